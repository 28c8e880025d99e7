"""Length policies: each decode step, a speculative length k_i in [0, cap_i] for every request in the batch.

``GoodputPolicy`` is FASER's Adaptive Drafter as we implement it (faser-algorithms.md §1.3 stand-in, §6.2): the
value of verifying draft slot (i, t) is its survival probability m[i, t] = prod_{j<=t} a_i[j]; slots compete across
requests, so position 5 of a confident request can outrank position 1 of a doubtful one. Because m falls with t,
the best set of Q slots is the Q largest values, and every request's share of it is a prefix. For every Q the
expected committed tokens are B + (sum of the top Q values) and the step costs
``cost.step_ms(B, B + Q, deepest draft, draft rows)`` (a slot past a request's first draft adds one draft row
where drafting is cut per request); the policy takes the Q with the highest expected tokens per
millisecond. Q = 0 (no speculation at all) is always a candidate, and so is every uniform length, so under the
model the choice never loses to the best fixed length. Where the verify backend gives every request the same rows
(``uniform``), only the uniform lengths are candidates, each priced as B x (k + 1) verified rows.

Everything is a handful of NumPy array operations over the B x K slot grid (well under a millisecond at B = 256,
see benchmarks/policy_decision.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from sglang_faser.spec.cost_model import StepCostModel


@dataclass(frozen=True)
class StepPlan:
    """One step's decision: a length per request, and what the model expects of it."""

    lengths: np.ndarray  # [B] int64
    expected_tokens: float
    expected_ms: float

    @property
    def goodput(self) -> float:
        """Expected committed tokens per millisecond."""
        return self.expected_tokens / self.expected_ms if self.expected_ms > 0 else 0.0


class LengthPolicy(ABC):
    name: str

    @abstractmethod
    def plan(
        self, accept_probs: np.ndarray, caps: np.ndarray, min_lens: np.ndarray, cost: StepCostModel,
        uniform: bool = False,
    ) -> StepPlan:
        """``accept_probs`` [B, K]; ``caps``/``min_lens`` [B] per-request bounds with min_lens <= caps <= K.

        ``uniform``: one length for the whole batch (clipped to each request's bounds), for verify backends that
        cannot give requests different row counts.
        """


def evaluate(
    accept_probs: np.ndarray, lengths: np.ndarray, cost: StepCostModel, uniform: bool = False
) -> tuple[float, float]:
    """(expected tokens, expected ms) of running ``lengths`` under the model (``uniform``: every request verifies
    the deepest length's rows)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    batch = len(lengths)
    survival = np.cumprod(accept_probs, axis=1)
    cols = np.arange(accept_probs.shape[1])[None, :]
    tokens = batch + float(np.where(cols < lengths[:, None], survival, 0.0).sum())
    depth = int(lengths.max(initial=0))
    verify = batch * (depth + 1) if uniform else batch + int(lengths.sum())
    ms = float(cost.step_ms(batch, verify, depth, cost.plan_rows(lengths)))
    return tokens, ms


class FixedPolicy(LengthPolicy):
    """The same length for every request, clipped to each request's bounds (SGLang's stock behaviour); it is
    uniform already, so ``uniform`` only changes how the step is priced."""

    name = "fixed"

    def __init__(self, length: int):
        self.length = length

    def plan(self, accept_probs, caps, min_lens, cost, uniform=False) -> StepPlan:
        lengths = np.clip(np.full(len(caps), self.length, dtype=np.int64), min_lens, caps)
        return StepPlan(lengths, *evaluate(accept_probs, lengths, cost, uniform))


class GoodputPolicy(LengthPolicy):
    name = "adaptive"

    def plan(self, accept_probs, caps, min_lens, cost, uniform=False) -> StepPlan:
        accept_probs = np.clip(np.asarray(accept_probs, dtype=np.float64), 0.0, 1.0)
        caps = np.asarray(caps, dtype=np.int64)
        min_lens = np.minimum(np.asarray(min_lens, dtype=np.int64), caps)
        batch, width = accept_probs.shape
        if batch == 0:
            return StepPlan(np.zeros(0, dtype=np.int64), 0.0, 0.0)

        survival = np.cumprod(accept_probs, axis=1)

        # Uniform candidates: every length k = 0..K, clipped to the per-request bounds. A deep prefix set can need
        # more draft steps than a uniform one, so these keep "never worse than the best fixed length".
        u_lengths = np.clip(np.arange(width + 1)[:, None], min_lens[None, :], caps[None, :])  # [K + 1, B]
        prefix_sums = np.concatenate((np.zeros((batch, 1)), np.cumsum(survival, axis=1)), axis=1)
        tokens = batch + prefix_sums[np.arange(batch)[None, :], u_lengths].sum(axis=1)
        depths = u_lengths.max(axis=1)
        verify = batch * (depths + 1) if uniform else batch + u_lengths.sum(axis=1)
        draft_rows = np.maximum(u_lengths - 1, 0).sum(axis=1)
        prefix_candidates = 0

        if not uniform:
            # Prefix candidates, ahead of the uniform ones: the forced minimum plus the Q best optional slots,
            # Q = 0..n. Ties go to the shallower position, so each request's share of the set stays a prefix.
            cols = np.arange(width)[None, :]
            forced = cols < min_lens[:, None]
            optional = (cols < caps[:, None]) & ~forced
            rows, depth = np.nonzero(optional)
            values = survival[rows, depth]
            order = np.argsort(-values, kind="stable")  # nonzero() lists each row by depth: stable keeps it
            rows, depth = rows[order], depth[order]
            prefix_candidates = len(order) + 1
            q_tokens = batch + survival[forced].sum() + np.concatenate(([0.0], np.cumsum(values[order])))
            q_verify = batch + int(forced.sum()) + np.arange(prefix_candidates)
            q_depth = np.concatenate(([0], np.maximum.accumulate(depth + 1)))
            q_depth = np.maximum(q_depth, int(min_lens.max(initial=0)))
            q_rows = int(np.maximum(min_lens - 1, 0).sum()) + np.concatenate(([0], np.cumsum(depth >= 1)))
            tokens = np.concatenate((q_tokens, tokens))
            verify = np.concatenate((q_verify, verify))
            depths = np.concatenate((q_depth, depths))
            draft_rows = np.concatenate((q_rows, draft_rows))

        ms = cost.step_ms(batch, verify, depths, draft_rows if cost.draft_cut else None)
        score = tokens / np.maximum(ms, 1e-9)
        best = int(np.argmax(score))  # first maximum: the fewest slots among equals
        if best < prefix_candidates:
            lengths = min_lens + np.bincount(rows[:best], minlength=batch)
        else:
            lengths = u_lengths[best - prefix_candidates]
        return StepPlan(lengths.astype(np.int64), float(tokens[best]), float(ms[best]))


def make_policy(mode: str, fixed_len: int) -> LengthPolicy:
    if mode == "fixed":
        return FixedPolicy(fixed_len)
    if mode == "off":
        return FixedPolicy(0)
    return GoodputPolicy()
