"""The KV-slot ops of the CPU sgl_kernel stand-in: hand-worked cases plus a plain loop reference."""

from __future__ import annotations

import pytest
import torch

from sglang_faser.kernels.cpu import kv_cache
from sglang_faser.kernels.cpu.kv_cache import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    copy_all_layer_kv_cache_cpu,
)


def _ref_segments(req_pool_indices, start, end):
    """(row, col) of every table cell the ops touch, in flat out_cache_loc order."""
    cells = []
    for b in range(len(req_pool_indices)):
        for col in range(int(start[b]), int(end[b])):
            cells.append((int(req_pool_indices[b]), col))
    return cells


def test_assign_req_to_token_pool_hand_case():
    req_to_token = torch.zeros(4, 8, dtype=torch.int32)
    req_pool_indices = torch.tensor([2, 0])
    start, end = torch.tensor([1, 3], dtype=torch.int32), torch.tensor([3, 6], dtype=torch.int32)
    out_cache_loc = torch.tensor([10, 11, 20, 21, 22])
    assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start, end, out_cache_loc, 8)
    expected = torch.tensor(
        [
            [0, 0, 0, 20, 21, 22, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 0],
            [0, 10, 11, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 0],
        ],
        dtype=torch.int32,
    )
    assert torch.equal(req_to_token, expected)


@pytest.fixture(params=["slices", "vectorised"])
def segment_path(request, monkeypatch):
    """Both ways the ops walk their segments: a slice per request (small batches) and numpy coordinates."""
    if request.param == "vectorised":
        monkeypatch.setattr(kv_cache, "FEW_SEGMENTS", 0)
    return request.param


def test_assign_req_to_token_pool_matches_loop_reference(segment_path):
    gen = torch.Generator().manual_seed(0)
    req_to_token = torch.randint(0, 1000, (6, 16), generator=gen, dtype=torch.int32)
    req_pool_indices = torch.tensor([5, 1, 3, 0])
    start = torch.tensor([0, 4, 7, 15])
    end = torch.tensor([3, 4, 12, 16])  # includes an empty segment
    out_cache_loc = torch.arange(500, 500 + int((end - start).sum()))
    expected = req_to_token.clone()
    for i, (row, col) in enumerate(_ref_segments(req_pool_indices, start, end)):
        expected[row, col] = int(out_cache_loc[i])
    assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start, end, out_cache_loc, 16)
    assert torch.equal(req_to_token, expected)


@pytest.mark.parametrize("lengths", [[1] * 9, [1, 0, 1, 1, 0, 1, 1, 1, 0]])
def test_assign_req_to_token_pool_one_slot_a_request_matches_loop_reference(lengths):
    """A speculative decode step's allocation (each request's next slot, or none), past the small-batch slices:
    the single indexed write, with int32 offsets as SGLang passes them."""
    gen = torch.Generator().manual_seed(1)
    req_to_token = torch.randint(0, 1000, (12, 32), generator=gen, dtype=torch.int32)
    req_pool_indices = torch.tensor([11, 2, 7, 0, 5, 9, 1, 3, 4])
    start = torch.randint(0, 31, (9,), generator=gen, dtype=torch.int32)
    end = start + torch.tensor(lengths, dtype=torch.int32)
    out_cache_loc = torch.arange(700, 700 + sum(lengths) + 3)  # longer than needed, as the allocator's may be
    expected = req_to_token.clone()
    for i, (row, col) in enumerate(_ref_segments(req_pool_indices, start, end)):
        expected[row, col] = int(out_cache_loc[i])
    assert kv_cache._unit_segments(req_pool_indices, start, end) is not None
    assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start, end, out_cache_loc, 32)
    assert torch.equal(req_to_token, expected)


def test_assign_extend_cache_locs_hand_case():
    req_to_token = torch.arange(32, dtype=torch.int32).view(4, 8)
    out = torch.full((5,), -1, dtype=torch.int64)
    assign_extend_cache_locs_cpu(
        torch.tensor([2, 0]), req_to_token, torch.tensor([1, 3]), torch.tensor([3, 6]), out, 8
    )
    assert torch.equal(out, torch.tensor([17, 18, 3, 4, 5]))


def test_assign_extend_cache_locs_matches_loop_reference_int32_window(segment_path):
    # fill_front_out_cache_loc_func (cache_locs.py:763) passes an int32 window table and int64 output.
    window = torch.tensor([[7, 8, 9, 10], [11, 12, 13, 14], [15, 16, 17, 18]], dtype=torch.int32)
    rows = torch.arange(3)
    starts = torch.zeros(3, dtype=torch.int32)
    num_front = torch.tensor([2, 4, 1], dtype=torch.int32)
    out = torch.zeros(12, dtype=torch.int64)
    assign_extend_cache_locs_cpu(rows, window, starts, num_front, out, 4)
    ref = [int(window[r, c]) for r, c in _ref_segments(rows, starts, num_front)]
    assert out[: len(ref)].tolist() == ref == [7, 8, 11, 12, 13, 14, 15]
    assert out[len(ref) :].tolist() == [0] * (12 - len(ref))


def test_assign_draft_cache_locs_contiguous_hand_case_and_reference():
    req_to_token = torch.arange(40, dtype=torch.int32).view(4, 10)
    req_pool_indices = torch.tensor([3, 1])
    seq_lens = torch.tensor([2, 5])
    topk, num_steps = 2, 2
    out = torch.full((8,), -1, dtype=torch.int64)
    assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out, 10, topk, num_steps)
    assert out.tolist() == [32, 33, 34, 35, 15, 16, 17, 18]
    ref = []
    for b in range(2):
        row = req_to_token[int(req_pool_indices[b])]
        ref += row[int(seq_lens[b]) : int(seq_lens[b]) + topk * num_steps].tolist()
    assert out.tolist() == ref


def _kv_buffers():
    gen = torch.Generator().manual_seed(1)
    k = torch.randn(6, 2, 3, generator=gen)  # float32, 24-byte rows
    v = torch.randn(6, 4, generator=gen).to(torch.bfloat16)  # 8-byte rows
    return [k, v]


def _ptrs_and_strides(buffers):
    data_ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in buffers])
    return data_ptrs, strides


def test_copy_all_layer_kv_cache_hand_case_overlapping_rows():
    buffers = _kv_buffers()
    before = [b.clone() for b in buffers]
    data_ptrs, strides = _ptrs_and_strides(buffers)
    # Row 1 is both a source and a target: every source is read before any target is written.
    copy_all_layer_kv_cache_cpu(data_ptrs, strides, torch.tensor([1, 2]), torch.tensor([0, 1]))
    for now, old in zip(buffers, before):
        assert torch.equal(now[1], old[0])
        assert torch.equal(now[2], old[1])
        assert torch.equal(now[0], old[0])
        assert torch.equal(now[3:], old[3:])


def test_copy_all_layer_kv_cache_matches_loop_reference():
    buffers = _kv_buffers()
    expected = [b.clone() for b in buffers]
    tgt, src = torch.tensor([5, 0, 3]), torch.tensor([1, 4, 0])
    for buf in expected:
        gathered = [buf[int(s)].clone() for s in src]
        for t, row in zip(tgt, gathered):
            buf[int(t)] = row
    data_ptrs, strides = _ptrs_and_strides(buffers)
    copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt, src)
    for now, exp in zip(buffers, expected):
        assert torch.equal(now, exp)


def test_copy_all_layer_kv_cache_empty_is_noop():
    buffers = _kv_buffers()
    before = [b.clone() for b in buffers]
    data_ptrs, strides = _ptrs_and_strides(buffers)
    empty = torch.zeros(0, dtype=torch.int64)
    copy_all_layer_kv_cache_cpu(data_ptrs, strides, empty, empty)
    assert all(torch.equal(a, b) for a, b in zip(buffers, before))
