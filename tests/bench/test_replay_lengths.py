"""The batch-1 replay: run lengths read off a window-wide trace, steps priced by depth, plans and the policy ranked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import replay_lengths  # noqa: E402
from benchmarks.ab_servers import workload_requests  # noqa: E402

VERIFY_COEF, DRAFT_COEF = [9.8, 0.0, 0.3, 0.0], [3.3, 3.0, 0.0, 4.7, 0.0]  # a batch-1 CPU fit of the embedded pair


def _step(rid: str, length: int, accepted: int, time: float, step_ms: float = 10.0, catch_up_ms: float = 0.0) -> dict:
    return {"batch": 1, "rids": [rid], "lengths": [length], "depth": length, "accepted": [accepted], "time": time,
            "step_ms": step_ms, "catch_up_ms": catch_up_ms, "verify_coef": VERIFY_COEF, "draft_coef": DRAFT_COEF}


def test_a_window_wide_trace_tells_how_many_drafts_pass_from_each_position():
    trace = [_step("a", 7, 2, 0.0), _step("a", 7, 7, 0.1), _step("a", 7, 0, 0.2), _step("b", 7, 1, 0.3)]
    assert replay_lengths.run_lengths(trace, window=7) == [[2, 1, 0] + [7] * 8 + [0], [1, 0]]


def test_a_replay_prices_each_step_by_its_depth_and_a_resume_after_parked_steps():
    prices = (10.0, 20.0, 5.0, 3.0)  # parked, drafting intercept, per draft, resume
    runs = [3, 2, 1, 0, 0, 0]
    assert replay_lengths.replay(runs, lambda p: 2, prices) == 4 * 30.0  # 3 tokens, then 1, 1 and 1
    assert replay_lengths.replay(runs, lambda p: 0, prices) == 6 * 10.0
    # parked at 0, drafts 2 from position 1 (2 pass: positions 1-3), parked again at 4 and 5
    assert replay_lengths.replay(runs, lambda p: 2 if p == 1 else 0, prices) == 10.0 + 30.0 + 3.0 + 2 * 10.0


def test_it_ranks_per_kind_plans_and_the_policy_on_sure_and_doomed_requests(tmp_path, monkeypatch):
    """Repeat prompts whose drafts always pass, noise whose first draft always fails: the best plan drafts the
    whole window for the first and none for the second, and the policy, learning each request as it goes, beats
    parking everyone (it has to find the sure ones) without reaching the plan that knew them in advance."""
    monkeypatch.setattr(replay_lengths, "RESULTS", tmp_path)
    served, _ = workload_requests("mixed-c1", 16, 64)
    acceptance, t = [], 0.0
    for i, request in enumerate(served):
        for _ in range(9 if request.kind == "repeat" else 64):
            acceptance.append(_step(f"r{i}", 7, 7 if request.kind == "repeat" else 0, t))
            t += 0.05
    costs = []
    for depth, ms in [(0, 11.0)] * 20 + [(1, 22.0), (3, 31.0), (5, 40.0), (7, 49.0)] * 3:
        t += ms / 1000.0  # a step's time is when it ended
        costs.append(_step("c", depth, 0, t, step_ms=ms - 2.0, catch_up_ms=6.0 if depth == 1 else 0.0))
    for name, trace in (("acceptance", acceptance), ("costs", costs)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
    assert replay_lengths.main(["--acceptance", str(tmp_path / "acceptance.jsonl"), "--costs",
                                str(tmp_path / "costs.jsonl"), "--requests", "16", "--tag", "t"]) == 0
    result = json.loads((tmp_path / "replay_lengths_t.json").read_text())
    rows, prices = result["rows"], result["meta"]["prices_ms"]
    assert result["meta"]["best_plan"] == "7/0" and prices["parked"] == 11.0 and prices["resume"] == 6.0
    assert abs(prices["per_draft"] - 4.5) < 0.2, prices
    assert rows["7/7"]["vs_parked"] < 1.0 < rows["7/0"]["vs_parked"]
    assert 1.0 < rows["faser"]["vs_parked"] and rows["faser"]["vs_best_plan"] < 1.0, rows["faser"]
    assert (tmp_path / "replay_lengths_t.md").exists()
