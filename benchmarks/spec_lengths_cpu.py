"""FASER's per-request lengths against fixed draft lengths and no speculation, on CPU, in one run.

Each configuration is a real ``sglang_faser.launch_server`` process serving the same workload in turn:

* ``no-spec``: plain decoding;
* ``fixed-k`` (k = 1, 3, 5): stock SGLang speculative decoding with k draft steps (``--faser-mode stock``);
* ``faser``: FASER's goodput policy with a window of 5 draft steps.

The model pair is a "cycle pair" (``sglang_faser/models/tiny.py``): its draft is always right for half the
prompts and always wrong for the other half, the per-request spread FASER is built for. ``--pair cycle`` (the
default): a 2-layer target and a 2-layer draft, where a draft step costs about a target step on CPU, so that no
speculation wins even where every draft passes; ``--pair deep``: a 12-layer target and a 1-layer draft with the
same maps, where a draft step costs a fraction of a target step, as in serving. CPU numbers say nothing about GPU
speed; they check that the machinery runs and show the ratios the current execution path gives.
Prints a table with ratios against no-spec and the best fixed length, and writes JSON, markdown and a plot to
``benchmarks/results/``.

    python benchmarks/spec_lengths_cpu.py [--requests 16] [--concurrency 8] [--max-new-tokens 64]
    python benchmarks/spec_lengths_cpu.py --batch-one [--repeats 3] [--max-new-tokens 256] [--pair deep]

``--batch-one``: one request at a time, sure and doomed prompts measured apart, every server up at once and the
configurations alternating within each repeat, FASER run beside its targets; its ratio is the median of the
repeats' own ratios (``batch_one_table``), shown beside an A/A control: a second no-spec server's ratio to the first,
what this machine measures between two servers of the same code. It checks the policy at the two extremes:
with drafts that always pass FASER should reach the window (max-len) within a few steps and run as fast as the best
fixed length; with drafts that never pass, as fast as no speculation. The server's start-up sweep runs during a
warm-up request of each kind. Writes ``spec_lengths_cpu_batch1[-deep].{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serve import configs as serve_configs  # noqa: E402
from sglang_faser.models.tiny import CYCLE_SPLIT, DEEP_CYCLE_LAYERS, ensure_tiny_suite  # noqa: E402
from sglang_faser.server_process import ServerProcess  # noqa: E402

RESULTS = Path(__file__).parent / "results"


WINDOW = 5  # FASER's window here, so its max-len
PAIR_TITLES = {"cycle": "tiny cycle pair, 2-layer target and draft",
               "deep": f"deep cycle pair, {DEEP_CYCLE_LAYERS}-layer target, 1-layer draft"}


def configurations() -> dict[str, list[str]]:
    configs = serve_configs.configurations("STANDALONE", window=WINDOW, fixed=(1, 3, 5), adaptive=False, frontiers=())
    return {name: flags for name, flags in configs.items() if name not in serve_configs.EXTRA}


def workload(n: int) -> list[list[int]]:
    """Prompts [BOS, token]: even ones on the cycle the draft knows, odd ones on the cycle it gets wrong."""
    return [[0, 3 + i] if i % 2 == 0 else [0, CYCLE_SPLIT + i] for i in range(n)]


def run_one(url: str, input_ids: list[int], max_new_tokens: int) -> dict:
    body = {
        "input_ids": input_ids,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    start = time.perf_counter()
    out = requests.post(url + "/generate", json=body, timeout=600).json()
    meta = out["meta_info"]
    histogram = meta.get("spec_cap_lens_histogram") or []
    return {
        "latency_s": time.perf_counter() - start,
        "tokens": meta["completion_tokens"],
        "accept_length": meta.get("spec_accept_length"),
        "mean_len": (sum(k * c for k, c in enumerate(histogram)) / sum(histogram)) if sum(histogram) else None,
        "histogram": histogram,  # [k]: verify steps at length k
        "output_ids": out["output_ids"],
    }


def pair_paths(suite, pair: str) -> tuple[Path, Path]:
    """(target, draft) of a cycle pair: ``cycle`` (2 layers each), ``deep`` (DEEP_CYCLE_LAYERS, 1 layer)."""
    if pair == "deep":
        return suite.deep_cycle_target, suite.small_cycle_draft
    return suite.cycle_target, suite.cycle_draft


def server_flags(flags: list[str], suite, concurrency: int, pair: str = "cycle") -> list[str]:
    target, draft = pair_paths(suite, pair)
    extra = ["--speculative-draft-model-path", str(draft)] if flags else []
    return flags + extra + [
        "--model-path", str(target),
        "--dtype", "float32",
        "--max-total-tokens", "8192",
        "--max-running-requests", str(concurrency),
    ]  # fmt: skip


def measure(name: str, flags: list[str], suite, args) -> dict:
    log = Path(tempfile.gettempdir()) / f"faser-bench-{name}.log"
    prompts = workload(args.requests)
    with ServerProcess(server_flags(flags, suite, args.concurrency, args.pair), log_path=log) as server:
        run_one(server.url, prompts[0], 8)  # warm-up
        start = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            rows = list(pool.map(lambda p: run_one(server.url, p, args.max_new_tokens), prompts))
        wall = time.perf_counter() - start
    latencies = sorted(r["latency_s"] for r in rows)
    accept = [r["accept_length"] for r in rows if r["accept_length"] is not None]
    sure_len = [r["mean_len"] for i, r in enumerate(rows) if i % 2 == 0 and r["mean_len"] is not None]
    doomed_len = [r["mean_len"] for i, r in enumerate(rows) if i % 2 == 1 and r["mean_len"] is not None]
    return {
        "config": name,
        "flags": flags,
        "wall_s": wall,
        "output_tok_per_s": sum(r["tokens"] for r in rows) / wall,
        "latency_mean_s": statistics.fmean(latencies),
        "latency_p50_s": latencies[len(latencies) // 2],
        "latency_p99_s": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "accept_length_mean": statistics.fmean(accept) if accept else None,
        "faser_len_sure_prompts": statistics.fmean(sure_len) if sure_len else None,
        "faser_len_doomed_prompts": statistics.fmean(doomed_len) if doomed_len else None,
        "outputs": [r["output_ids"] for r in rows],
    }


def report(results: list[dict]) -> str:
    base = next(r for r in results if r["config"] == "no-spec")
    fixed = [r for r in results if r["config"].startswith("fixed-")]
    best_fixed = max(fixed, key=lambda r: r["output_tok_per_s"])
    lines = [
        f"best fixed length: {best_fixed['config']}",
        "",
        "| config | tok/s | vs no-spec | vs best fixed | mean latency s | p99 latency s | accept length | "
        "FASER len (sure / doomed prompts) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lens = (
            f"{r['faser_len_sure_prompts']:.2f} / {r['faser_len_doomed_prompts']:.2f}"
            if r["faser_len_sure_prompts"] is not None
            else "-"
        )
        accept = f"{r['accept_length_mean']:.2f}" if r["accept_length_mean"] else "-"
        lines.append(
            f"| {r['config']} | {r['output_tok_per_s']:.1f} | "
            f"{r['output_tok_per_s'] / base['output_tok_per_s']:.2f}x | "
            f"{r['output_tok_per_s'] / best_fixed['output_tok_per_s']:.2f}x | {r['latency_mean_s']:.2f} | "
            f"{r['latency_p99_s']:.2f} | {accept} | {lens} |"
        )
    return "\n".join(lines)


def plot(results: list[dict], path: Path, pair: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["config"] for r in results]
    ax1.bar(names, [r["output_tok_per_s"] for r in results])
    ax1.set_ylabel("output tokens/s")
    ax2.bar(names, [r["latency_p99_s"] for r in results], color="tab:orange")
    ax2.set_ylabel("p99 request latency (s)")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(f"CPU, {PAIR_TITLES[pair]} (half sure, half doomed drafts)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# batch 1's run order: FASER beside both of its targets (no-spec for doomed prompts, fixed-5 for sure ones), so
# that each repeat's ratio compares runs seconds apart (the order is reversed every other repeat); ``AA_CONTROL``, a
# second no-spec server, beside no-spec: their ratio is what the same code measures against itself (one of these
# CPU servers keeps its own speed while it runs, forwards 5-15 % apart between identical ones: phase_times.py)
AA_CONTROL = "no-spec-2"
BATCH_ONE_ORDER = ("fixed-1", "fixed-3", AA_CONTROL, "no-spec", "faser", "fixed-5")


def batch_one(suite, args) -> None:
    """Sure and doomed prompts one at a time, the configurations alternating within each repeat."""
    configs = configurations()
    configs[AA_CONTROL] = configs["no-spec"]
    order = list(BATCH_ONE_ORDER)
    kinds = {"sure": [0, 3], "doomed": [0, CYCLE_SPLIT + 1]}
    runs = {kind: {name: [] for name in order} for kind in kinds}
    servers = {name: ServerProcess(server_flags(configs[name], suite, 1, args.pair) + ["--sleep-on-idle"],
                                   log_path=Path(tempfile.gettempdir()) / f"faser-bench1-{name}.log")
               for name in order}
    try:
        for server in servers.values():
            server.start()
            for prompt in kinds.values():  # warm-up; FASER's start-up sweep runs here
                run_one(server.url, prompt, args.max_new_tokens)
        for repeat in range(args.repeats):
            for kind, prompt in kinds.items():
                for name in (order if repeat % 2 == 0 else order[::-1]):
                    runs[kind][name].append(run_one(servers[name].url, prompt, args.max_new_tokens))
                    print(f"[bench] repeat {repeat} {kind:6s} {name:8s} "
                          f"{runs[kind][name][-1]['tokens'] / runs[kind][name][-1]['latency_s']:.1f} tok/s", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    meta = {"pair": args.pair, "repeats": args.repeats, "max_new_tokens": args.max_new_tokens,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset")}  # the servers inherit it
    table = batch_one_table(runs)
    text = batch_one_report(table, meta, args.pair)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"args": vars(args), "meta": meta, "kinds": table}
    stem = "spec_lengths_cpu_batch1" + ("" if args.pair == "cycle" else f"-{args.pair}")
    (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(text)
    plot_batch_one(table, RESULTS / f"{stem}.png")


def batch_one_table(runs: dict[str, dict[str, list[dict]]]) -> dict:
    """Per kind: each configuration's median tokens/s over the repeats, and FASER against its target (no-spec for
    doomed prompts, the best fixed length for sure ones) as the median of the repeats' own ratios (``paired``: a
    repeat's runs lie seconds apart, while this machine's plain step time moves by up to 30 % between requests a
    minute apart, so a ratio of two medians mixes repeats of different speeds) beside the ratio of the medians."""
    table = {}
    for kind, by_name in runs.items():
        rows = {}
        for name, rs in by_name.items():
            tps = [r["tokens"] / r["latency_s"] for r in rs]
            last = rs[-1]
            below = [sum(r["histogram"][:WINDOW]) for r in rs if r["histogram"]]
            rows[name] = {"tok_per_s": statistics.median(tps), "repeats_tok_per_s": tps,
                          "accept_length": last["accept_length"], "mean_len": last["mean_len"],
                          # the most verify steps any repeat spent below max-len, of its steps
                          "steps_below_max_len": max(below) if name == "faser" and below else None,
                          "steps": sum(last["histogram"]) if last["histogram"] else None}
        best_fixed = max((n for n in rows if n.startswith("fixed-")), key=lambda n: rows[n]["tok_per_s"])
        target = "no-spec" if kind == "doomed" else best_fixed
        paired = _paired(rows, "faser", target)
        table[kind] = {"rows": rows, "best_fixed": best_fixed, "target": target,
                       "faser_vs_target": statistics.median(paired), "repeats_vs_target": paired,
                       "medians_vs_target": rows["faser"]["tok_per_s"] / rows[target]["tok_per_s"]}
        if AA_CONTROL in rows:  # the same code against itself: how far apart two servers of it measure
            table[kind]["aa_repeats"] = _paired(rows, AA_CONTROL, "no-spec")
            table[kind]["aa"] = statistics.median(table[kind]["aa_repeats"])
    return table


def _paired(rows: dict, a: str, b: str) -> list[float]:
    """Each repeat's tokens/s of ``a`` over ``b``'s."""
    return [x / y for x, y in zip(rows[a]["repeats_tok_per_s"], rows[b]["repeats_tok_per_s"])]


def batch_one_report(table: dict, meta: dict, pair: str) -> str:
    lines = [f"# Batch 1 on CPU: one request at a time ({PAIR_TITLES[pair]}, window {WINDOW})", "",
             f"{json.dumps(meta)}", ""]
    for kind, entry in table.items():
        rows, best_fixed, target = entry["rows"], entry["best_fixed"], entry["target"]
        spread = ", ".join(f"{r:.2f}" for r in sorted(entry["repeats_vs_target"]))
        lines += [f"## {kind} prompts (FASER against {target}: {entry['faser_vs_target']:.3f}x, the median of the "
                  f"repeats' ratios; {entry['medians_vs_target']:.3f}x of the medians; repeats {spread})", ""]
        if "aa" in entry:
            aa = ", ".join(f"{r:.2f}" for r in sorted(entry["aa_repeats"]))
            lines += [f"A/A: {AA_CONTROL} against no-spec (the same flags, another server) {entry['aa']:.3f}x, "
                      f"repeats {aa}", ""]
        lines += ["| config | tok/s | vs no-spec | vs best fixed | accept length | FASER mean len | FASER steps below "
                  "max-len / steps |", "|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            below = f"{r['steps_below_max_len']} / {r['steps']}" if r["steps_below_max_len"] is not None else "-"
            mean_len = f"{r['mean_len']:.2f}" if name == "faser" and r["mean_len"] is not None else "-"
            accept = f"{r['accept_length']:.2f}" if r["accept_length"] else "-"
            lines.append(f"| {name} | {r['tok_per_s']:.1f} | {r['tok_per_s'] / rows['no-spec']['tok_per_s']:.2f}x | "
                         f"{r['tok_per_s'] / rows[best_fixed]['tok_per_s']:.2f}x | {accept} | {mean_len} | {below} |")
        lines.append("")
    return "\n".join(lines)


def plot_batch_one(table: dict, path: Path) -> None:
    """Tokens/s per configuration for sure and doomed prompts (median repeat, every repeat as a dot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table), figsize=(5 * len(table), 4))
    for ax, (kind, entry) in zip(axes, table.items()):
        names = list(entry["rows"])
        ax.bar(names, [entry["rows"][n]["tok_per_s"] for n in names])
        for i, n in enumerate(names):
            repeats = entry["rows"][n]["repeats_tok_per_s"]
            ax.plot([i] * len(repeats), repeats, "k.", markersize=3)
        ax.set_title(f"{kind} prompts: FASER {entry['faser_vs_target']:.2f}x {entry['target']}")
        ax.set_ylabel("output tokens/s (batch 1)")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int,
                        help="tokens per request (default 64; 256 with --batch-one, where one 64-token request is "
                        "mostly its prefill and a few hundred milliseconds of this shared machine's noise)")
    parser.add_argument("--batch-one", action="store_true", help="one request at a time, sure and doomed apart")
    parser.add_argument("--repeats", type=int, default=3, help="with --batch-one: alternating repeats")
    parser.add_argument("--pair", choices=sorted(PAIR_TITLES), default="cycle",
                        help="cycle: a draft step costs a target step, so on CPU no speculation wins even where "
                        "every draft passes; deep: a draft step costs a fraction of a target step, as in serving")
    args = parser.parse_args()
    if args.max_new_tokens is None:
        args.max_new_tokens = 256 if args.batch_one else 64
    suite = ensure_tiny_suite()
    if args.batch_one:
        batch_one(suite, args)
        return
    results = []
    for name, flags in configurations().items():
        print(f"[bench] {name}: starting server", flush=True)
        results.append(measure(name, flags, suite, args))
        print(f"[bench] {name}: {results[-1]['output_tok_per_s']:.1f} tok/s", flush=True)
    reference = results[0]["outputs"]
    lossless = all(r["outputs"] == reference for r in results)
    table = report(results)
    print("\n" + table + f"\n\nall configurations produced identical greedy outputs: {lossless}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.machine(), "cpus": __import__("os").cpu_count(), "args": vars(args)}
    for r in results:
        r.pop("outputs")
    stem = "spec_lengths_cpu" + ("" if args.pair == "cycle" else f"-{args.pair}")
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "lossless": lossless, "results": results}, indent=2) + "\n"
    )
    (RESULTS / f"{stem}.md").write_text(
        f"# FASER vs fixed lengths on CPU ({PAIR_TITLES[args.pair]})\n\n{json.dumps(meta)}\n\n{table}\n\n"
        f"identical greedy outputs: {lossless}\n")
    plot(results, RESULTS / f"{stem}.png", args.pair)
    print(f"wrote {RESULTS}/{stem}.{{json,md,png}}")


if __name__ == "__main__":
    main()
