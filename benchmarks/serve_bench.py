"""Serving benchmark: each configuration as a real server in turn, the same load against each, one run.

    python benchmarks/serve_bench.py --quick          # CPU smoke run (< 15 min on 2 cores)
    python benchmarks/serve_bench.py                  # every configuration and rate
    python benchmarks/serve_bench.py --trace t.jsonl  # replay a trace instead of generated arrivals

Configurations: no speculation; fixed lengths 1, 3, 5, 7 (stock SGLang, ``--faser-mode off``); SGLang's own
``--speculative-adaptive``; FASER (goodput policy, window 7); FASER with frontiers of 2. Load: prompts from
``benchmarks/data`` (chat, MT-Bench-style, HumanEval-style stubs), Poisson or bursty Gamma arrivals at several
rates. Per configuration and rate it reports output tokens/s, TTFT, TPOT and end-to-end latency (mean, p50, p99),
SGLang's acceptance length (overall and by prompt kind), FASER's mean per-request length and pruned share, and
ratios against no speculation and the best fixed length of the same run. Writes
``benchmarks/results/serve_bench_{quick,full}.{json,md}`` and plots (throughput and p99 latency against rate,
lengths against load). The model is the launcher's embedded default unless ``--model-path`` is given.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.serve import metrics, workload  # noqa: E402
from benchmarks.serve.driver import drive  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def configurations(algorithm: str, window: int = 7) -> dict[str, list[str]]:
    def spec(k: int, *extra: str) -> list[str]:
        return ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(k),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1), *extra]

    configs = {"no-spec": []}
    configs.update({f"fixed-{k}": spec(k, "--faser-mode", "off") for k in (1, 3, 5, 7)})
    configs["sglang-adaptive"] = spec(window, "--faser-mode", "off", "--speculative-adaptive")
    configs["faser"] = spec(window)
    configs["faser-frontier-2"] = spec(window, "--faser-frontier-size", "2")
    return configs


QUICK = ("no-spec", "fixed-1", "fixed-3", "faser", "faser-frontier-2")


def faser_counters(url: str) -> dict | None:
    import requests

    try:
        states = requests.get(url + "/server_info", timeout=30).json().get("internal_states", [])
    except (requests.RequestException, ValueError):
        return None
    reports = [s["faser"]["counters"] for s in states if "faser" in s]
    return reports[0] if reports else None


def run_config(name: str, flags: list[str], args, requests_by_rate, progress) -> dict:
    from sglang_faser.server_process import ServerProcess

    server_flags = list(flags) + ["--max-total-tokens", str(args.max_total_tokens), "--faser-control", "off",
                                  *args.server_arg]
    if args.model_path:
        server_flags += ["--model-path", args.model_path]
        if flags and args.draft_model_path:
            server_flags += ["--speculative-draft-model-path", args.draft_model_path]
    log = RESULTS / "logs" / f"serve_bench_{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    runs = {}
    with ServerProcess(server_flags, log_path=log) as server:
        drive(server.url, requests_by_rate[next(iter(requests_by_rate))][:2])  # warm-up, not measured
        for rate, requests in requests_by_rate.items():
            before = faser_counters(server.url)
            results, wall = drive(server.url, requests, progress)
            after = faser_counters(server.url)
            delta = {k: after[k] - before[k] for k in ("verified", "pruned")} if before and after else None
            runs[rate] = metrics.summarise(results, wall, delta)
    return runs


def report(table: dict, meta: dict) -> str:
    lines = ["# Serving benchmark", "", f"`{json.dumps(meta)}`", ""]
    for rate in sorted({r for runs in table.values() for r in runs}, key=float):
        lines += [f"## rate {rate} req/s", "",
                  "| config | out tok/s | vs no-spec | vs best fixed | TTFT p50 s | TPOT p50 ms | e2e mean s | e2e p99 s "
                  "| accept len | FASER len | pruned share | failed |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for config, runs in table.items():
            row = runs.get(rate)
            if row is None:
                continue
            fmt = lambda v, f="{:.2f}": "-" if v is None else f.format(v)  # noqa: E731
            lines.append(
                f"| {config} | {row['output_tokens_per_s']:.1f} | {fmt(row['vs_no_spec'], '{:.2f}x')} | "
                f"{fmt(row['vs_best_fixed'], '{:.2f}x')} | {row['ttft_s']['p50']:.3f} | "
                f"{row['tpot_s']['p50'] * 1e3:.1f} | {row['e2e_s']['mean']:.2f} | {row['e2e_s']['p99']:.2f} | "
                f"{fmt(row['accept_length'])} | {fmt(row['mean_spec_length'])} | {fmt(row['pruned_share'])} | "
                f"{row['failed']} |")
        best = next((runs[rate]["best_fixed"] for runs in table.values() if rate in runs), None)
        lines += ["", f"best fixed length at this rate: {best}", ""]
    return "\n".join(lines) + "\n"


def plot(table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for config, runs in table.items():
        rates = sorted(runs, key=float)
        xs = [float(r) for r in rates]
        axes[0].plot(xs, [runs[r]["output_tokens_per_s"] for r in rates], marker="o", label=config)
        axes[1].plot(xs, [runs[r]["e2e_s"]["p99"] for r in rates], marker="o", label=config)
        if config.startswith("faser"):
            axes[2].plot(xs, [runs[r]["mean_spec_length"] or 0 for r in rates], marker="o", label=config)
    for ax, title in zip(axes, ("output tokens/s", "p99 end-to-end latency (s)", "FASER mean length")):
        ax.set_xlabel("request rate (req/s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer configurations, rates and requests")
    parser.add_argument("--configs", nargs="*", help="names to run (default: all, or the quick set)")
    parser.add_argument("--rates", nargs="*", type=float, help="request rates (req/s)")
    parser.add_argument("--requests", type=int, help="requests per rate")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--arrivals", choices=["poisson", "gamma"], default="poisson")
    parser.add_argument("--cv", type=float, default=2.0, help="Gamma arrivals: coefficient of variation (burstiness)")
    parser.add_argument("--trace", help="JSONL trace to replay: {t, prompt, max_new_tokens}")
    parser.add_argument("--algorithm", default="EAGLE", choices=["EAGLE", "EAGLE3", "STANDALONE"])
    parser.add_argument("--model-path")
    parser.add_argument("--draft-model-path")
    parser.add_argument("--max-total-tokens", type=int, default=16384)
    parser.add_argument("--server-arg", action="append", default=[], metavar="FLAG",
                        help="extra flag for every server, e.g. --server-arg=--load-format --server-arg=dummy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", help="results file suffix (default: quick or full)")
    args = parser.parse_args(argv)

    all_configs = configurations(args.algorithm)
    names = args.configs or (list(QUICK) if args.quick else list(all_configs))
    unknown = [n for n in names if n not in all_configs]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]} (known: {', '.join(all_configs)})")
    rates = args.rates or ([2.0, 16.0] if args.quick else [1.0, 4.0, 16.0, 64.0])
    n = args.requests or (12 if args.quick else 32)
    max_new = args.max_new_tokens or (32 if args.quick else 64)
    if args.trace:
        requests_by_rate = {"trace": workload.replay(args.trace, max_new)}
    else:
        requests_by_rate = {str(rate): workload.build(n, rate, args.arrivals, max_new, args.seed, args.cv)
                            for rate in rates}

    from tqdm import tqdm

    total = len(names) * sum(len(r) for r in requests_by_rate.values())
    table = {}
    began = time.time()
    with tqdm(total=total, desc="requests", unit="req") as progress:
        for name in names:
            progress.set_postfix_str(name)
            table[name] = run_config(name, all_configs[name], args, requests_by_rate, progress)
    metrics.add_ratios(table)
    tag = args.tag or ("quick" if args.quick else "full")
    meta = {"machine": platform.machine(), "python": platform.python_version(), "arrivals": args.arrivals,
            "requests_per_rate": n, "max_new_tokens": max_new, "algorithm": args.algorithm,
            "model": args.model_path or "embedded default", "minutes": round((time.time() - began) / 60, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"serve_bench_{tag}.json").write_text(json.dumps({"meta": meta, "results": table}, indent=1))
    text = report(table, meta)
    (RESULTS / f"serve_bench_{tag}.md").write_text(text)
    plot(table, RESULTS / f"serve_bench_{tag}.png")
    print(text)
    print(f"wrote {RESULTS}/serve_bench_{tag}.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
