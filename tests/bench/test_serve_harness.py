"""The serving benchmark's pure parts: arrival processes, workloads, metric maths and ratios."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serve import metrics, workload  # noqa: E402
from benchmarks.serve.driver import Result  # noqa: E402


@pytest.mark.parametrize("process", ["poisson", "gamma"])
def test_arrivals_have_the_asked_rate_and_are_reproducible(process):
    times = workload.arrival_times(4000, rate=8.0, process=process, seed=3)
    assert np.all(np.diff(times) >= 0) and times[0] == 0
    assert 4000 / times[-1] == pytest.approx(8.0, rel=0.1)
    assert np.array_equal(times, workload.arrival_times(4000, 8.0, process, seed=3))


def test_gamma_arrivals_are_burstier_than_poisson():
    poisson = np.diff(workload.arrival_times(4000, 8.0, "poisson", seed=1))
    bursty = np.diff(workload.arrival_times(4000, 8.0, "gamma", cv=3.0, seed=1))
    assert np.std(poisson) / np.mean(poisson) == pytest.approx(1.0, rel=0.15)
    assert np.std(bursty) / np.mean(bursty) == pytest.approx(3.0, rel=0.25)


def test_infinite_rate_sends_everything_at_once_and_unknown_process_is_refused():
    assert not workload.arrival_times(5, float("inf")).any()
    with pytest.raises(ValueError, match="unknown arrival process"):
        workload.arrival_times(5, 1.0, "uniform")


def test_workload_draws_from_every_shipped_prompt_set(tmp_path):
    requests = workload.build(60, 4.0, "poisson", max_new_tokens=8, seed=0)
    assert {r.kind for r in requests} == set(workload.SETS)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 1.5, "prompt": "b"}\n{"t": 0.5, "prompt": "a", "max_new_tokens": 3}\n')
    replayed = workload.replay(trace, default_max_new_tokens=9)
    assert [(r.at, r.prompt, r.max_new_tokens) for r in replayed] == [(0.5, "a", 3), (1.5, "b", 9)]


def test_summary_and_ratios():
    results = [Result("chat", True, ttft=0.1, e2e=1.1, output_tokens=11, accept_length=2.0, mean_cap=1.5),
               Result("code", True, ttft=0.3, e2e=2.3, output_tokens=21, accept_length=3.0, mean_cap=2.5),
               Result("chat", False, error="HTTP 500")]
    row = metrics.summarise(results, wall_s=4.0, telemetry_delta={"verified": 30, "pruned": 10})
    assert row["failed"] == 1 and row["output_tokens_per_s"] == pytest.approx(8.0)
    assert row["tpot_s"]["mean"] == pytest.approx(0.1) and row["e2e_s"]["p50"] == pytest.approx(1.7)
    assert row["accept_length_by_kind"] == {"chat": 2.0, "code": 3.0} and row["pruned_share"] == pytest.approx(0.25)
    table = {"no-spec": {"1": {"output_tokens_per_s": 10.0, "e2e_s": {"p99": 2.0}}},
             "fixed-1": {"1": {"output_tokens_per_s": 8.0, "e2e_s": {"p99": 3.0}}},
             "fixed-3": {"1": {"output_tokens_per_s": 12.0, "e2e_s": {"p99": 1.0}}},
             "faser": {"1": {"output_tokens_per_s": 15.0, "e2e_s": {"p99": 1.0}}}}
    metrics.add_ratios(table)
    faser = table["faser"]["1"]
    assert faser["best_fixed"] == "fixed-3"
    assert faser["vs_best_fixed"] == pytest.approx(1.25) and faser["vs_no_spec"] == pytest.approx(1.5)
    assert faser["p99_e2e_vs_no_spec"] == pytest.approx(0.5)
