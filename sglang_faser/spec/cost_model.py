"""Step-cost model: how long a decode step takes as a function of batch size, verified tokens and draft steps.

The goodput policy divides expected tokens by this cost (faser-algorithms.md §1.3, §5, §6.2), so the model must
be measured on the hardware it runs on: the SGLang layer profiles it at start-up with real forward passes and then
feeds it the measured time of every step. Two linear models, fitted by least squares with non-negative
coefficients, once over every sample and once per batch-size bucket (powers of two), where samples of nearby
buckets weigh more; a step is priced by its own bucket's fit (costs are not linear in the batch size over the
whole range: on CPU an attention pass costs more per request at 32 requests than at 4):

    verify_ms(B, tokens, ctx)       = v0 + v_req * B + v_tok * tokens + v_att * tokens * ctx / B
                                      (one TARGET_VERIFY pass over `tokens` rows of B requests whose contexts
                                      hold `ctx` tokens in all; a step verified in frontiers pays v0 per pass)
    draft_ms(B, steps, rows, n)     = d0 + (d_ext + d_req * n * (steps + 1)) [steps > 0] + d_step * steps
                                      + d_row * rows

Attention is the term that grows with context, and each verified row attends over its request's whole context:
``tokens * ctx / B`` (rows times the mean context) is the keys a pass reads, so a verify pass of four rows a
request pays four times a plain decode's attention over the same context. Priced by ``ctx`` alone, steps that
verified deep windows over long contexts put their attention on the context term, and a parked step (one row a
request) paid it in full: at 17-32 requests on CPU (mixed prompts, bursty 64 req/s) parked steps were priced at
40 ms where they took 26, and 32 requests drafted 4-6 deep at 0.75-0.8 tokens/ms against parking's 0.9-1.0.

The draft side is the rest of the step: d0 the scheduler's and our host work of every step, d_ext + d_req * n *
(steps + 1) the draft-extend that keeps the draft current (a draft pass over the verified windows of the n
requests that drafted, steps + 1 rows each whatever their own length, SGLang's uniform layout: a fixed part and
a part per row; a request with k_i = 0 is left out of it, a step where every k_i = 0 runs none, and the draft
catches up when the request drafts again: ``engine/draft_backlog.py``), d_step each draft forward's fixed cost,
d_row each request drafted in it. Drafting is cut per request
(``engine/draft_cut.py``): forward s only runs for requests with k_i >= s + 2, so ``rows`` = sum(max(k_i - 1, 0))
and a request held at k_i = 1 costs no draft row however deep the step goes. Where the cut is not available the
draft runs every request to the step's depth: ``rows`` = B * (steps - 1) (:func:`full_depth_rows`).

Which part of a cost is fixed and which grows with the batch cannot be told apart from steps of one batch size
(a server's first steps, and its start-up sweep, often see one or two requests). The fit then puts the cost on
the fixed terms: the per-request terms carry a small ridge penalty, so they only take what batch-size variation in
the samples shows. That errs towards pricing speculation at a larger batch too cheaply, which the policy then
tries and the fit corrects, rather than too dearly, which it would never try again (a step without drafts says
nothing about what drafting costs). For the same reason a batch-size bucket's fit does not extrapolate the
per-request slopes of smaller batches to its own until steps of its size (or larger) exercise them
(``BORROWED_RIDGE``).

A request that drafts again after steps at k_i = 0 first catches its draft up (one batched draft extend over
its skipped rows, ``engine/draft_backlog.py``): a one-off, kept out of the per-step fit and priced by its own
fit, ``catch_up_coef`` = [fixed ms per catch-up pass, ms per skipped row] (a draft pass costs mostly its fixed
part: pricing rows at a one-row catch-up's mean would make a request's resumption dearer every step it rests,
until it never drafts again); a catch-up far dearer than the others predict for its size, a stall, stays out of
that fit until another of its size confirms it.

The linear fit is refitted every ``refit_every`` steps (a refit is a few NNLS solves: every 8 steps they were a
fifth of FASER's host time in a batch-1 step), and after ``NEW_BUCKET_STEPS`` steps of a batch size it has not
fitted (a burst's steps price the burst sooner); it cannot follow what it cannot express (a draft phase whose cost
is not linear in depth, a machine loaded by other work since the start-up profile). Every step's
measured time is therefore also compared with the fit's price for its shape: ``residual`` keeps, per batch-size
bucket and depth, a running mean of log(measured / modelled), and ``step_ms`` multiplies the fit's price by it
(a refit moves each mean by how it reprices the shape last measured there: a residual is relative to its fit).
What a step's depth did not expect moves the bucket's other depths too, most of the way (``SHARED_RATE``): the
machine's speed is every depth's, so a depth not chosen for a while is not left at the speed of its last spell.
It moves within a few steps (a burst of a new batch size is priced from its first steps, not 32 steps later);
a parked step (depth 0, the target's plain decode) not run in a bucket takes the parked factor of the nearest
buckets that ran one (re-expressed against its own bucket's fit), never other buckets' drafting steps'; a drafting
depth not yet run in a bucket takes its factor from the run drafting depths nearest it (the load on the machine
moves every depth alike, the fit's error grows with depth), a bucket not yet seen the nearest parked factor (the
fit's price where none parked) and the mean of every drafting one, and a depth run once or long ago leans towards
its kind's level (parked: the nearest parked factor; drafting: the bucket's drafting mean).

Profile samples stay as a prior, weighing as much as the online samples together; online samples live in a
sliding window, so the fit follows load and thermal drift without forgetting the shape the profile established
(the window often holds one batch size at one or two depths, which cannot tell fixed costs from costs per row).
One-off stalls are dropped by comparing each sample with what the current fit predicts for its own shape and with
the typical sample of its batch-size bucket, so a burst's large-batch steps (slow, but as slow as their shape
says) are kept, even before the fit has seen a batch that large.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

VERIFY, DRAFT = "verify", "draft"
OUTLIER_FACTOR = 4.0
CATCH_UP_WINDOW = 64  # catch-up samples the catch-up fit keeps
CATCH_UP_PENALISED = np.array([False, True])  # [fixed per pass, per row]: the rows ridge-penalised
RESIDUAL_RATE = 0.25  # weight of the newest step in a (bucket, depth) running mean of log(measured / modelled)
# of a step's surprise (log of measured over its depth's corrected price), what moves every other depth of its bucket:
# the machine's speed moves every depth alike (other work on the CPU comes and goes in spells), so only the rest,
# RESIDUAL_RATE - SHARED_RATE, is what the step tells of its own depth against the others. Moved by their own steps
# alone, the depths a policy was not choosing kept the speed of the spell they last ran in: at 32-63 requests on CPU
# (Poisson 64) depth 3's factor went 0.75-1.24 within twenty steps while depth 1's stayed at the 1.25-1.6 of an
# earlier spell, and FASER drafted 3-4 deep on 233 of 385 steps (``traces/steps_s40-t64``; replayed with this rule,
# depth 1 against 3 moved 2.6x less, sd 0.042 in log). In ``benchmarks/closed_loop.py`` (spells of sd 0.25) 0.2 ran
# depths 3-4 on 78 of 9000 steps where 0 ran them on 1143; 0.225 and 0.24 did worse (a depth's first steps then fix
# its deviation from the others for good)
SHARED_RATE = 0.2
RESIDUAL_CLIP = 0.4  # how far (in log) one step may pull that mean's sample from it, after the first two
RESIDUAL_PSEUDO = 1.0  # steps' worth of the bucket's mean a depth's own residual is weighed against
RESIDUAL_AGE = 0.98  # per step since a depth last ran: how much its own residual still counts
PRICED_EVIDENCE = 0.25  # a depth's evidence (a step's worth, fading with age) for its price to count as measured
LOCAL_WEIGHT = 0.25  # a sample's weight in the fit for a batch-size bucket, per bucket away from it
PRIOR_SHARE = 1.0  # the profile prior's weight in a refit, relative to the online window's samples together
RIDGE = 1e-4  # penalty on the per-request terms, relative to each term's own sum of squares
# a bucket's fit adds this penalty, quartered by each sample of that bucket or a larger one that exercises the
# per-request terms: slopes fitted on smaller batches are not extrapolated to larger ones that have not run such steps
BORROWED_RIDGE = 1.0
# a batch-size bucket that no step of the last refit's window ran in is refitted for after this many of its steps,
# not up to ``refit_every`` steps later: until then its steps are priced by other buckets' fits and residuals, and
# at 32 requests on CPU (bursty 64 req/s) a burst after a quiet spell of two requests priced drafting at 2x a fit
# made of those two requests' steps and parked for 22 steps at 0.97 tokens/ms; the refit 23 steps in drafted it
# 2-6 deep at 1.2-1.4
NEW_BUCKET_STEPS = 4


def _weighted_mean(seen: dict, depths: list[int]) -> float:
    """The mean residual of ``depths`` weighed by their evidence (``_evidence``), taken relative to the depth run
    last, so that it holds however long ago that was. Once every depth's evidence had faded below a threshold they
    counted alike: at 32 requests on CPU a depth run 38 times (0.1) and four run once each (0.4-0.8), all over a
    thousand steps earlier, priced drafting at exp(0.51) = 1.66x the fit for a whole burst, which parked."""
    latest = max(seen[d][2] for d in depths)
    weights = [_aged_steps(seen[d], latest) for d in depths]
    return math.fsum(seen[d][0] * w for d, w in zip(depths, weights)) / math.fsum(weights)


def _aged_steps(running: list, now: int, every: bool = False) -> float:
    """A (bucket, depth) residual's steps (as many as its running mean holds; ``every``: all of them), fading with
    the steps between the last one and ``now``."""
    _, steps, last = running
    return (steps if every else min(steps, 1.0 / RESIDUAL_RATE)) * RESIDUAL_AGE ** (now - last)


def _nearest(buckets: list[int], bucket: int) -> list[int]:
    """The buckets of ``buckets`` nearest ``bucket`` (one, or two equally near; none of none)."""
    if not buckets:
        return []
    near = min(abs(b - bucket) for b in buckets)
    return [b for b in buckets if abs(b - bucket) == near]


def _verify_features(batch: int, tokens: int, context: int) -> np.ndarray:
    return np.array([1.0, batch, tokens, attended_keys(batch, tokens, context)], dtype=float)


def attended_keys(batch, tokens, context):
    """The keys a verify pass of ``tokens`` rows over ``batch`` requests whose contexts hold ``context`` tokens in
    all reads: each row over its request's context, the mean context standing for each request's."""
    return np.asarray(tokens, dtype=float) * np.asarray(context, dtype=float) / np.maximum(batch, 1)


def _draft_features(batch: int, steps: int, rows: int, drafting: int) -> np.ndarray:
    drafts = 1.0 if steps > 0 else 0.0
    return np.array([1.0, drafts, drafting * drafts * (steps + 1), steps, rows], dtype=float)


# the terms that grow with the batch (ridge-penalised), by phase: verify [v0, v_req, v_tok, v_att], draft [d0,
# d_ext, d_req, d_step, d_row]
PER_REQUEST = {VERIFY: np.array([False, True, True, True]), DRAFT: np.array([False, False, True, False, True])}


def full_depth_rows(batch, steps):
    """Draft rows when every request is drafted to the step's depth (forward s makes token s + 2)."""
    return np.asarray(batch) * np.maximum(np.asarray(steps) - 1, 0)


def cut_rows(lengths: np.ndarray) -> int:
    """Draft rows when each request is drafted only as far as its own length needs."""
    return int(np.maximum(np.asarray(lengths) - 1, 0).sum())


def _kept(x: np.ndarray, y: np.ndarray, batch: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Which samples to keep: those at most ``OUTLIER_FACTOR`` x what the current fit (``fallback``) predicts for
    their shape or x the median of their batch-size bucket. One-off stalls (first use of a runtime state, lazy
    initialisation, a busy machine) would otherwise dominate a window of a few hundred steps, while a burst's
    large batches are slow because of their shape and stay, even when the fit has not seen that batch size yet
    and predicts it too cheap."""
    bucket = batch_bucket(batch)
    typical = np.zeros_like(y)
    for b in np.unique(bucket):
        typical[bucket == b] = np.median(y[bucket == b])
    return y <= OUTLIER_FACTOR * np.maximum(x @ fallback, typical)


def _supported(x: np.ndarray, y: np.ndarray, penalised: np.ndarray) -> np.ndarray:
    """Which samples the others support: at most ``OUTLIER_FACTOR`` x what the ridge fit of all the others predicts
    for their shape (leave-one-out, from the hat matrix) or x the median sample. Catch-ups are few and a stall
    among them is the one sample of its size: a fit over all of them passes through it (on an H200 one 116 ms
    serving-time compile priced every skipped row at 0.9 ms, 450x a draft-extend row, and a request parked for a
    while then looked too dear to resume for the rest of its life). One sample alone is kept."""
    if len(y) < 2:
        return np.ones(len(y), dtype=bool)
    gram = x.T @ x
    gram += np.diag(RIDGE * np.diag(gram) * penalised)
    inverse = np.linalg.pinv(gram)
    coef = inverse @ x.T @ y
    leverage = np.einsum("ij,jk,ik->i", x, inverse, x)
    left_out = y - (y - x @ coef) / np.maximum(1.0 - leverage, 1e-9)  # each one's prediction from the others
    return y <= OUTLIER_FACTOR * np.maximum(left_out, np.median(y))


def batch_bucket(batch) -> np.ndarray:
    """Batch sizes by powers of two: 1, 2-3, 4-7, ..."""
    return np.floor(np.log2(np.maximum(np.asarray(batch, dtype=float), 1.0))).astype(np.int64)


def bucket_of(batch: int) -> int:
    """``batch_bucket`` of one batch size, in plain Python (every step asks several times)."""
    return max(int(batch), 1).bit_length() - 1


def _fit_nonnegative(x: np.ndarray, y: np.ndarray, fallback: np.ndarray, penalised: np.ndarray,
                     weight: np.ndarray | None = None, ridge: float = RIDGE) -> np.ndarray:
    """Least squares with non-negative coefficients (a cost never falls as work grows), the ``penalised`` terms
    ridge-penalised by ``ridge`` x their own sum of squares (see the module docstring); ``weight``: each
    sample's weight (weighted least squares). Terms whose coefficient comes out negative are dropped and the rest
    refitted, until none is negative.
    """
    if len(y) < (~penalised).sum():  # the penalised terms are pinned by the ridge
        return fallback
    if weight is not None:
        root = np.sqrt(weight)
        x, y = x * root[:, None], y * root
    penalty = np.diag(np.sqrt(ridge * (x * x).sum(axis=0)) * penalised)[penalised]
    x, y = np.vstack([x, penalty]), np.concatenate([y, np.zeros(len(penalty))])
    active = np.ones(x.shape[1], dtype=bool)
    coef = np.zeros(x.shape[1])
    while active.any():
        sub, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sub >= 0).all():
            coef[active] = sub
            break
        active[np.flatnonzero(active)[sub < 0]] = False
    return coef


class _Samples:
    """Measured samples of one phase (features, ms, batch size) in preallocated arrays; ``limit``: the newest
    ``limit`` are kept (a ring; None: all). A refit reads them as arrays without rebuilding them every time."""

    def __init__(self, width: int, limit: int | None = None, capacity: int = 64):
        self.limit = limit
        size = limit if limit is not None else capacity
        self._x, self._y, self._b = np.zeros((size, width)), np.zeros(size), np.zeros(size, dtype=np.int64)
        self._n = self._next = 0

    def __len__(self) -> int:
        return self._n

    def add(self, x: np.ndarray, ms: float, batch: int) -> None:
        if self._next == len(self._y):
            if self.limit is not None:
                self._next = 0
            else:  # grow (the profile prior: a few dozen samples)
                self._x, self._y, self._b = (np.concatenate([a, np.zeros_like(a)]) for a in (self._x, self._y, self._b))
        self._x[self._next], self._y[self._next], self._b[self._next] = x, ms, batch
        self._next += 1
        self._n = min(self._n + 1, len(self._y))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x [n, F], ms [n], batch [n]), in no particular order."""
        n = self._n
        return self._x[:n], self._y[:n], self._b[:n]


@dataclass
class StepCostModel:
    """Linear step costs in milliseconds; see the module docstring for the terms."""

    verify_coef: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.05, 0.0]))
    draft_coef: np.ndarray = field(default_factory=lambda: np.array([0.2, 0.0, 0.0, 0.2, 0.0]))
    window: int = 256
    refit_every: int = 32
    draft_cut: bool = False  # the runtime drafts each request only as far as its length (set by the worker)
    frontier_size: int = 0  # draft positions per verify pass (0: one pass per step); each pass pays v0
    catch_up_coef: np.ndarray = field(default_factory=lambda: np.zeros(2))  # [ms per pass, ms per row]; 0: unmeasured

    def __post_init__(self) -> None:
        self.verify_coef = np.asarray(self.verify_coef, dtype=float)
        self.draft_coef = np.asarray(self.draft_coef, dtype=float)
        widths = {VERIFY: len(self.verify_coef), DRAFT: len(self.draft_coef)}
        self._prior = {phase: _Samples(w) for phase, w in widths.items()}  # the start-up profile
        self._online = {phase: _Samples(w, limit=self.window) for phase, w in widths.items()}  # the latest steps
        self._local: dict[str, dict[int, np.ndarray]] = {VERIFY: {}, DRAFT: {}}  # batch bucket -> coefficients
        # (x, y, bucket, weight) of the last refit
        self._kept_samples: dict[str, tuple | None] = {VERIFY: None, DRAFT: None}
        self._since_refit = 0
        self._fitted_buckets: set[int] = set()  # the buckets of the last refit's draft samples
        self._unfitted_steps: dict[int, int] = {}  # steps recorded since then in each bucket not among them
        self._catch_ups: deque = deque(maxlen=CATCH_UP_WINDOW)  # (rows, ms)
        # batch bucket -> depth -> [mean log(measured / modelled), steps, the step it last ran]
        self._residual: dict[int, dict[int, list]] = {}
        # (batch bucket, depth) -> (the shape of its last step, the fit's price of it): a refit rebases the residual
        self._priced_at: dict[tuple[int, int], tuple[tuple, float]] = {}
        self._steps = 0  # steps recorded
        self._warmed: dict[int, int] = {}  # batch bucket -> the deepest depth the start-up warm-up's steps ran there
        self._factors: dict[tuple[int, int], np.ndarray] = {}  # ``depth_factor`` by (bucket, depth) till a step
        # (source bucket, depth, bucket) -> (the ``_priced_at`` entry it was made from, log(its price / ``bucket``'s))
        self._offsets: dict[tuple[int, int, int], tuple[tuple, float]] = {}

    def samples(self, phase: str, online: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features [n, F], ms [n], batch size [n]) the fit holds for ``phase``: the latest steps' (``online``) or
        the start-up profile's."""
        return (self._online if online else self._prior)[phase].arrays()

    def coefs(self, phase: str, batch) -> np.ndarray:
        """The coefficients that price a step of ``batch`` requests (scalar, or an array: one row each): the fit
        local to its batch-size bucket (the global fit before the first refit)."""
        fitted = self.verify_coef if phase == VERIFY else self.draft_coef
        if self._kept_samples[phase] is None:
            return fitted
        batch = np.asarray(batch)
        if batch.ndim == 0:
            return self._local_fit(phase, bucket_of(batch))
        rows = [self._local_fit(phase, int(b)) for b in batch_bucket(batch).ravel()]
        return np.stack(rows).reshape(batch.shape + fitted.shape)

    def _coefs_of(self, phase: str, bucket: int) -> np.ndarray:
        """``coefs`` of the batch sizes of one bucket."""
        return self.coefs(phase, 1 << bucket)

    def _local_fit(self, phase: str, bucket: int) -> np.ndarray:
        """The fit for one batch-size bucket, made when first asked for after a refit (a step asks for one); with
        no sample in the bucket itself, the nearest buckets' samples dominate it. Its per-request terms are
        penalised the more, the fewer samples of batches at least as large exercise them (``BORROWED_RIDGE``): a
        slope fitted on smaller batches, extrapolated, priced drafting at 32 requests on CPU at 2-3x a parked step
        where it cost 1.2x (a few slow deep steps at 8-12 requests set it), and a price too dear is never tried
        and so never corrected; too cheap, the first such step measures it (module docstring)."""
        local = self._local[phase]
        if bucket not in local:
            x, y, buckets, weight = self._kept_samples[phase]
            fitted = self.verify_coef if phase == VERIFY else self.draft_coef
            penalised = PER_REQUEST[phase]
            above = math.fsum(weight[(buckets >= bucket) & (x[:, penalised] != 0).any(axis=1)])
            local[bucket] = _fit_nonnegative(x, y, fitted, penalised,
                                             weight=weight * LOCAL_WEIGHT ** np.abs(buckets - bucket).astype(float),
                                             ridge=RIDGE + BORROWED_RIDGE * 0.25 ** above)
        return local[bucket]

    # -- queries (vectorised over candidate plans) ------------------------------------------------------
    def verify_ms(self, batch, tokens, context=0) -> np.ndarray:
        v0, v_req, v_tok, v_att = np.moveaxis(self.coefs(VERIFY, batch), -1, 0)
        return (v0 + v_req * np.asarray(batch, dtype=float) + v_tok * np.asarray(tokens, dtype=float)
                + v_att * attended_keys(batch, tokens, context))

    def draft_ms(self, batch, steps, rows=None, drafting=None) -> np.ndarray:
        """Drafting ``steps`` positions (``rows`` request-forwards in all; default: every request at every step)
        for ``batch`` requests, plus the draft-extend over the ``drafting`` requests with k_i > 0 (default: all)
        that keeps the draft current."""
        d0, d_ext, d_req, d_step, d_row = np.moveaxis(self.coefs(DRAFT, batch), -1, 0)
        rows = full_depth_rows(batch, steps) if rows is None else rows
        drafting = batch if drafting is None else drafting
        steps = np.asarray(steps, dtype=float)
        return (d0 + (d_ext + d_req * np.asarray(drafting, dtype=float) * (steps + 1)) * (steps > 0) + d_step * steps
                + d_row * np.asarray(rows, dtype=float))

    def plan_rows(self, lengths: np.ndarray) -> int | None:
        """Draft rows a plan costs on this runtime (None: every request to the depth, draft_ms's default)."""
        return cut_rows(lengths) if self.draft_cut else None

    def verify_passes(self, depth) -> np.ndarray:
        """Target passes a step of this depth runs: one per frontier (``spec/frontier.py: frontier_bounds``)."""
        depth = np.asarray(depth)
        size = self.frontier_size
        if size <= 0:
            return np.ones_like(depth)
        return np.where(depth > size, 1 + -(-(depth - size) // size), 1)

    def step_ms(self, batch, verify_tokens, draft_steps, draft_rows=None, drafting=None, context=0,
                corrected: bool = True) -> np.ndarray:
        """A whole step; ``context``: the batch's context tokens (sum of its sequence lengths); ``corrected``:
        times the measured residual of its batch bucket and depth (``depth_factor``)."""
        extra_passes = self.verify_passes(draft_steps) - 1
        ms = (self.verify_ms(batch, verify_tokens, context) + self.coefs(VERIFY, batch)[..., 0] * extra_passes
              + self.draft_ms(batch, draft_steps, draft_rows, drafting))
        if not corrected:
            return ms
        depth = np.asarray(draft_steps, dtype=np.int64)
        return ms * self.depth_factor(int(np.max(batch)), int(depth.max(initial=0))).take(depth)

    def depth_factor(self, batch: int, max_depth: int) -> np.ndarray:
        """[max_depth + 1]: measured / modelled step time at each depth for a batch of ``batch`` requests.

        A depth's own residual is weighed against its bucket's mean (over steps) by how many steps ran at it and
        how long ago (``RESIDUAL_PSEUDO``, ``RESIDUAL_AGE``): one noisy step must not price a depth for good, since
        a depth priced too dear is not chosen and so never measured again. A drafting depth leans towards the
        drafting depths' mean, not towards parked steps' (depth 0, the target's plain decode, a different shape
        whose error says little about drafting's): at batch 1 on CPU (mixed prompts at 1 request/s) parked steps
        ran at 0.66-0.79x of the fit while the drafting depths ran at 0.85-1.0x, and a long parked stretch pulled
        every drafting depth seldom run towards the parked steps' factor. A drafting depth not run in the bucket
        takes its factor from the run ones nearest it on either side (the fit's error grows with depth: at 32
        requests on CPU one draft ran at 0.7x of the fit and three at 1.6x, and depth 1 priced at the drafting
        mean was never tried). Depth 0 leans on the parked steps of the nearest batch sizes instead
        (``_parked_level``). Kept until the next step is recorded: a decision asks several times (its plan, its
        priced alternatives), and the residuals and their ages only move when a step is recorded."""
        key = (bucket_of(batch), max_depth)
        factor = self._factors.get(key)
        if factor is None:
            factor = self._factors[key] = self._depth_factor(batch, max_depth)
            factor.flags.writeable = False
        return factor

    def _depth_factor(self, batch: int, max_depth: int) -> np.ndarray:
        """``depth_factor``, computed (plain Python over a few depths)."""
        if not self._residual:
            return np.ones(max_depth + 1)
        bucket = bucket_of(batch)
        seen = self._residual.get(bucket)
        parked = self._parked_level(bucket)
        if not seen:  # a bucket not run yet: the nearest parked residuals (none: the fit's), every drafting one alike
            drafting = [r for by_depth in self._residual.values() for d, (r, _, _) in by_depth.items() if d > 0]
            parked = 0.0 if parked is None else parked
            return np.exp([parked] + [sum(drafting) / len(drafting) if drafting else parked] * max_depth)
        evidence = self._evidence(seen)
        mean = _weighted_mean(seen, list(seen))  # the bucket's, steps weighed
        drafted = [depth for depth in evidence if depth > 0]
        mean_drafting = _weighted_mean(seen, drafted) if drafted else mean
        parked = mean if parked is None else parked
        # as the bucket's drafting evidence fades, its drafting depths lean towards the lower of that mean and the
        # bucket's parked level: one slow drafting step (the first after a long parked stretch ran at 1.5-1.7x) kept
        # every drafting depth of 16-31 requests dear for the rest of a run, never tried again
        faded = RESIDUAL_PSEUDO / (math.fsum(evidence[d] for d in drafted) + RESIDUAL_PSEUDO)
        mean_drafting += faded * (min(mean_drafting, seen[0][0] if 0 in seen else parked) - mean_drafting)

        # a run depth's residual, weighed against its target's by every step it ran: weighed by the steps its running
        # mean holds (four), a depth run 20 times in a row still leaned a fifth of the way (in log) towards other
        # buckets' level, and 32 parked requests on CPU were priced at 29 ms for 22 steps that took 31-38
        steps = self._evidence(seen, every=True)

        def leaned(depth: int, r: float) -> float:
            target = parked if depth == 0 else mean_drafting
            return target + steps[depth] / (steps[depth] + RESIDUAL_PSEUDO) * (r - target)

        own = {depth: leaned(depth, r) for depth, (r, _, _) in seen.items()}
        logs = np.full(max_depth + 1, mean_drafting)
        logs[0] = own.get(0, parked)
        if drafted and max_depth:  # a drafting depth not run: from the run ones nearest it on either side
            drafted.sort()
            logs[1:] = np.interp(np.arange(1, max_depth + 1), drafted, [own[d] for d in drafted])
        return np.exp(logs)

    def _parked_level(self, bucket: int) -> float | None:
        """What a parked step's residual leans on in ``bucket``: the parked residual of the nearest buckets that
        ran parked steps, against this bucket's fit (``_transferred``); None where none did (then the bucket's own
        mean, or for a bucket not run yet the fit itself). Never other buckets' drafting steps: a parked step is
        the target's plain decode, and at 32 requests on CPU, with only drafting steps measured there (at 1.5-2.3x
        of the fit), a parked step priced at their level looked dearer than a three-deep one for a whole burst; at
        16 req/s a server whose only measured steps had drafted at one or two requests (1.8x of the fit) priced 8
        parked requests at 25 ms where they took 13, and drafted them at 0.4 tokens/ms against parking's 0.6."""
        nearest = _nearest([b for b, by_depth in self._residual.items() if 0 in by_depth and b != bucket], bucket)
        if not nearest:
            return None
        return math.fsum(self._transferred(b, 0, bucket) for b in nearest) / len(nearest)

    def _transferred(self, source: int, depth: int, bucket: int) -> float:
        """The residual of ``source``'s steps at ``depth`` against ``bucket``'s fit: what they measured over what
        ``bucket``'s fit prices their shape at. A residual is relative to its own bucket's fit, and buckets' fits
        differ: carried over as it stands it corrects another fit's error (it is, where no shape was recorded)."""
        r = self._residual[source][depth][0]
        priced = self._priced_at.get((source, depth))
        if priced is None or source == bucket:
            return r
        # kept until that entry changes (its bucket steps at that depth, or a refit rebases it): most steps of a
        # batch size reuse their neighbours' offsets, on the scheduler's path
        made = self._offsets.get((source, depth, bucket))
        if made is None or made[0] is not priced:
            shape, modelled = priced
            here = self.modelled_step_ms(*shape, bucket=bucket)
            made = self._offsets[(source, depth, bucket)] = (
                priced, math.log(modelled / here) if here > 0 and modelled > 0 else 0.0)
        return r + made[1]

    def _evidence(self, seen: dict, every: bool = False) -> dict:
        """Each depth's evidence in a bucket: its steps (as many as the running mean holds; ``every``: all of them),
        fading with the steps since it last ran."""
        return {depth: _aged_steps(running, self._steps, every) for depth, running in seen.items()}

    def priced_depth(self, batch: int) -> int | None:
        """The deepest drafting depth recent steps of ``batch``'s bucket measured (evidence faded by age at least
        ``PRICED_EVIDENCE``; 0: none) or the start-up warm-up's real steps ran there, or None before any step is
        measured."""
        if not self._steps:
            return None
        bucket = bucket_of(batch)
        seen = self._residual.get(bucket, {})
        measured = (depth for depth, e in self._evidence(seen).items() if e >= PRICED_EVIDENCE)
        return max(max(measured, default=0), self._warmed.get(bucket, 0))

    def drafting_evidence(self, batch: int) -> float:
        """How much recent steps of ``batch``'s bucket measured drafting: the largest evidence (a step's worth,
        fading with age) of any drafting depth there, 0 where none ran (``LengthController._cost_probe``)."""
        seen = self._residual.get(bucket_of(batch))
        if not seen:
            return 0.0
        return max((e for depth, e in self._evidence(seen).items() if depth > 0), default=0.0)

    def modelled_step_ms(self, batch: int, verify_tokens: int, depth: int, draft_rows: int, drafting: int,
                         context: int, bucket: int | None = None) -> float:
        """``step_ms(..., corrected=False)`` of one step's shape, without the vectorised machinery (every step
        asks for it once); ``bucket``: priced by that batch-size bucket's fit (default: its own)."""
        passes = int(self.verify_passes(depth))
        at = bucket_of(batch) if bucket is None else bucket
        verify_coef, draft_coef = self._coefs_of(VERIFY, at), self._coefs_of(DRAFT, at)
        verify = verify_coef @ _verify_features(batch, verify_tokens, context) + verify_coef[0] * (passes - 1)
        return float(verify + draft_coef @ _draft_features(batch, depth, draft_rows, drafting))

    def record_step(self, batch: int, depth: int, modelled_ms: float, ms: float, shape: tuple | None = None) -> None:
        """A step's measured time against the fit's price for its shape (``modelled_step_ms``); ``shape``: the
        rest of that shape (verify tokens, draft rows, drafting requests, context), by which a refit rebases the
        residual (``_rebase``)."""
        if modelled_ms <= 0 or ms <= 0 or ms > OUTLIER_FACTOR * modelled_ms:  # a stall (first use of a shape)
            return
        self._steps += 1
        self._factors.clear()
        if shape is not None:
            verify_tokens, draft_rows, drafting, context = shape
            self._priced_at[(bucket_of(batch), depth)] = (
                (batch, verify_tokens, depth, draft_rows, drafting, context), modelled_ms)
        by_depth = self._residual.setdefault(bucket_of(batch), {})
        running = by_depth.setdefault(depth, [0.0, 0, 0])
        running[2] = self._steps
        r = float(np.log(ms / modelled_ms))
        if running[1] >= 2:  # a one-off stall (another process on the CPU, a first use) moves it a bounded step
            r = min(max(r, running[0] - RESIDUAL_CLIP), running[0] + RESIDUAL_CLIP)
        surprise = r - running[0]
        if running[1]:  # what its depth did not expect is mostly the machine's speed: every depth of the bucket
            for other, moved in by_depth.items():
                if other != depth:
                    moved[0] += SHARED_RATE * surprise
        running[1] += 1  # a plain mean over the first steps, then a running one
        running[0] += max(RESIDUAL_RATE, 1.0 / running[1]) * surprise

    # -- measurements ------------------------------------------------------------------------------------
    def add_profile_sample(self, phase: str, batch: int, size: int, ms: float, rows: int | None = None,
                           drafting: int | None = None, context: int = 0, warmup: bool = False) -> None:
        """A start-up measurement: ``size`` is verified tokens (verify, over ``context`` tokens of context) or
        draft steps (draft, with the draft ``rows`` computed, default every request at every step, and the
        ``drafting`` requests, default all). ``warmup``: a step of the start-up warm-up, which runs every depth
        at every batch bucket as serving will (CUDA graphs and all), so its depth counts as measured at its
        bucket (``priced_depth``): a burst need not climb one depth at a time to what the warm-up priced."""
        self._prior[phase].add(self._features(phase, batch, size, rows, drafting, context), float(ms), batch)
        if warmup and phase == DRAFT:
            bucket = bucket_of(batch)
            self._warmed[bucket] = max(self._warmed.get(bucket, 0), int(size))

    def record(self, phase: str, batch: int, size: int, ms: float, rows: int | None = None,
               drafting: int | None = None, context: int = 0) -> None:
        """An online measurement of a real step; the model is refitted every ``refit_every`` steps, and after
        ``NEW_BUCKET_STEPS`` steps of a batch-size bucket the last refit had none of."""
        self._online[phase].add(self._features(phase, batch, size, rows, drafting, context), float(ms), batch)
        if phase == DRAFT:  # one per step (a step verified in frontiers records several verify passes)
            self._since_refit += 1
            bucket, new = bucket_of(batch), 0
            if bucket not in self._fitted_buckets:
                new = self._unfitted_steps[bucket] = self._unfitted_steps.get(bucket, 0) + 1
            if self._since_refit >= self.refit_every or new >= NEW_BUCKET_STEPS:
                self.refit()

    def record_catch_up(self, rows: int, ms: float) -> None:
        """A measured catch-up of ``rows`` skipped rows; refits ``catch_up_coef`` (rows ridge-penalised like the
        per-request step terms, so catch-ups of one size put their cost on the fixed part) over the samples the
        others support (``_supported``)."""
        if rows > 0:
            self._catch_ups.append((rows, float(ms)))
            data = np.array(self._catch_ups)
            x, y = np.stack([np.ones(len(data)), data[:, 0]], axis=1), data[:, 1]
            keep = _supported(x, y, CATCH_UP_PENALISED)
            self.catch_up_coef = _fit_nonnegative(x[keep], y[keep], self.catch_up_coef, CATCH_UP_PENALISED)

    def catch_up_ms(self, backlog) -> np.ndarray:
        """What catching up each request's ``backlog`` skipped rows costs it (0 where there is none): its rows,
        and the pass's fixed part shared among every request that holds a backlog (they resume together)."""
        backlog = np.asarray(backlog, dtype=float)
        holding = backlog > 0
        fixed, per_row = self.catch_up_coef
        return np.where(holding, fixed / max(int(holding.sum()), 1) + per_row * backlog, 0.0)

    def refit(self) -> None:
        """The global fit (every sample alike) and one fit per batch-size bucket seen, weighting samples by
        ``LOCAL_WEIGHT`` ^ (buckets away): costs are not linear in the batch size over the whole range (a CPU
        attention pass at 32 requests costs more per request than at 4), so a step is priced from samples of
        batches like its own, and by the global fit where there are none."""
        self._since_refit = 0
        for phase in (VERIFY, DRAFT):
            if not len(self._prior[phase]) + len(self._online[phase]):
                continue
            prior, online = self._prior[phase].arrays(), self._online[phase].arrays()
            x, y, batch = (np.concatenate(pair) for pair in zip(prior, online))
            # the profile's samples weigh as much as the online window's together: the window often holds one
            # batch size at one or two depths, whose rows alone cannot tell a pass's fixed cost from its cost per
            # row (16 requests drafting 4-5 deep on a machine that slowed down meanwhile fitted 1.2 ms + 0.15 ms a
            # row where the refit before had 11.5 + 0.04, and a parked step was priced at a third of its 12 ms)
            weight = np.ones(len(y))
            if len(prior[1]) and len(online[1]):
                weight[:len(prior[1])] = max(1.0, PRIOR_SHARE * len(online[1]) / len(prior[1]))
            current = self.verify_coef if phase == VERIFY else self.draft_coef
            keep = _kept(x, y, batch, current)
            x, y, bucket, weight = x[keep], y[keep], batch_bucket(batch[keep]), weight[keep]
            fitted = _fit_nonnegative(x, y, current, PER_REQUEST[phase], weight=weight)
            if phase == VERIFY:
                self.verify_coef = fitted
            else:
                self.draft_coef = fitted
                self._fitted_buckets = set(batch_bucket(batch).tolist())  # every sample's, kept or not
            self._kept_samples[phase] = (x, y, bucket, weight)
            self._local[phase] = {}
        self._unfitted_steps.clear()
        self._rebase()

    def _rebase(self) -> None:
        """After a refit, each (bucket, depth) residual is moved by how the new fit reprices its last step's shape,
        so that shape keeps the price its measured steps gave it: a residual is relative to the fit it was measured
        against. Left as it was, the residual counts twice what the refit learnt from the same steps: at 32 requests
        on CPU (Poisson 64 req/s) three parked steps ran at 1.5x a fit pricing them at 35 ms; the next refit priced
        that shape at 55 ms (as measured), the stale 1.5x made it 82, and a burst drafted one deep at 0.43-0.55
        tokens/ms where parking, rebased, would have been priced at 0.58."""
        for (bucket, depth), (shape, modelled) in self._priced_at.items():
            repriced = self.modelled_step_ms(*shape)
            if repriced > 0:
                self._residual[bucket][depth][0] += math.log(modelled / repriced)
                self._priced_at[(bucket, depth)] = (shape, repriced)
        self._factors.clear()

    @staticmethod
    def _features(phase: str, batch: int, size: int, rows: int | None = None, drafting: int | None = None,
                  context: int = 0):
        if phase == VERIFY:
            return _verify_features(batch, size, context)
        if phase == DRAFT:
            return _draft_features(batch, size, full_depth_rows(batch, size) if rows is None else rows,
                                   batch if drafting is None else drafting)
        raise ValueError(f"unknown phase {phase!r}")

    def mean_abs_pct_error(self, phase: str) -> float | None:
        """MAPE of the fits that price steps (by batch-size bucket) over the online window (the paper reports its
        profiler's MAPE)."""
        if not len(self._online[phase]):
            return None
        x, y, batch = self._online[phase].arrays()
        coef = self.coefs(phase, batch)
        return float(np.mean(np.abs((x * coef).sum(axis=-1) - y) / np.maximum(y, 1e-9)))
