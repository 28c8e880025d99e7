"""The ceiling of per-request speculative lengths on the mixed workload: each prompt kind held at a length of its own.

    python benchmarks/oracle_lengths.py --workload mixed-c32 --plans 1/1 2/2 2/1 3/1 3/2 --repeats 4
    python benchmarks/oracle_lengths.py --workload mixed-g64 --plans 1/1 2/1

FASER's worker held at the whole window in fixed mode (``faser-fixed-7``) runs each request at the length its
prompt kind gets through the request's ``custom_params`` (``{"faser": {"max_len": k}}``): plan ``r/n`` drafts ``r``
tokens a step for the ``repeat`` prompts (drafts mostly pass) and ``n`` for the ``noise`` ones
(``benchmarks/serve/workload.py``). This oracle knows each kind's acceptance in advance, which FASER's policy has
to learn, so the best plan giving the kinds different lengths, against the best giving them one (``k/k``), is
about the most any per-request length policy can gain on this workload, machine and pair; stock SGLang's fixed
lengths, no speculation and FASER's adaptive policy run in the same repeats. Each repeat runs every (server, plan)
in turn, in alternating order; the report gives medians of each repeat's ratios, and for the runs of FASER's
worker one decode step by phase from its telemetry (requests, verified rows, committed tokens, draft / verify /
draft-extend / schedule milliseconds, and the run's prefill and idle time per step), and writes
``benchmarks/results/oracle_lengths_{tag}.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ab_servers import start_servers, stop_servers, workload_requests  # noqa: E402
from benchmarks.serve import telemetry  # noqa: E402
from benchmarks.serve import workload as serve_workload  # noqa: E402
from benchmarks.serve.driver import drive  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ORACLE = "faser-fixed-7"  # FASER's worker at the window: each request's cap is its length
KINDS = ("repeat", "noise")


def plan_requests(requests: list, plan: tuple[int, int] | None) -> list:
    """The workload with each request capped at its kind's length under ``plan`` (None: as it is)."""
    if plan is None:
        return requests
    lengths = dict(zip(KINDS, plan))
    return [dataclasses.replace(r, custom_params={"faser": {"max_len": lengths[r.kind]}}) for r in requests]


def parse_plan(name: str) -> tuple[int, int]:
    """``"r/n"`` -> (r, n): the ``repeat`` prompts' length, then the ``noise`` prompts' (``KINDS``)."""
    repeat, noise = (int(k) for k in name.split("/"))
    return repeat, noise


def mixed_workload(name: str) -> str:
    if not re.fullmatch(r"mixed-(c[1-9][0-9]*|[rg][0-9]+(\.[0-9]+)?)", name):
        raise argparse.ArgumentTypeError(f"{name!r}: mixed-c<in flight>, mixed-r<req/s> or mixed-g<req/s>")
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", type=mixed_workload, default="mixed-c32",
                        help="mixed-c<N>: N requests in flight; mixed-r<R> / mixed-g<R>: Poisson / Gamma arrivals "
                        "at R/s")
    parser.add_argument("--plans", nargs="+", default=["1/1", "2/2", "2/1", "3/1", "3/2"],
                        help="repeat/noise draft lengths per step")
    parser.add_argument("--baselines", nargs="+", default=["no-spec", "fixed-1", "fixed-3", "faser"])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    serve_workload.add_output_spread_flag(parser)
    parser.add_argument("--tag", help="results file suffix (default: the workload)")
    args = parser.parse_args()
    plans = [parse_plan(p) for p in args.plans]
    requests, concurrency = workload_requests(args.workload, args.requests, args.max_new_tokens, args.output_spread)
    runs = [(config, None) for config in args.baselines] + [(ORACLE, plan) for plan in plans]
    servers = start_servers([(config, "new") for config in dict.fromkeys(c for c, _ in runs)], args.workload, None)
    rates: dict[str, list[float]] = {}
    steps: dict[str, list[dict]] = {}  # FASER's worker: each repeat's decode step, by phase (its telemetry)
    try:
        def once(config: str, plan, name: str | None = None) -> float:
            url = servers[config, "new"].url
            before = telemetry.read_step_phases(url) if name else None
            results, wall = drive(url, plan_requests(requests, plan), None, max_concurrency=concurrency)
            delta = telemetry.step_phases_delta(before, telemetry.read_step_phases(url)) if name else None
            if delta:
                steps.setdefault(name, []).append(delta)
            return sum(r.output_tokens for r in results) / wall

        for config, plan in runs:  # warm-up (FASER's start-up sweep), not measured
            once(config, plan)
        for repeat in range(args.repeats):
            for config, plan in runs if repeat % 2 == 0 else runs[::-1]:
                name = config if plan is None else "/".join(map(str, plan))
                rates.setdefault(name, []).append(once(config, plan, name))
                print(f"[oracle] repeat {repeat} {name:10s} {rates[name][-1]:7.1f} tok/s", flush=True)
    finally:
        stop_servers(servers)
    report(args, rates, steps)


def step_table(steps: dict[str, list[dict]]) -> list[str]:
    """What one decode step of each FASER run held and cost, by phase (medians over repeats): whether a plan that
    verifies fewer rows runs a cheaper step on this machine."""
    if not steps:
        return []
    cols = ("requests", "verified", "committed", *(f"{p}_ms" for p in (*telemetry.PHASES, *telemetry.BETWEEN)))
    lines = ["", "one decode step of FASER's worker (its telemetry; medians over repeats): requests, verified rows, "
             "committed tokens, milliseconds per phase; prefill and idle: the run's, per decode step", "",
             "| run | " + " | ".join(cols) + " | step ms |",
             "|---" * (len(cols) + 2) + "|"]
    for name, deltas in steps.items():
        values = [statistics.median(d[c] for d in deltas) for c in cols]
        total = statistics.median(sum(d[f"{p}_ms"] for p in telemetry.PHASES) for d in deltas)
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" if c.endswith("_ms") else f"{v:.1f}"
                                                 for c, v in zip(cols, values)) + f" | {total:.2f} |")
    return lines


def report(args, rates: dict[str, list[float]], steps: dict[str, list[dict]] | None = None) -> None:
    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

    stock = [name for name in rates if "/" not in name and not name.startswith("faser")]  # SGLang's own runs
    plans = [name for name in rates if "/" in name]
    uniform = [p for p in plans if len(set(parse_plan(p))) == 1]
    per_kind = [p for p in plans if p not in uniform]
    best = lambda names: max(names, key=lambda n: statistics.median(rates[n]))  # noqa: E731
    lines = [f"# Per-kind length oracle: {args.workload}", "",
             f"`{json.dumps({k: v for k, v in vars(args).items()})}`", "",
             "plan r/n: the repeat prompts draft r tokens a step, the noise prompts n (FASER's worker, per-request "
             "caps); medians of per-repeat ratios", "",
             "| run | tok/s | vs no-spec | vs best SGLang run |", "|---|---|---|---|"]
    top_stock = best(stock)
    for name in rates:
        lines.append(f"| {name} | {statistics.median(rates[name]):.1f} | {ratio(name, 'no-spec'):.3f}x | "
                     f"{ratio(name, top_stock):.3f}x |")
    lines.append("")
    if uniform and per_kind:
        a, b = best(per_kind), best(uniform)
        lines.append(f"best per-kind plan {a} against the best uniform plan {b}: {ratio(a, b):.3f}x; against the "
                     f"best SGLang configuration ({top_stock}): {ratio(a, top_stock):.3f}x")
    if "faser" in rates:
        lines.append(f"FASER's adaptive policy against the best SGLang configuration ({top_stock}): "
                     f"{ratio('faser', top_stock):.3f}x; against the best plan ({best(plans)}): "
                     f"{ratio('faser', best(plans)):.3f}x")
    lines += step_table(steps or {})
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    tag = args.tag or args.workload
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"oracle_lengths_{tag}.json").write_text(json.dumps(
        {"meta": vars(args), "repeats_tok_per_s": rates, "repeats_per_step": steps or {}}, indent=1) + "\n")
    (RESULTS / f"oracle_lengths_{tag}.md").write_text(text)


if __name__ == "__main__":
    main()
