"""``LengthController``: the per-step loop of FASER's Adaptive Drafter, independent of SGLang.

The SGLang worker calls it three times per decode step:

1. ``decide(rids)`` before verification: the lengths k_i for this batch (acceptance estimates + cost model +
   policy, within the operator's bounds);
2. ``observe(accepted)`` once the accepted counts are on the CPU (SGLang's ``on_verify_complete_cpu``);
3. ``record_phase`` with measured draft / verify times, which refresh the cost model online.

It also keeps the counters FASER's telemetry reports (proposed, verified, accepted tokens; chosen lengths).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sglang_faser.spec.acceptance import AcceptanceTracker
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.cost_model import StepCostModel
from sglang_faser.spec.policy import make_policy


@dataclass
class LengthCounters:
    """Running totals since start; telemetry derives rates and shares from them."""

    steps: int = 0
    requests: int = 0  # request-steps
    proposed: int = 0  # draft tokens put up for verification (sum of k_i)
    verified: int = 0  # target rows computed in verification (sum of k_i + 1 ragged, B * (K + 1) padded)
    accepted: int = 0  # draft tokens accepted
    committed: int = 0  # tokens committed (accepted + one bonus/correction per request-step)
    length_histogram: list[int] = field(default_factory=list)

    def add_lengths(self, lengths: np.ndarray) -> None:
        counts = np.bincount(lengths)
        if len(counts) > len(self.length_histogram):
            self.length_histogram.extend([0] * (len(counts) - len(self.length_histogram)))
        for length, count in enumerate(counts):
            self.length_histogram[length] += int(count)


class LengthController:
    def __init__(self, config: FaserConfig, window: int, cost: StepCostModel | None = None):
        """``window``: the draft positions the server reserves per request (SGLang's speculative_num_steps)."""
        self.window = window
        self.tracker = AcceptanceTracker(max_len=max(window, 1))
        self.cost = cost or StepCostModel()
        self.counters = LengthCounters()
        self._pending: tuple[list[str], np.ndarray] | None = None
        self.apply_config(config)

    def apply_config(self, config: FaserConfig) -> None:
        """Take a new policy at a step boundary; requests in flight simply get new lengths next step."""
        self.config = config
        self.max_len = min(self.window, config.max_len if config.max_len is not None else self.window)
        self.min_len = min(config.min_len, self.max_len)
        fixed = config.fixed_len if config.fixed_len is not None else self.max_len
        self.policy = make_policy(config.mode.value, fixed)

    def decide(self, rids: list[str], caps: np.ndarray | None = None, padded_width: int | None = None) -> np.ndarray:
        """Lengths for this step's batch; ``caps`` are per-request limits (e.g. from custom_params)."""
        batch = len(rids)
        limit = np.full(batch, self.max_len, dtype=np.int64)
        if caps is not None:
            limit = np.minimum(limit, np.asarray(caps, dtype=np.int64))
        mins = np.minimum(np.full(batch, self.min_len, dtype=np.int64), limit)
        accept = self.tracker.accept_probs(rids)
        lengths = self.policy.plan(accept, limit, mins, self.cost).lengths
        self._pending = (list(rids), lengths)
        c = self.counters
        c.steps += 1
        c.requests += batch
        c.proposed += int(lengths.sum())
        c.verified += batch * (padded_width + 1) if padded_width is not None else int(lengths.sum()) + batch
        c.add_lengths(lengths)
        return lengths

    def observe(self, accepted: list[int] | np.ndarray) -> None:
        """Accepted draft counts for the batch of the last ``decide``."""
        if self._pending is None:
            return
        rids, lengths = self._pending
        self._pending = None
        accepted = np.minimum(np.asarray(accepted, dtype=np.int64)[: len(rids)], lengths)
        self.tracker.observe(rids, lengths, accepted)
        self.counters.accepted += int(accepted.sum())
        self.counters.committed += int(accepted.sum()) + len(rids)

    def record_phase(self, phase: str, batch: int, size: int, ms: float) -> None:
        self.cost.record(phase, batch, size, ms)

    def forget(self, rid: str) -> None:
        self.tracker.forget(rid)
