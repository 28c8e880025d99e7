"""Step-cost model: how long a decode step takes as a function of batch size, verified tokens and draft steps.

The goodput policy divides expected tokens by this cost (faser-algorithms.md §1.3, §5, §6.2), so the model must
be measured on the hardware it runs on: the SGLang layer profiles it at start-up with real forward passes and then
feeds it the measured time of every step. Two linear models, fitted by least squares with non-negative
coefficients:

    verify_ms(B, tokens)      = v0 + v_req * B + v_tok * tokens     (one TARGET_VERIFY pass over `tokens` rows;
                                                                    a step verified in frontiers pays v0 per pass)
    draft_ms(B, steps, rows)  = d0 + d_req * B [steps > 0] + d_step * steps + d_row * rows

The draft side is the rest of the step: d0 the scheduler's and our host work of every step, d_req * B the
draft-extend that keeps the draft current, paid only by steps that draft (a step where every k_i = 0 skips it,
and the draft catches up when drafting resumes: ``engine/draft_backlog.py``), d_step each draft forward's fixed
cost, d_row each request drafted in it. Drafting is cut per request
(``engine/draft_cut.py``): forward s only runs for requests with k_i >= s + 2, so ``rows`` = sum(max(k_i - 1, 0))
and a request held at k_i = 1 costs no draft row however deep the step goes. Where the cut is not available the
draft runs every request to the step's depth: ``rows`` = B * (steps - 1) (:func:`full_depth_rows`).

Profile samples stay as a prior; online samples live in a sliding window, so the fit follows load and thermal
drift without forgetting the shape the profile established. One-off stalls are dropped by comparing each sample
with what the current fit predicts for its own shape, so a burst's large-batch steps (slow, but as slow as
their shape says) are kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

VERIFY, DRAFT = "verify", "draft"
OUTLIER_FACTOR = 4.0


def _verify_features(batch, tokens) -> np.ndarray:
    batch, tokens = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(tokens, dtype=float))
    return np.stack([np.ones_like(batch), batch, tokens], axis=-1)


def _draft_features(batch, steps, rows) -> np.ndarray:
    batch, steps, rows = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (batch, steps, rows)))
    return np.stack([np.ones_like(batch), batch * (steps > 0), steps, rows], axis=-1)


def full_depth_rows(batch, steps):
    """Draft rows when every request is drafted to the step's depth (forward s makes token s + 2)."""
    return np.asarray(batch) * np.maximum(np.asarray(steps) - 1, 0)


def cut_rows(lengths: np.ndarray) -> int:
    """Draft rows when each request is drafted only as far as its own length needs."""
    return int(np.maximum(np.asarray(lengths) - 1, 0).sum())


def _fit_nonnegative(x: np.ndarray, y: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients (a cost never falls as work grows).

    Terms whose coefficient comes out negative are dropped and the rest refitted, until none is negative.
    Samples above ``OUTLIER_FACTOR`` x what the current fit (``fallback``) predicts for their shape, and above that
    factor x the median, are ignored: one-off stalls (first use of a runtime state, lazy initialisation, a busy
    machine) would otherwise dominate a window of a few hundred steps, while a burst's large batches are slow
    because of their shape and stay.
    """
    keep_rows = y <= OUTLIER_FACTOR * np.maximum(x @ fallback, np.median(y))
    x, y = x[keep_rows], y[keep_rows]
    if len(y) < x.shape[1]:
        return fallback
    active = np.ones(x.shape[1], dtype=bool)
    coef = np.zeros(x.shape[1])
    while active.any():
        sub, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sub >= 0).all():
            coef[active] = sub
            break
        active[np.flatnonzero(active)[sub < 0]] = False
    return coef


@dataclass
class StepCostModel:
    """Linear step costs in milliseconds; see the module docstring for the terms."""

    verify_coef: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.05]))
    draft_coef: np.ndarray = field(default_factory=lambda: np.array([0.2, 0.0, 0.2, 0.0]))
    window: int = 256
    refit_every: int = 32
    draft_cut: bool = False  # the runtime drafts each request only as far as its length (set by the worker)
    frontier_size: int = 0  # draft positions per verify pass (0: one pass per step); each pass pays v0

    def __post_init__(self) -> None:
        self.verify_coef = np.asarray(self.verify_coef, dtype=float)
        self.draft_coef = np.asarray(self.draft_coef, dtype=float)
        self._prior: dict[str, list[tuple[np.ndarray, float]]] = {VERIFY: [], DRAFT: []}
        self._online: dict[str, deque] = {VERIFY: deque(maxlen=self.window), DRAFT: deque(maxlen=self.window)}
        self._since_refit = 0

    # -- queries (vectorised over candidate plans) ------------------------------------------------------
    def verify_ms(self, batch, tokens) -> np.ndarray:
        v0, v_req, v_tok = self.verify_coef
        return v0 + v_req * np.asarray(batch, dtype=float) + v_tok * np.asarray(tokens, dtype=float)

    def draft_ms(self, batch, steps, rows=None) -> np.ndarray:
        """Drafting ``steps`` positions (``rows`` request-forwards in all; default: every request at every step)
        for ``batch`` requests, plus the draft-extend that keeps the draft current."""
        d0, d_req, d_step, d_row = self.draft_coef
        rows = full_depth_rows(batch, steps) if rows is None else rows
        steps = np.asarray(steps, dtype=float)
        return d0 + d_req * np.asarray(batch, dtype=float) * (steps > 0) + d_step * steps + d_row * np.asarray(
            rows, dtype=float)

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

    def step_ms(self, batch, verify_tokens, draft_steps, draft_rows=None) -> np.ndarray:
        extra_passes = self.verify_passes(draft_steps) - 1
        return (self.verify_ms(batch, verify_tokens) + self.verify_coef[0] * extra_passes
                + self.draft_ms(batch, draft_steps, draft_rows))

    # -- measurements ------------------------------------------------------------------------------------
    def add_profile_sample(self, phase: str, batch: int, size: int, ms: float, rows: int | None = None) -> None:
        """A start-up measurement: ``size`` is verified tokens (verify) or draft steps (draft, with the draft
        ``rows`` computed; default: every request at every step)."""
        self._prior[phase].append((self._features(phase, batch, size, rows), float(ms)))

    def record(self, phase: str, batch: int, size: int, ms: float, rows: int | None = None) -> None:
        """An online measurement of a real step; the model is refitted every ``refit_every`` samples."""
        self._online[phase].append((self._features(phase, batch, size, rows), float(ms)))
        self._since_refit += 1
        if self._since_refit >= self.refit_every:
            self.refit()

    def refit(self) -> None:
        self._since_refit = 0
        for phase in (VERIFY, DRAFT):
            samples = self._prior[phase] + list(self._online[phase])
            if not samples:
                continue
            x = np.stack([s[0] for s in samples])
            y = np.array([s[1] for s in samples])
            current = self.verify_coef if phase == VERIFY else self.draft_coef
            fitted = _fit_nonnegative(x, y, current)
            if phase == VERIFY:
                self.verify_coef = fitted
            else:
                self.draft_coef = fitted

    @staticmethod
    def _features(phase: str, batch: int, size: int, rows: int | None = None) -> np.ndarray:
        if phase == VERIFY:
            return _verify_features(batch, size)
        if phase == DRAFT:
            return _draft_features(batch, size, full_depth_rows(batch, size) if rows is None else rows)
        raise ValueError(f"unknown phase {phase!r}")

    def mean_abs_pct_error(self, phase: str) -> float | None:
        """MAPE of the current fit over the online window (the paper reports its profiler's MAPE)."""
        samples = list(self._online[phase])
        if not samples:
            return None
        x = np.stack([s[0] for s in samples])
        y = np.array([s[1] for s in samples])
        coef = self.verify_coef if phase == VERIFY else self.draft_coef
        return float(np.mean(np.abs(x @ coef - y) / np.maximum(y, 1e-9)))
