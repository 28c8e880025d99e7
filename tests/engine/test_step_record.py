"""What a decode step records: every step counts; a hold (the same batch on a decision reused) adds one cost
sample, from its last held step; a step the controller decided without holding adds its verify, draft and
whole-step samples."""

from __future__ import annotations

from sglang_faser.engine.draft_cut import DraftCut, DraftSchedule
from sglang_faser.engine.step import FaserEngine
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController
from sglang_faser.spec.cost_model import DRAFT, VERIFY
from sglang_faser.spec.telemetry import TelemetryRecorder


def _engine() -> FaserEngine:
    engine = FaserEngine.__new__(FaserEngine)  # the recording half only: no SGLang worker behind it
    engine.controller = LengthController(FaserConfig(mode="off"), window=3)
    engine.draft_path, engine.trace, engine.metrics, engine._metrics_at = "none", None, None, 0.0
    engine.telemetry = TelemetryRecorder()
    return engine


def _plain_step(engine: FaserEngine, rids: list[str]):
    decision = engine.controller.decide(rids)
    engine._record(decision, DraftCut(DraftSchedule(decision.lengths), 0), None, 1,
                   [("verify", 1.0, 1.002)], 1.0, 1.0, 1.002, 1.0025, host_ms=0.4, context=40, catch_up_ms=0.0)
    engine.controller.observe([0] * len(rids))
    return decision


def _samples(engine: FaserEngine) -> tuple[int, int, int]:
    """(verify samples, draft samples, steps counted)."""
    cost = engine.controller.cost
    return len(cost._online[VERIFY]), len(cost._online[DRAFT]), engine.controller.counters.steps


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
