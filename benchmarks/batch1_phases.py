"""Where a batch-1 step's time goes, server by server: the target's forward against the host work around it.

    OMP_NUM_THREADS=1 python benchmarks/batch1_phases.py --kind doomed --configs no-spec faser --copies 2
    OMP_NUM_THREADS=1 python benchmarks/batch1_phases.py --kind sure --configs fixed-5 faser --copies 2

One request at a time on the deep cycle pair (``spec_lengths_cpu --batch-one``'s prompts: ``sure`` drafts always
pass, ``doomed`` never), every configuration run ``--copies`` times as separate server processes, all up at once,
the servers taking turns request by request (the order reversed every other repeat). Each server times its
scheduler's phases (``engine/phase_times.py``); the table gives, per server, the median forward (the target's
``forward_batch_generation``) and host work (the rest of the iteration) of its batch-1 decode iterations, and its
tokens/s against the first server's, repeat by repeat.

Why copies: a CPU server process keeps its own speed while it runs (forwards 5-15 % apart between identical ones),
more than the step costs this benchmark looks at. With two processes of each configuration, a difference that both
copies of one configuration show against both of the other's is the code's; one copy alone may be its process's.
Writes ``benchmarks/results/batch1_phases_{kind}[-{tag}].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import spec_lengths_cpu  # noqa: E402
from sglang_faser.engine import phase_times  # noqa: E402
from sglang_faser.models.tiny import CYCLE_SPLIT, ensure_tiny_suite  # noqa: E402
from sglang_faser.server_process import ServerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PROMPTS = {"sure": [0, 3], "doomed": [0, CYCLE_SPLIT + 1]}


def server_names(configs: list[str], copies: int) -> list[str]:
    """``faser``, ``faser#2``, ...: each configuration ``copies`` times, copies of one next to each other."""
    return [name if copy == 1 else f"{name}#{copy}" for name in configs for copy in range(1, copies + 1)]


def summarise(tok_per_s: dict[str, list[float]], phases: dict[str, dict]) -> dict:
    """Per server: median tokens/s, the median of its repeats' ratios to the first server's, and its batch-1
    phase medians (us: forward, host and the iteration's phases) from ``phase_times.read``'s summary."""
    first = next(iter(tok_per_s))
    rows = {}
    for name, runs in tok_per_s.items():
        ratios = [a / b for a, b in zip(runs, tok_per_s[first])]
        batch_one = phases.get(name, {}).get("1", {})
        rows[name] = {"tok_per_s": statistics.median(runs), "vs_first": statistics.median(ratios),
                      "repeats_vs_first": ratios, "steps": batch_one.get("steps", 0),
                      "median_us": batch_one.get("median_us", {})}
    return rows


def report(rows: dict, meta: dict) -> str:
    first = next(iter(rows))
    lines = [f"# Batch-1 phases, {meta['kind']} prompts (deep cycle pair)", "", json.dumps(meta), "",
             f"| server | tok/s | vs {first} (median of repeats) | decode iterations | forward us | host us | "
             "schedule us | results us |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        us = r["median_us"]
        cells = [f"{us[p]:.0f}" if p in us else "-" for p in ("forward", "host", "schedule", "results")]
        lines.append(f"| {name} | {r['tok_per_s']:.1f} | {r['vs_first']:.3f}x | {r['steps']} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(PROMPTS), default="doomed")
    parser.add_argument("--configs", nargs="+", default=["no-spec", "faser"])
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    suite, configs = ensure_tiny_suite(), spec_lengths_cpu.configurations()
    names, prompt = server_names(args.configs, args.copies), PROMPTS[args.kind]
    folder = Path(tempfile.mkdtemp(prefix="faser-batch1-phases-"))
    servers = {name: ServerProcess(
        spec_lengths_cpu.server_flags(configs[name.split("#")[0]], suite, 1, "deep") + ["--sleep-on-idle"],
        log_path=folder / f"{name}.log", env={phase_times.ENV: str(folder / f"phases_{name}")}) for name in names}
    tok_per_s: dict[str, list[float]] = {name: [] for name in names}
    try:
        for server in servers.values():
            server.start()
            for warm in PROMPTS.values():  # FASER's start-up sweep runs here
                spec_lengths_cpu.run_one(server.url, warm, args.max_new_tokens)
        for repeat in range(args.repeats):
            for name in names if repeat % 2 == 0 else names[::-1]:
                run = spec_lengths_cpu.run_one(servers[name].url, prompt, args.max_new_tokens)
                tok_per_s[name].append(run["tokens"] / run["latency_s"])
            print(f"[bench] repeat {repeat}: " + ", ".join(f"{n} {v[-1]:.1f}" for n, v in tok_per_s.items()),
                  flush=True)
    finally:
        for server in servers.values():
            server.stop()
    phases = {name: next(iter(phase_times.read(str(folder / f"phases_{name}")).values()), {}) for name in names}
    meta = {"kind": args.kind, "repeats": args.repeats, "copies": args.copies,
            "max_new_tokens": args.max_new_tokens, "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset")}
    rows = summarise(tok_per_s, phases)
    text = report(rows, meta)
    print(text)
    stem = f"batch1_phases_{args.kind}" + (f"-{args.tag}" if args.tag else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "servers": rows}, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
