"""EAGLE commit and draft-metadata ops of the CPU sgl_kernel stand-in: hand-worked cases, loop references."""

from __future__ import annotations

import pytest
import torch

from sglang_faser.kernels.cpu.speculative import (
    build_draft_decode_metadata_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    rotate_input_ids_cpu,
)


def test_fill_bonus_tokens_hand_case():
    accept_tokens = torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]])
    accept_lens = torch.tensor([2, 3, 1], dtype=torch.int32)
    bonus = torch.zeros(3, dtype=torch.int32)
    fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus, 3)
    assert bonus.tolist() == [6, 10, 11]


def test_fill_bonus_tokens_matches_loop_reference():
    gen = torch.Generator().manual_seed(0)
    bs, stride = 5, 4
    accept_tokens = torch.randint(0, 100, (bs * stride,), generator=gen)
    accept_lens = torch.randint(1, stride + 1, (bs,), generator=gen, dtype=torch.int32)
    bonus = torch.zeros(bs, dtype=torch.int32)
    fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus, stride)
    ref = [int(accept_tokens[b * stride + int(accept_lens[b]) - 1]) for b in range(bs)]
    assert bonus.tolist() == ref


def test_fill_accept_out_cache_loc_hand_case():
    accept_index = torch.tensor([[0, 2, -1], [4, -1, -1], [6, 7, 8]], dtype=torch.int32)
    out_cache_loc = torch.arange(100, 109)
    dst = torch.full((9,), -7, dtype=torch.int64)
    fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, dst)
    assert dst.tolist() == [100, 102, 104, 106, 107, 108, -7, -7, -7]


def test_fill_accept_out_cache_loc_matches_loop_reference():
    gen = torch.Generator().manual_seed(3)
    accept_index = torch.randint(-1, 12, (4, 3), generator=gen, dtype=torch.int32)
    out_cache_loc = torch.randint(0, 1000, (12,), generator=gen)
    dst = torch.zeros(12, dtype=torch.int64)
    ref = dst.clone()
    flat = accept_index.flatten().tolist()
    for pos, e in enumerate(flat):
        if e != -1:
            ref[sum(1 for x in flat[:pos] if x != -1)] = out_cache_loc[e]
    fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, dst)
    assert torch.equal(dst, ref)


def test_build_draft_decode_metadata_hand_case():
    pool_len = 10
    req_to_token = torch.arange(30, dtype=torch.int32).view(3, pool_len)
    req_pool_indices = torch.tensor([2, 0])
    seq_lens = torch.tensor([3, 1])
    table = build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, 2, 2, pool_len)
    # as wide as the longest row (3 + 2 drafts), not the pool's context
    assert table.dtype == torch.int32 and table.shape == (4, 5)
    # Row b*topk + k = prefix row_b[:s] then row_b[s + 2k : s + 2k + 2]; the rest is undefined (zero here).
    expected_defined = [
        [20, 21, 22, 23, 24],
        [20, 21, 22, 25, 26],
        [0, 1, 2],
        [0, 3, 4],
    ]
    for r, values in enumerate(expected_defined):
        assert table[r, : len(values)].tolist() == values


@pytest.mark.parametrize("topk,num_steps,seq", [(3, 2, [7, 0, 17]), (1, 4, [7, 0, 17]), (1, 3, [21, 2, 5]),
                                                (2, 3, [20, 4, 9])])
def test_build_draft_decode_metadata_matches_loop_reference(topk, num_steps, seq):
    """Every defined column against the loop, with rows whose drafts reach the pool's end (clamped there)."""
    gen = torch.Generator().manual_seed(5)
    pool_len = 24
    req_to_token = torch.randperm(5 * pool_len, generator=gen).to(torch.int32).view(5, pool_len)
    req_pool_indices = torch.tensor([4, 1, 2])
    seq_lens = torch.tensor(seq)
    table = build_draft_decode_metadata_cpu(
        req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len
    )
    for b in range(3):
        row, s = req_to_token[int(req_pool_indices[b])], int(seq_lens[b])
        for k in range(topk):
            ref = torch.cat([row[:s], row[s + k * num_steps : s + (k + 1) * num_steps]])[:pool_len]
            assert torch.equal(table[b * topk + k, : len(ref)], ref)
            assert not table[b * topk + k, s + num_steps:].any()
    assert table.shape[1] == min(pool_len, max(seq) + num_steps)


def test_rotate_input_ids_raises_clearly():
    with pytest.raises(NotImplementedError, match="multi-layer EAGLE"):
        rotate_input_ids_cpu(
            torch.zeros(4, dtype=torch.int64), torch.tensor([0]), torch.tensor([4]), torch.tensor([1])
        )
