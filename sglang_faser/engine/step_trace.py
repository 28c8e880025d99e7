"""A per-step trace of the policy's choice against what the step then cost: the tool to see why FASER chose a length.

``SGLANG_FASER_STEP_TRACE=/path/steps.jsonl`` (set for the server process) makes every FASER decode step append one
JSON line: when its times were read, the batch size, its requests' ids and context tokens, each request's length
and the depth run, what the policy expected (tokens and milliseconds, after the measured residual) and the posterior
means of each request's acceptance by position it decided on (``held``: the last deciding step's), the measured
phases (verify, the rest of the step with the scheduler's host time, catch-up), the drafts each request had
accepted, and the cost model's coefficients and depth factors for that batch (and whether the step's time fed the
cost model: ``sampled``, ``ragged``); a server's first line holds its start-up profile (CPU). A line is written once
its step's acceptance (SGLang reports it after the step, ``observe``) and its measured times (on a GPU read a step or
two later) have both arrived, line-buffered, so the trace of a live server can be read while it serves; off by
default (a JSON line per step is host work a server should not pay unasked).
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
        # steps not written yet, oldest first: each waits for its measured times (on a GPU read a step or two later,
        # engine/step_clock.py) and its acceptance (``observe``), which arrive in either order
        self._waiting: deque[dict] = deque(maxlen=16)

    @classmethod
    def from_env(cls) -> StepTrace | None:
        path = os.environ.get(ENV_VAR)
        return cls(path) if path else None

    def profile(self, samples) -> None:
        """The start-up profile's verify passes, ``[(requests, rows, context tokens, ms)]``, as one line at once:
        the cost model's prior, which a replay of the trace (``benchmarks/replay_costs.py``) starts from."""
        self._file.write(json.dumps({"profile": [[int(b), int(r), int(c), round(float(ms), 4)]
                                                 for b, r, c, ms in samples]}) + "\n")

    def decided(self, decision, rids: list | None = None, ragged: bool = False) -> dict:
        """A step as decided (``rids``: its requests, in batch order; ``ragged``: verified by the ragged verifier,
        whose passes are cost samples whether the step is or not); ``measured`` and ``observe`` complete it."""
        record = {
            "batch": len(decision.lengths),
            **({} if rids is None else {"rids": [str(rid) for rid in rids]}),
            "lengths": decision.lengths.tolist(),
            "depth": int(decision.depth),
            "calibration": bool(decision.calibration),
            "warmup": bool(decision.warmup),
            "expected_tokens": round(decision.expected_tokens, 3),
            "expected_ms": round(decision.expected_ms, 3),
            "held": bool(decision.held),  # a decision reused without deciding again (its means are the deciding step's)
            "sampled": bool(decision.sampled),  # its measured time fed the cost model
            "ragged": bool(ragged),
            "probe": decision.probe,  # a parked plan run as a cost or joint probe ("" otherwise)
        }
        if decision.means is not None:  # what the policy believed of each request's acceptance by position
            record["means"] = np.round(decision.means, 3).tolist()
        self._waiting.append(record)
        return record

    def measured(self, record: dict, controller, context: int = 0, **measured_ms: float) -> None:
        """Its measured times, and the cost model after recording them; ``context``: the batch's context tokens."""
        cost, batch = controller.cost, record["batch"]
        record.update({
            "time": round(time.time(), 4),  # when its times were read (wall clock, seconds)
            "context": int(context),
            **{name: round(ms, 3) for name, ms in measured_ms.items()},
            "verify_coef": _rounded(cost.coefs(VERIFY, batch)),
            "draft_coef": _rounded(cost.coefs(DRAFT, batch)),
            "depth_factor": _rounded(cost.depth_factor(batch, controller.window)),
            "catch_up_coef": _rounded(cost.catch_up_coef),
        })
        self._flush()

    def observe(self, accepted) -> None:
        """The accepted draft counts of the oldest step waiting for them (as ``LengthController.observe``)."""
        for record in self._waiting:
            if "accepted" not in record:
                record["accepted"] = [int(a) for a in list(accepted)[: record["batch"]]]
                break
        self._flush()

    def _flush(self) -> None:
        waiting = self._waiting
        while waiting and "accepted" in waiting[0] and "time" in waiting[0]:
            self._file.write(json.dumps(waiting.popleft()) + "\n")
