"""What a FASER step trace says about its cost model and its choices, in one table (CPU or GPU traces alike).

    python benchmarks/trace_report.py steps.jsonl            # or .jsonl.gz (the GPU leases' traces)
    python benchmarks/trace_report.py steps.jsonl --out benchmarks/results/trace_TAG   # also TAG.{md,json}

A trace is ``SGLANG_FASER_STEP_TRACE``'s output (``sglang_faser/engine/step_trace.py``): one line per decode step.
For each (batch-size bucket, depth) the live steps (the start-up warm-up's and sweep's left out) give their count,
the measured step time with the scheduler's host work since the last decode step (what the cost model prices: on
CPU about a millisecond a step; on a GPU the device's timeline hides it) and the modelled one (the price the policy
chose on, after the measured residual), tokens
committed a request against what the policy expected, and tokens a millisecond a request: where the model's
prices or hopes are off, and which depth paid at which batch size. Below it the climbs, the runs where a batch
size newly entered started at one draft and went deeper one depth at a time (the cost-side probe,
``spec/controller.py`` ``_priced_limit``), the catch-ups (a resumed request's skipped draft rows) and, by draft
position, the acceptance estimates the steps decided on against the share that passed (``calibration``). The fourth
GPU lease's analysis (``benchmarks/results/gpu/README.md``) is this report on its trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

from sglang_faser.spec import cost_model

CLIMB_LOOKAHEAD = 24  # steps of a bucket after it is entered within which a climb reaches its top


def read(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def bucket_of(batch: int) -> int:
    """The cost model's batch-size bucket, named by its smallest size (1, 2, 4, 8, ...)."""
    return 1 << cost_model.bucket_of(batch)


def live_steps(lines: list[dict]) -> list[dict]:
    return [x for x in lines if "step_ms" in x and not x.get("warmup") and not x.get("calibration")]


def _measured(step: dict) -> float:
    """A step's milliseconds as the cost model counts them: the step and the host gap before it, less its draft
    catch-up (a one-off of the resumption, priced apart)."""
    return step["step_ms"] + step.get("host_ms", 0.0) - step.get("catch_up_ms", 0.0)


def _committed(step: dict) -> float:
    """Tokens a request the step committed (accepted drafts and the bonus token), mean over its batch."""
    return (sum(step["accepted"]) + step["batch"]) / step["batch"]


def cells(steps: list[dict]) -> list[dict]:
    """One row per (bucket, depth): means over its steps."""
    by = defaultdict(list)
    for step in steps:
        by[(bucket_of(step["batch"]), step["depth"])].append(step)
    rows = []
    for (bucket, depth), group in sorted(by.items()):
        def mean(f):
            return statistics.fmean(f(s) for s in group)
        measured, modelled = mean(_measured), mean(lambda s: s["expected_ms"])
        got = mean(_committed)
        rows.append({"bucket": bucket, "depth": depth, "steps": len(group), "measured_ms": measured,
                     "modelled_ms": modelled, "measured_over_modelled": measured / modelled if modelled else None,
                     "tokens_per_request": got,
                     "expected_tokens_per_request": mean(lambda s: s["expected_tokens"] / s["batch"]),
                     "tokens_per_ms_per_request": got / measured if measured else None})
    return rows


def climbs(steps: list[dict]) -> list[dict]:
    """Each entry into a bucket (its step follows one of another bucket) at depth 1 whose next steps there went
    deeper one depth at a time: the steps spent below the top depth reached within ``CLIMB_LOOKAHEAD``."""
    found, last = [], None
    for i, step in enumerate(steps):
        bucket = bucket_of(step["batch"])
        if bucket != last and step["depth"] == 1:
            run = [s["depth"] for s in steps[i:i + CLIMB_LOOKAHEAD] if bucket_of(s["batch"]) == bucket]
            top = max(run)
            below = next(j for j, d in enumerate(run) if d == top)
            if top >= 3 and all(0 <= b - a <= 1 for a, b in zip(run[:below + 1], run[1:below + 1])):
                found.append({"bucket": bucket, "top_depth": top, "steps_below_top": below,
                              "depths": run[:below + 1]})
        last = bucket
    return found


def calibration(steps: list[dict]) -> list[dict]:
    """The acceptance estimates against what followed, by draft position: over the request-steps whose drafts reached
    position t (drafted t or more, the first t - 1 accepted), the posterior mean the step decided on there against
    the share accepted. Drafting requests' means below what passes price deeper drafts too low (steps traced with
    ``means``: the controller's ``explain``)."""
    reached, believed, passed = defaultdict(int), defaultdict(float), defaultdict(int)
    for step in steps:
        means = step.get("means")
        if not means or "accepted" not in step:
            continue
        for row, k, a in zip(means, step["lengths"], step["accepted"]):
            a = min(a, k)
            for t in range(min(k, a + 1)):
                reached[t] += 1
                believed[t] += row[t]
                passed[t] += t < a
    return [{"position": t + 1, "reached": reached[t], "mean_estimate": believed[t] / reached[t],
             "accepted": passed[t] / reached[t]} for t in sorted(reached)]


def catch_ups(steps: list[dict]) -> dict:
    ms = [s["catch_up_ms"] for s in steps if s.get("catch_up_ms")]
    return {"count": len(ms), "mean_ms": statistics.fmean(ms) if ms else 0.0}


def report(lines: list[dict]) -> dict:
    steps = live_steps(lines)
    return {"steps": len(steps), "warmup_steps": sum(bool(x.get("warmup")) for x in lines),
            "step_seconds": sum(map(_measured, steps)) / 1000, "cells": cells(steps),
            "climbs": climbs(steps), "catch_ups": catch_ups(steps), "calibration": calibration(steps)}


def markdown(summary: dict, source: str) -> str:
    out = [f"# Step trace: {source}", "",
           f"{summary['steps']} live decode steps ({summary['step_seconds']:.2f} s with their host gaps), "
           f"{summary['warmup_steps']} warm-up steps left out.", "",
           "| batch bucket | depth | steps | measured ms (with host gap) | modelled ms | measured / modelled | tokens a request "
           "(expected) | tokens/ms a request |", "|---|---|---|---|---|---|---|---|"]
    for r in summary["cells"]:
        ratio = "-" if r["measured_over_modelled"] is None else f"{r['measured_over_modelled']:.2f}"
        out.append(f"| {r['bucket']}+ | {r['depth']} | {r['steps']} | {r['measured_ms']:.1f} | "
                   f"{r['modelled_ms']:.1f} | {ratio} | {r['tokens_per_request']:.2f} "
                   f"({r['expected_tokens_per_request']:.2f}) | {r['tokens_per_ms_per_request']:.3f} |")
    found = summary["climbs"]
    out += ["", f"Climbs from one draft at a newly entered batch bucket: {len(found)}, "
            f"{sum(c['steps_below_top'] for c in found)} steps below their top depth"
            + "".join(f"; {c['bucket']}+: {' '.join(map(str, c['depths']))}" for c in found) + ".",
            f"Catch-ups: {summary['catch_ups']['count']}, {summary['catch_ups']['mean_ms']:.1f} ms on average.", ""]
    if summary["calibration"]:
        out += ["| draft position | reached | mean estimate | accepted |", "|---|---|---|---|"]
        out += [f"| {c['position']} | {c['reached']} | {c['mean_estimate']:.3f} | {c['accepted']:.3f} |"
                for c in summary["calibration"]]
        out.append("")
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, help="also write OUT.md and OUT.json")
    args = parser.parse_args(argv)
    summary = report(read(args.trace))
    text = markdown(summary, args.trace.name)
    print(text)
    if args.out:
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
