"""Where a scheduler iteration's time goes, per decode batch size: the target's forward against the host work
around it. A benchmark instrument, on where ``SGLANG_FASER_PHASE_TIMES`` names a file.

A server process keeps its own speed for as long as it runs (four identical CPU servers of the embedded default
under the same interleaved load: target forward medians of 5.04 to 5.72 ms at batch 1), so two servers' step times
differ by more than a k = 0 step's extra host work does. The host work around the forward (taking in requests,
building the batch, the worker's own code, processing and streaming results) is measured per scheduler iteration
instead: the median of each phase, per batch size, in the named file (``{path}.{pid}``, one per scheduler process;
rewritten at most once a second). ``benchmarks/k0_step_cost.py`` reads it.

Phases of one iteration: ``ingest`` (new requests), ``schedule`` (the next batch), ``run`` (the worker's step,
``forward`` included: the target model's calls), ``results``; ``host`` = ingest + schedule + run + results -
forward. Only iterations that ran a decode batch count, under that batch's size.
"""

from __future__ import annotations

import json
import os
import statistics
import time

ENV = "SGLANG_FASER_PHASE_TIMES"
PHASES = ("ingest", "schedule", "run", "forward", "results")
KEEP = 20000  # iterations kept per batch size (the oldest go first)


class PhaseTimes:
    def __init__(self, path: str, clock=time.perf_counter, write_every_s: float = 1.0):
        self.path = path
        self.clock = clock
        self.write_every_s = write_every_s
        self._current: dict[str, float] = {}
        self._batch: int | None = None  # the decode batch size this iteration ran, if it ran one
        self._samples: dict[int, list[dict[str, float]]] = {}
        self._written = clock()

    def add(self, phase: str, seconds: float) -> None:
        self._current[phase] = self._current.get(phase, 0.0) + seconds

    def ran(self, batch_size: int) -> None:
        """This iteration ran a decode batch of ``batch_size`` requests."""
        self._batch = batch_size

    def next_iteration(self) -> None:
        """The scheduler starts its next iteration: the last one, if it decoded, becomes a sample."""
        current, batch = self._current, self._batch
        self._current, self._batch = {}, None
        if batch is None or "run" not in current:
            return
        current["host"] = sum(current.get(p, 0.0) for p in PHASES if p != "forward") - current.get("forward", 0.0)
        kept = self._samples.setdefault(batch, [])
        kept.append(current)
        if len(kept) > KEEP:
            del kept[0]
        if self.clock() - self._written >= self.write_every_s:
            self.write()

    def summary(self) -> dict:
        """{batch size: {"steps": n, "median_us": {phase: us}}}, ``host`` among the phases."""
        return {str(batch): {"steps": len(kept), "median_us": {
            p: round(statistics.median(s.get(p, 0.0) for s in kept) * 1e6, 1) for p in (*PHASES, "host")}}
            for batch, kept in sorted(self._samples.items())}

    def write(self) -> None:
        self._written = self.clock()
        path = f"{self.path}.{os.getpid()}"
        with open(path + ".tmp", "w") as f:
            json.dump(self.summary(), f)
        os.replace(path + ".tmp", path)


def read(path: str) -> dict:
    """The summaries every scheduler process of a server wrote under ``path`` (``{pid: summary}``)."""
    folder, stem = os.path.split(os.path.abspath(path))
    out = {}
    for name in sorted(os.listdir(folder)):
        pid = name[len(stem) + 1:]
        if name.startswith(stem + ".") and pid.isdigit():
            with open(os.path.join(folder, name)) as f:
                out[pid] = json.load(f)
    return out


def install_from_env() -> None:
    """Time the scheduler's phases where ``SGLANG_FASER_PHASE_TIMES`` is set (every process SGLang starts runs
    this; only a scheduler process calls what it wraps)."""
    path = os.environ.get(ENV)
    if path:
        from sglang_faser.engine import touchpoints

        touchpoints.time_scheduler_phases(PhaseTimes(path))
