"""Frontier planning: how one step's verification is split into chunks and target passes, and who takes part.

A request with length k_i needs k_i + 1 verify rows: the root (its last committed token, whose target output
checks draft 1) and its k_i drafts. SGLang's one-shot verification computes B x (d + 1) rows in one TARGET_VERIFY
pass. FASER verifies only the rows each request needs, in SGLang's ragged layout (``RaggedVerifyLayout``:
per-request ``verify_lens``), and in *frontiers* of ``frontier_size`` draft positions:

* frontier 0 covers rows [0, F + 1) (root + drafts 1..F), frontier f > 0 covers rows [1 + fF, 1 + (f + 1)F);
  frontier size 0 means one frontier over the whole window;
* each frontier is **one ragged pass** over the requests still live in it: request i takes the rows of the
  frontier it still needs (``rows_needed``), so a frontier computes sum_i min(k_i + 1, end) - start rows;
* **early pruning**: once frontier f shows a rejection for request i (the target's prediction at some row differs
  from the next draft token), i's later rows can never be accepted, so i takes part in no later frontier. Its
  correction token is the target's prediction at the rejection row, already computed, exactly as in one-shot
  verification.

Pure NumPy; the SGLang layer (``sglang_faser/engine/verify.py``) executes the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VerifyPass:
    """One ragged target pass: request ``members[m]`` (a batch index) gets rows [offset, offset + widths[m])."""

    frontier: int
    members: np.ndarray
    offset: int
    widths: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.widths.sum())

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(member index, row) of every row of the pass, in the pass's row order (request by request)."""
        member = np.repeat(np.arange(len(self.members)), self.widths)
        starts = np.repeat(np.cumsum(self.widths) - self.widths, self.widths)
        return member, self.offset + np.arange(self.rows) - starts


def frontier_bounds(depth: int, frontier_size: int) -> list[tuple[int, int]]:
    """Row ranges [start, end) of the frontiers of a step that verifies ``depth`` draft positions."""
    total = depth + 1
    if frontier_size <= 0 or frontier_size >= depth:
        return [(0, total)]
    bounds = [(0, frontier_size + 1)]
    while bounds[-1][1] < total:
        start = bounds[-1][1]
        bounds.append((start, min(start + frontier_size, total)))
    return bounds


def rows_needed(lengths: np.ndarray, start: int, end: int) -> np.ndarray:
    """Rows of [start, end) each request still needs (0 once its k_i + 1 rows are all before ``start``)."""
    return np.clip(np.asarray(lengths, dtype=np.int64) + 1 - start, 0, end - start)


def plan_frontier(
    frontier: int, bounds: tuple[int, int], live: np.ndarray, lengths: np.ndarray
) -> VerifyPass | None:
    """The ragged pass that verifies frontier ``frontier`` for the ``live`` requests (None: no rows left)."""
    start, end = bounds
    live = np.asarray(live, dtype=np.int64)
    widths = rows_needed(np.asarray(lengths)[live], start, end)
    keep = widths > 0
    if not keep.any():
        return None
    return VerifyPass(frontier, live[keep], start, widths[keep])


def first_rejection(predictions: np.ndarray, next_tokens: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per request, the first row whose prediction rejects the next draft token, or -1 if none (greedy check).

    ``predictions[i, r]`` is the target's token after row r, ``next_tokens[i, r]`` the draft at row r + 1 and
    ``valid[i, r]`` whether that draft is on request i's chain (r + 1 <= k_i) and was computed.
    """
    reject = (predictions != next_tokens) & valid
    if reject.shape[1] == 0:
        return np.full(reject.shape[0], -1)
    any_reject = reject.any(axis=1)
    return np.where(any_reject, reject.argmax(axis=1), -1)


@dataclass
class FrontierStepStats:
    """What one step's verification did: rows computed, rows pruned, passes run."""

    planned_rows: int = 0  # sum(k_i + 1): rows a ragged one-shot verification would compute
    verified_rows: int = 0  # rows actually computed
    pruned_rows: int = 0  # planned rows skipped because an earlier frontier rejected
    passes: int = 0
    offset_passes: int = 0  # passes starting past row 0 (a later frontier's rows over KV earlier passes wrote)
    frontiers: int = 0


def frontier_of(bounds: list[tuple[int, int]], row: int) -> int:
    """The frontier holding verify row ``row`` (len(bounds) past the last)."""
    for f, (start, end) in enumerate(bounds):
        if start <= row < end:
            return f
    return len(bounds)


def drafted_at(step: int, lengths: np.ndarray, bounds: list[tuple[int, int]] | None = None,
               live_after: list[np.ndarray] | None = None, overlap: bool = True) -> np.ndarray:
    """Who draft forward ``step`` runs for (it turns draft token step + 1 into step + 2).

    Only requests with k_i >= step + 2 need it. With frontiers, a request a finished verification already
    rejected is drafted no further: overlap on, draft chunk f runs beside verify f - 1, so it may use the verdict
    of frontier f - 2; overlap off, verify f - 1 runs before it."""
    members = np.flatnonzero(np.asarray(lengths) >= step + 2)
    if not bounds or not live_after:
        return members
    verdict = frontier_of(bounds, step + 2) - (2 if overlap else 1)
    if verdict >= 0:  # live sets only shrink: the latest verdict up to ``verdict`` holds
        members = np.intersect1d(members, live_after[min(verdict, len(live_after) - 1)])
    return members
