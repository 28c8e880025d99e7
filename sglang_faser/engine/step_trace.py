"""A per-step trace of the policy's choice against what the step then cost: the tool to see why FASER chose a length.

``SGLANG_FASER_STEP_TRACE=/path/steps.jsonl`` (set for the server process) makes every FASER decode step append
one JSON line: when it ended, the batch size, each request's length and the depth run, what the policy expected
(tokens and milliseconds, after the measured residual), the measured phases (verify, the rest of the step with
the scheduler's host time, catch-up), the drafts each request had accepted, and the cost model's coefficients and
depth factors for that batch. A line is written when its step's acceptance arrives (SGLang reports it after the
step, ``observe``), line-buffered, so the trace of a live server can be read while it serves; off by default (a
JSON line per step is host work a server should not pay unasked).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque

import numpy as np

from sglang_faser.spec.cost_model import DRAFT, VERIFY

ENV_VAR = "SGLANG_FASER_STEP_TRACE"


def _rounded(values) -> list[float]:
    return [round(float(v), 4) for v in np.asarray(values).ravel()]


class StepTrace:
    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - open for the server's lifetime
        self._waiting: deque[dict] = deque(maxlen=4)  # steps whose acceptance has not arrived yet, oldest first

    @classmethod
    def from_env(cls) -> StepTrace | None:
        path = os.environ.get(ENV_VAR)
        return cls(path) if path else None

    def write(self, decision, controller, **measured_ms: float) -> None:
        """One step: ``decision`` (its ``StepDecision``), the controller after recording it, measured times; written
        by the ``observe`` that brings its acceptance."""
        cost, batch = controller.cost, len(decision.lengths)
        record = {
            "time": round(time.time(), 4),  # when the step ended (wall clock, seconds)
            "batch": batch,
            "lengths": decision.lengths.tolist(),
            "depth": int(decision.depth),
            "calibration": bool(decision.calibration),
            "expected_tokens": round(decision.expected_tokens, 3),
            "expected_ms": round(decision.expected_ms, 3),
            **{name: round(ms, 3) for name, ms in measured_ms.items()},
            "verify_coef": _rounded(cost.coefs(VERIFY, batch)),
            "draft_coef": _rounded(cost.coefs(DRAFT, batch)),
            "depth_factor": _rounded(cost.depth_factor(batch, controller.window)),
            "catch_up_coef": _rounded(cost.catch_up_coef),
        }
        self._waiting.append(record)

    def observe(self, accepted) -> None:
        """The accepted draft counts of the oldest step waiting for them (as ``LengthController.observe``)."""
        if self._waiting:
            record = self._waiting.popleft()
            record["accepted"] = [int(a) for a in list(accepted)[: record["batch"]]]
            self._file.write(json.dumps(record) + "\n")
