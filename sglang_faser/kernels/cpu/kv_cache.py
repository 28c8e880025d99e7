"""KV-slot bookkeeping ops of ``sgl_kernel`` for the CPU engine, in plain PyTorch.

The spec is the Triton kernels shipped in the SGLang 0.5.23 wheel; each function cites the one it mirrors.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch


def _segment_coords(
    req_pool_indices: torch.Tensor, start_offset: torch.Tensor, end_offset: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Row and column of every ``req_to_token`` cell in the segments ``[start_offset[b], end_offset[b])``.

    Cells come out in batch order and, within a request, in column order; that is the order of the flat
    ``out_cache_loc`` the Triton kernels read or write (request b starts at the sum of earlier lengths).
    Computed in numpy: these are a few dozen integers every decode step, where each torch op's dispatch (and
    its thread-pool wake-up inside a busy server) costs more than the arithmetic.
    """
    start = start_offset.reshape(-1).numpy().astype(np.int64)
    lengths = end_offset.reshape(-1).numpy().astype(np.int64) - start
    rows = np.repeat(req_pool_indices.reshape(-1)[: len(lengths)].numpy().astype(np.int64), lengths)
    cols = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths - start, lengths)
    return torch.from_numpy(rows), torch.from_numpy(cols), len(cols)


FEW_SEGMENTS = 4  # up to this many requests a slice per request beats the vectorised coordinates


def _few_segments(
    req_pool_indices: torch.Tensor, start_offset: torch.Tensor, end_offset: torch.Tensor
) -> list[tuple[int, int, int]] | None:
    """``(row, start, end)`` per request where the batch is small (a decode step at batch 1 writes one or a few
    slots a request: three host lists and a slice each cost a third of ``_segment_coords``' numpy work), else
    None."""
    starts = start_offset.reshape(-1)
    if starts.numel() > FEW_SEGMENTS:
        return None
    rows = req_pool_indices.reshape(-1)[: starts.numel()].tolist()
    return list(zip(rows, starts.tolist(), end_offset.reshape(-1).tolist()))


def _unit_segments(
    req_pool_indices: torch.Tensor, start_offset: torch.Tensor, end_offset: torch.Tensor
) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, columns) of the cells where no segment holds more than one (a speculative decode step's allocation:
    each request's next slot, or none), else None: one indexed write instead of ``_segment_coords``' numpy work
    (which cost a CPU step of 8 requests about 0.1 ms)."""
    start = start_offset.reshape(-1).numpy()
    lengths = end_offset.reshape(-1).numpy() - start
    if lengths.size == 0 or lengths.max() > 1:
        return None
    rows = req_pool_indices.reshape(-1)[: lengths.size].numpy()
    if lengths.min() == 1:
        return rows, start
    keep = np.flatnonzero(lengths)
    return rows[keep], start[keep]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Scatter newly allocated KV slots into the request-to-token table.

    ``req_to_token[req_pool_indices[b], start_offset[b]:end_offset[b]] = out_cache_loc[off_b : off_b + n_b]``.
    Mirrors ``assign_req_to_token_pool`` in ``srt/mem_cache/allocation.py:692``; ``pool_len`` is the row
    stride the Triton kernel needs and is implied by ``req_to_token`` here.
    """
    del pool_len
    few = _few_segments(req_pool_indices, start_offset, end_offset)
    if few is not None:
        flat, at = out_cache_loc.reshape(-1), 0
        for row, start, end in few:
            if end > start:
                req_to_token[row, start:end] = flat[at : at + end - start]
                at += end - start
        return
    unit = _unit_segments(req_pool_indices, start_offset, end_offset)
    if unit is not None:  # numpy's indexed write: 6 us at 64 requests against 17 us for torch's index_put (warm)
        rows, cols = unit
        req_to_token.numpy()[rows, cols] = out_cache_loc.reshape(-1)[: rows.size].numpy()
        return
    rows, cols, total = _segment_coords(req_pool_indices, start_offset, end_offset)
    if total:
        req_to_token[rows, cols] = out_cache_loc.reshape(-1)[:total].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Gather each request's table segment into the flat ``out_cache_loc`` (inverse of the op above).

    Mirrors ``assign_extend_cache_locs`` in ``kernels/ops/speculative/cache_locs.py:500`` (CPU call sites at
    ``cache_locs.py:740`` and ``:763``; the second passes an int32 window table and an int64 output).
    """
    del pool_len
    few = _few_segments(req_pool_indices, start_offset, end_offset)
    if few is not None:
        flat, at = out_cache_loc.view(-1), 0
        for row, start, end in few:
            if end > start:
                flat[at : at + end - start] = req_to_token[row, start:end]
                at += end - start
        return
    rows, cols, total = _segment_coords(req_pool_indices, start_offset, end_offset)
    if total:
        out_cache_loc.view(-1)[:total] = req_to_token[rows, cols].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """Copy each request's ``topk * num_steps`` draft slots from ``seq_lens[b]`` on into ``out_cache_loc``.

    Mirrors ``assign_draft_cache_locs_contiguous`` in ``kernels/ops/speculative/cache_locs.py:43``. The CPU
    caller (``cache_locs.py:97``) asserts that no positions are requested, so none are written.
    """
    del pool_len
    n = topk * num_steps
    start = seq_lens.to(torch.int64).reshape(-1)
    assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start, start + n, out_cache_loc, 0)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Move KV rows ``src_loc[i] -> tgt_loc[i]`` in every buffer given by raw base address.

    ``data_ptrs[k]`` is the base address of buffer k (every layer's K and V, plus scale buffers when present)
    and ``strides[k]`` the byte size of one token row. Mirrors ``copy_all_layer_kv_cache_tiled`` in
    ``kernels/ops/kvcache/cache_move.py:146``: that kernel loads every source row before it stores any target
    row, so this gathers all sources first too (overlapping source and target sets are safe).
    """
    n = tgt_loc.numel()
    if n == 0:
        return
    tgt = tgt_loc.reshape(-1).to(torch.int64)
    src = src_loc.reshape(-1)[:n].to(torch.int64)
    num_rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for base, row_bytes in zip(data_ptrs.reshape(-1).tolist(), strides.reshape(-1).tolist()):
        raw = (ctypes.c_uint8 * (num_rows * int(row_bytes))).from_address(int(base))
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(num_rows, int(row_bytes))
        rows[tgt] = rows[src]  # advanced indexing on the right makes a copy: gather, then scatter
