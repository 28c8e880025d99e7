"""Length policies: each decode step, a speculative length k_i in [0, cap_i] for every request in the batch.

``GoodputPolicy`` is FASER's Adaptive Drafter as we implement it (faser-algorithms.md §1.3, §6.2, §11): request
i at length k is expected to commit T_i(k) = 1 + sum_{t<=k} m_i[t] tokens, m_i[t] = prod_{j<=t} a_i[j] its
survival, and the step costs ``cost.step_ms`` of its shape. For a depth cap D (the step's draft depth, one
runtime tier) that cost is A(B, D) + sum_i c(k_i): a fixed part and a per-request part, rows verified
(v_tok per row, plus the row's attention over the batch's mean context) and draft rows (d_row per forward past the
first, where drafting is cut per request). The policy
maximises the **weighted goodput** sum_i w_i T_i(k_i) / (A + sum_i c(k_i)) exactly, for every D at once, by
Dinkelbach's method: with lambda the current ratio, each request independently takes the k maximising
w_i T_i(k) - lambda c(k) within its bounds; the new ratio is that plan's, and the iteration stops when it no
longer rises (a few passes; the optimum of a ratio over a finite set). Then the best D wins; a cap whose bound
after a pass (ratio + F / its cheapest plan's cost) is below the best ratio found gets no more passes, which leaves
one cap or two after the first pass of a step that starts from the last step's ratios. Measured steps
correct the fit's price by depth (``StepCostModel.depth_factor``: cap D's whole cost times factor[D]); while the
corrected prices do not fall with depth, a plan below its cap is never dearer at its own depth, and where they
do, each cap's plan is held at exactly that depth (the request that loses least is raised to it), which keeps the
result exact. The prices that only change with the fit and the batch size are kept between steps. The weights
w_i are 1, or ``latency_weight`` for ``latency_class: critical`` requests, so a critical request's tokens count
more and it is not starved of speculation by its neighbours' load. k = 0 (no speculation) and every uniform length are
inside the search space, so under the model the plan never loses to no speculation or (with the margins below at
0) the best fixed length.
``uniform_margin``: the per-request optimum replaces the best single length only when it expects that much more
goodput, since a mixed plan pays what the model does not price (sub-batch draft-extends, catch-ups later).
``draft_margin``: likewise a plan that drafts replaces no drafts at all only when it expects that much more, or
when it pays on the posterior means alone (``sure_probs``): the margin is for exploration's hopes, which drafted
steps did not deliver, not for what a request's record already shows.

``uniform``: a verify backend that gives every request the same rows (B x (k + 1)) gets one length for all.
Everything is NumPy over [D, B] plans (benchmarks/policy_decision.py times it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from sglang_faser.spec.cost_model import DRAFT, VERIFY, StepCostModel
from sglang_faser.spec.policy_tables import Bounds, StepShape, worth_and_gain


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
        resume_ms: np.ndarray | None = None, sure_probs: np.ndarray | None = None,
    ) -> StepPlan:
        """``accept_probs`` [B, K]; ``caps``/``min_lens`` [B] per-request bounds with min_lens <= caps <= K.

        ``uniform``: one length for the whole batch (clipped to each request's bounds), for verify backends that
        cannot give requests different row counts. ``weights`` [B]: how much each request's tokens count
        (default 1; latency-critical requests more). ``context``: the batch's context tokens (its sum of sequence
        lengths), which every plan pays for in verification. ``resume_ms`` [B]: what each request pays, this step,
        to draft at all (its draft's catch-up after steps at length 0, amortised; default 0). ``sure_probs`` [B, K]:
        the posterior means behind ``accept_probs`` (which may hold exploration's optimism), or None.
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
             resume_ms=None, sure_probs=None) -> StepPlan:
        lengths = np.clip(np.full(len(caps), self.length, dtype=np.int64), min_lens, caps)
        return StepPlan(lengths, *evaluate(accept_probs, lengths, cost, uniform, context, resume_ms))


class GoodputPolicy(LengthPolicy):
    name = "adaptive"
    max_iterations = 16

    def __init__(self, uniform_margin: float = 0.0, draft_margin: float = 0.0):
        self._warm: np.ndarray | None = None  # the last plan's ratio per depth cap: the next step's start
        self.uniform_margin = uniform_margin  # how much more goodput per-request lengths must expect than one length
        self.draft_margin = draft_margin  # how much more goodput drafting must expect than no drafts at all
        self._shape_key: tuple | None = None  # what the cached step prices were made from
        self._shape_cache: StepShape | None = None
        self._bounds_key: tuple | None = None  # the caps and floors the cached bounds were made from
        self._bounds_cache: Bounds | None = None

    def plan(self, accept_probs, caps, min_lens, cost, uniform=False, weights=None, context=0,
             resume_ms=None, sure_probs=None) -> StepPlan:
        accept_probs = np.asarray(accept_probs, dtype=np.float64)
        caps = np.asarray(caps, dtype=np.int64)
        min_lens = np.minimum(np.asarray(min_lens, dtype=np.int64), caps)
        batch, width = accept_probs.shape
        if batch == 0:
            return StepPlan(np.zeros(0, dtype=np.int64), 0.0, 0.0)
        # worth[k, i] = w_i m_i[k], position k's marginal worth, and gain[k, i] = w_i T_i(k): request i's weighted
        # expected tokens at length k, both position-major (each position's worth is one contiguous row)
        worth, gain = worth_and_gain(accept_probs)
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
            worth *= weights
            gain *= weights
        resume = None if resume_ms is None else np.asarray(resume_ms, dtype=np.float64)
        # a plan that drafts below the margin may still pay on the posterior means alone (``_or_rest``)
        sure = None if sure_probs is None else (
            lambda lengths: evaluate(sure_probs, lengths, cost, uniform, context, resume_ms))
        if uniform:
            return self._uniform(gain, caps, min_lens, cost, batch, width, context, resume, sure)
        return self._dinkelbach(worth, gain, caps, min_lens, cost, batch, width, context, resume, sure)

    def _dinkelbach(self, worth, gain, caps, min_lens, cost, batch: int, width: int, context: int,
                    resume: np.ndarray | None, sure=None) -> StepPlan:
        """The exact optimum for every depth cap D = 0..K at once, then the best D.

        Survival falls with k and, past the first draft, the marginal cost of a draft does not change, so for a
        given ratio lambda request i's best length among k >= 1 is a threshold: one plus the number of positions
        past the first whose marginal value w_i m_i[k] exceeds lambda times their marginal cost, clipped to its
        bounds and the cap D. The first draft costs more (the request joins the draft-extend, D + 1 rows, and
        after steps at length 0 its draft catches up first), so that length is then compared with k = 0
        (Dinkelbach's parametric step: each request's own argmax of w_i T_i(k) - lambda cost_i(k)); the ratio
        rises until no request's choice changes it."""
        ks = np.arange(width + 1)
        shape = self._shape(cost, batch, width)
        # measured / modelled step time by depth (``StepCostModel.depth_factor``): a cap D's costs, fixed and per
        # request, all scale by factor[D], so its thresholds compare worth with ratio x factor[D]
        factor = cost.depth_factor(batch, width)
        # each verified row reads its request's context (``attended_keys``): the batch's roots read it all, a row
        # past the root the mean context
        row_keys = shape.v_att * context / batch
        fixed = (shape.fixed + shape.v_att * context) * factor  # [D]: what a step at depth D costs whoever drafts
        # a request's cost at length k under cap D, [D, K + 1]: rows past the root, draft rows, and its D + 1 rows
        # in the draft-extend once it drafts at all
        per_req = (shape.per_req + row_keys * ks[None, :] if row_keys else shape.per_req) * factor[:, None]
        # a plan below its cap runs (and is scored) at its own depth; the cap's price is never below that while
        # neither the fixed part nor any length's part gets cheaper with depth (a measured factor that falls with
        # depth can make them), otherwise each cap's plan is held at exactly its depth
        steps = factor.tolist()
        exact_depth = (shape.falls_at_par if steps.count(steps[0]) == len(steps)
                       else shape.falls_with_depth(fixed, per_req))
        per_req = per_req.ravel()
        # what the first draft costs beyond its rows: its draft's catch-up
        resuming = resume is not None and bool(resume.any())
        if exact_depth:  # what length D costs under cap D, [D, B]
            cap_ms = np.broadcast_to(per_req[::width + 2][:, None], (width + 1, batch))
            if resuming:
                cap_ms = cap_ms + resume[None, :] * (ks > 0)[:, None]
        # positions 2..K pay where their worth exceeds ratio x factor[D] x a draft's marginal cost, [K - 1, 1, B]
        worth = worth[1:, None, :]
        scale = factor * max(shape.step + row_keys, 1e-12)
        bounds = self._bounds(caps, min_lens, width)
        # D below some request's floor, or beyond every request's cap, is not a candidate (min_lens <= caps); k = 0
        # is allowed where there is no floor or the cap allows no draft (no floors, the common case, skips these ops)
        high, floor, feasible, first, may_rest = (bounds.high, bounds.floor, bounds.feasible, bounds.first,
                                                  bounds.may_rest)
        feasible_caps = bounds.feasible_caps
        cols = bounds.cols
        rows = shape.rows  # [D, 1]: each cap's offset into per_req
        rise_by_cap = gain - gain[:1]  # [D, B]: T(k) - T(0), length k = cap D
        flat, rise = gain.ravel(), rise_by_cap.ravel()  # T(k) and T(k) - T(0), flat [(K + 1) * B]
        rest_tokens = float(np.add.reduce(gain[0]))  # every request at k = 0
        if exact_depth:  # T(D) - T(0) where the request may reach cap D, else -inf
            reach_cap = np.where(high >= ks[:, None], rise_by_cap, -np.inf)

        def ms_of(plan, depth):  # plans [D, B] priced at depth ``depth`` [D]
            ms = fixed.take(depth) + np.add.reduce(per_req.take(plan + depth[:, None] * (width + 1)), axis=1)
            return ms + ((plan > 0) * resume).sum(axis=1) if resuming else ms

        def best_at(ratio, depths=None):
            """Each request's best length at this ratio (ties: shorter) under the depth caps ``depths`` (all:
            None), and the plans' (ratio, tokens, ms)."""
            if depths is None:
                cap_scale, cap_high, cap_rows, cap_fixed, rest_ok = scale, high, rows, fixed, may_rest
            else:
                cap_scale, cap_high, cap_rows, cap_fixed = scale[depths], high[depths], rows[depths], fixed[depths]
                rest_ok = None if may_rest is None else may_rest[depths]
            # best k >= 1: one plus the positions past the first that pay
            longest = np.add.reduce(worth > (ratio * cap_scale)[None, :, None], axis=0, dtype=np.int16, initial=1)
            drafting = np.minimum(np.maximum(longest, first) if floor > 1 else longest, cap_high)
            # resting (k = 0) wins where ratio x cost(k) >= T(k) - T(0); where the cap allows no draft, drafting
            # is 0 and this holds
            drafting_ms = per_req.take(drafting + cap_rows)
            if resuming:  # (where drafting is 0, resting wins whatever it costs)
                drafting_ms += resume[None, :]
            worth_more = rise.take(drafting * batch + cols)
            draws = ratio[:, None] * drafting_ms < worth_more
            if rest_ok is not None:
                draws |= ~rest_ok
            plan = drafting * draws
            if exact_depth:
                gained, paid = worth_more * draws, drafting_ms * draws  # [D, B]: each request's part of the plan
                raise_to_cap(plan, gained, paid, ratio, ks if depths is None else depths)
                tokens, ms = np.add.reduce(gained, axis=1), np.add.reduce(paid, axis=1)
            else:  # (a float mask: NumPy's products with a bool array cast it each time)
                draws = draws.astype(np.float64)
                tokens, ms = np.vecdot(worth_more, draws), np.vecdot(drafting_ms, draws)
            tokens += rest_tokens
            ms += cap_fixed
            return plan, tokens / np.maximum(ms, 1e-9), tokens, ms

        def raise_to_cap(plan, gained, paid, ratio, depths):
            """Each cap's plan (caps ``depths``) with one request raised to the cap where none reaches it: the
            request that loses least of w T(k) - ratio x cost(k) by it (the exact optimum over plans of exactly
            that depth); in place, ``gained`` and ``paid`` with it."""
            short = (plan.max(axis=1) < depths) & feasible[depths]
            if not short.any():
                return
            at_cap = reach_cap[depths] - ratio[:, None] * cap_ms[depths]
            who = np.argmax(at_cap - (gained - ratio[:, None] * paid), axis=1)  # the least loss
            raised = np.flatnonzero(short)
            who, cap = who[raised], depths[raised]
            plan[raised, who] = cap
            gained[raised, who] = rise_by_cap[cap, who]
            paid[raised, who] = cap_ms[cap, who]

        # start from a feasible plan: the thresholds at the last step's optimal ratios (the batch changes little
        # from step to step, so this is usually within one pass of the optimum), or at ratio 0 (every request as
        # long as its estimates give it any chance)
        warm = np.zeros(width + 1) if self._warm is None or len(self._warm) != width + 1 else self._warm
        choice, ratio, tokens, ms = best_at(warm)
        # each pass: F(r) = max over cap D's plans of w T - r cost, >= 0 up to the optimum r*; a cap's plan that
        # does not beat its ratio is optimal. Any cap D plan P has ratio <= r + F(r) / cost(P), so a cap whose
        # bound is below the best ratio found is done too (its best cannot win): later passes run fewer caps
        floor_ms = np.maximum(fixed if shape.free_rest else
                              fixed + per_req.reshape(width + 1, width + 1).min(axis=1, initial=0.0) * batch, 1e-9)
        pending = self._pending(True, warm, tokens - warm * ms, floor_ms, ratio, feasible_caps)
        for _ in range(self.max_iterations):
            if not len(pending):
                break
            at = ratio[pending]
            best, new, new_tokens, new_ms = best_at(at, pending)
            rose = new > at * (1 + 1e-12) + 1e-15
            if not rose.any():
                break
            rising = pending[rose]
            choice[rising], ratio[rising] = best[rose], new[rose]
            tokens[rising], ms[rising] = new_tokens[rose], new_ms[rose]
            slack = new_tokens - at * new_ms
            pending = pending[self._pending(rose, at, slack, floor_ms[pending], ratio, feasible_caps)]
        self._warm = ratio
        # the best cap's plan is the optimum, and its cap's price is its own: a plan below its cap is priced by the
        # cap no lower than by its own depth's cap, which scores it at least as well and comes first in argmax
        best = int(feasible_caps[np.argmax(ratio.take(feasible_caps))])
        plan = choice[best]
        chosen = StepPlan(plan.astype(np.int64), float(tokens[best]), float(ms[best]))
        if self.uniform_margin > 0 and (plan != plan[0]).any():
            # one length for all unless per-request lengths expect clearly more: a mixed plan pays what the model
            # does not price (sub-batch draft-extends, catch-ups later, a layout that changes every step)
            same = bounds.same
            same_tokens = np.add.reduce(flat.take(bounds.same_index), axis=1)
            same_ms = ms_of(same, bounds.same_depth)
            ratio = same_tokens / np.maximum(same_ms, 1e-9)
            one = int(np.argmax(ratio))
            if ratio[one] * (1 + self.uniform_margin) >= chosen.goodput:
                chosen = StepPlan(same[one].astype(np.int64), float(same_tokens[one]), float(same_ms[one]))
        # cap 0's plan is every request at rest (feasible: no request's floor asks for drafts)
        return self._or_rest(chosen, StepPlan(choice[0].astype(np.int64), float(tokens[0]), float(ms[0]))
                             if feasible[0] else None, sure)

    @staticmethod
    def _pending(rose, at, slack, floor_ms, ratio, feasible_caps) -> np.ndarray:
        """Which of the caps just run still need a pass: those whose plan rose and whose bound
        ``at + max(slack, 0) / floor_ms`` (slack: F at ``at``; floor_ms: no plan of the cap costs less) reaches
        the best ratio of a feasible cap."""
        bound = np.maximum(slack, 0.0)
        bound /= floor_ms
        bound += at
        return (rose & (bound >= ratio.take(feasible_caps).max(initial=0.0) * (1 - 1e-9))).nonzero()[0]

    def _or_rest(self, chosen: StepPlan, rest: StepPlan | None, sure=None) -> StepPlan:
        """``chosen``, unless it drafts and expects less than ``draft_margin`` more goodput than ``rest`` (every
        request at length 0) and, priced on the posterior means alone (``sure``: lengths -> (tokens, ms), None
        without them), no more than ``rest``. Its expected tokens hold the hopes of exploration, which drafted
        steps did not deliver: measured on the mixed workload at 4 concurrent requests on CPU, steps that drafted
        delivered 8-16 % fewer tokens than expected, parked steps 4 % more tokens a millisecond than modelled. A
        plan that pays on what the requests' records already show needs no margin: at 32 requests of that
        workload the model gave one draft a request 6-9 % over parking on the means, the margin parked every
        request, and stock fixed-1 ran at 1.00-1.15x of no speculation."""
        if rest is None or self.draft_margin <= 0 or not chosen.lengths.any():
            return chosen
        if chosen.goodput >= rest.goodput * (1 + self.draft_margin):
            return chosen
        if sure is not None:
            (tokens, ms), (rest_tokens, rest_ms) = sure(chosen.lengths), sure(rest.lengths)
            if tokens * rest_ms > rest_tokens * ms:
                return chosen
        return rest

    def _shape(self, cost: StepCostModel, batch: int, width: int) -> StepShape:
        """The step's prices that only change with the fit and the batch size (most steps reuse the last)."""
        verify, draft = cost.coefs(VERIFY, batch), cost.coefs(DRAFT, batch)
        key = (batch, width, cost.draft_cut, cost.frontier_size, verify.tobytes(), draft.tobytes())
        if self._shape_key != key:
            self._shape_key, self._shape_cache = key, StepShape.of(verify, draft, cost, batch, width)
        return self._shape_cache

    def _bounds(self, caps: np.ndarray, min_lens: np.ndarray, width: int) -> Bounds:
        """The bounds' arrays by cap (most steps reuse the last: the same requests, the same limits)."""
        key = (width, caps.tobytes(), min_lens.tobytes())
        if self._bounds_key != key:
            self._bounds_key, self._bounds_cache = key, Bounds.of(caps, min_lens, width)
        return self._bounds_cache

    def _uniform(self, gain, caps, min_lens, cost, batch: int, width: int, context: int,
                 resume: np.ndarray | None, sure=None) -> StepPlan:
        lengths = np.clip(np.arange(width + 1)[:, None], min_lens[None, :], caps[None, :])  # [K + 1, B]
        tokens = gain[lengths, np.arange(batch)[None, :]].sum(axis=1)
        ms = plan_ms(cost, batch, lengths, uniform=True, context=context, resume_ms=resume)
        best = int(np.argmax(tokens / np.maximum(ms, 1e-9)))
        plans = [StepPlan(lengths[k].astype(np.int64), float(tokens[k]), float(ms[k])) for k in (best, 0)]
        return self._or_rest(plans[0], None if plans[1].lengths.any() else plans[1], sure)


def make_policy(mode: str, fixed_len: int, uniform_margin: float = 0.0, draft_margin: float = 0.0) -> LengthPolicy:
    if mode == "fixed":
        return FixedPolicy(fixed_len)
    if mode == "off":
        return FixedPolicy(0)
    return GoodputPolicy(uniform_margin, draft_margin)
