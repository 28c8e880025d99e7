"""Length policies: each decode step, a speculative length k_i in [0, cap_i] for every request in the batch.

``GoodputPolicy`` is FASER's Adaptive Drafter as we implement it (faser-algorithms.md §1.3, §6.2, §11): request
i at length k is expected to commit T_i(k) = 1 + sum_{t<=k} m_i[t] tokens, m_i[t] = prod_{j<=t} a_i[j] its
survival, and the step costs ``cost.step_ms`` of its shape. For a depth cap D (the step's draft depth, one
runtime tier) that cost is A(B, D) + sum_i c(k_i): a fixed part and a per-request part, rows verified
(v_tok per row) and draft rows (d_row per forward past the first, where drafting is cut per request). The policy
maximises the **weighted goodput** sum_i w_i T_i(k_i) / (A + sum_i c(k_i)) exactly, for every D at once, by
Dinkelbach's method: with lambda the current ratio, each request independently takes the k maximising
w_i T_i(k) - lambda c(k) within its bounds; the new ratio is that plan's, and the iteration stops when it no
longer rises (a few passes; the optimum of a ratio over a finite set). Then the best D wins. Measured steps
correct the fit's price by depth (``StepCostModel.depth_factor``: cap D's whole cost times factor[D]); while the
factor does not fall with depth, a plan below its cap is never dearer at its own depth, and where it does fall,
each cap's plan is held at exactly that depth (the request that loses least is raised to it), which keeps the
result exact. The weights w_i are
1, or ``latency_weight`` for ``latency_class: critical`` requests, so a critical request's tokens count more and
it is not starved of speculation by its neighbours' load. k = 0 (no speculation) and every uniform length are
inside the search space, so under the model the plan never loses to no speculation or the best fixed length.
``uniform_margin``: the per-request optimum replaces the best single length only when it expects that much more
goodput, since a mixed plan pays what the model does not price (sub-batch draft-extends, catch-ups later).

``uniform``: a verify backend that gives every request the same rows (B x (k + 1)) gets one length for all.
Everything is NumPy over a [D, B, K + 1] grid (benchmarks/policy_decision.py times it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from sglang_faser.spec.cost_model import DRAFT, VERIFY, StepCostModel


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
        uniform: bool = False, weights: np.ndarray | None = None, context: int = 0,
        resume_ms: np.ndarray | None = None,
    ) -> StepPlan:
        """``accept_probs`` [B, K]; ``caps``/``min_lens`` [B] per-request bounds with min_lens <= caps <= K.

        ``uniform``: one length for the whole batch (clipped to each request's bounds), for verify backends that
        cannot give requests different row counts. ``weights`` [B]: how much each request's tokens count
        (default 1; latency-critical requests more). ``context``: the batch's context tokens (its sum of sequence
        lengths), which every plan pays for in verification. ``resume_ms`` [B]: what each request pays, this step,
        to draft at all (its draft's catch-up after steps at length 0, amortised; default 0).
        """


def evaluate(
    accept_probs: np.ndarray, lengths: np.ndarray, cost: StepCostModel, uniform: bool = False, context: int = 0,
    resume_ms: np.ndarray | None = None,
) -> tuple[float, float]:
    """(expected tokens, expected ms) of running ``lengths`` under the model (``uniform``: every request verifies
    the deepest length's rows)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    batch = len(lengths)
    survival = np.cumprod(accept_probs, axis=1)
    cols = np.arange(accept_probs.shape[1])[None, :]
    tokens = batch + float(np.where(cols < lengths[:, None], survival, 0.0).sum())
    return tokens, float(plan_ms(cost, batch, lengths, uniform, context, resume_ms))


def plan_ms(cost: StepCostModel, batch: int, lengths: np.ndarray, uniform: bool = False,
            context: int = 0, resume_ms: np.ndarray | None = None) -> np.ndarray:
    """Modelled step time of each plan (rows of ``lengths``) at the depth it runs (its deepest length)."""
    depth = lengths.max(axis=-1, initial=0)
    verify = batch * (depth + 1) if uniform else batch + lengths.sum(axis=-1)
    rows = np.maximum(lengths - 1, 0).sum(axis=-1) if cost.draft_cut else None
    resuming = 0.0 if resume_ms is None else (np.asarray(resume_ms) * (lengths > 0)).sum(axis=-1)
    return cost.step_ms(batch, verify, depth, rows, drafting=(lengths > 0).sum(axis=-1), context=context) + resuming


class FixedPolicy(LengthPolicy):
    """The same length for every request, clipped to each request's bounds (SGLang's stock behaviour); it is
    uniform already, so ``uniform`` only changes how the step is priced."""

    name = "fixed"

    def __init__(self, length: int):
        self.length = length

    def plan(self, accept_probs, caps, min_lens, cost, uniform=False, weights=None, context=0,
             resume_ms=None) -> StepPlan:
        lengths = np.clip(np.full(len(caps), self.length, dtype=np.int64), min_lens, caps)
        return StepPlan(lengths, *evaluate(accept_probs, lengths, cost, uniform, context, resume_ms))


class GoodputPolicy(LengthPolicy):
    name = "adaptive"
    max_iterations = 16

    def __init__(self, uniform_margin: float = 0.0):
        self._warm: np.ndarray | None = None  # the last plan's ratio per depth cap: the next step's start
        self.uniform_margin = uniform_margin  # how much more goodput per-request lengths must expect than one length

    def plan(self, accept_probs, caps, min_lens, cost, uniform=False, weights=None, context=0,
             resume_ms=None) -> StepPlan:
        accept_probs = np.asarray(accept_probs, dtype=np.float64)
        caps = np.asarray(caps, dtype=np.int64)
        min_lens = np.minimum(np.asarray(min_lens, dtype=np.int64), caps)
        batch, width = accept_probs.shape
        if batch == 0:
            return StepPlan(np.zeros(0, dtype=np.int64), 0.0, 0.0)
        # gain[k, i] = w_i T_i(k): request i's weighted expected tokens at length k, position-major (each
        # position's marginal worth below is then one contiguous row)
        gain = np.empty((width + 1, batch))
        gain[0] = 0.0
        np.cumsum(np.cumprod(np.clip(accept_probs.T, 0.0, 1.0), axis=0), axis=0, out=gain[1:])
        gain += 1.0
        if weights is not None:
            gain *= np.asarray(weights, dtype=np.float64)[None, :]
        resume = np.zeros(batch) if resume_ms is None else np.asarray(resume_ms, dtype=np.float64)
        if uniform:
            return self._uniform(gain, caps, min_lens, cost, batch, width, context, resume)
        return self._dinkelbach(gain, caps, min_lens, cost, batch, width, context, resume)

    def _dinkelbach(self, gain, caps, min_lens, cost, batch: int, width: int, context: int,
                    resume: np.ndarray) -> StepPlan:
        """The exact optimum for every depth cap D = 0..K at once, then the best D.

        Survival falls with k and, past the first draft, the marginal cost of a draft does not change, so for a
        given ratio lambda request i's best length among k >= 1 is a threshold: one plus the number of positions
        past the first whose marginal value w_i m_i[k] exceeds lambda times their marginal cost, clipped to its
        bounds and the cap D. The first draft costs more (the request joins the draft-extend, D + 1 rows, and
        after steps at length 0 its draft catches up first), so that length is then compared with k = 0
        (Dinkelbach's parametric step: each request's own argmax of w_i T_i(k) - lambda cost_i(k)); the ratio
        rises until no request's choice changes it."""
        ks = np.arange(width + 1)
        depths = ks[:, None]  # one candidate cap per possible depth, [D, 1]
        v0, v_req, v_tok, v_ctx = cost.coefs(VERIFY, batch)
        d0, d_ext, d_req, d_step, d_row = cost.coefs(DRAFT, batch)
        # the per-request part of the cost: rows past the root and draft rows where drafting is cut per request
        # [K + 1], and its D + 1 rows in the draft-extend once it drafts at all [D]
        per_k = v_tok * ks + (d_row * np.maximum(ks - 1, 0) if cost.draft_cut else 0.0)
        join = d_req * (ks + 1.0)
        fixed = (v0 * cost.verify_passes(depths[:, 0]) + (v_req + v_tok) * batch + v_ctx * context + d0
                 + d_step * depths[:, 0]
                 + d_ext * (depths[:, 0] > 0)  # the draft-extend's fixed part: only steps that draft pay it
                 + (0.0 if cost.draft_cut else d_row * batch * np.maximum(depths[:, 0] - 1, 0)))  # [D]
        # worth of positions 2..K (marginal value per marginal cost), [K - 1, B]
        worth = (gain[2:] - gain[1:-1]) / np.maximum(per_k[2:] - per_k[1:-1], 1e-12)[:, None]
        low = min_lens[None, :]
        high = np.minimum(caps[None, :], depths)  # [D, B]
        floor = int(min_lens.max())
        # D below some request's floor, or beyond every request's cap, is not a candidate (min_lens <= caps)
        feasible = (ks >= floor) & (ks <= caps.max())
        first = np.maximum(low, 1)
        # k = 0 allowed: no floor, or the cap allows no draft (the common case, no floors, skips these ops)
        may_rest = None if floor == 0 else (low == 0) | (high == 0)
        # what the first draft costs beyond its rows: the draft-extend's D + 1 rows and the catch-up
        resuming = bool(resume.any())
        cols = np.arange(batch)[None, :]
        flat, rise = gain.ravel(), (gain - gain[:1]).ravel()  # T(k) and T(k) - T(0), flat [(K + 1) * B]
        # measured / modelled step time by depth (``StepCostModel.depth_factor``): a cap D's costs, fixed and per
        # request, all scale by factor[D], so its thresholds compare worth with ratio x factor[D]
        factor = cost.depth_factor(batch, width)
        # a plan below its cap runs (and is scored) at its own depth; that is never dearer than the cap's price
        # while the factor does not fall with depth, otherwise each cap's plan is held at exactly its depth
        exact_depth = bool((np.diff(factor) < 0).any())

        def tokens_of(plan):
            return flat.take(plan * batch + cols).sum(axis=1)

        def ms_of(plan, depth):  # plans [D, B] priced at depth ``depth`` [D]
            ms = fixed.take(depth) + per_k.take(plan).sum(axis=1) + join.take(depth) * np.count_nonzero(plan, axis=1)
            ms *= factor.take(depth)
            return ms + ((plan > 0) * resume).sum(axis=1) if resuming else ms

        def ratio_of(plan):  # (its ratio at each cap, its tokens)
            tokens = tokens_of(plan)
            return tokens / np.maximum(ms_of(plan, ks), 1e-9), tokens

        def best_at(ratio):  # each request's best length at this ratio (ties: shorter)
            scaled = ratio * factor
            above = np.add.reduce(worth[:, None, :] > scaled[None, :, None], axis=0, dtype=np.int16)
            drafting = np.minimum(np.maximum(1 + above, first) if floor > 1 else 1 + above, high)  # best k >= 1
            # resting (k = 0) wins where ratio x cost(k) >= T(k) - T(0); where the cap allows no draft, drafting
            # is 0 and this holds
            lam_cost = scaled[:, None] * (per_k.take(drafting) + join[:, None])
            if resuming:
                lam_cost += ratio[:, None] * resume[None, :]
            rest = lam_cost >= rise.take(drafting * batch + cols)
            if may_rest is not None:
                rest &= may_rest
            plan = np.where(rest, 0, drafting)
            return at_depth(plan, ratio, scaled) if exact_depth else plan

        def at_depth(plan, ratio, scaled):
            """Each cap's plan with one request raised to the cap where none reaches it: the request that loses
            least of w T(k) - ratio x cost(k) by it (the exact optimum over plans of exactly that depth)."""
            short = np.flatnonzero((plan.max(axis=1) < ks) & feasible)
            if len(short) == 0:
                return plan
            part, depth = plan[short], ks[short][:, None]

            def value(k):  # w T(k) - w T(0) - ratio x cost(k), [caps, B]
                v = rise.take(k * batch + cols) - scaled[short][:, None] * (per_k.take(k) + join[short][:, None]
                                                                             * (k > 0))
                return v - ratio[short][:, None] * resume[None, :] * (k > 0) if resuming else v

            loss = np.where(high[short] >= depth, value(part) - value(np.broadcast_to(depth, part.shape)), np.inf)
            who = loss.argmin(axis=1)
            part[np.arange(len(short)), who] = ks[short]
            plan = plan.copy()
            plan[short] = part
            return plan

        # start from a feasible plan: the thresholds at the last step's optimal ratios (the batch changes little
        # from step to step, so this is usually within one pass of the optimum), or each request's shortest length
        if self._warm is None or len(self._warm) != width + 1:
            choice = np.where(low == 0, 0, np.minimum(low, high))  # each request's shortest length
            if exact_depth:
                choice = at_depth(choice, np.zeros(width + 1), np.zeros(width + 1))
        else:
            choice = best_at(self._warm)
        ratio, tokens = ratio_of(choice)
        for _ in range(self.max_iterations):  # each pass: F(ratio) = max sum(gain - ratio cost) >= 0
            best = best_at(ratio)
            if np.array_equal(best, choice):  # the plans reproduce themselves: the ratios are optimal
                break
            new, new_tokens = ratio_of(best)
            rose = new > ratio * (1 + 1e-12) + 1e-15
            if not rose.any():
                break
            choice = np.where(rose[:, None], best, choice)
            ratio, tokens = np.where(rose, new, ratio), np.where(rose, new_tokens, tokens)
        self._warm = ratio
        # score each cap's plan at the depth it really runs (its deepest length; ``plan_ms`` in closed form) and
        # keep the best
        ms = ms_of(choice, choice.max(axis=1))
        best = int(np.argmax(np.where(feasible, tokens / np.maximum(ms, 1e-9), -np.inf)))
        plan = choice[best]
        if self.uniform_margin > 0 and (plan != plan[0]).any():
            # one length for all unless per-request lengths expect clearly more: a mixed plan pays what the model
            # does not price (sub-batch draft-extends, catch-ups later, a layout that changes every step)
            same = np.clip(ks[:, None], low, caps[None, :])  # every single length, within each request's bounds
            same_tokens, same_ms = tokens_of(same), ms_of(same, same.max(axis=1))
            ratio = same_tokens / np.maximum(same_ms, 1e-9)
            one = int(np.argmax(ratio))
            if ratio[one] * (1 + self.uniform_margin) >= tokens[best] / max(ms[best], 1e-9):
                return StepPlan(same[one].astype(np.int64), float(same_tokens[one]), float(same_ms[one]))
        return StepPlan(plan.astype(np.int64), float(tokens[best]), float(ms[best]))

    def _uniform(self, gain, caps, min_lens, cost, batch: int, width: int, context: int,
                 resume: np.ndarray) -> StepPlan:
        lengths = np.clip(np.arange(width + 1)[:, None], min_lens[None, :], caps[None, :])  # [K + 1, B]
        tokens = gain[lengths, np.arange(batch)[None, :]].sum(axis=1)
        ms = plan_ms(cost, batch, lengths, uniform=True, context=context, resume_ms=resume)
        best = int(np.argmax(tokens / np.maximum(ms, 1e-9)))
        return StepPlan(lengths[best].astype(np.int64), float(tokens[best]), float(ms[best]))


def make_policy(mode: str, fixed_len: int, uniform_margin: float = 0.0) -> LengthPolicy:
    if mode == "fixed":
        return FixedPolicy(fixed_len)
    if mode == "off":
        return FixedPolicy(0)
    return GoodputPolicy(uniform_margin)
