"""``LengthController``: the per-step loop of FASER's Adaptive Drafter, independent of SGLang.

The SGLang worker calls it three times per decode step:

1. ``decide(rids)`` before drafting: the lengths k_i for this batch (acceptance estimates + cost model + policy,
   within the operator's bounds) and the draft depth the step runs at (the deepest k_i);
2. ``observe(accepted)`` once the accepted counts are on the CPU (SGLang's ``on_verify_complete_cpu``). Under
   SGLang's overlap scheduler step t + 1 is decided before step t's counts arrive, so decisions wait in a FIFO and
   each ``observe`` is credited to the oldest one;
3. ``record_phase`` with measured draft / verify times, which refresh the cost model online, and
   ``record_step`` with the whole step's, which corrects its price per batch size and depth at once.

It also keeps the counters FASER's telemetry reports (proposed, verified, accepted tokens; chosen lengths).

Start-up sweep (``calibration_sweeps``): the first steps of an adaptive server run every depth 0..max_len in turn
with uniform lengths; the first ``warm_steps`` only warm up (on a GPU a whole sweep: the first use of each depth's
runtime state is a one-off stall; on CPU the server's first decode step alone is), the measured draft,
draft-extend and verify times of the sweeps after them become the cost model's prior (the verify side also gets
dummy passes before the first step, engine/profiler.py). Each of these steps runs a live request at a depth the
policy would seldom choose (at batch 1 on CPU a depth-7 step costs 4-5 parked ones), so no more of them run than
the prior needs, and a batch of ``SWEEP_MAX_BATCH`` requests or more ends the sweep where it stands. After that
there is no exploration cadence: the acceptance posteriors are optimistic where evidence is thin
(spec/acceptance.py), which is what moves lengths up, and the online cost samples of every depth the policy picks
keep the model current.
Before it, a batch made only of the start-up warm-up's requests (spec/warmup.py) runs the warm-up's sweep, which
no acceptance statistic or counter sees (``warmup_steps`` counts its steps). Its steps measure the cost of every
depth at every batch bucket, each shape's second and later runs (its first pays the compiles): they join the
cost model's profile prior, fitted when the first real batch is decided; on a GPU they replace the eager start-up
profile, which is launch-bound there (engine/step.py).
A step decides on the optimistic estimates of one request only (``EXPLORED_PER_STEP``), the posterior means of the
rest: each request is probed in turn, and the hopes of a whole batch do not add up to a deep step. Probes are
short: a request in back-off is probed one draft deep (``AcceptanceTracker.probe_limits``), and so is a new request
that hope alone drafts (the posterior means would give it no drafts); while its drafts pass, it keeps a new
request's hopes along the rest of its chain (``probed_short``), so a sure request drafts deep from its second step
and a doomed one pays a one-draft step instead of a full-depth one (several plain steps at small batches on CPU).
A probe is never priced below not probing on the hopes that chose it: cut to one draft where that would be, it
is raised to the shortest length that is not, or not run.
The cost side probes alike (``_priced_limit``): a step drafts at most one deeper than the deepest depth recent
steps of its batch size measured (or the start-up warm-up ran there), so each depth is priced by its own steps
before a deeper one is tried; it runs the optimum within that depth, not a deeper plan cut to it. A large batch
parked where no recent step measured drafting runs a few steps of one draft instead (``_cost_probe``), so a dear
drafting price is measured again rather than parked on for good. A small parked batch whose requests' first-draft
evidence has faded probes them together, one draft each, where that pays on their joint hopes (``_joint_probe``):
there one request's probe alone cannot pay for a draft's fixed costs, and without it a batch parked on a stale
estimate never learns otherwise.
A drafting plan the batch decided twice in a row on its means alone is kept for a few steps, through rejections, as
a bounded one is (``decide``): deciding it again every step cost a small batch 4-8 % of a CPU step.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sglang_faser.spec.acceptance import AcceptanceTracker
from sglang_faser.spec.config import FaserConfig, Mode
from sglang_faser.spec.cost_model import DRAFT, PRICED_EVIDENCE, VERIFY, StepCostModel, bucket_of
from sglang_faser.spec.policy import StepPlan, evaluate, make_policy
from sglang_faser.spec.warmup import is_warmup, sweep_lengths, sweep_steps

MAX_PENDING_STEPS = 4  # decided steps awaiting their verify result; the overlap scheduler needs 2
RESUME_HORIZON = 8  # steps of drafting a request's catch-up is spread over (it pays for those, not one)
EXPLORED_PER_STEP = 1  # requests a step's decision may see optimistically (the rest at their posterior means)
HOLD_RECHECK = 4  # a batch at its bounds (every request parked at 0 or at its cap) is decided again after this
# many steps (its estimates move little in between, and a decision costs about a tenth of a small batch's step on
# CPU) ...
HOLD_MAX = 16  # ... and after twice as many each time the same batch is found at its bounds again, up to this many
# (``LONG_HOLD_MAX`` where no request is parked, HOLD_MAX x 2^b where some are, b the fewest failed probes in a row
# among them, at most ``LONG_HOLD_MAX``): a parked request's evidence fades at request_rate / 2^b a step, so its
# decision changes that much more slowly, and one drafting its cap is decided again by its first rejection anyway.
# A full decision took 0.8-1.7 ms of one doomed request's 12 ms steps on the deep pair (caches cold after the
# forward), 22 in a 256-token request at holds of 16 (back-off 5-6), 11 at these
LONG_HOLD_MAX = 128
# A parked batch whose batch size's last priced step took longer than this, or whose batch size (power-of-two bucket)
# has had no step priced yet, is decided (and its step priced) every step instead: there a decision is a small share of
# the step, and pricing every step is what corrects a batch size's first estimates. At 32 requests on CPU (35-45 ms
# steps) a parked batch's holds priced 3 steps in 28 while the model still put a parked step at 23 ms, and drafting,
# 0.9-1.3 tokens/ms there against parking's 0.7-1.0, began 28 steps late; judged by the last priced step of any size, a
# burst of 44-48 requests after a quiet spell of two (18.6 ms steps) was held unpriced for its first seven steps, priced
# at 20 ms while they took 39-75. A batch drafting at its caps keeps its holds: each already ends at a rejection and
# prices its deciding step, so deciding every step there only adds host work (one sure request on the deep pair, 20-26
# ms steps: 1.09x with its holds kept against deciding every step, 3 repeats, one below). So does a batch of fewer than
# ``HOLD_STEP_BATCH`` requests: its size's price is the one every quiet spell refines, and one doomed request on the
# deep pair, whose parked steps took 17-20 ms on a slow day, was re-priced on 545 of 1534 steps (0.887x of no
# speculation in one run).
HOLD_STEP_MS = 20.0
HOLD_STEP_BATCH = 8
# A batch this large arriving during the start-up sweep ends it: the policy decides its steps. The sweep runs live
# requests at uniform depths the policy would seldom choose, affordable at a request or two; a burst of 48 requests
# that met the sweep at its depths 6 and 7 on CPU paid 210-320 ms steps (a parked step of theirs: 40 ms), and those
# two samples were its batch size's whole draft-cost fit (a 42-49 ms draft-extend intercept, one draft priced at
# 3x the ~20 ms it cost), so it parked 48 requests for a whole burst where one draft each paid.
SWEEP_MAX_BATCH = 8
# a parked batch of this many requests or more whose batch size no recent step measured drafting at runs a cost probe
# (``LengthController._cost_probe``): ``PROBE_STEPS`` steps of one draft for the requests whose first draft passes
# with a posterior mean of ``PROBE_ACCEPTANCE`` or more (one request alone keeps its batch-1 probes, ``_as_probe``)
PROBE_BATCH = 2
PROBE_STEPS = 4
PROBE_ACCEPTANCE = 0.5
# a parked batch of fewer than ``JOINT_BATCH`` requests probes together the requests whose first position's evidence
# has faded below ``JOINT_EVIDENCE`` observations (``LengthController._joint_probe``)
JOINT_EVIDENCE = 0.25
JOINT_BATCH = 16


@dataclass(frozen=True)
class StepDecision:
    lengths: np.ndarray  # [B] draft tokens each request may have accepted
    depth: int  # draft steps the batch runs (max of lengths; the whole window without depth tiers)
    calibration: bool  # a step of the start-up sweep
    expected_tokens: float = 0.0  # what the policy expected of its plan (a calibration step runs other lengths)
    expected_ms: float = 0.0
    held: bool = False  # a decision at the batch's bounds (or a steady plan) reused without deciding again
    probe: str = ""  # a parked plan run as a probe instead: "cost" (``_cost_probe``) or "joint" (``_joint_probe``)
    # whether the step's measured time is a cost sample: a parked hold's deciding step of fewer than
    # ``HOLD_STEP_BATCH`` requests is not (it pays the decision its held steps skip; sampled, it priced a parked step
    # at batch 1 on CPU 19 % above what held steps cost), a hold's last held step is, every other decided step is.
    # From ``HOLD_STEP_BATCH`` requests on the decision is a few % of the step, and a batch that changes every few
    # steps (16 req/s) seldom reaches a hold's last step: its parked steps went unsampled, and at 8-31 requests on
    # CPU they ran 1.12-1.27x their price where drafting ones ran at 1.00-1.03x (a trace at Poisson 16), so the
    # policy parked batches whose one-draft steps delivered 10-25 % more tokens a millisecond
    sampled: bool = True
    warmup: bool = False  # a step of the start-up warm-up: no statistic observes it; sampled, its costs are prior
    means: np.ndarray | None = None  # [B, K] the posterior means it decided on (where ``explain``: the step trace)


class _Pending(NamedTuple):
    """A decided step awaiting its acceptance (``observe``)."""

    rids: list[str]
    lengths: np.ndarray
    warmup: bool  # a warm-up step: no statistic observes it
    parked: bool  # nobody drafts
    gone: frozenset = frozenset()  # its requests that finished before it was observed (``forget``)


class _Hold(NamedTuple):
    """A decision a batch keeps without deciding again: at its bounds, or a steady plan (``decide``)."""

    shape: tuple  # the step's inputs it holds for
    decision: StepDecision  # as held
    left: int  # steps it is held still
    steps: int  # steps of this hold (the next hold at the bounds doubles it)
    parked: bool
    steady: bool  # a steady plan: rejections do not end it


@dataclass
class LengthCounters:
    """Running totals since start; telemetry derives rates and shares from them."""

    steps: int = 0
    requests: int = 0  # request-steps
    proposed: int = 0  # draft tokens put up for verification (sum of k_i)
    verified: int = 0  # target rows computed in verification (sum of k_i + 1 ragged, B * (d + 1) uniform)
    pruned: int = 0  # rows skipped because an earlier frontier already rejected (early pruning)
    offset_passes: int = 0  # verify passes that started past row 0 (later frontiers over KV earlier passes wrote)
    drafted: int = 0  # draft-model rows computed (one per request per draft forward)
    draft_skipped: int = 0  # draft rows not computed because the request's k_i was already reached
    accepted: int = 0  # draft tokens accepted
    committed: int = 0  # tokens committed (accepted + one bonus/correction per request-step)
    skipped_extends: int = 0  # steps without drafts whose draft-extend was skipped (the draft caught up later)
    plain_decodes: int = 0  # of those, steps run as the target's plain decode (no verify bookkeeping)
    extend_skipped_requests: int = 0  # requests with k_i = 0 left out of a draft-extend that others ran
    catch_up_rows: int = 0  # draft rows computed to catch up after either
    backlog_dropped_rows: int = 0  # skipped rows never caught up: their requests ran a mixed prefill-decode step
    lazy_prefills: int = 0  # prefill steps that ran no draft model (lazy prefill; a chunk of a prompt counts too)
    lazy_prefill_rows: int = 0  # prompt rows a prefill left to the backlog instead of the draft (lazy prefill)
    unobserved: int = 0  # decided steps dropped unobserved because MAX_PENDING_STEPS were already waiting
    warmup_steps: int = 0  # steps of the start-up warm-up (spec/warmup.py), counted in nothing above
    length_histogram: list[int] = field(default_factory=list)
    proposed_by_position: list[int] = field(default_factory=list)  # [j]: drafts proposed at position j + 1
    accepted_by_position: list[int] = field(default_factory=list)  # [j]: of those, accepted

    def add_positions(self, lengths: np.ndarray, accepted: np.ndarray) -> None:
        depth = int(lengths.max(initial=0))
        if depth > len(self.proposed_by_position):
            grow = depth - len(self.proposed_by_position)
            self.proposed_by_position.extend([0] * grow)
            self.accepted_by_position.extend([0] * grow)
        if len(lengths) == 1:  # batch 1: plain Python
            for j in range(depth):
                self.proposed_by_position[j] += 1
            for j in range(min(int(accepted[0]), depth)):
                self.accepted_by_position[j] += 1
            return
        positions = np.arange(depth)
        proposed = np.count_nonzero(lengths[:, None] > positions, axis=0).tolist()
        passed = np.count_nonzero(accepted[:, None] > positions, axis=0).tolist()
        for j in range(depth):
            self.proposed_by_position[j] += proposed[j]
            self.accepted_by_position[j] += passed[j]

    def add_lengths(self, lengths: np.ndarray, parked: bool = False) -> None:
        """``parked``: every length is 0 (a parked batch's step, the common one: no bincount)."""
        if parked or not lengths.any():
            if not self.length_histogram:
                self.length_histogram.append(0)
            self.length_histogram[0] += len(lengths)
            return
        counts = np.bincount(lengths)
        if len(counts) > len(self.length_histogram):
            self.length_histogram.extend([0] * (len(counts) - len(self.length_histogram)))
        for length, count in enumerate(counts):
            self.length_histogram[length] += int(count)


class LengthController:
    def __init__(
        self,
        config: FaserConfig,
        window: int,
        cost: StepCostModel | None = None,
        calibration_sweeps: int = 0,
        warm_steps: int | None = None,
    ):
        """``window``: the draft positions the server reserves per request (SGLang's speculative_num_steps);
        ``calibration_sweeps``: measured sweeps of the start-up sweep, after ``warm_steps`` steps that only warm up
        (default: one sweep, window + 1 steps)."""
        self.window = window
        self.tracker = AcceptanceTracker(max_len=max(window, 1))
        self.cost = cost or StepCostModel()
        self.counters = LengthCounters()
        self._pending: deque[_Pending] = deque()  # decided steps, oldest first
        self._held: _Hold | None = None  # a batch held at its bounds or on a steady plan
        self._last_plan: tuple | None = None  # the last decided step's (inputs, lengths): a repeat is steady
        # batch-size bucket -> its last priced step's measured time (``record_step``): long parked steps are not held
        self._step_ms: dict[int, float] = {}
        self._sweep_cut = False  # the start-up sweep ended early (``_end_sweep``): unmeasured depths are probed
        self._cost_probe_left = 0  # steps a running cost probe still drafts (``_cost_probe``)
        self.warm_steps = window + 1 if warm_steps is None else warm_steps
        self.calibration_steps = self.warm_steps + calibration_sweeps * (window + 1) if calibration_sweeps else 0
        self._warmed: set[tuple[int, int, bool]] = set()  # (batch, sweep phase, mixed) the warm-up ran
        self._warm_samples = 0  # warm-up draft samples in the prior since the last fit
        self.explain = True  # price every decision's final plan (the step trace reports what it expected)
        self.apply_config(config)

    def apply_config(self, config: FaserConfig) -> None:
        """Take a new policy at a step boundary; requests in flight simply get new lengths next step."""
        self.config = config
        self.cost.frontier_size = config.frontier_size
        self.tracker.request_rate = config.request_rate
        self.tracker.prior_weight = config.prior_weight
        self.tracker.explore = config.explore
        self.max_len = min(self.window, config.max_len if config.max_len is not None else self.window)
        self.min_len = min(config.min_len, self.max_len)
        fixed = config.fixed_len if config.fixed_len is not None else self.max_len
        self.policy = make_policy(config.mode.value, fixed, config.uniform_margin, config.draft_margin)
        self._held = self._last_plan = None
        self._cost_probe_left = 0

    def decide(self, rids: list[str], caps: np.ndarray | None = None, padded: bool = False,
               floors: np.ndarray | None = None, uniform: bool = False,
               critical: np.ndarray | None = None, context: int | Callable[[], int] = 0,
               backlog: np.ndarray | Callable[[], np.ndarray] | None = None) -> StepDecision:
        """Lengths and depth for this step's batch; ``caps`` / ``floors`` are per-request limits (custom_params).

        ``critical``: requests of ``latency_class: critical``, whose tokens count ``latency_weight`` times.
        ``context``: the batch's context tokens (sum of its sequence lengths), part of every plan's verify cost.
        ``backlog``: [B] skipped rows each request's draft must catch up before it drafts again; the catch-up is
        charged to the step that resumes, spread over ``RESUME_HORIZON`` steps of drafting it enables (in full for
        a probe, ``_resume_ms``).
        ``context`` and ``backlog`` may be functions that give them: they are only read where the step is decided,
        not where a held decision is reused.
        ``padded``: the worker verifies the full window whatever the lengths (no depth tiers available).
        ``uniform``: the verify backend gives every request the same rows, so the policy gives every request the
        same length (up to the per-request caps and floors).
        A decision with every request at a bound, parked at length 0 or drafting its cap, is one that new evidence
        can only confirm while drafts keep passing: the batch keeps it (``held``) for ``HOLD_RECHECK`` - 1 more
        steps while it is the same batch, twice as many after each decision that finds it at its bounds again (up
        to ``HOLD_MAX``; longer where its parked requests' probes failed or none is parked: ``LONG_HOLD_MAX``).
        Deciding, observing and pricing a step cost a CPU decode step of a small batch 4-5 % (a parked step's own
        cost is a plain decode); a parked batch of ``HOLD_STEP_BATCH`` requests or more whose steps take longer
        than ``HOLD_STEP_MS`` at its batch size (or not priced there yet) is decided and priced every step
        (adaptive mode). A new request, a new policy or a rejected draft (``observe``) decides at once. A drafting
        plan below the bounds that the same batch was given twice in a row, on its posterior means alone (no request
        drafting where its hopes lift it, no probe), is steady: held for ``HOLD_RECHECK`` - 1 more steps whatever
        their rejections (most drafting steps have one), each priced, then decided again. At 4 requests in flight
        on CPU adaptive drafted one each on most steps, as fixed:1 does, and its steps of that shape took 0.75 ms
        more (10.1 ms against 9.1, `traces/steps_s43-live-c4`): the decision, its recording and pricing. The fixed
        and off modes hold every decision: their lengths depend on the bounds alone.
        """
        if is_warmup(rids):
            return self._warmup_step(rids, caps, padded, mixed=not uniform)
        if self._warm_samples:  # the warm-up is over: its costs are the prior the first real steps decide on
            self.cost.refit()
            self._warm_samples = 0
        shape = (list(rids), padded, uniform, *(None if a is None else np.asarray(a).tobytes()
                                                 for a in (caps, floors, critical)))
        kept, hold = self._held, HOLD_RECHECK
        if kept is not None and kept.shape == shape:  # the same batch, still at its bounds or on its steady plan
            held, left, hold, parked = kept.decision, kept.left, kept.steps, kept.parked
            if left > 0:
                self._held = _Hold(shape, held, left - 1, hold, parked, kept.steady)
                self._enqueue(rids, held.lengths, parked)
                return held if left > 1 else dataclasses.replace(held, sampled=True)
            hold = 2 * hold
        context = context() if callable(context) else context
        backlog = backlog() if callable(backlog) else backlog
        batch = len(rids)
        if batch >= SWEEP_MAX_BATCH and self.calibrating:
            self._end_sweep()
        limit = np.full(batch, self.max_len, dtype=np.int64)
        if caps is not None:
            limit = np.minimum(limit, np.asarray(caps, dtype=np.int64))
        if self.config.mode is Mode.OFF:
            limit[:] = 0  # off means no speculation at all, whatever min_len or a request's class says
        mins = np.full(batch, self.min_len, dtype=np.int64)
        if floors is not None:
            mins = np.maximum(mins, np.asarray(floors, dtype=np.int64))
        mins = np.minimum(mins, limit)
        means, hopes = self.tracker.estimates(rids)
        probs = _explore_few(means, hopes, EXPLORED_PER_STEP)
        weights = None if critical is None else np.where(critical, self.config.latency_weight, 1.0)
        resume = None if backlog is None else self._resume_ms(backlog, (probs != means).any(axis=1))
        adaptive = self.config.mode is Mode.ADAPTIVE
        # planned within the depths this batch size measured and one deeper; ``limit`` stays the requests' own bounds
        planned = self._priced_limit(limit, mins) if adaptive else limit
        plan = self.policy.plan(probs, planned, mins, self.cost, uniform=uniform, weights=weights, context=context,
                                resume_ms=resume, sure_probs=means)
        probe = ""
        if adaptive and plan.lengths.any():
            self._cost_probe_left = 0
            plan = self._as_probe(rids, plan, probs, means, planned, mins, uniform, weights, context, resume)
        elif adaptive:
            plan, probe = self._parked_probe(rids, plan, means, hopes, limit, mins, uniform, weights, context, resume)
        lengths = plan.lengths
        c = self.counters
        calibration = self.calibrating and not padded and adaptive
        if calibration:
            # start-up profile of the draft side: the first steps sweep every depth with uniform lengths, so the
            # cost model's prior holds real draft and draft-extend times of this machine at each depth
            lengths = np.clip(np.full(batch, c.steps % (self.max_len + 1), dtype=np.int64), mins, limit)
        depth = self.window if padded else int(lengths.max(initial=0))
        parked = not lengths.any()
        self._enqueue(rids, lengths, parked)
        decision = StepDecision(lengths, depth, calibration, plan.expected_tokens, plan.expected_ms,
                                probe="" if calibration else probe, means=means if self.explain else None)
        bounded = not adaptive or ((lengths == 0) | (lengths == limit)).all()
        long_steps = batch >= HOLD_STEP_BATCH and self._step_ms.get(bucket_of(batch), HOLD_STEP_MS + 1) > HOLD_STEP_MS
        # a drafting plan decided twice in a row for the same batch, on its means alone, is steady: kept like a bounded
        # one, through rejections (which most drafting steps have), for ``HOLD_RECHECK`` - 1 more steps, each priced
        # (unpriced, a depth the fit mispriced was corrected later: closed_loop.py --draft-prior 0.3, 12 seeds, 0.972
        # of the oracle, worst 0.858, against 0.983 and 0.957 priced)
        repeat = (shape, lengths.tobytes())
        steady = (adaptive and not bounded and not calibration and not probe and self._last_plan == repeat
                  and not _drafts_on_hope(probs, means, lengths).any())
        self._last_plan = None if steady else repeat
        holds = (bounded or steady) and not calibration and not (adaptive and parked and long_steps)
        if steady:
            hold = HOLD_RECHECK
        elif holds:
            hold = min(hold, self._hold_limit(rids, lengths))
        self._held = (_Hold(shape, dataclasses.replace(decision, held=True, sampled=steady), hold - 1, hold, parked,
                            steady) if holds else None)
        # a small parked batch's hold's deciding step is not a sample; a drafting one's is (a rejection may end its
        # hold before its last held step, every time), and so is a large batch's (``HOLD_STEP_BATCH``)
        unsampled = holds and parked and batch < HOLD_STEP_BATCH
        return dataclasses.replace(decision, sampled=False) if unsampled else decision

    def _hold_limit(self, rids: list[str], lengths: np.ndarray) -> int:
        """How long a batch at its bounds may be held at most (``LONG_HOLD_MAX``)."""
        parked = lengths == 0
        if not parked.any():
            return LONG_HOLD_MAX
        return min(HOLD_MAX << int(self.tracker.failed_probes(rids)[parked].min()), LONG_HOLD_MAX)

    def _resume_ms(self, backlog: np.ndarray, on_hope: np.ndarray) -> np.ndarray:
        """[B] what resuming costs each request this step: its catch-up spread over ``RESUME_HORIZON`` steps of
        drafting where it decides on its posterior means, in full where it decides on its hopes (a probe), which
        park it again where they fail, so no later drafting shares the price. Spread, the first probe of a new
        request at batch 1 after a lazy prefill (up to 64 prompt rows, 4.1 ms on average to catch up on CPU beside
        5.5 ms parked steps) was priced at 15 ms and took 19, and ran for almost every request of the mixed
        prompts at 1 req/s (one run: 27 of 32 drafting steps committed fewer tokens a millisecond than parking)."""
        resume = self.cost.catch_up_ms(backlog)
        return np.where(on_hope, resume, resume / RESUME_HORIZON)

    def _as_probe(self, rids: list[str], plan: StepPlan, probs, means, limit, mins, uniform: bool, weights,
                  context: int, resume) -> StepPlan:
        """A plan that drafts, run as a probe where it drafts on hope: the explored request (the one deciding on
        its optimistic estimate) drafts as the plan says, every other one as the posterior means alone would have
        it, so one request's hope does not draft the batch (on the mixed workload at 4 concurrent requests, steps
        where all four drafted one or two tokens on one request's hope delivered 0.31-0.36 tokens/ms against parked
        steps' 0.39, in a fifth of the steps). A probe is one draft deep for a request in back-off
        (``probe_limits``) and for a new one the means alone would not draft (``probed_short``: while its drafts
        pass it hopes along the rest of its chain, so a sure request drafts deep from its second step); a
        full-depth probe cost a doomed request several plain steps at small batches on CPU. A probe so cut is
        raised to the shortest length that still pays on its hopes, or not run (``_paying_probe``); one deeper than
        every other request drafts only as deep as pays on its hopes beside them (``_shallow_probe``)."""
        limits = self.tracker.probe_limits(rids)
        lengths = plan.lengths
        explored = _drafts_on_hope(probs, means, lengths)
        if explored.any():
            on_means = self.policy.plan(means, limit, mins, self.cost, uniform=uniform, weights=weights,
                                        context=context, resume_ms=resume, sure_probs=means).lengths
            if not uniform:
                lengths = np.where(explored, lengths, on_means)
            short = explored & self.tracker.untried(rids) & (on_means == 0) & (limits > 1)
            if short.any():
                limits = np.where(short, 1, limits)
                self.tracker.probed_short(rids, short)
            if not uniform:
                lengths = self._shallow_probe(lengths, explored, probs, context, resume)
        if uniform:
            limits[:] = limits.max()
        lengths = np.maximum(np.minimum(lengths, limits), mins)
        if (lengths == plan.lengths).all():
            return plan
        if not uniform and (explored & (lengths < plan.lengths)).any():
            return self._paying_probe(lengths, plan.lengths, explored, probs, mins, context, resume)
        priced = evaluate(probs, lengths, self.cost, uniform, context, resume) if self.explain else (0.0, 0.0)
        return StepPlan(lengths, *priced)

    def _shallow_probe(self, lengths, explored, probs, context: int, resume) -> np.ndarray:
        """``lengths`` with the explored requests no deeper than pays on their hopes where they alone set the step's
        depth: the plan that gave them their lengths priced their drafts beside a batch it drafted as deep, and
        with the others at their posterior means' lengths every draft forward past those is run for the explored
        alone, at a forward's fixed cost. At 48 requests on CPU (Poisson 64 bursts) one request probed six deep
        beside 47 at one draft made 95-105 ms steps of a 56 ms depth, 0.68 tokens/ms expected against 1.4 for
        the step without the probe's depth. Each depth from the others' (at least one) to the explored's own is
        priced on the hopes; the best runs."""
        rest = int(lengths[~explored].max(initial=0))
        top = int(lengths[explored].max(initial=0))
        if top <= max(rest, 1):
            return lengths
        best, best_rate = lengths, -1.0
        for depth in range(max(rest, 1), top + 1):
            trial = np.where(explored, np.minimum(lengths, depth), lengths)
            tokens, ms = evaluate(probs, trial, self.cost, False, context, resume)
            if tokens > best_rate * ms:
                best, best_rate = trial, tokens / ms
        return best

    def _paying_probe(self, lengths, planned, explored, probs, mins, context: int, resume) -> StepPlan:
        """A probe cut short (``lengths``), raised a draft at a time towards what the plan gave it (``planned``)
        until it prices, on the hopes that chose it, at least as well as not probing (the explored requests at
        their floors, the others as they are); not run where no such length does. Cut to one draft, a probe could
        price below parking even on its hopes, and ran: where a draft-extend and the verify's fixed costs are about
        a plain step, as on CPU, about half the drafting steps of 2-4 requests (mixed prompts, Poisson 1-16 req/s,
        three servers' traces) expected fewer tokens a millisecond than the parked steps beside them."""
        cost = self.cost
        without = np.where(explored, mins, lengths)
        base_tokens, base_ms = evaluate(probs, without, cost, False, context, resume)
        cut = explored & (lengths < planned)
        while True:
            tokens, ms = evaluate(probs, lengths, cost, False, context, resume)
            if tokens * base_ms >= base_tokens * ms:
                return StepPlan(lengths, tokens, ms)
            deeper = cut & (lengths < planned)
            if not deeper.any():
                return StepPlan(without, base_tokens, base_ms)
            lengths = lengths + deeper

    def _cost_probe(self, plan: StepPlan, means, limit, mins, uniform: bool, context: int, resume) -> StepPlan:
        """A parked plan of a large batch whose batch size no recent step measured drafting at (its drafting
        evidence below ``PRICED_EVIDENCE``), run instead as ``PROBE_STEPS`` steps of one draft for the requests
        likely to pass it (posterior mean at the first position >= ``PROBE_ACCEPTANCE``): what prices drafting
        there is otherwise the fit and the residuals of long ago, and a batch that parks on them never measures
        drafting again. A burst of 32-48 requests at Poisson 64 on CPU parked every step on one draft priced at
        1.7-1.8x a parked step, from a dozen one-draft steps that had each just resumed from a parked stretch; in
        one server at 48 in flight, one draft cost 1.4x a parked step from the third step of drafting on and
        delivered 1.2x its tokens a second (``benchmarks/live_ab.py``, ``live_ab_s42-c48-phases``). The probe
        runs several steps since a resumption's first steps run dearer (a catch-up's own pass is priced apart, the
        next two steps still took 1.2x). Then the plan decides on what they measured; a dear price stands until its
        evidence fades again, so where drafting does not pay a probe costs about ``PROBE_STEPS`` one-draft steps in
        every 140 priced steps (four steps' evidence faded by ``RESIDUAL_AGE`` below ``PRICED_EVIDENCE``)."""
        batch = len(limit)
        if not self._cost_probe_left:
            if batch < PROBE_BATCH or self.cost.drafting_evidence(batch) >= PRICED_EVIDENCE:
                return plan
            self._cost_probe_left = PROBE_STEPS
        self._cost_probe_left -= 1
        likely = (means[:, 0] >= PROBE_ACCEPTANCE) & (limit > 0)
        if uniform and likely.any():
            likely = limit > 0
        lengths = np.maximum(likely.astype(np.int64), mins)
        if not lengths.any():
            self._cost_probe_left = 0
            return plan
        priced = evaluate(means, lengths, self.cost, uniform, context, resume) if self.explain else (0.0, 0.0)
        return StepPlan(lengths, *priced)

    def _parked_probe(self, rids, plan: StepPlan, means, hopes, limit, mins, uniform: bool, weights, context: int,
                      resume) -> tuple[StepPlan, str]:
        """A parked plan, or the probe that runs instead and its kind: a cost probe where the batch size's drafting
        price is stale, else a joint probe where the requests' acceptance is."""
        probe = self._cost_probe(plan, means, limit, mins, uniform, context, resume)
        if probe is not plan:
            return probe, "cost"
        probe = self._joint_probe(rids, plan, means, hopes, limit, mins, uniform, weights, context, resume)
        return probe, "" if probe is plan else "joint"

    def _joint_probe(self, rids, plan: StepPlan, means, hopes, limit, mins, uniform: bool, weights, context: int,
                     resume) -> StepPlan:
        """A parked plan of a small batch run instead as one draft for the requests whose first position's
        evidence has faded (below ``JOINT_EVIDENCE`` observations), where that pays on their joint hopes: each
        one's optimism shrunk by the square root of their number, the bound on their tokens together rather than
        the sum of each one's bound (which compounds). The others stay at their floors, as in ``_as_probe``. At a
        few requests on CPU a draft's fixed costs (a draft forward, the draft-extend, the verify's bookkeeping) are
        most of a drafting step's price, so one explored request alone never pays for them, its probe is not run,
        and a parked batch learns nothing more: at 4 in flight on the mixed prompts (first drafts passing 0.44-1.0,
        0.7 on average) adaptive parked where one draft each delivered 1.10x its tokens a second
        (``live_ab_s42-c4-probes``), its new requests estimated at the server-wide 0.6, just short of what pays. A
        probe shared by the batch pays for those costs once; the evidence it brings keeps the ones that pass
        drafting on their means, and their votes keep the server-wide estimate true. In ``closed_loop.py --batch
        4`` (the measured costs of that server, half the requests at 0.61, half at 0.85) adaptive went from 0.82 of
        the oracle, parked every step, to 0.91 with the cost probe from 2 requests on (0.82 to 0.91 at 2 requests,
        0.95 at 8); where drafting does not pay it costs 0.4-1 % of the oracle at four requests (first drafts at
        0.1-0.6), 2.5 % at eight whose first drafts pass 0.4-0.5 (the requests its probes find lucky draft on their
        means for a few steps). Large batches do not need it: there one request's probe costs its own rows, and a
        joint one tipped doomed batches of 48 into drafting on a bonus (0.993 of the oracle to 0.985)."""
        if not 2 <= len(rids) < JOINT_BATCH:
            return plan
        stale = self.tracker.first_evidence(rids) < JOINT_EVIDENCE
        if not stale.any():
            return plan
        hopes = np.where(stale[:, None], means + (hopes - means) / np.sqrt(np.count_nonzero(stale)), means)
        one = np.where(stale, np.minimum(limit, 1), mins)
        probe = self.policy.plan(hopes, one, mins, self.cost, uniform=uniform, weights=weights, context=context,
                                 resume_ms=resume, sure_probs=hopes)
        return probe if probe.lengths.any() else plan

    def _priced_limit(self, limit: np.ndarray, mins: np.ndarray) -> np.ndarray:
        """``limit`` capped at one draft deeper than the deepest depth recent steps of this batch size measured (the
        cost-side probe, as ``_as_probe`` is the acceptance side's; the requests' own bounds, which decide whether a
        batch is held, stay ``limit``): a depth not run at a batch size takes its price from the depths that were,
        and the fit's error grows with depth. At 32 requests on CPU one draft cost 1.2x a parked step where three
        cost 3x, while the fit, fitted on smaller batches, priced them alike: drafting there started three deep and
        stayed there; with every depth tried at once, each deeper one cost a step of its own. Probed one deeper at a
        time, each depth is priced by its own steps before the next is tried. The policy plans within the cap
        (parking included): the optimum over every depth cut to it could price below parking and ran (Gamma 64 on
        CPU, 32 requests: a plan drafting deeper on extrapolated prices cut to one draft, 1.25 tokens/ms expected
        against parking's 1.97, then to two, 1.4-1.9, for a whole burst). The depths the start-up warm-up ran at a
        batch size are measured there (``StepCostModel.priced_depth``): on an H200 the climb cost each new bucket
        of a Poisson 32 burst a dozen steps at one to six drafts where seven paid (the fourth lease)."""
        priced = self.cost.priced_depth(len(limit))
        if priced is None and self._sweep_cut:  # no step measured yet, and the prior holds what a few requests cost
            priced = 0
        if priced is None or limit.max(initial=0) <= priced + 1:
            return limit
        return np.maximum(np.minimum(limit, priced + 1), mins)

    def _end_sweep(self) -> None:
        """The start-up sweep ends before its last depth: the depths it measured are the prior (fitted now; a step's
        samples arrive before the next decision on CPU), the others are priced online as the policy reaches them,
        one deeper at a time (``_priced_limit``), from the first step on: the large batch's own first plan, priced
        on a few requests' sweep, drafted 3 deep at 48 requests for a whole burst at 0.65 tokens/ms against a
        parked step's 1.0. The first ``warm_steps`` still only warm up."""
        self.calibration_steps = max(self.counters.steps, self.warm_steps)
        self._sweep_cut = True
        self.cost.refit()

    def _warmup_step(self, rids: list[str], caps: np.ndarray | None, padded: bool, mixed: bool) -> StepDecision:
        """The warm-up sweep's next step over every depth the window has (a later policy may allow any of them);
        ``mixed``: with the steps that park every other request (not on a uniform verify path, where plans never
        do)."""
        step = self.counters.warmup_steps
        self.calibration_steps = 0  # the warm-up's sweep is the start-up profile: live traffic runs no sweep
        lengths = sweep_lengths(step, len(rids), self.window, mixed)
        if caps is not None:
            lengths = np.minimum(lengths, np.asarray(caps, dtype=np.int64))
        self.counters.warmup_steps += 1
        self._held = None
        self._queue(rids, lengths, warmup=True)
        depth = self.window if padded else int(lengths.max(initial=0))
        shape = (len(rids), step % sweep_steps(self.window, mixed), mixed)
        sampled = shape in self._warmed  # its first run paid the compiles
        self._warmed.add(shape)
        return StepDecision(lengths, depth, calibration=False, sampled=sampled, warmup=True)

    def _queue(self, rids: list[str], lengths: np.ndarray, warmup: bool = False, parked: bool = False) -> None:
        if len(self._pending) == MAX_PENDING_STEPS:  # an observe went missing: forget it rather than grow
            self._pending.popleft()
            self.counters.unobserved += 1
        self._pending.append(_Pending(list(rids), lengths, warmup, parked))

    def _enqueue(self, rids: list[str], lengths: np.ndarray, parked: bool) -> None:
        """A decided step (``parked``: nobody drafts): queued for its acceptance (``observe``) and counted."""
        c = self.counters
        self._queue(rids, lengths, parked=parked)
        c.steps += 1
        c.requests += len(rids)
        if not parked:
            c.proposed += int(lengths.sum())
        c.add_lengths(lengths, parked)

    def replace_last(self, decision: StepDecision, lengths: np.ndarray, depth: int) -> StepDecision:
        """The source rank's lengths for the step just decided: with tensor parallelism every rank runs rank 0's
        decision (the same shapes everywhere), so it replaces this rank's own in the queue and the counters."""
        lengths = np.asarray(lengths, dtype=np.int64)
        last = self._pending[-1]
        old, warmup = last.lengths, last.warmup
        self._pending[-1] = last._replace(lengths=lengths, parked=not lengths.any())
        if warmup:
            return dataclasses.replace(decision, lengths=lengths, depth=int(depth))
        c = self.counters
        c.proposed += int(lengths.sum()) - int(old.sum())
        for k in old:
            c.length_histogram[k] -= 1
        c.add_lengths(lengths)
        return dataclasses.replace(decision, lengths=lengths, depth=int(depth))

    def observe(self, accepted: list[int] | np.ndarray) -> None:
        """Accepted draft counts for the oldest decided step not yet observed."""
        if not self._pending:
            return
        rids, lengths, warmup, parked, gone = self._pending.popleft()
        if warmup:
            return
        if gone:  # their tokens of this step were dropped, and their statistics must not come back
            kept = np.array([rid not in gone for rid in rids])
            rids, lengths = [rid for rid, keep in zip(rids, kept) if keep], lengths[kept]
            if not parked:
                accepted = np.asarray(accepted, dtype=np.int64)[: len(kept)][kept]
        if parked:  # nothing drafted: nothing accepted, one token committed each
            self.tracker.observe_parked(rids)
            self.counters.committed += len(rids)
            return
        accepted = np.minimum(np.asarray(accepted, dtype=np.int64)[: len(rids)], lengths)
        held = self._held
        if held is not None and not held.steady and self.config.mode is Mode.ADAPTIVE and (accepted < lengths).any():
            self._held = None  # a rejected draft: the next step decides on the new evidence (a steady plan's holds on)
        self.tracker.observe(rids, lengths, accepted)
        self.counters.add_positions(lengths, accepted)
        self.counters.accepted += int(accepted.sum())
        self.counters.committed += int(accepted.sum()) + len(rids)

    def record_verification(self, verified_rows: int, pruned_rows: int, offset_passes: int = 0) -> None:
        """Rows the step's verification computed, rows early pruning saved, passes that started past row 0."""
        self.counters.verified += verified_rows
        self.counters.pruned += pruned_rows
        self.counters.offset_passes += offset_passes

    def record_drafting(self, rows: int, skipped: int, cut: bool) -> None:
        """One step's draft rows; ``cut``: the runtime drafted each request only as far as its length."""
        self.counters.drafted += rows
        self.counters.draft_skipped += skipped
        self.cost.draft_cut = cut

    @property
    def calibrating(self) -> bool:
        return self.counters.steps < self.calibration_steps

    def record_phase(self, phase: str, batch: int, size: int, ms: float, rows: int | None = None,
                     drafting: int | None = None, context: int = 0, step: int | None = None,
                     warmup: bool = False) -> None:
        """A measured phase time (``rows``: draft rows computed; ``drafting``: requests with k_i > 0; ``context``:
        context tokens a verify pass read); during the start-up sweep, and from the warm-up (``warmup``), it joins
        the cost model's profile prior. ``step``: the count of the step it measured (default: the last decided; on
        a GPU times arrive steps later)."""
        if warmup:
            self.cost.add_profile_sample(phase, batch, size, ms, rows, drafting, context, warmup=True)
            self._warm_samples += phase == DRAFT
            return
        step = self.counters.steps if step is None else step
        if step <= self.calibration_steps:
            if step > self.warm_steps:  # the first steps only warm each depth's runtime state up
                self.cost.add_profile_sample(phase, batch, size, ms, rows, drafting, context)
            if step == self.calibration_steps and phase == DRAFT:
                self.cost.refit()
        else:
            self.cost.record(phase, batch, size, ms, rows, drafting, context)

    def record_step(self, batch: int, verify_rows: int, depth: int, draft_rows: int, drafting: int, context: int,
                    ms: float, step: int | None = None) -> None:
        """A whole step's measured time (verify and the rest, catch-ups excluded), against what the fit prices its
        shape at: the cost model's per-depth residual (not during the start-up sweep, which is the fit's prior)."""
        if (self.counters.steps if step is None else step) > self.calibration_steps:
            modelled = self.cost.modelled_step_ms(batch, verify_rows, depth, draft_rows, drafting, context)
            self.cost.record_step(batch, depth, modelled, ms, shape=(verify_rows, draft_rows, drafting, context))
        self._step_ms[bucket_of(batch)] = ms

    def record_catch_up(self, rows: int, ms: float) -> None:
        """A measured catch-up of ``rows`` skipped draft rows (priced for the requests that resume next)."""
        self.counters.catch_up_rows += rows
        self.cost.record_catch_up(rows, ms)

    def forget(self, rid: str) -> None:
        """A finished request. Under the overlap scheduler a step decided before its result (a stop token) may
        still hold it: that step's ``observe`` leaves it out, so its row is not made again (each such request kept
        one for good, and a parked step's feedback could be what grew a full table)."""
        self.tracker.forget(rid)
        for i, step in enumerate(self._pending):
            if rid in step.rids:
                self._pending[i] = step._replace(gone=step.gone | {rid})

    def model_report(self) -> dict:
        """What the policy currently believes: fitted step costs (ms) and server-wide acceptance by position."""
        cost = self.cost
        return {
            "verify_coef": [round(float(c), 4) for c in cost.verify_coef],
            "draft_coef": [round(float(c), 4) for c in cost.draft_coef],
            "verify_mape": cost.mean_abs_pct_error(VERIFY),
            "draft_mape": cost.mean_abs_pct_error(DRAFT),
            "accept_by_position": [round(float(a), 3) for a in self.tracker.global_accept_by_position],
            "tracked_requests": len(self.tracker),  # requests with acceptance statistics: those in flight
        }


def _drafts_on_hope(probs: np.ndarray, means: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[B] the requests drafting as far as a position where their estimates (``probs``) lift them above their
    means: a probe. One drafting short of it drafts as the means alone would have it (a plan optimal on the
    estimates prices the same on the means, which are nowhere above them, so it is optimal there too), and no
    plan on the means is needed to run it: skipping it when nobody probes took a drafting decision in the closed
    loop from 412 to 361 us at 4 requests and from 517 to 444 at 32-63, every decision the same."""
    lifted = probs != means
    return lifted.any(axis=1) & (lengths > lifted.argmax(axis=1))


def _explore_few(means: np.ndarray, hopes: np.ndarray, count: int) -> np.ndarray:
    """The estimates a step decides on: the optimistic ones for the ``count`` requests whose optimism adds most
    (ties: the first), the posterior means for the rest. Optimism on every request of a batch at once compounds:
    on the mixed workload at 32 concurrent requests, steps drafted 5-6 tokens a request on the hopes of many
    parked or new requests (0.70-0.74 tokens/ms against 0.88 expected), and FASER ran at 0.75-0.85x of its own
    posterior-mean-only decisions (one closed-loop run); one request explored a step still probes each in turn."""
    if len(means) <= count:
        return hopes
    lift = (hopes - means).sum(axis=1)
    if np.count_nonzero(lift) <= count:
        return hopes
    keep = np.argsort(-lift, kind="stable")[:count]
    out = means.copy()
    out[keep] = hopes[keep]
    return out
