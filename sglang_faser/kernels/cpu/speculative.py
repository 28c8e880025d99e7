"""EAGLE commit and draft-metadata ops of ``sgl_kernel`` for the CPU engine, in plain PyTorch."""

from __future__ import annotations

import torch


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor, accept_stride: int
) -> None:
    """``bonus_tokens[b] = accept_tokens.flatten()[b * accept_stride + accept_lens[b] - 1]``.

    ``accept_lens`` counts the bonus token, so the last accepted slot of request b is the bonus token.
    ``accept_stride`` is ``accept_index.shape[1]`` (steps + 1), not the number of draft tokens. Mirrors
    ``fill_bonus_tokens`` in ``kernels/ops/speculative/eagle.py:14``; the batch size is
    ``accept_lens.numel()``.
    """
    bs = accept_lens.numel()
    if bs == 0:
        return
    last_accepted = accept_lens.reshape(-1).to(torch.int64) - 1
    flat_index = torch.arange(bs, dtype=torch.int64) * accept_stride + last_accepted
    bonus_tokens.view(-1)[:bs] = accept_tokens.reshape(-1)[flat_index].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor, out_cache_loc: torch.Tensor, accept_out_cache_loc: torch.Tensor
) -> None:
    """Stream-compact the KV slots of accepted tokens.

    Walks ``accept_index.flatten()`` in order and appends ``out_cache_loc[e]`` for every entry ``e != -1``;
    entries of ``accept_out_cache_loc`` past the number accepted are left untouched. Mirrors
    ``fill_accept_out_cache_loc`` in ``kernels/ops/speculative/eagle.py:56``.
    """
    flat = accept_index.reshape(-1).to(torch.int64)
    accepted = flat[flat != -1]
    if accepted.numel():
        accept_out_cache_loc.view(-1)[: accepted.numel()] = out_cache_loc.reshape(-1)[accepted].to(
            accept_out_cache_loc.dtype
        )


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Return a ``[bs * topk, width]`` table giving each draft branch its own ``req_to_token`` row.

    Row ``b * topk + k`` is request b's prefix ``row_b[:seq_lens[b]]`` followed by branch k's draft slots
    ``row_b[seq_lens[b] + k * num_steps : seq_lens[b] + (k + 1) * num_steps]`` (the layout
    ``assign_draft_cache_locs_contiguous`` allocated); later columns are zero. Used by
    ``IntelAMXMultiStepDraftBackend`` (``srt/layers/attention/intel_amx_backend.py:438``), which indexes it
    with ``arange(bs * topk)`` and per-branch ``seq_lens + step + 1``. Same dtype as ``req_to_token``.

    ``width`` is the longest row's end, ``max(seq_lens) + num_steps`` (at most ``pool_len``): the decode
    kernel reads a row up to its sequence length only, and ``pool_len`` (the model's whole context) made the
    table 8-10x wider than any row at the embedded default's prompts (300 us against 53 at 16 requests in
    isolation; the draft phase of a depth-2 step at 16 requests about 5 % shorter).
    """
    bs = req_pool_indices.numel()
    if bs == 0:
        return req_to_token.new_zeros((0, pool_len))
    seq = seq_lens.reshape(-1)[:bs].to(torch.int64)
    longest = int(seq.max())
    width = min(pool_len, longest + num_steps)  # the table's columns
    source = min(pool_len, longest + topk * num_steps)  # the request rows' columns its branches read
    rows = req_to_token[req_pool_indices.reshape(-1).to(torch.int64), :source]
    seq = seq[:, None]
    col = torch.arange(width, dtype=torch.int64)[None, :]
    if topk == 1:  # branch 0's draft slots follow its prefix in place
        table = rows[:, :width]
    else:
        rows = rows.repeat_interleave(topk, dim=0)  # [bs * topk, source]
        seq = seq.repeat_interleave(topk, dim=0)
        branch = torch.arange(topk, dtype=torch.int64).repeat(bs)[:, None]
        in_draft = (col >= seq) & (col < seq + num_steps)
        table = rows.gather(1, torch.where(in_draft, col + branch * num_steps, col).clamp_(max=source - 1))
    return torch.where(col < seq + num_steps, table, torch.zeros((), dtype=table.dtype))


def rotate_input_ids_cpu(
    input_ids: torch.Tensor,
    extend_start_loc: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    topk_index: torch.Tensor,
    select_index: torch.Tensor | None = None,
) -> None:
    """Multi-layer EAGLE's input rotation (``rotate_input_ids_kernel``, ``multi_layer_eagle.py:29``).

    SGLang imports this at module load (``multi_layer_eagle.py:25``), so it must exist; only the multi-layer
    EAGLE worker calls it, and the CPU stand-in does not support that worker, so it raises.
    """
    raise NotImplementedError(
        "rotate_input_ids_cpu: multi-layer EAGLE is not supported on the CPU stand-in for sgl_kernel "
        "(sglang_faser.kernels.cpu); use EAGLE, STANDALONE or NGRAM speculation on CPU"
    )
