"""Step timing on a GPU: phase times come from events on the device's timeline, read once the device has passed
them, never from the host's launch times; on CPU from the host's clock at once, priced less the waits for a core."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sglang_faser.engine import step_clock
from sglang_faser.engine.cpu_wait import CpuWait
from sglang_faser.engine.step_clock import Mark, StepClock


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


def test_on_cpu_costs_are_wall_time_less_the_threads_waits_for_a_core():
    clock = StepClock(cpu_wait=None)
    a, b = Mark(1.0, waited=5.0), Mark(1.030, waited=17.0)  # 30 ms of wall time, 12 of them waiting
    assert clock.ms(a, b) == pytest.approx(30.0) and clock.cost_ms(a, b) == pytest.approx(18.0)
    assert clock.cost_ms(a, Mark(1.010, waited=30.0)) == 0.0  # never negative
    assert StepClock.for_device("cpu").mark().waited >= 0.0


@pytest.mark.skipif(not CpuWait().available, reason="no per-thread schedstat on this kernel")
def test_cpu_wait_counts_the_time_this_process_was_kept_off_the_cores():
    """More busy processes than cores: a spinning thread of ours must wait for its turns, and the count is a
    running total that only grows (threads joining or leaving the watched set do not move it back)."""
    wait = CpuWait()
    start = wait.ms()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        spin_until = time.perf_counter() + 0.5
        seen = [start]
        while time.perf_counter() < spin_until:
            seen.append(wait.ms())
    finally:
        for hog in hogs:
            hog.kill()
    assert seen == sorted(seen)
    assert seen[-1] - start > 0.0
