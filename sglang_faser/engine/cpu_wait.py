"""How long this process's compute threads waited for a CPU: what a step's wall time holds that is not its work.

On CPU the cost model prices a step by its measured time, and other processes on the same cores (a load
generator, SGLang's own tokenizer and detokenizer) take turns with the step's threads. While a burst's requests
arrive, a step of 48 requests at Poisson 64 req/s on 2 cores spent 20-40 % of its wall time waiting for a core
(96 ms of wall time, 65 of work); such steps measured the depths a burst's first steps try, calmer ones the depth
it settled on, so shallow depths looked dear and deep ones cheap. Linux counts, per thread, the time it was
runnable but not running (``/proc/<pid>/task/<tid>/schedstat``, second field). Subtracted from a step's wall time
it leaves what the step would have taken with the cores to itself: beside a busy process a 2-thread torch loop's
wall time was 2.3-8x its quiet time, its wall time less its threads' waits 0.85-0.97x.

The threads summed are the process's compute threads (the caller's, and those that ran a share of the busiest one's
time: torch's OpenMP workers), looked at again every ``REFRESH_S``; the others (ZMQ, watchdogs) would add nothing
but reads. Where schedstat is missing (not Linux, or a kernel without it) the wait reads 0 throughout.
"""

from __future__ import annotations

import os
import threading
import time

REFRESH_S = 2.0  # how often the set of compute threads is looked at again
COMPUTE_SHARE = 0.05  # a thread that ran this share of the busiest thread's time is a compute thread


def _read(fd: int) -> tuple[int, int]:
    """(ns run, ns waited) of one thread's schedstat."""
    run, wait, _ = os.pread(fd, 96, 0).split()
    return int(run), int(wait)


class CpuWait:
    """``ms()``: the compute threads' total run-queue wait so far (ms); differences between two reads are what
    the threads waited in between. A running total of each watched thread's increments, so it stays continuous
    when threads join the set, leave it or end."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._fds: dict[int, int] = {}  # tid -> open schedstat
        self._waited: dict[int, int] = {}  # watched tid -> ns waited at its last read
        self._total = 0  # ns
        self._refreshed: float | None = None
        self.available = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat")

    def ms(self) -> float:
        if not self.available:
            return 0.0
        now = self._clock()
        if self._refreshed is None or now - self._refreshed >= REFRESH_S:
            self._refresh(now)
        for tid, last in self._waited.items():
            try:
                waited = _read(self._fds[tid])[1]
            except OSError:  # ended: its wait since the last read is lost; the next read looks again
                self._refreshed = None
                continue
            self._total += waited - last
            self._waited[tid] = waited
        return self._total / 1e6

    def _refresh(self, now: float) -> None:
        """The compute threads: the caller's and those that ran at least ``COMPUTE_SHARE`` of the busiest
        thread's time since the process began (a share of the last window would drop torch's workers after an idle
        spell, just before a burst needs them)."""
        self._refreshed = now
        tids = {int(t) for t in os.listdir("/proc/self/task")}
        for tid in [t for t in self._fds if t not in tids]:
            os.close(self._fds.pop(tid))
        me, stats = threading.get_native_id(), {}
        for tid in sorted(tids):
            try:
                fd = self._fds.get(tid)
                if fd is None:
                    fd = self._fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
                stats[tid] = _read(fd)
            except OSError:  # ended meanwhile
                continue
        busiest = max((ran for ran, _ in stats.values()), default=0)
        self._waited = {tid: self._waited.get(tid, wait) for tid, (ran, wait) in stats.items()
                        if tid == me or ran >= COMPUTE_SHARE * busiest}  # one already watched keeps its last read
