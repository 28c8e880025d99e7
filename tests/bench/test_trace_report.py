"""benchmarks/trace_report.py on a hand-made trace: its cells, climbs and catch-ups (a real trace: engine tests)."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmarks import trace_report


def _step(batch, depth, ms, expected_ms, accepted, warmup=False, catch_up=0.0):
    return {"batch": batch, "depth": depth, "lengths": [depth] * batch, "accepted": [accepted] * batch,
            "step_ms": ms - 1.0, "host_ms": 1.0, "expected_ms": expected_ms, "expected_tokens": batch * (accepted + 1.5),
            "warmup": warmup, "calibration": False, "catch_up_ms": catch_up}


def test_cells_climbs_and_catch_ups_of_a_trace(tmp_path):
    lines = [_step(16, 3, 99.0, 1.0, 0, warmup=True)]  # the warm-up's: left out
    lines += [_step(2, 0, 5.0, 4.0, 0), _step(3, 0, 7.0, 6.0, 0, catch_up=2.0)]  # bucket 2+, parked
    lines += [_step(20, d, 10.0 + d, 10.0 + d, d) for d in (1, 1, 2, 2, 3, 3, 3)]  # a climb at 16+
    lines += [_step(2, 1, 8.0, 8.0, 1), _step(2, 1, 8.0, 8.0, 0)]  # one draft at 2+: no climb (top 1)
    path = tmp_path / "steps.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    summary = trace_report.report(trace_report.read(path))
    assert summary["steps"] == 11 and summary["warmup_steps"] == 1
    parked = summary["cells"][0]
    assert (parked["bucket"], parked["depth"], parked["steps"]) == (2, 0, 2)
    # the catch-up is left out of its step, as the cost model leaves it out: 7 - 2 ms against 6 modelled
    assert parked["measured_ms"] == pytest.approx(5.0)
    assert parked["measured_over_modelled"] == pytest.approx(5.0 / 5.0)
    assert parked["tokens_per_ms_per_request"] == pytest.approx(1 / 5.0)
    assert parked["expected_tokens_per_request"] == pytest.approx(1.5)
    three = next(c for c in summary["cells"] if (c["bucket"], c["depth"]) == (16, 3))
    assert three["steps"] == 3 and three["tokens_per_request"] == pytest.approx(4.0)
    assert summary["climbs"] == [{"bucket": 16, "top_depth": 3, "steps_below_top": 4, "depths": [1, 1, 2, 2, 3]}]
    assert summary["catch_ups"] == {"count": 1, "mean_ms": 2.0}
    text = trace_report.markdown(summary, path.name)
    assert "| 16+ | 3 | 3 |" in text and "Climbs from one draft at a newly entered batch bucket: 1, 4 steps" in text


def test_calibration_sets_each_positions_estimates_against_what_passed():
    step = {"batch": 3, "depth": 2, "lengths": [2, 2, 0], "accepted": [2, 0, 0], "step_ms": 5.0, "host_ms": 0.0,
            "expected_ms": 5.0, "expected_tokens": 4.0, "means": [[0.9, 0.8], [0.5, 0.4], [0.3, 0.3]]}
    rows = trace_report.calibration([step, {**step, "means": None}])  # a step traced without means: left out
    # position 1: both drafting requests reached it, one passed; position 2: only the first, which passed
    assert rows == [{"position": 1, "reached": 2, "mean_estimate": pytest.approx(0.7), "accepted": 0.5},
                    {"position": 2, "reached": 1, "mean_estimate": pytest.approx(0.8), "accepted": 1.0}]
    assert "| 1 | 2 | 0.700 | 0.500 |" in trace_report.markdown(trace_report.report([step]), "t")
