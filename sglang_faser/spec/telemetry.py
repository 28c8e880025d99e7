"""Phase utilisation and token counters over a sliding window and since start (what ``faserctl telemetry`` shows).

Each decode step the worker reports the intervals in which its phases ran (clock seconds on the machine's
timeline: the host's on CPU, the GPU stream's placed on the host clock on a GPU: ``engine/step_clock.py``) —
``draft``, ``verify`` (target passes and SGLang's acceptance), ``draft_extend``, and ``schedule``: the
scheduler's host work between two steps of running requests (results processed and streamed, the next batch
built), which a saturated server spends every step and which must not pass for idle time — and its cumulative
``LengthCounters``. From these the
recorder keeps cumulative totals and, for the window, the difference between now and the oldest snapshot inside it.

Shares are fractions of wall time ``W`` (window length, or time since start):

* ``draft``, ``verify``, ``draft_extend``, ``prefill``, ``schedule``: time each phase was busy / W (own intervals
  merged);
* ``overlap``: time two or more phases were busy at once / W (0 when phases run in turn, as on CPU);
* ``idle``: time no phase was busy / W (no batch to run, or host work before a prefill).

So ``draft + verify + draft_extend + prefill + schedule - overlap + idle = 1`` when at most two phases overlap at
any instant (true of FASER's pipeline: verify f beside draft f + 1).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

PHASES = ("draft", "verify", "draft_extend", "prefill", "schedule")
COUNTERS = ("steps", "requests", "proposed", "verified", "accepted", "pruned", "committed", "drafted",
            "draft_skipped")


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def busy_times(intervals: list[tuple[str, float, float]]) -> tuple[dict[str, float], float]:
    """Per-phase busy time (own intervals merged) and the busy time of their union (once per decode step: phases
    that ran one after another, each once, the usual step, are summed without merging)."""
    per_phase = dict.fromkeys(PHASES, 0.0)
    union, last_end = 0.0, float("-inf")
    for phase, start, end in intervals:
        if start < last_end or per_phase.get(phase):  # overlapping or repeated: merged below
            return _merged_busy_times(intervals)
        if phase in per_phase:
            per_phase[phase] = end - start
        union += end - start
        last_end = end
    return per_phase, union


def _merged_busy_times(intervals: list[tuple[str, float, float]]) -> tuple[dict[str, float], float]:
    per_phase = {p: sum(b - a for a, b in _merge([(s, e) for q, s, e in intervals if q == p])) for p in PHASES}
    union = sum(b - a for a, b in _merge([(s, e) for _, s, e in intervals]))
    return per_phase, union


@dataclass
class Totals:
    """Cumulative values at one instant; windows are differences of two of these."""

    at: float = 0.0
    step_start: float = 0.0  # when the step that produced this snapshot began (its first interval)
    busy: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    union: float = 0.0
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    batch_sum: int = 0  # sum of batch sizes over steps (mean batch = batch_sum / steps)
    length_histogram: list[int] = field(default_factory=list)
    proposed_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    def copy(self) -> Totals:
        return Totals(self.at, self.step_start, dict(self.busy), self.union, dict(self.counters), self.batch_sum,
                      list(self.length_histogram), list(self.proposed_by_position), list(self.accepted_by_position))


def _minus(a: list[int], b: list[int]) -> list[int]:
    b = b + [0] * (len(a) - len(b))
    return [x - y for x, y in zip(a, b)]


def summarise(now: Totals, then: Totals) -> dict:
    """The telemetry of the span (then, now]: shares, tokens, acceptance by position, lengths, rates."""
    wall = max(now.at - then.at, 1e-9)
    busy = {p: now.busy[p] - then.busy[p] for p in PHASES}
    union = now.union - then.union
    overlap = max(sum(busy.values()) - union, 0.0)
    shares = {p: busy[p] / wall for p in PHASES}
    shares["overlap"] = overlap / wall
    shares["idle"] = max(wall - union, 0.0) / wall
    counters = {k: now.counters[k] - then.counters.get(k, 0) for k in COUNTERS}
    proposed = _minus(now.proposed_by_position, then.proposed_by_position)
    accepted = _minus(now.accepted_by_position, then.accepted_by_position)
    steps = counters["steps"]
    return {
        "seconds": wall,
        "shares": shares,
        "tokens": {k: counters[k] for k in ("proposed", "verified", "accepted", "pruned", "committed",
                                            "drafted", "draft_skipped")},
        "steps": steps,
        "mean_batch_size": (now.batch_sum - then.batch_sum) / steps if steps else 0.0,
        "acceptance_by_position": [a / p if p else None for a, p in zip(accepted, proposed)],
        "length_histogram": _minus(now.length_histogram, then.length_histogram),
        "committed_tokens_per_s": counters["committed"] / wall,
        "acceptance_rate": counters["accepted"] / counters["proposed"] if counters["proposed"] else None,
    }


class TelemetryRecorder:
    def __init__(self, window_s: float = 10.0, clock=time.monotonic, resolution_s: float = 0.05):
        """``resolution_s``: the window's start moves in steps of about this much (a snapshot of the totals at most
        this often, not one per decode step: a copy of every counter each step was host time a small batch's
        step paid; the window is off by at most this much busy time, counted as idle)."""
        self.window_s = window_s
        self.resolution_s = resolution_s
        self._clock = clock
        self._start = Totals(at=clock())
        self._now = self._start.copy()
        self._counters = None  # the controller's cumulative counters, read when a snapshot is taken
        self._span_start: float | None = None  # when the first step since the last snapshot began
        # the start is the first snapshot: until a window has passed, the window begins there (first steps included)
        self._snapshots: deque[Totals] = deque([self._start.copy()])

    def record_step(self, intervals: list[tuple[str, float, float]], counters, batch_size: int) -> None:
        """One decode step: its phase intervals (clock seconds) and the controller's cumulative counters."""
        per_phase, union = busy_times(intervals)
        now = self._now
        for phase, seconds in per_phase.items():
            now.busy[phase] += seconds
        now.union += union
        now.batch_sum += batch_size
        now.at = self._clock()
        self._counters = counters
        if self._span_start is None:
            self._span_start = min((start for _, start, _ in intervals), default=now.at)
        if now.at - self._snapshots[-1].at >= self.resolution_s:
            self._read_counters()
            now.step_start, self._span_start = self._span_start, None
            self._snapshots.append(now.copy())
            self._trim(now.at)

    def _read_counters(self) -> None:
        counters, now = self._counters, self._now
        if counters is not None:
            now.counters = {k: int(getattr(counters, k, 0)) for k in COUNTERS}
            now.length_histogram = list(counters.length_histogram)
            now.proposed_by_position = list(counters.proposed_by_position)
            now.accepted_by_position = list(counters.accepted_by_position)

    def _trim(self, at: float) -> None:
        while len(self._snapshots) > 1 and self._snapshots[1].step_start < at - self.window_s:
            self._snapshots.popleft()

    def snapshot(self) -> dict:
        """``{"window": ..., "total": ...}``; both end now, so idle time since the last step counts as idle."""
        at = self._clock()
        self._trim(at)
        self._read_counters()
        now = self._now.copy()
        now.at = at
        # The window counts the steps since its first snapshot (the deque's head after _trim) whose span of steps
        # began inside it; the steps before that snapshot (at most ``resolution_s`` of them inside the window, or
        # one straddling its start) count as idle. Every busy second counted then lies inside the window, so the
        # shares add up to exactly 1.
        start = at - self.window_s
        window_start = self._snapshots[0].copy()
        window_start.at = max(window_start.at, start)
        return {"window": summarise(now, window_start), "total": summarise(now, self._start),
                "window_s": self.window_s}


def subtract(start: float, end: float, holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """[start, end) without the holes: e.g. the draft call's time minus the verify passes run inside it."""
    segments, cursor = [], start
    for a, b in _merge([(max(a, start), min(b, end)) for a, b in holes if b > start and a < end]):
        if a > cursor:
            segments.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < end:
        segments.append((cursor, end))
    return segments
