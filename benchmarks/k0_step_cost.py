"""What a step without speculation costs inside a FASER server, against a plain decode step of the same batch.

    python benchmarks/k0_step_cost.py                  # batch sizes 1, 8, 32; 3 alternating repeats
    python benchmarks/k0_step_cost.py --model-path smollm2
    python benchmarks/k0_step_cost.py --model deep-cycles   # a 12-layer target: a plain step of about 10 ms at B = 1

Two servers of the same target: ``no-spec`` (no speculative algorithm) and ``faser-k0`` (the FASER worker with every
length 0, ``--faser-mode off``: every step is a whole-batch k = 0 step). For each batch size B, B greedy requests of
``--new-tokens`` tokens on prompts of ``--prompt-tokens`` start together and decode together; a request's time
between tokens is the step time, and the median over the batch is reported (``client``). The server's own view is
reported beside it (``server``): SGLang's decode log (``--decode-log-interval``) gives the throughput of the steps
where all B requests ran, so B / throughput is the step time without the client's streaming (on a 2-core machine the
HTTP client and SGLang's tokenizer processes share the cores with the step). The configurations alternate within each
repeat and the median repeat is reported, with the ratio faser-k0 / no-spec (the goal: <= 1.05). With two intra-op
threads on two cores shared with those processes, every small op waits on the other thread and repeats spread
10-25 %; ``OMP_NUM_THREADS=1 python benchmarks/k0_step_cost.py`` (both servers inherit it, recorded in the JSON)
measures steadier and faster steps for both.

``phases``: every server's scheduler iterations timed per phase (``engine/phase_times.py``): the target's forward
and the host work around it (requests taken in, the batch built, the worker's own code, results processed). Two
servers of the same code run at their own speeds (forwards 10-15 % apart at batch 1 on this machine), more than the
difference this benchmark looks for, so this view puts each server's host work around the plain server's forward:
(plain forward + host) / (plain forward + plain host) is the step ratio with each process's own speed taken out.

``--fixed K`` adds the same comparison with speculation on: stock SGLang at K draft steps (``fixed-K``) against
FASER's worker holding every request at K inside a window of 7 (``faser-fixed-K``: depth tiers, ragged verify, draft
cut, decision and record all run). Both draft and accept the same tokens, so their time per token is the cost of
FASER's own path (the ratio faser-fixed-K / fixed-K).
Writes ``benchmarks/results/k0_step_cost.{json,md,png}`` (``--plot-only`` redraws the plot from the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.serve.configs import deep_cycle_pair, spec_flags  # noqa: E402
from sglang_faser.engine import phase_times  # noqa: E402
from sglang_faser.server_process import ServerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PROMPT_TOKENS = 32  # a fixed prompt of this many tokens (``--prompt-tokens``); every request's last token differs
LOG_INTERVAL = 8  # decode steps per line of SGLang's decode log
DECODE_LOG = re.compile(r"#running-req: (\d+),.*gen throughput \(token/s\): ([\d.]+)")


def prompt(tokens: int, i: int) -> list[int]:
    """Request ``i``'s prompt: ``tokens`` token ids, the same for every request but the last, all below 500 (the
    deep cycle pair's vocabulary has 512; up to the fifty-first session the last was 600 + i, past it)."""
    return [1] + [100 + j % 300 for j in range(tokens - 2)] + [400 + i % 100]


def decode_step_ms(url: str, batch: int, new_tokens: int, prompt_tokens: int = PROMPT_TOKENS) -> float:
    """Decode step time at batch ``batch``: the median over requests of (last token - first token) / (tokens - 1),
    the time between two of a request's tokens while all ``batch`` requests decode together."""

    def one(i: int) -> float:
        body = {"input_ids": prompt(prompt_tokens, i), "stream": True,
                "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}}
        first = None
        with requests.post(url + "/generate", json=body, stream=True, timeout=600) as response:
            for line in response.iter_lines():
                if line.startswith(b"data:") and first is None:
                    first = time.perf_counter()
        return (time.perf_counter() - first) * 1e3 / (new_tokens - 1)

    with ThreadPoolExecutor(batch) as pool:
        return statistics.median(pool.map(one, range(batch)))


def server_step_ms(log: Path, start: int, batch: int) -> float | None:
    """The median decode step time SGLang logged after byte ``start`` of its log, over lines of ``batch`` running
    requests (B / their generation throughput); None if there are none."""
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    rates = [float(m.group(2)) for m in DECODE_LOG.finditer(text) if int(m.group(1)) == batch and float(m.group(2))]
    return statistics.median(batch * 1e3 / r for r in rates) if rates else None


def host_ratio(spec: dict, plain: dict) -> float:
    """A step of ``spec``'s host work against a plain one, both around the plain server's forward."""
    return (plain["forward"] + spec["host"]) / (plain["forward"] + plain["host"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="each request's prompt length (the "
                    "context a decode step attends over; the mixed prompts are about 160)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--algorithm", default="EAGLE")
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--model", choices=["embedded", "deep-cycles"], default="embedded",
                    help="deep-cycles: the deep cycle pair (12-layer target, 1-layer STANDALONE draft, generated)")
    ap.add_argument("--fixed", type=int, default=0, help="also compare FASER held at this length with stock SGLang")
    ap.add_argument("--out", type=Path, help="results stem (default benchmarks/results/k0_step_cost[-MODEL])")
    ap.add_argument("--plot-only", action="store_true", help="redraw the plot from an earlier run's JSON")
    args, extra = ap.parse_known_args(argv)
    args.out = args.out or RESULTS / ("k0_step_cost" + ("" if args.model == "embedded" else f"-{args.model}"))
    if args.plot_only:
        plot(json.loads(args.out.with_suffix(".json").read_text())["rows"], args.out.with_suffix(".png"))
        return 0
    draft = []  # the draft model of a STANDALONE pair, for the speculative servers only
    if args.model == "deep-cycles" and not args.model_path:
        (args.model_path, draft_path), args.algorithm = deep_cycle_pair(), "STANDALONE"
        draft, extra = ["--speculative-draft-model-path", draft_path], ["--dtype", "float32", *extra]
    model = ["--model-path", args.model_path] if args.model_path else []
    base = model + ["--faser-control", "off", "--max-total-tokens", "16384", "--sleep-on-idle",
                    "--decode-log-interval", str(LOG_INTERVAL), *extra]
    configs = {"no-spec": base, "faser-k0": base + spec_flags(args.algorithm, 3, "--faser-mode", "off") + draft}
    pairs = [("faser-k0", "no-spec")]
    if args.fixed:
        k = str(args.fixed)
        configs[f"fixed-{k}"] = base + spec_flags(args.algorithm, args.fixed, "--faser-mode", "stock") + draft
        configs[f"faser-fixed-{k}"] = base + spec_flags(args.algorithm, 7, "--faser-mode", "fixed",
                                                         "--faser-fixed-len", k) + draft
        pairs.append((f"faser-fixed-{k}", f"fixed-{k}"))
    phase_files = {name: Path(tempfile.mkdtemp(prefix="k0_step_cost-")) / "phases" for name in configs}
    servers = {name: ServerProcess(flags, log_path=Path(f"/tmp/k0_step_cost-{name}.log"),
                                   env={phase_times.ENV: str(phase_files[name])})
               for name, flags in configs.items()}
    samples: dict[str, dict[int, list[float]]] = {name: {b: [] for b in args.batch_sizes} for name in configs}
    server_samples: dict[str, dict[int, list[float]]] = {name: {b: [] for b in args.batch_sizes} for name in configs}
    try:
        for server in servers.values():
            server.start()
        # each server's first batch of each size pays one-off costs (with two threads a first repeat took 85-104
        # ms a token against 4-6 after it, and the median of three was then the slower of the other two)
        for server in servers.values():
            for batch in args.batch_sizes:
                decode_step_ms(server.url, batch, 8)
        for repeat in range(args.repeats):
            order = list(configs) if repeat % 2 == 0 else list(reversed(configs))
            for batch in args.batch_sizes:
                for name in order:
                    log = servers[name].log_path
                    start = log.stat().st_size
                    ms = decode_step_ms(servers[name].url, batch, args.new_tokens, args.prompt_tokens)
                    samples[name][batch].append(ms)
                    logged = server_step_ms(log, start, batch)
                    if logged is not None:
                        server_samples[name][batch].append(logged)
                    print(f"repeat {repeat} B={batch:3d} {name:15s} {ms:8.2f} ms/token (client), "
                          f"{logged or float('nan'):8.2f} ms/step (server)", flush=True)
        time.sleep(1.5)  # the phase files are rewritten at most once a second: one more request flushes them
        for name, server in servers.items():
            decode_step_ms(server.url, 1, 8)
    finally:
        for server in servers.values():
            server.stop()
    phases = {name: next(iter(phase_times.read(str(path)).values()), {}) for name, path in phase_files.items()}
    rows = []
    for batch in args.batch_sizes:
        row = {"batch": batch}
        for view, measured in (("", samples), ("server_", server_samples)):
            if not all(measured[n][batch] for n in configs):
                continue
            ms = {n: statistics.median(measured[n][batch]) for n in configs}
            row[view + "ms"] = {n: round(v, 3) for n, v in ms.items()}
            row[view + "ratios"] = {f"{a} / {b}": round(ms[a] / ms[b], 3) for a, b in pairs}
            row[view + "samples"] = {n: measured[n][batch] for n in configs}
        if all(str(batch) in phases[n] for n in configs):
            row["phases_us"] = {n: phases[n][str(batch)]["median_us"] for n in configs}
            row["phase_steps"] = {n: phases[n][str(batch)]["steps"] for n in configs}
            # each server's host work around its own forward, both over the plain server's forward: the process's
            # own speed (a forward 10-15 % apart between identical servers) cancels out
            row["host_ratios"] = {f"{a} / {b}": round(host_ratio(row["phases_us"][a], row["phases_us"][b]), 3)
                                  for a, b in pairs}
        rows.append(row)
    md = []
    for view, title in (("", "client: time between streamed tokens"), ("server_", "server: SGLang's decode log")):
        md += [f"{title}", "", "| batch | " + " | ".join(f"{n} ms" for n in configs) + " | "
               + " | ".join(f"{a} / {b}" for a, b in pairs) + " |", "|---" * (1 + len(configs) + len(pairs)) + "|"]
        md += [f"| {r['batch']} | " + " | ".join(f"{r[view + 'ms'][n]:.2f}" for n in configs) + " | "
               + " | ".join(f"{v:.3f}" for v in r[view + "ratios"].values()) + " |" for r in rows if view + "ms" in r]
        md.append("")
    md += ["phases: median per scheduler iteration, us (engine/phase_times.py); host = the iteration less the "
           "target's forward; ratio = (plain forward + host) / (plain forward + plain host)", "",
           "| batch | " + " | ".join(f"{n} forward | {n} host" for n in configs) + " | "
           + " | ".join(f"{a} / {b}" for a, b in pairs) + " |", "|---" * (1 + 2 * len(configs) + len(pairs)) + "|"]
    md += [f"| {r['batch']} | " + " | ".join(f"{r['phases_us'][n]['forward']:.0f} | {r['phases_us'][n]['host']:.0f}"
                                             for n in configs) + " | "
           + " | ".join(f"{v:.3f}" for v in r["host_ratios"].values()) + " |" for r in rows if "phases_us" in r]
    md.append("")
    print("\n".join(md))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"model": args.model_path or "embedded default", "algorithm": args.algorithm,
            "new_tokens": args.new_tokens, "prompt_tokens": args.prompt_tokens, "repeats": args.repeats,
            "statistic": "median of alternating repeats",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset")}  # the servers inherit it
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    return 0


def plot(rows: list[dict], path: Path) -> None:
    """Step time by batch size, one bar per configuration (median repeat, every repeat as a dot); one panel for
    the client's view, one for the server's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    views = [(v, t) for v, t in (("", "client (streamed tokens)"), ("server_", "server (SGLang's decode log)"))
             if any(v + "ms" in r for r in rows)]
    fig, axes = plt.subplots(1, len(views), figsize=(6 * len(views), 4), squeeze=False)
    for ax, (view, title) in zip(axes[0], views):
        shown = [r for r in rows if view + "ms" in r]
        names = list(shown[0][view + "ms"])
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(shown))]
            ax.bar(xs, [r[view + "ms"][name] for r in shown], width, label=name)
            for x, r in zip(xs, shown):
                ax.plot([x] * len(r[view + "samples"][name]), r[view + "samples"][name], "k.", markersize=3)
        ax.set_xticks(range(len(shown)), [f"B = {r['batch']}" for r in shown])
        ax.set_ylabel("ms per decode step")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("k = 0 step and FASER's own path against plain SGLang (CPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
