"""What moved with the code: the same configurations from two versions of this repository, side by side, in one run.

    python benchmarks/ab_servers.py --base HEAD~1 --configs faser faser-k0 --workload batch1-doomed
    python benchmarks/ab_servers.py --base db7d467 --configs faser --workload mixed-c4 --repeats 5
    python benchmarks/ab_servers.py --configs faser faser-k0 --workload deep1-doomed --fresh-servers

``--base`` is checked out into a temporary git worktree; its servers run that version's ``sglang_faser`` (the
worktree first on their PYTHONPATH), the others this checkout's (without ``--base``: this checkout's
configurations only). Every server is up at once and each repeat runs every (configuration, version) in turn, in
alternating order, so this shared machine's drift (10-25 % between runs) falls on both versions alike; ``no-spec``
runs once, from this checkout, as the common reference. Reports the median tokens/s of the repeats and, as the
median of each repeat's own ratio, new / base per configuration and each against no speculation, and writes
``benchmarks/results/ab_{tag}.{json,md}``. A server process keeps its own speed, a few % either way, for as long
as it runs (two servers of the same code: 2-4 % apart in every repeat); ``--fresh-servers`` starts them all anew
for each repeat, so the median is over processes too.

Workloads: ``mixed-c1`` / ``mixed-c4`` / ``mixed-c32``: the serving benchmark's mixed prompts (code and random
text, embedded default pair, EAGLE, window 7), 1 / 4 / 32 requests in flight; ``mixed-r16`` / ``mixed-r64``: the same
prompts arriving as a Poisson process of 16 / 64 requests/s, ``mixed-g16`` / ``mixed-g64`` as bursty Gamma
arrivals (cv 2) (the regret table's cells; with ``--fresh-servers`` each repeat is a cold server's burst, as in the
regret table); ``batch1-sure`` / ``batch1-doomed``: one
request at a time on the tiny cycle pair (STANDALONE, window 5) whose drafts always / never pass; ``deep1-sure`` /
``deep1-doomed``: the same on the deep cycle pair (a 12-layer target, a 1-layer draft: a draft step costs a
fraction of a target step); ``deep-c4`` / ``deep-c16``: the deep pair's cycle prompts (half sure, half doomed, the
serving benchmark's ``--prompts cycles``), 4 / 16 requests in flight.

Where one request is in flight at a time (``mixed-c1`` and the batch-1 workloads) the requests are interleaved:
each runs on every server in turn, the order rotating from request to request, and a repeat's tokens/s is each
server's tokens over its requests' own seconds. Whole repeats in turn left this machine's drift within a repeat
on one server: at ``mixed-c1`` two servers of the same code differed by up to 11 % in the median of 5 repeats
(``ab_mixed-c1-s12``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.serve import configs as serve_configs  # noqa: E402
from benchmarks.serve import workload as serve_workload  # noqa: E402
from benchmarks.serve.driver import drive  # noqa: E402
from benchmarks.serve.same_code import SameCode  # noqa: E402
from benchmarks.spec_lengths_cpu import WINDOW, run_one  # noqa: E402
from benchmarks.spec_lengths_cpu import server_flags as cycle_flags  # noqa: E402
from sglang_faser.models.tiny import CYCLE_SPLIT, ensure_tiny_suite  # noqa: E402
from sglang_faser.server_process import ServerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WORKLOADS = ("mixed-c1", "mixed-c4", "mixed-c32", "mixed-r16", "mixed-r64", "mixed-g16", "mixed-g64",
             "batch1-sure", "batch1-doomed", "deep1-sure", "deep1-doomed", "deep-c4", "deep-c16")


def flags_for(workload: str, config: str) -> list[str]:
    """The configuration's flags for the workload; every server sleeps while idle (the others are all up, and an
    idle scheduler's loop would otherwise poll on this machine's two cores)."""
    if workload.startswith("mixed"):
        flags = serve_configs.configurations("EAGLE", window=7)[config] + ["--max-total-tokens", "16384"]
    else:
        flags = serve_configs.configurations("STANDALONE", window=WINDOW, fixed=(1, 3, 5), adaptive=False)[config]
        flags = cycle_flags(flags, ensure_tiny_suite(), in_flight(workload), "deep" if workload.startswith("deep")
                            else "cycle")
    return flags + ["--faser-control", "off", "--sleep-on-idle"]


def base_env(tree: Path) -> dict[str, str]:
    """A server process that imports ``sglang_faser`` from ``tree``: first on its path, and PYTHONSAFEPATH keeps
    ``python -m`` from putting the working directory (this checkout) before it."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
            "PYTHONSAFEPATH": "1"}


def in_flight(workload: str) -> int:
    """Requests a workload keeps in flight (1 for the batch-1 workloads; 32 where they arrive at a rate)."""
    load = workload.split("-")[1]
    return int(load[1:]) if load[0] == "c" else 32 if load[0] in "rg" else 1


def workload_requests(workload: str, requests: int, max_new_tokens: int,
                      output_spread: float = 0.0) -> tuple[list, int | None]:
    """A workload's requests and the most it keeps in flight (None: they arrive at their times); ``output_spread``:
    ``workload.build``'s (0: every request ``max_new_tokens`` long)."""
    load = workload.split("-")[1]  # c<in flight>, r<requests/s> (Poisson) or g<requests/s> (Gamma, cv 2)
    rate = float(load[1:]) if load[0] in "rg" else float("inf")
    concurrency = int(load[1:]) if load[0] == "c" else None
    prompts = "cycles" if workload.startswith("deep") else "mixed"
    arrivals = "gamma" if load[0] == "g" else "poisson"
    return serve_workload.build(requests, rate, arrivals, max_new_tokens, 0, 2.0, prompts,
                                output_spread=output_spread), concurrency


def runner(workload: str, args):
    """One repeat's load against a server URL, where several requests are in flight: (tokens, seconds)."""
    requests, concurrency = workload_requests(workload, args.requests, args.max_new_tokens, args.output_spread)

    def run(url: str) -> tuple[int, float]:
        results, wall = drive(url, requests, None, max_concurrency=concurrency)
        return sum(r.output_tokens for r in results), wall
    return run


def one_at_a_time(workload: str) -> bool:
    return in_flight(workload) == 1


def request_jobs(workload: str, args) -> list:
    """A one-at-a-time workload's requests, each a job: server URL -> (tokens, seconds it took)."""
    if workload.startswith("mixed"):
        def job(request):
            def run(url: str) -> tuple[int, float]:
                (result,), _ = drive(url, [request])
                return result.output_tokens, result.e2e
            return run
        return [job(r) for r in serve_workload.build(args.requests, float("inf"), "poisson", args.max_new_tokens,
                                                     0, 2.0, "mixed")]
    prompt = [0, 3] if workload.endswith("-sure") else [0, CYCLE_SPLIT + 1]

    def run(url: str) -> tuple[int, float]:
        out = run_one(url, prompt, args.max_new_tokens)
        return out["tokens"], out["latency_s"]
    return [run] * args.requests


def interleaved_repeat(jobs: list, keys: list, urls: dict) -> dict:
    """One repeat with every request run on each server in turn, the order rotating by request, so the machine's
    drift falls on every server alike: {key: tokens/s over its requests' own seconds}."""
    totals = {key: [0, 0.0] for key in keys}
    for i, job in enumerate(jobs):
        for key in keys[i % len(keys):] + keys[:i % len(keys)]:
            tokens, seconds = job(urls[key])
            totals[key][0] += tokens
            totals[key][1] += seconds
    return {key: tokens / seconds for key, (tokens, seconds) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the git revision to compare this checkout against (none: this checkout's "
                        "configurations against no speculation only)")
    parser.add_argument("--configs", nargs="+", default=["faser"], help="configurations (benchmarks/serve/configs.py)")
    parser.add_argument("--workload", choices=WORKLOADS, default="mixed-c4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, help="requests per repeat (default 48 mixed, 4 at batch 1)")
    parser.add_argument("--max-new-tokens", type=int, help="default 64 mixed, 256 at batch 1")
    serve_workload.add_output_spread_flag(parser)
    parser.add_argument("--fresh-servers", action="store_true", help="start every server anew for each repeat "
                        "(a server process keeps its own speed, a few %% either way, as long as it runs)")
    parser.add_argument("--tag", help="results file suffix (default: the workload)")
    args = parser.parse_args()
    batch1 = args.workload.startswith(("batch1", "deep1"))
    args.requests = args.requests or (4 if batch1 else 48)
    args.max_new_tokens = args.max_new_tokens or (256 if batch1 else 64)
    revision, tree = None, None
    if args.base:
        tree = Path(tempfile.mkdtemp(prefix="faser-ab-")) / "base"
        revision = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                                  capture_output=True, text=True).stdout.strip()
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=ROOT, check=True,
                       capture_output=True)
    versions = ("new", "base") if args.base else ("new",)
    keys = [("no-spec", "new")] + [(c, v) for c in args.configs if c != "no-spec" for v in versions]
    jobs = request_jobs(args.workload, args) if one_at_a_time(args.workload) else None
    run = runner(args.workload, args) if jobs is None else None
    runs: dict[tuple[str, str], list[float]] = {}
    servers: dict[tuple[str, str], ServerProcess] = {}
    same_code = SameCode()
    try:
        for repeat in range(args.repeats):
            if not servers:
                servers = start_servers(keys, args.workload, tree, same_code)
                for server in servers.values():  # warm-up (FASER's start-up sweep), not measured: a repeat, or
                    for job in jobs[:2] if jobs is not None else [run]:  # two requests where one runs at a time
                        job(server.url)
            urls = {key: server.url for key, server in servers.items()}
            if jobs is not None:
                rates = interleaved_repeat(jobs, keys if repeat % 2 == 0 else keys[::-1], urls)
            else:
                rates = {}
                for key in keys if repeat % 2 == 0 else keys[::-1]:
                    tokens, seconds = run(urls[key])
                    rates[key] = tokens / seconds
            for key, rate in rates.items():
                runs.setdefault(key, []).append(rate)
                print(f"[ab] repeat {repeat} {key[0]:10s} {key[1]:4s} {rate:7.1f} tok/s", flush=True)
            if args.fresh_servers:
                stop_servers(servers)
    finally:
        stop_servers(servers)
        if tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    report(args, revision, runs, same_code.code)


def start_servers(keys: list, workload: str, tree: Path | None, same_code: SameCode | None = None) -> dict:
    servers = {}
    same_code = same_code or SameCode()
    try:
        for config, version in keys:
            log = Path(tempfile.gettempdir()) / f"faser-ab-{config}-{version}.log"
            servers[config, version] = ServerProcess(flags_for(workload, config), log_path=log,
                                                     env=base_env(tree) if version == "base" else None
                                                     ).start(timeout=600)
            same_code.check(servers[config, version], version)
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: dict) -> None:
    for server in servers.values():
        server.stop()
    servers.clear()


def report(args, revision: str | None, runs: dict, code: dict | None = None) -> None:
    """Medians of the repeats' tokens/s, and of their per-repeat ratios (each repeat ran every server under the
    same load; with one request at a time, each request on every server in turn)."""
    median = {key: statistics.median(values) for key, values in runs.items()}
    plain = runs["no-spec", "new"]

    def ratio(a: list, b: list) -> float:
        return statistics.median(x / y for x, y in zip(a, b))

    meta = {"base": revision, "workload": args.workload, "repeats": args.repeats, "requests": args.requests,
            "max_new_tokens": args.max_new_tokens, "fresh_servers": bool(getattr(args, "fresh_servers", False)),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"), "code": code}
    if revision is None:
        lines = [f"# This checkout: {args.workload}", "", f"`{json.dumps(meta)}`", "",
                 "| config | tok/s | vs no-spec |", "|---|---|---|"]
        lines += [f"| {c} | {median[c, 'new']:.1f} | {ratio(runs[c, 'new'], plain):.3f}x |"
                  for c in args.configs if c != "no-spec"]
    else:
        lines = [f"# This checkout against {revision}: {args.workload}", "", f"`{json.dumps(meta)}`", "",
                 "| config | new tok/s | base tok/s | new / base | new vs no-spec | base vs no-spec |",
                 "|---|---|---|---|---|---|"]
        for config in args.configs:
            if config == "no-spec":
                continue
            new, base = runs[config, "new"], runs[config, "base"]
            lines.append(f"| {config} | {median[config, 'new']:.1f} | {median[config, 'base']:.1f} | "
                         f"{ratio(new, base):.3f}x | {ratio(new, plain):.3f}x | {ratio(base, plain):.3f}x |")
    order = ("requests interleaved across servers" if one_at_a_time(args.workload)
             else "servers in alternating order")
    fresh = ", servers started anew each repeat" if meta["fresh_servers"] else ""
    lines += ["", f"no-spec (this checkout): {median['no-spec', 'new']:.1f} tok/s; medians of {args.repeats} "
              f"repeats ({order}{fresh}); ratios are medians of each repeat's ratio."]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    tag = args.tag or args.workload
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"meta": meta, "repeats_tok_per_s": {f"{c} {v}": r for (c, v), r in runs.items()}}
    (RESULTS / f"ab_{tag}.json").write_text(json.dumps(record, indent=1) + "\n")
    (RESULTS / f"ab_{tag}.md").write_text(text)


if __name__ == "__main__":
    main()
