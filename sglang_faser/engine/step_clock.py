"""Where a step's phase times are read: the host's clock on CPU, the GPU stream's on a GPU.

The cost model must see what a phase costs the machine. On CPU the host runs the forward passes itself, so host
times are the costs. On a GPU the host only launches work: a CUDA graph replay returns at once, and with overlap
scheduling the scheduler waits for step N while it launches step N + 1, so host times between phase boundaries
are launch times and the GPU's work lands in whichever later wait happens to sync (the first H200 run fitted a
verify pass at a flat 14 ms, with no cost per token, and drafted the whole window at 32 requests). There every
boundary is also a CUDA event on the stream the step runs on, read once the GPU has passed it (a step or two
later, never waiting for it), and what a step measured reaches the cost model and telemetry's phase shares then
(``when_ready``). A gap between two steps' events is the time the GPU waited for the host, the scheduler's work that
overlap did not hide.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

logger = logging.getLogger(__name__)

PENDING_MAX = 256  # steps whose events are not yet read; beyond this the oldest are dropped, never waited for


@dataclass(frozen=True)
class Mark:
    """One phase boundary: the host's time (telemetry's phases) and, on a GPU, an event recorded there."""

    host: float
    event: object = None


class StepClock:
    """``mark()`` at each boundary, ``ms(a, b)`` between two, ``when_ready(mark, fn)`` to run ``fn`` once ``mark``
    (and every mark before it) can be read; ``poll()`` runs what became ready (each step calls it)."""

    def __init__(self, event_factory=None):
        self._event = event_factory  # None: host times only (CPU)
        self._origin: Mark | None = None  # the first mark: where the device's timeline meets the host's
        self._pending: deque = deque()  # (mark, fn), in the order the marks were made
        self.dropped = 0

    @classmethod
    def for_device(cls, device) -> StepClock:
        if str(device).startswith("cuda"):
            import torch

            if torch.cuda.is_available():
                return cls(lambda: torch.cuda.Event(enable_timing=True))
        return cls()

    @property
    def on_gpu(self) -> bool:
        return self._event is not None

    def mark(self) -> Mark:
        if self._event is None:
            return Mark(time.perf_counter())
        event = self._event()
        event.record()  # on the current stream: the one the step's work is queued on
        mark = Mark(time.perf_counter(), event)
        if self._origin is None:
            self._origin = mark
        return mark

    def seconds(self, mark: Mark) -> float:
        """When the device passed ``mark``, on the host's clock (perf_counter seconds; on CPU the host's time): the
        device's times are placed after its first mark's host time, so intervals between marks are the device's."""
        if mark.event is None or self._origin is None:
            return mark.host
        return self._origin.host + self.ms(self._origin, mark) / 1e3

    @staticmethod
    def ms(a: Mark, b: Mark) -> float:
        if a.event is None or b.event is None:
            return (b.host - a.host) * 1e3
        return float(a.event.elapsed_time(b.event))

    def when_ready(self, mark: Mark, fn) -> None:
        """On CPU ``fn`` runs now; on a GPU it waits for the next ``poll`` (at a step's start: refits and trace
        writes of earlier steps must not land inside the step being timed)."""
        if mark.event is None and not self._pending:
            self._run(fn)
            return
        self._pending.append((mark, fn))
        if len(self._pending) > PENDING_MAX:
            self._pending.popleft()
            self.dropped += 1

    def poll(self) -> None:
        """Run, oldest first, every callback whose mark the device has passed (one stream passes them in order)."""
        pending = self._pending
        while pending and (pending[0][0].event is None or pending[0][0].event.query()):
            self._run(pending.popleft()[1])

    @staticmethod
    def _run(fn) -> None:
        try:
            fn()
        except Exception:  # a lost sample must not fail the step that reads it
            logger.exception("FASER: recording a step's measured times failed")
