"""Frontier planning: how one step's verification is split into chunks and target passes, and who takes part.

A request with length k_i needs k_i + 1 verify rows: the root (its last committed token, whose target output
checks draft 1) and its k_i drafts. One-shot verification computes all of them in one TARGET_VERIFY pass over
B x (d + 1) rows. FASER's Pipeline Overlapper (faser-algorithms.md) instead verifies in *frontiers* of
``frontier_size`` draft positions:

* frontier 0 covers rows [0, F + 1) (root + drafts 1..F), frontier f > 0 covers rows [1 + fF, 1 + (f + 1)F);
  frontier size 0 means one frontier over the whole window;
* in a pipeline, frontier f is verified while the draft produces frontier f + 1 (``pipeline_schedule``);
* **early pruning**: once frontier f shows a rejection for request i (the target's prediction at some row differs
  from the next draft token), i's later rows can never be accepted, so i takes part in no later frontier. Its
  correction token is the target's prediction at the rejection row, already computed, exactly as in one-shot
  verification. Rows past k_i are never computed at all (the **ragged** layout: sum(k_i + 1) rows, not B(d+1)).

Inside a frontier the live requests can need different row counts (k_i cuts some short). A target pass must be
uniform (every request in it gets the same number of rows), so requests are grouped into passes; each extra pass
costs a fixed overhead while padding a request costs rows. ``group_passes`` picks the partition of the sorted
widths into contiguous groups with the least modelled cost (a tiny dynamic programme), using the verify-cost
model ``pass_ms(requests, rows)``.

Pure NumPy; the SGLang layer (``sglang_faser/engine/frontier_verify.py``) executes the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

PassCost = Callable[[int, int], float]  # (requests in the pass, rows in the pass) -> modelled ms


@dataclass(frozen=True)
class VerifyPass:
    """One target pass: requests ``members`` (batch indices) each get rows [offset, offset + width)."""

    frontier: int
    members: np.ndarray
    offset: int
    width: int

    @property
    def rows(self) -> int:
        return len(self.members) * self.width


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


def group_passes(
    members: np.ndarray, widths: np.ndarray, pass_ms: PassCost | None = None
) -> list[tuple[np.ndarray, int]]:
    """Partition requests into uniform passes: [(members, width)], widths padded up to the group's largest.

    Without a cost model every distinct width gets its own pass (fewest rows). With one, contiguous runs of the
    sorted distinct widths are merged when a saved pass is worth more than the padded rows.
    """
    members, widths = np.asarray(members), np.asarray(widths)
    keep = widths > 0
    members, widths = members[keep], widths[keep]
    if len(members) == 0:
        return []
    distinct = np.unique(widths)
    if pass_ms is None or len(distinct) == 1:
        return [(members[widths == w], int(w)) for w in distinct]
    counts = np.array([(widths == w).sum() for w in distinct])
    n = len(distinct)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    cut = np.zeros(n + 1, dtype=np.int64)
    for end in range(1, n + 1):  # best[end]: cheapest cover of distinct[:end]; last group is distinct[j:end]
        for j in range(end):
            requests = int(counts[j:end].sum())
            cost = best[j] + pass_ms(requests, requests * int(distinct[end - 1]))
            if cost < best[end]:
                best[end], cut[end] = cost, j
    groups, end = [], n
    while end > 0:
        j = cut[end]
        width = int(distinct[end - 1])
        in_group = (widths >= distinct[j]) & (widths <= distinct[end - 1])
        groups.append((members[in_group], width))
        end = j
    return groups[::-1]


def plan_frontier(
    frontier: int,
    bounds: tuple[int, int],
    live: np.ndarray,
    lengths: np.ndarray,
    pass_ms: PassCost | None = None,
) -> list[VerifyPass]:
    """The passes that verify frontier ``frontier`` for the ``live`` requests (batch indices)."""
    start, end = bounds
    live = np.asarray(live, dtype=np.int64)
    widths = rows_needed(np.asarray(lengths)[live], start, end)
    return [VerifyPass(frontier, group, start, width) for group, width in group_passes(live, widths, pass_ms)]


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


@dataclass(frozen=True)
class PipelineEvent:
    """One box of the step's pipeline: ``phase`` ("draft" or "verify") of frontier ``frontier``, at slot ``slot``.

    Events with the same slot run concurrently when overlap is on (verify f beside draft f + 1); with overlap off
    every event has its own slot.
    """

    slot: int
    phase: str
    frontier: int


def pipeline_schedule(frontiers: int, overlap: bool) -> list[PipelineEvent]:
    """The order of a step's draft and verify chunks: draft 0, then verify f alongside draft f + 1, ..."""
    events = [PipelineEvent(0, "draft", 0)]
    slot = 0
    for f in range(frontiers):
        slot += 1
        events.append(PipelineEvent(slot, "verify", f))
        if f + 1 < frontiers:
            if not overlap:
                slot += 1
            events.append(PipelineEvent(slot, "draft", f + 1))
    return events


@dataclass
class FrontierStepStats:
    """What one step's verification did: rows computed, rows pruned, passes run."""

    planned_rows: int = 0  # sum(k_i + 1): rows a ragged one-shot verification would compute
    verified_rows: int = 0  # rows actually computed (padding included)
    pruned_rows: int = 0  # planned rows skipped because an earlier frontier rejected
    passes: int = 0
    frontiers: int = 0
