"""FASER's length policy replayed offline at batch 1 on recorded acceptance, against per-kind length plans.

    python benchmarks/replay_lengths.py --acceptance f7.jsonl --costs faser.jsonl --workload mixed-c1 --requests 64

This shared machine moves 10-25 % between runs, so a few % that a policy change gains or loses at batch 1 drowns
in a served A/B. This replays it without noise: ``--acceptance`` is a step trace (``SGLANG_FASER_STEP_TRACE``) of
FASER's worker held at the whole window (``faser-fixed-7``) serving the workload one request at a time, which tells
for each request and output position how many drafts would pass from there (a step at position p that had a
drafts accepted of k tried, a < k, says r(p + j) = a - j for j <= a; a full window passed counts as the window);
``--costs`` is a step trace of an adaptive FASER server at batch 1, from which a step's price by depth is taken
(the median time between consecutive steps: parked, and a line fitted over the drafting depths) and what a
request pays to resume drafting after parked steps (the median catch-up). Each request is replayed to its output
length under FASER's real ``LengthController`` (default policy, that server's fitted batch-1 cost model) and under
every plan ``r/n`` (the ``repeat`` prompts drafting r a step, the ``noise`` ones n, as in
``oracle_lengths.py``), each request's kind taken from the workload's requests in order
(``ab_servers.workload_requests``). Reports each as tokens per replayed millisecond
against ``0/0`` (FASER's worker parked throughout) and against the best plan, and writes
``benchmarks/results/replay_lengths_{tag}.{json,md}``. A model, not a measurement: it prices steps by depth alone,
so it ranks policies on this pair's acceptance; served runs (``oracle_lengths.py``) are what the ratios mean.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ab_servers import workload_requests  # noqa: E402
from benchmarks.oracle_lengths import KINDS, parse_plan  # noqa: E402
from sglang_faser.spec.config import FaserConfig  # noqa: E402
from sglang_faser.spec.controller import LengthController  # noqa: E402
from benchmarks.trace_report import read  # noqa: E402
from sglang_faser.spec.cost_model import StepCostModel  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def read_trace(path: str | Path) -> list[dict]:
    """The batch-1 steps of a step trace (``.jsonl`` or ``.jsonl.gz``), warm-up steps left out, in order."""
    return [r for r in read(Path(path)) if r.get("batch") == 1 and not r.get("warmup")]


def run_lengths(trace: list[dict], window: int) -> list[list[int]]:
    """Per request (in the order they first appear), r(p) for every output position the trace covers: the drafts
    that pass from position p (capped at ``window``)."""
    by_request: dict[str, list[dict]] = {}
    for record in trace:
        by_request.setdefault(record["rids"][0], []).append(record)
    out = []
    for steps in by_request.values():
        runs: list[int] = []
        for step in steps:
            tried = step["lengths"][0]
            accepted = min(step["accepted"][0], tried)
            full = accepted == tried >= window  # the whole window passed: a run at least that long
            runs.extend(window if full else accepted - j for j in range(accepted + 1))
        out.append(runs)
    return out


def step_prices(trace: list[dict]) -> tuple[float, float, float, float]:
    """(parked, drafting intercept, per draft, resume) ms at batch 1: medians of the time between consecutive steps
    of one request (its first step, after its prefill, is left out; a gap longer than 1.5 step times is cut to
    that), a line through the drafting depths' medians, and the median catch-up of the steps that had one."""
    gaps: dict[int, list[float]] = {}
    for a, b in itertools.pairwise(trace):
        if a["rids"] == b["rids"]:
            gaps.setdefault(b["depth"], []).append(min((b["time"] - a["time"]) * 1000.0, b["step_ms"] * 1.5))
    depths = sorted(d for d in gaps if d > 0)
    if 0 not in gaps or len(depths) < 2:
        raise SystemExit("--costs: the trace needs parked steps and drafting steps at two depths or more")
    medians = [statistics.median(gaps[d]) for d in depths]
    slope, intercept = np.polyfit(depths, medians, 1, w=[np.sqrt(len(gaps[d])) for d in depths])
    catch_ups = [r["catch_up_ms"] for r in trace if r.get("catch_up_ms", 0.0) > 0.0]
    return statistics.median(gaps[0]), float(intercept), float(slope), statistics.median(catch_ups or [0.0])


def replay(runs: list[int], length_at, prices) -> float:
    """Milliseconds to emit ``len(runs)`` tokens of one request, ``length_at(position)`` drafts a step (it may
    record what passed through ``length_at.observe``)."""
    parked, intercept, per_draft, resume = prices
    ms, position, was_parked = 0.0, 0, False
    observe = getattr(length_at, "observe", None)
    while position < len(runs):
        k = length_at(position)
        passed = min(k, runs[position])
        if observe:
            observe(passed)
        ms += parked if k == 0 else intercept + per_draft * k + (resume if was_parked else 0.0)
        was_parked, position = k == 0, position + passed + 1
    return ms


class PolicyLengths:
    """FASER's controller deciding one request's steps (``forget`` once the request ends)."""

    def __init__(self, controller: LengthController, rid: str):
        self.controller, self.rid = controller, rid

    def __call__(self, position: int) -> int:
        return int(self.controller.decide([self.rid]).lengths[0])

    def observe(self, passed: int) -> None:
        self.controller.observe([passed])


def policy_controller(costs: list[dict], window: int) -> LengthController:
    """The adaptive policy as served, priced by the cost trace's last batch-1 fit (no start-up sweep: that fit has
    measured what one would)."""
    last = costs[-1]
    cost = StepCostModel(verify_coef=last["verify_coef"], draft_coef=last["draft_coef"])
    return LengthController(FaserConfig(), window=window, cost=cost, calibration_sweeps=0)


def evaluate(requests: list[tuple[str, list[int]]], prices, plans: list[tuple[int, int]],
             controller: LengthController) -> dict[str, float]:
    """Replayed milliseconds of every plan and of the policy over the requests, in order."""
    totals = {}
    for plan in plans:
        lengths = dict(zip(KINDS, plan))
        totals[f"{plan[0]}/{plan[1]}"] = sum(replay(runs, lambda p, k=lengths[kind]: k, prices)
                                             for kind, runs in requests)
    policy = 0.0
    for i, (_, runs) in enumerate(requests):
        policy += replay(runs, PolicyLengths(controller, f"replay-{i}"), prices)
        controller.forget(f"replay-{i}")
    totals["faser"] = policy
    return totals


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--acceptance", required=True, help="step trace of faser-fixed-<window> at batch 1")
    parser.add_argument("--costs", required=True, help="step trace of an adaptive FASER server at batch 1")
    parser.add_argument("--workload", default="mixed-c1", help="the workload both traces served (kinds, order)")
    parser.add_argument("--requests", type=int, default=64, help="requests of the workload at the trace's end")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="as the traced workload ran")
    parser.add_argument("--window", type=int, default=7)
    parser.add_argument("--plans", nargs="+", default=["1/0", "2/0", "3/0", "5/0", "7/0", "1/1", "2/2", "3/3",
                                                       "5/5", "7/7", "3/1", "5/2"])
    parser.add_argument("--tag", help="results file suffix (default: the workload)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    served, _ = workload_requests(args.workload, args.requests, args.max_new_tokens)
    kinds = {r.kind for r in served}
    if not kinds <= set(KINDS):
        raise SystemExit(f"--workload {args.workload}: plans give lengths to {KINDS}, it has {sorted(kinds)}")
    runs = run_lengths(read_trace(args.acceptance), args.window)[-len(served):]
    if len(runs) < len(served):
        raise SystemExit(f"--acceptance: {len(runs)} requests traced, the workload has {len(served)}")
    requests = [(r.kind, run[: r.max_new_tokens]) for r, run in zip(served, runs)]
    costs = read_trace(args.costs)
    prices = step_prices(costs)
    plans = [parse_plan(p) for p in dict.fromkeys(["0/0", *args.plans])]
    totals = evaluate(requests, prices, plans, policy_controller(costs, args.window))
    best = min((name for name in totals if name != "faser"), key=totals.get)
    rows = {name: {"ms": round(ms, 1), "vs_parked": totals["0/0"] / ms, "vs_best_plan": totals[best] / ms}
            for name, ms in totals.items()}
    meta = {**{k: v for k, v in vars(args).items() if k != "plans"}, "kinds": KINDS, "best_plan": best,
            "prices_ms": dict(zip(("parked", "intercept", "per_draft", "resume"), (round(p, 2) for p in prices)))}
    tag = args.tag or args.workload
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"replay_lengths_{tag}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Batch-1 replay of the length policy: {args.workload}", "", f"`{json.dumps(meta)}`", "",
             f"plan r/n: {KINDS[0]} prompts draft r a step, {KINDS[1]} n; tokens per replayed ms (a model: steps "
             "priced by depth)", "", "| run | replayed ms | vs 0/0 (parked) | vs best plan |", "|---|---|---|---|"]
    lines += [f"| {name} | {row['ms']} | {row['vs_parked']:.3f}x | {row['vs_best_plan']:.3f}x |"
              for name, row in rows.items()]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"replay_lengths_{tag}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
