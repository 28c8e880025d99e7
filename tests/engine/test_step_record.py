"""What a decode step records: every step counts; a hold (the same batch on a decision reused) adds one cost
sample, from its last held step; a step the controller decided without holding adds its verify, draft and
whole-step samples."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.engine.draft_cut import DraftCut, DraftSchedule
from sglang_faser.engine.step import FaserEngine, StepMarks
from sglang_faser.engine.step_clock import Mark, StepClock
from sglang_faser.engine.touchpoints import StepBatch
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController
from sglang_faser.spec.cost_model import DRAFT, VERIFY
from sglang_faser.spec.telemetry import TelemetryRecorder


def _engine(clock: StepClock | None = None) -> FaserEngine:
    engine = FaserEngine.__new__(FaserEngine)  # the recording half only: no SGLang worker behind it
    engine.controller = LengthController(FaserConfig(mode="off"), window=3)
    engine.draft_path, engine.trace, engine.metrics, engine._metrics_at = "none", None, None, 0.0
    engine.telemetry = TelemetryRecorder()
    engine.clock = clock or StepClock()
    return engine


def _host_marks(began=1.0, verify_began=1.0, verify_ended=1.002, ended=1.0025, gap_from=0.9996) -> StepMarks:
    return StepMarks(Mark(began), Mark(verify_began), Mark(verify_ended), Mark(ended),
                     host_gap=(Mark(gap_from), Mark(began)))


def _plain_step(engine: FaserEngine, rids: list[str], marks: StepMarks | None = None):
    decision = engine.controller.decide(rids)
    marks = marks or _host_marks()
    engine._record(decision, DraftCut(DraftSchedule(decision.lengths), 0), None, 1,
                   [("verify", marks.verify_began, marks.verify_ended)], marks,
                   StepBatch(rids, [None] * len(rids), np.array([40] + [0] * (len(rids) - 1))))
    engine.controller.observe([0] * len(rids))
    return decision


def _samples(engine: FaserEngine) -> tuple[int, int, int]:
    """(verify samples, draft samples, steps counted)."""
    cost = engine.controller.cost
    return len(cost.samples(VERIFY)[1]), len(cost.samples(DRAFT)[1]), engine.controller.counters.steps


def test_a_hold_adds_one_cost_sample_from_its_last_held_step():
    """A hold's deciding step pays the decision its held steps skip: it is not a sample of the shape (sampled, it
    priced a parked step 19 % above a held one's cost); the hold's last held step is."""
    engine = _engine()
    samples = lambda: _samples(engine)  # noqa: E731
    decided = _plain_step(engine, ["a"])
    assert not decided.held and not decided.sampled and samples() == (0, 0, 1)
    held = [_plain_step(engine, ["a"]) for _ in range(3)]
    assert [d.held for d in held] == [True] * 3 and [d.sampled for d in held] == [False, False, True]
    assert samples() == (1, 1, 4)  # counted, one sampled
    assert not _plain_step(engine, ["a"]).held and samples() == (1, 1, 5)
    total = engine.telemetry.snapshot()["total"]
    assert total["steps"] == 5 and total["length_histogram"] == [5] and total["tokens"]["verified"] == 5


def test_request_limits_are_parsed_once_per_batch_of_the_same_params():
    engine = _engine()
    engine.window, engine._limits = 5, ([], ())
    tight, critical = {"faser": {"max_len": 2}}, {"faser": {"latency_class": "critical"}}
    caps, floors, urgent = engine._limits_of([None, tight, critical])
    assert caps.tolist() == [5, 2, 5] and floors.tolist() == [0, 0, 1] and urgent.tolist() == [False, False, True]
    assert engine._limits_of([None, tight, critical])[0] is caps  # the same objects: the same arrays
    assert engine._limits_of([None, {"faser": {"max_len": 2}}, critical])[0] is not caps  # another request's
    assert engine._limits_of([tight, None])[0].tolist() == [2, 5]


def test_on_a_gpu_a_step_is_priced_by_the_devices_times_once_they_can_be_read():
    """A verify launch returns at once (host 0.01 ms); the device took 9 ms: the sample must say 9, and wait."""
    from tests.engine.test_step_clock import FakeDevice

    device = FakeDevice()
    engine = _engine(StepClock(device.event))
    clock = engine.clock
    gap_from, began, verify_began, verify_ended, ended = (clock.mark() for _ in range(5))  # launched at once
    marks = StepMarks(began, verify_began, verify_ended, ended, host_gap=(gap_from, began))
    decided = _plain_step(engine, ["a"], marks)
    assert decided.sampled is False  # a parked hold's deciding step: counted, not a sample
    for _ in range(3):
        _plain_step(engine, ["a"], marks)  # held; the last of these is a sample
    assert _samples(engine) == (0, 0, 4)  # counted at once, priced once the device passed the marks
    # the last step's end at 100, its start at 100.5 (the device waited 0.5 ms for the host), verify 100.5 + 0.2
    # .. 109.7, then the draft-extend until 111
    device.run_until(100.0, 100.5, 100.7, 109.7, 111.0)
    clock.poll()
    cost = engine.controller.cost
    assert _samples(engine) == (1, 1, 4)
    _, verify_ms, _ = cost.samples(VERIFY)
    _, draft_ms, _ = cost.samples(DRAFT)
    assert verify_ms.tolist() == pytest.approx([9.0]) and draft_ms.tolist() == pytest.approx([1.5 + 0.5])
    # telemetry's phase times are the device's too: 4 steps of 9 ms verifying (the host launched each in 0 ms)
    assert engine.telemetry._now.busy["verify"] == pytest.approx(4 * 0.009)
