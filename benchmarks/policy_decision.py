"""How long the goodput policy takes to decide a step's lengths, by batch size (CPU wall time).

The scheduler calls the policy once per decode step, so its decision must stay well under a millisecond at
B = 256 (goal: 0.2 ms with max-len 8). Acceptance estimates drift a little between steps and the batch is redrawn
every 50 steps, so the timing covers warm starts (the usual case) and cold ones; each batch size is timed once with
the fit's price and once with measured residuals by depth that do not grow with depth (the policy then holds
each cap's plan at its exact depth, its slower path). Prints median and p99 microseconds per decision and writes benchmarks/results/policy_decision.json.

    python benchmarks/policy_decision.py [--max-len 8] [--repeats 2000]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from sglang_faser.spec.acceptance import AcceptanceTracker
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.cost_model import StepCostModel
from sglang_faser.spec.policy import FixedPolicy, GoodputPolicy

RESULTS = Path(__file__).parent / "results"


def time_decisions(batch: int, max_len: int, repeats: int, rng: np.random.Generator, residuals: bool) -> dict:
    tracker = AcceptanceTracker(max_len=max_len)
    rids = [f"r{i}" for i in range(batch)]
    cost = StepCostModel(verify_coef=[8.0, 0.02, 0.05, 0.001], draft_coef=[0.5, 0.5, 0.01, 1.0, 0.005], draft_cut=True)
    if residuals:  # measured steps off the fit by depth, not monotone in it: the exact-depth path (the slower one)
        for depth in range(max_len + 1):
            cost.record_step(batch, depth, 10.0, 10.0 * (1.2 if depth % 2 else 0.9))
    policy = GoodputPolicy(FaserConfig().uniform_margin)  # as a server runs it: the single-length check included
    caps, mins = np.full(batch, max_len), np.zeros(batch, dtype=np.int64)
    samples = []
    base = rng.uniform(0.0, 1.0, size=(batch, max_len))
    for step in range(repeats):
        # estimates drift a little from step to step, as in serving (the policy starts from the last optimum);
        # every 50 steps the batch is redrawn entirely (a cold start)
        if step % 50 == 0:
            base = rng.uniform(0.0, 1.0, size=(batch, max_len))
        accept = np.clip(base + rng.normal(0.0, 0.03, size=base.shape), 0.0, 1.0)
        start = time.perf_counter()
        plan = policy.plan(accept, caps, mins, cost)
        samples.append(time.perf_counter() - start)
    # the per-step bookkeeping that goes with a decision: read estimates, then record the outcome
    book = []
    for _ in range(repeats // 4):
        start = time.perf_counter()
        tracker.estimates(rids)  # what a server step reads (means and optimistic estimates)
        tracker.observe(rids, plan.lengths, np.minimum(plan.lengths, rng.integers(0, max_len, batch)))
        book.append(time.perf_counter() - start)
    fixed = max(FixedPolicy(k).plan(accept, caps, mins, cost).goodput for k in range(max_len + 1))
    us = np.array(samples) * 1e6
    return {
        "batch": batch,
        "max_len": max_len,
        "depth_residuals": residuals,
        "decision_us_median": float(np.median(us)),
        "decision_us_p99": float(np.percentile(us, 99)),
        "tracker_us_median": float(np.median(book) * 1e6),
        "last_plan_goodput_vs_best_fixed": plan.goodput / fixed if fixed else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [time_decisions(b, args.max_len, args.repeats, rng, residuals)
            for residuals in (False, True) for b in (1, 16, 64, 256)]
    print(f"{'batch':>6} {'residuals':>9} {'decide median us':>17} {'p99 us':>8} {'tracker us':>11} "
          f"{'vs best fixed':>14}")
    for r in rows:
        print(
            f"{r['batch']:>6} {'yes' if r['depth_residuals'] else 'no':>9} {r['decision_us_median']:>17.1f} "
            f"{r['decision_us_p99']:>8.1f} {r['tracker_us_median']:>11.1f} {r['last_plan_goodput_vs_best_fixed']:>14.3f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(), "rows": rows}
    (RESULTS / "policy_decision.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS / 'policy_decision.json'}")


if __name__ == "__main__":
    main()
