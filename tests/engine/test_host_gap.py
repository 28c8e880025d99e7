"""The scheduler's host work between two steps: a ``schedule`` phase, and step cost only between decode steps."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_faser.engine.step import FaserEngine
from sglang_faser.engine.step_clock import Mark, StepClock


def _gap(last, began, rids):
    last = None if last is None else (Mark(last[0]), *last[1:])
    phases, gap = FaserEngine._host_gap(SimpleNamespace(_last=last), Mark(began), frozenset(rids))
    return [(name, a.host, b.host) for name, a, b in phases], gap


def test_back_to_back_decode_steps_count_the_gap_as_schedule_and_step_cost():
    phases, gap = _gap((1.0, frozenset({"a", "b"}), True), 1.004, {"b", "c"})
    assert phases == [("schedule", 1.0, 1.004)] and abs(StepClock.ms(*gap) - 4.0) < 1e-9


def test_after_a_prefill_the_gap_is_schedule_but_not_decode_cost():
    phases, gap = _gap((1.0, frozenset({"a"}), False), 1.002, {"a", "new"})
    assert phases == [("schedule", 1.0, 1.002)] and gap is None


def test_a_gap_before_new_requests_only_may_be_idle_time():
    assert _gap((1.0, frozenset({"a"}), True), 5.0, {"z"}) == ([], None)
    assert _gap(None, 5.0, {"z"}) == ([], None)
