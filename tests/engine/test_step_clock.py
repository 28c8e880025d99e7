"""Step timing on a GPU: phase times come from events on the device's timeline, read once the device has passed
them, never from the host's launch times; on CPU from the host's clock at once."""

from __future__ import annotations

import pytest

from sglang_faser.engine import step_clock
from sglang_faser.engine.step_clock import StepClock


class FakeDevice:
    """A stream whose recorded events the test lets the 'GPU' reach, at times of its choosing (ms)."""

    def __init__(self):
        self.queued: list[FakeEvent] = []

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def run_until(self, *times_ms: float) -> None:
        """The next recorded events are passed at these times."""
        for t in times_ms:
            self.queued.pop(0).t = t


class FakeEvent:
    def __init__(self, device: FakeDevice):
        self.device, self.t = device, None

    def record(self) -> None:
        self.device.queued.append(self)

    def query(self) -> bool:
        return self.t is not None

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.t is not None and other.t is not None, "read before the device passed it"
        return other.t - self.t


def test_on_cpu_host_times_are_read_at_once():
    clock = StepClock()
    assert not clock.on_gpu and StepClock.for_device("cpu").on_gpu is False
    a, b = clock.mark(), clock.mark()
    seen = []
    clock.when_ready(b, lambda: seen.append(clock.ms(a, b)))
    assert len(seen) == 1 and 0 <= seen[0] == pytest.approx((b.host - a.host) * 1e3)


def test_on_a_gpu_times_are_the_devices_and_wait_until_it_passed_the_marks():
    device = FakeDevice()
    clock = StepClock(device.event)
    assert clock.on_gpu
    seen = []
    began, ended = clock.mark(), clock.mark()  # launched: the host moved on at once
    clock.when_ready(ended, lambda: seen.append(("first", clock.ms(began, ended))))
    later = clock.mark()
    clock.when_ready(later, lambda: seen.append(("second", clock.ms(ended, later))))
    assert seen == []  # nothing read while the device is behind
    device.run_until(10.0)
    clock.poll()
    assert seen == []  # only `began` passed
    device.run_until(17.5, 20.0)
    clock.poll()
    assert seen == [("first", 7.5), ("second", 2.5)]  # in order, the device's milliseconds


def test_a_device_that_never_answers_costs_old_samples_not_memory(monkeypatch):
    monkeypatch.setattr(step_clock, "PENDING_MAX", 3)
    device = FakeDevice()
    clock = StepClock(device.event)
    for _ in range(5):
        clock.when_ready(clock.mark(), lambda: None)
    assert clock.dropped == 2 and len(clock._pending) == 3


def test_a_failing_record_is_logged_and_the_step_goes_on(caplog):
    clock = StepClock()

    def broken():
        raise RuntimeError("trace disk full")

    clock.when_ready(clock.mark(), broken)
    assert "recording a step's measured times failed" in caplog.text


def test_on_a_gpu_records_wait_for_the_next_steps_poll_even_when_ready():
    """Refits and trace writes of earlier steps run at a step's start, not inside the step being timed."""
    device = FakeDevice()
    clock = StepClock(device.event)
    seen = []
    mark = clock.mark()
    device.run_until(1.0)
    clock.when_ready(mark, lambda: seen.append(1))
    assert seen == []
    clock.poll()
    assert seen == [1]
