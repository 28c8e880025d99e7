"""Phase shares and counter windows of the telemetry recorder (pure, with a fake clock)."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.controller import LengthCounters
from sglang_faser.spec.telemetry import TelemetryRecorder, _merged_busy_times, busy_times, subtract


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _counters(steps, proposed, accepted, committed, lengths):
    c = LengthCounters(steps=steps, proposed=proposed, accepted=accepted, committed=committed)
    c.add_lengths(np.array(lengths))
    c.add_positions(np.array(lengths), np.array([min(1, k) for k in lengths]))
    return c


def test_busy_time_merges_a_phase_and_counts_overlap_once():
    per_phase, union = busy_times([("draft", 0, 2), ("verify", 1, 3), ("draft", 1.5, 2.5)])
    assert per_phase["draft"] == pytest.approx(2.5) and per_phase["verify"] == pytest.approx(2.0)
    assert union == pytest.approx(3.0)  # overlap = 2.5 + 2 - 3 = 1.5


def test_phases_in_turn_take_the_unmerged_path_with_the_same_result():
    """A step's phases one after another, each once (the usual step), are summed without merging; the result is
    the merged one's, and an overlap or a repeated phase after them still merges."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        names = list(rng.permutation(["schedule", "draft", "verify", "draft_extend", "prefill"]))[: rng.integers(1, 6)]
        ends = np.cumsum(rng.uniform(0.0, 1.0, 2 * len(names)))
        steps = [(name, float(ends[2 * i]), float(ends[2 * i + 1])) for i, name in enumerate(names)]
        if rng.random() < 0.5:  # an overlap or a phase again: the merging path
            a, b = sorted(rng.uniform(0.0, float(ends[-1]), 2))
            steps.append((str(rng.choice(names)), float(a), float(b)))
        fast, merged = busy_times(steps), _merged_busy_times(steps)
        assert fast[1] == pytest.approx(merged[1])
        assert fast[0] == pytest.approx(merged[0])


def test_subtract_cuts_holes_out_of_an_interval():
    assert subtract(0, 10, [(2, 3), (2.5, 4), (9, 12)]) == [(0, 2), (4, 9)]
    assert subtract(0, 1, []) == [(0, 1)]


def test_shares_add_up_to_one_with_overlap_and_idle():
    clock = Clock()
    recorder = TelemetryRecorder(window_s=100.0, clock=clock)
    clock.t = 4.0
    recorder.record_step([("draft", 0, 2), ("verify", 1, 3)], _counters(1, 4, 1, 3, [2, 2]), batch_size=2)
    snap = recorder.snapshot()["total"]
    shares = snap["shares"]
    assert shares["draft"] == pytest.approx(0.5) and shares["verify"] == pytest.approx(0.5)
    assert shares["overlap"] == pytest.approx(0.25) and shares["idle"] == pytest.approx(0.25)
    total = sum(shares[p] for p in ("draft", "verify", "draft_extend", "prefill", "schedule")) - shares["overlap"]
    total += shares["idle"]
    assert total == pytest.approx(1.0)
    assert snap["tokens"]["proposed"] == 4 and snap["committed_tokens_per_s"] == pytest.approx(3 / 4)
    assert snap["length_histogram"] == [0, 0, 2] and snap["acceptance_by_position"] == [1.0, 0.0]
    assert snap["mean_batch_size"] == 2


def test_the_window_forgets_old_steps_and_counts_quiet_time_as_idle():
    clock = Clock()
    recorder = TelemetryRecorder(window_s=10.0, clock=clock)
    clock.t = 1.0
    recorder.record_step([("verify", 0, 1)], _counters(1, 1, 1, 2, [1]), batch_size=1)
    clock.t = 50.0
    recorder.record_step([("verify", 49, 50)], _counters(2, 2, 1, 3, [1, 1]), batch_size=1)
    clock.t = 55.0
    window = recorder.snapshot()["window"]
    assert window["steps"] == 1 and window["tokens"]["committed"] == 1
    assert window["shares"]["verify"] == pytest.approx(0.1) and window["shares"]["idle"] == pytest.approx(0.9)
    clock.t = 200.0
    quiet = recorder.snapshot()["window"]
    assert quiet["steps"] == 0 and quiet["shares"]["idle"] == pytest.approx(1.0)


def test_before_a_whole_window_has_passed_the_window_is_everything_since_start():
    clock = Clock()
    recorder = TelemetryRecorder(window_s=10.0, clock=clock)
    clock.t = 2.0
    recorder.record_step([("verify", 1, 2)], _counters(1, 1, 1, 2, [1]), batch_size=1)
    clock.t = 4.0
    snap = recorder.snapshot()
    assert snap["window"] == snap["total"]  # the first step is in the window, not cut off by it
    assert snap["window"]["steps"] == 1 and snap["window"]["shares"]["verify"] == pytest.approx(0.25)
    clock.t = 13.0
    window = recorder.snapshot()["window"]  # the window [3, 13] no longer holds the step that ended at 2
    assert window["seconds"] == pytest.approx(10.0) and window["steps"] == 0


def test_steps_finer_than_the_resolution_are_all_counted_and_the_window_stays_within_it():
    """A snapshot at most every ``resolution_s``, not one per step: totals and counters stay exact, the window's
    start moves in steps of the resolution and its shares still add up to one."""
    clock = Clock()
    recorder = TelemetryRecorder(window_s=0.5, clock=clock, resolution_s=0.05)
    counters = LengthCounters()
    for i in range(1000):  # back-to-back 1 ms steps over one second
        counters.steps += 1
        counters.committed += 2
        clock.t = (i + 1) * 1e-3
        recorder.record_step([("verify", i * 1e-3, clock.t)], counters, batch_size=2)
    assert len(recorder._snapshots) <= 1 + 1.0 / 0.05  # one per resolution, not one per step
    counters.steps += 1  # a last step too soon after a snapshot to take one: snapshot() reads it anyway
    counters.committed += 2
    clock.t += 1e-4
    recorder.record_step([("verify", clock.t - 1e-4, clock.t)], counters, batch_size=2)
    snap = recorder.snapshot()
    assert snap["total"]["steps"] == 1001 and snap["total"]["tokens"]["committed"] == 2002
    assert snap["total"]["shares"]["verify"] == pytest.approx(1.0)
    window = snap["window"]
    assert 450 <= window["steps"] <= 500
    assert window["shares"]["verify"] + window["shares"]["idle"] == pytest.approx(1.0)
    assert window["shares"]["verify"] >= 0.9
