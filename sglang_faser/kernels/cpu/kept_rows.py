"""Each request's K/V rows, gathered once and kept across forward passes.

A CPU forward used to gather every request's whole context from the paged cache in every layer
(``index_select`` of B x L scattered rows for K and for V) although a decode step adds one row a request: at
32 requests x 250 keys that gather, and the attention over its fresh copy, was most of a loaded step
(``benchmarks/cpu_attention.py``). Here each layer keeps the padded float32 rows ``[B, L, H_kv, D]`` of its last
batch, in batch order, and gathers only the cells whose slot changed or was written since; a request that moved
up in the batch (one before it finished) has its row copied along.

Why a kept cell is right: cell ``(b, p)`` holds slot ``slots[b, p]``'s row as it was when gathered. Every write
this module is told of (``writing``: SGLang's ``set_kv_buffer``, hooked in ``engine/touchpoints.py``, and the
decode op's own write) clears the cells that hold a written slot; any other write to a cache shows in the
tensors' version counters and clears the layer's cells. ``SGLANG_FASER_CHECK_KEPT_ROWS=1`` keeps rows at every
size and compares them with a fresh gather on every call (the test suite runs so).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

MIN_CELLS = 2048  # below this many B x L cells a plain gather costs less than the bookkeeping
MAX_BYTES = 2 << 30  # all layers' kept rows together; a layer that would pass it gathers as before
_CHECK = os.environ.get("SGLANG_FASER_CHECK_KEPT_ROWS", "") not in ("", "0")


@dataclass
class _Kept:
    """One layer's kept rows: ``k``/``v`` ``[B_cap, L_cap, H_kv, D]`` float32, the slot behind each cell (-1:
    nothing kept) and the request (table row) behind each batch row."""

    caches: tuple  # the layer's K and V caches, held so that their addresses name this layer while it lives
    k: torch.Tensor
    v: torch.Tensor
    slots: torch.Tensor
    versions: tuple[int, int]  # the caches' version counters after the last write this module heard of
    scales: tuple[float, float]
    bump: bool = False  # the last write was a torch op's, whose dispatcher counts it once more after return
    pools: list[int] = field(default_factory=list)
    width: int = 0  # columns that may hold cells


_kept: dict[int, _Kept] = {}
counts = {"served": 0, "gathered": 0}  # cells returned and cells gathered for them, all layers (diagnostics)


def _versions(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int]:
    return k_cache._version, v_cache._version


def _unheard_writes(kept: _Kept, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether the caches were written since the last write this module heard of."""
    now = _versions(k_cache, v_cache)
    return not all(n == was or (kept.bump and n == was + 1) for n, was in zip(now, kept.versions))


@contextmanager
def writing(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, op: bool = False):
    """Around a write of the cache rows ``slots``: afterwards no kept cell holds one of them (``op``: the write
    is a registered torch op's own, so the dispatcher counts one more version when the op returns)."""
    kept = _kept.get(k_cache.data_ptr())
    unheard = kept is not None and _unheard_writes(kept, k_cache, v_cache)
    yield
    if kept is None:
        return
    if unheard:
        kept.slots.fill_(-1)
    elif slots.numel() and kept.pools:
        cells = kept.slots[: len(kept.pools), : kept.width]
        cells.masked_fill_(torch.isin(cells, slots.reshape(-1).to(torch.int64)), -1)
    kept.versions, kept.bump = _versions(k_cache, v_cache), op


def _kept_for(k_cache, v_cache, rows: int, cols: int, key_scale: float, value_scale: float) -> _Kept | None:
    """The layer's kept rows with room for ``rows x cols`` cells (grown, and emptied, when short), or None
    where they would pass ``MAX_BYTES``."""
    key = k_cache.data_ptr()
    kept = _kept.get(key)
    scales = (key_scale, value_scale)
    if kept is not None and kept.k.shape[0] >= rows and kept.k.shape[1] >= cols and kept.scales == scales:
        return kept
    shape = (max(rows, kept.k.shape[0] if kept else 0), -(-cols // 256) * 256, *k_cache.shape[1:])
    bytes_now = sum(2 * other.k.numel() * 4 for other_key, other in _kept.items() if other_key != key)
    if bytes_now + 2 * torch.Size(shape).numel() * 4 > MAX_BYTES:
        return None
    _kept[key] = kept = _Kept(
        caches=(k_cache, v_cache), k=torch.zeros(shape), v=torch.zeros(shape[:2] + v_cache.shape[1:]),
        slots=torch.full(shape[:2], -1, dtype=torch.int64), versions=_versions(k_cache, v_cache), scales=scales)
    return kept


def _follow_requests(kept: _Kept, pools: list[int]) -> None:
    """Move each request's kept row to its place in the new batch order where requests left from the middle
    (the rest move up; newcomers join at the end). Only an optimisation: a cell is used where its slot matches,
    whichever request's row it sits in (an EAGLE draft's decode steps name their requests by another table)."""
    old = kept.pools
    if pools == old[: len(pools)]:
        return
    where = {pool: row for row, pool in enumerate(old)}
    src = [where.get(pool, -1) for pool in pools]
    if len(where) != len(old) or any(0 <= s < b for b, s in enumerate(src)):
        return
    width = kept.width
    for b, s in enumerate(src):
        if s > b:
            kept.k[b, :width].copy_(kept.k[s, :width])
            kept.v[b, :width].copy_(kept.v[s, :width])
            kept.slots[b, :width].copy_(kept.slots[s, :width])


def padded_rows(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, present: torch.Tensor,
                pools: list[int], key_scale: float, value_scale: float
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Float32 ``[B, L, H_kv, D]`` K and V of the cache rows ``slots [B, L]`` (cells outside ``present`` hold
    any finite rows: the caller masks them), from the layer's kept rows, or None where the batch is too small to
    pay (the caller gathers)."""
    rows, cols = slots.shape
    if rows * cols < MIN_CELLS and not _CHECK:
        return None
    kept = _kept_for(k_cache, v_cache, rows, cols, key_scale, value_scale)
    if kept is None:
        return None
    if _unheard_writes(kept, k_cache, v_cache):
        kept.slots.fill_(-1)
        kept.versions, kept.bump = _versions(k_cache, v_cache), False
    _follow_requests(kept, pools)
    wanted = torch.where(present, slots, -1)
    held = kept.slots[:rows, :cols]
    stale = torch.nonzero(held != wanted)
    if len(stale):
        b, p = stale[:, 0], stale[:, 1]
        fresh = wanted[b, p]
        got = fresh >= 0
        b, p, fresh = b[got], p[got], fresh[got]
        counts["gathered"] += len(fresh)
        k_new = k_cache.index_select(0, fresh).to(torch.float32)
        v_new = v_cache.index_select(0, fresh).to(torch.float32)
        kept.k[b, p] = k_new * key_scale if key_scale != 1.0 else k_new
        kept.v[b, p] = v_new * value_scale if value_scale != 1.0 else v_new
        held.copy_(wanted)
    kept.slots[:rows, cols : kept.width] = -1
    kept.slots[rows : len(kept.pools)] = -1
    kept.pools, kept.width = list(pools), cols
    counts["served"] += rows * cols
    k, v = kept.k[:rows, :cols], kept.v[:rows, :cols]
    if _CHECK:
        _check(k, v, k_cache, v_cache, slots, present, key_scale, value_scale)
    return k, v


def _check(k, v, k_cache, v_cache, slots, present, key_scale, value_scale) -> None:
    """Raise unless the kept cells equal a fresh gather."""
    flat = slots[present]
    for name, got, cache, scale in (("K", k, k_cache, key_scale), ("V", v, v_cache, value_scale)):
        want = cache.index_select(0, flat).to(torch.float32) * scale
        if not torch.equal(got[present], want):
            raise AssertionError(f"kept {name} rows differ from the cache at {int((got[present] != want).sum())} "
                                 "values")
