"""The two intel_amx attention ops (``torch.ops.sgl_kernel.{decode,extend}_attention_cpu``) in plain PyTorch.

Per request, gather the K/V rows named by ``req_to_token`` in float32, then softmax(Q K^T * sm_scale) V with GQA,
optional logit cap and the verify masks. Decodes and short extends (verify, draft-extend) run every request in one
padded pass through PyTorch's SDPA; which keys and rows each request reads and sees (the layout) is built by a
forward pass's first layer and reused by the others, since on CPU with small models these small ops, not the
arithmetic, are the cost (``benchmarks/cpu_attention.py``: a 12-layer verify pass of 16 requests x 6 rows and a
decode each take 0.36-0.38x the time they took when every layer rebuilt them). Prefill extends loop per request,
each through SDPA too.
The caller is ``srt/layers/attention/intel_amx_backend.py`` (``forward_extend`` at :230, call at :290;
``forward_decode`` at :316, call at :383), which passes every argument positionally. Sliding windows, attention
sinks, cross-attention and encoder lengths are not implemented and raise, so misuse is loud rather than silently
wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_NO_MASK, _CAUSAL, _QLEN_ONLY, _FULL = "none", "causal", "qlen_only", "full"


def _reject_unsupported(
    op: str,
    is_cross_attn: bool,
    sliding_window_size: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
) -> None:
    """Raise for the features the Llama-only stand-in does not implement (the backend passes window + 1)."""
    if is_cross_attn:
        raise NotImplementedError(f"{op}: cross-attention is not supported by the CPU stand-in")
    if sliding_window_size > 0:
        raise NotImplementedError(f"{op}: sliding-window attention is not supported by the CPU stand-in")
    if encoder_lens is not None:
        raise NotImplementedError(f"{op}: encoder lengths (encoder-decoder models) are not supported")
    if sinks is not None:
        raise NotImplementedError(f"{op}: attention sinks are not supported by the CPU stand-in")


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    visible: torch.Tensor | None,
    sm_scale: float,
    logit_cap: float,
) -> torch.Tensor:
    """softmax(q k^T) v for ``q [M, H, D]``, ``k [H, L, D]``, ``v [H, L, Dv]``; ``visible [M, L]`` or None.

    Returns float32 ``[M, H, Dv]``; a query row that sees no key gets zeros instead of NaN.
    """
    scores = torch.einsum("mhd,hld->hml", q.to(torch.float32), k) * sm_scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if visible is not None:
        scores = scores.masked_fill(~visible[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("hml,hld->mhd", probs, v)


def _cache_rows(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, key_scale: float,
                value_scale: float, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """K and V rows ``slots`` (flat) of the caches as scaled float32 ``[N, H_kv, D]``, and the query heads per KV
    head (index_select: several times faster than ``k_cache[slots]`` on CPU)."""
    k = k_cache.index_select(0, slots).to(torch.float32)
    v = v_cache.index_select(0, slots).to(torch.float32)
    if key_scale != 1.0:
        k = k * key_scale
    if value_scale != 1.0:
        v = v * value_scale
    group = num_heads // k.shape[1]
    if group * k.shape[1] != num_heads:
        raise ValueError(f"query heads {num_heads} are not a multiple of KV heads {k.shape[1]}")
    return k, v, group


def _attend_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, key_scale: float,
                value_scale: float, visible: torch.Tensor | None, causal: bool, sm_scale: float) -> torch.Tensor:
    """One request's prefill rows ``q [M, H, D]`` over the cache rows ``slots`` (``visible [M, L]``, or None:
    every key, or with ``causal`` SDPA's own causal mask, its fused kernel: a prefill without prefix), through
    PyTorch's SDPA: float32 ``[M, H, Dv]``, a row that sees no key gets zeros. The padded batch pass is for short
    extends; a prefill's per-request einsum and softmax over float32 copies of the scores took 70 % of a draft
    prefill's time on the embedded pair."""
    k, v, group = _cache_rows(k_cache, v_cache, slots, key_scale, value_scale, q.shape[1])
    out = torch.nn.functional.scaled_dot_product_attention(
        q.to(torch.float32).transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=visible,
        is_causal=causal, scale=sm_scale, enable_gqa=group > 1).transpose(0, 1)
    if visible is not None:
        blind = ~visible.any(dim=-1)
        if bool(blind.any()):
            out = out.masked_fill(blind[:, None, None], 0.0)
    return out


@dataclass(frozen=True)
class _Layout:
    """Which keys each padded query row reads and sees, and where the rows come from and go: the same for every
    layer of one forward pass, so it is built once and reused (rebuilt in every layer it was a third of the
    attention's time in a CPU verify pass)."""

    slots: torch.Tensor  # [B, L] KV-cache rows of each request's first L keys (0 where past its length)
    seen: torch.Tensor  # [B, 1, E|1, L] bool: key visible to the query row (an SDPA mask, heads broadcast)
    blind: torch.Tensor | None  # [B, E] rows that see no key (their output is zeros), or None when none
    rows: torch.Tensor | None = None  # [B * E] the query row behind each padded row (None: row b is request b's)
    real: torch.Tensor | None = None  # [R] the padded rows that are real ones (None: all are)
    dest: torch.Tensor | None = None  # [R] where each real row's output goes


_memo: list = [None, None, set()]  # the last layout built: [its key, the _Layout, the layers' KV caches it served]


def _layout(req_to_token, key: tuple, layer_cache: torch.Tensor, build) -> _Layout:
    """``build()``'s layout for the inputs ``key`` names, reused while the calls are one forward pass's: the same
    inputs (with the table's version), each from another layer (``layer_cache``: the layer's KV cache). A layer
    seen again starts a new pass, so a layout never outlives the pass it was built for (a table written for a new
    request, or a freed one's memory reused with the same numbers, cannot be read through an old layout)."""
    key = (*key, req_to_token.data_ptr(), req_to_token._version)
    layer = layer_cache.data_ptr()
    if _memo[0] == key and layer not in _memo[2]:
        _memo[2].add(layer)
        return _memo[1]
    layout = build()
    _memo[:] = [key, layout, {layer}]
    return layout


def _keys(req_to_token, pools: torch.Tensor, seq_lens: torch.Tensor, mask: torch.Tensor | None,
          **rows) -> _Layout:
    """The layout of requests ``pools`` with ``seq_lens`` keys; ``mask`` [B, E, L] (None: every key is seen)."""
    longest = int(seq_lens.max())
    present = torch.arange(longest)[None, :] < seq_lens[:, None]  # [B, L]
    slots = torch.where(present, req_to_token[pools, :longest].to(torch.int64), 0)
    seen = present[:, None, :] if mask is None else mask & present[:, None, :]  # [B, E|1, L]
    blind = ~seen.any(dim=-1)
    return _Layout(slots, seen[:, None], blind if bool(blind.any()) else None, **rows)


def _attend_padded(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    key_scale: float,
    value_scale: float,
    layout: _Layout,
    sm_scale: float,
    logit_cap: float,
) -> torch.Tensor:
    """Every request's query rows at once: ``q [B, E, H, D]`` (rows padded to the most any request has) over the
    keys ``layout`` names (padded to the longest request and masked). Returns float32 ``[B, E, H, Dv]``; a row
    that sees no key gets zeros."""
    bs, rows, num_heads = q.shape[0], q.shape[1], q.shape[2]
    k, v, group = _cache_rows(k_cache, v_cache, layout.slots.view(-1), key_scale, value_scale, num_heads)
    k, v = k.view(bs, -1, *k.shape[1:]), v.view(bs, -1, *v.shape[1:])  # [B, L, H_kv, D]
    kv_heads = k.shape[2]
    q = q.to(torch.float32)
    if logit_cap > 0:  # a capped logit: softmax by hand
        qg = q.view(bs, rows, kv_heads, group, -1)  # query head h reads KV head h // group
        scores = torch.einsum("bekgd,blkd->bkgel", qg, k) * sm_scale
        scores = logit_cap * torch.tanh(scores / logit_cap)
        scores = scores.masked_fill(~layout.seen[:, :, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return torch.einsum("bkgel,blkd->bekgd", probs, v).reshape(bs, rows, num_heads, -1)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=layout.seen, scale=sm_scale,
        enable_gqa=group > 1)  # [B, H, E, Dv]
    out = out.transpose(1, 2)
    if layout.blind is not None:
        out = out.masked_fill(layout.blind[:, :, None, None], 0.0)
    return out


def decode_attention_cpu(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    key_scale: float,
    value_scale: float,
    output: torch.Tensor,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    loc: torch.Tensor,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attn: bool,
    sliding_window_size: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
) -> None:
    """One query row per request, attending to ``req_to_token[req_pool_indices[b], :seq_lens[b]]``.

    If ``key``/``value`` are given they are first written into the caches at rows ``loc`` (the backend passes
    None when it already wrote them, e.g. for fp8). ``attn_logits`` is the real kernel's split-KV scratch and
    is ignored. In EAGLE draft steps the multi-step backend passes its ``build_draft_decode_metadata_cpu``
    table, with one row per (request, branch).
    """
    del attn_logits
    _reject_unsupported("decode_attention_cpu", is_cross_attn, sliding_window_size, encoder_lens, sinks)
    slots = loc.reshape(-1).to(torch.int64)
    if key is not None:
        k_cache[slots] = key.reshape(-1, *k_cache.shape[1:]).to(k_cache.dtype)
    if value is not None:
        v_cache[slots] = value.reshape(-1, *v_cache.shape[1:]).to(v_cache.dtype)

    bs = query.shape[0]
    if bs == 0:
        return
    pools, lens = req_pool_indices.reshape(-1)[:bs].to(torch.int64), seq_lens.reshape(-1)[:bs].to(torch.int64)
    layout = _layout(req_to_token, ("decode", tuple(pools.tolist()), tuple(lens.tolist())), k_cache,
                     lambda: _keys(req_to_token, pools, lens, None))
    out = _attend_padded(query[:, None], k_cache, v_cache, key_scale, value_scale, layout, sm_scale, logit_cap)
    output[:bs] = out[:, 0].to(output.dtype)


def _mask_kind(
    tree_mask: torch.Tensor | None, is_causal: bool, ext_lens: list[int], seq_lens: list[int]
) -> str:
    """Which masking ``extend_attention_cpu`` applies (see the ``extend_attention_cpu`` docstring)."""
    if tree_mask is None or tree_mask.numel() == 0:
        return _CAUSAL if is_causal else _NO_MASK
    if tree_mask.numel() == sum(e * e for e in ext_lens):
        return _QLEN_ONLY
    needed = sum(e * s for e, s in zip(ext_lens, seq_lens))
    if tree_mask.numel() < needed:
        raise ValueError(
            f"extend_attention_cpu: tree_mask has {tree_mask.numel()} elements; a QLEN_ONLY mask needs "
            f"{sum(e * e for e in ext_lens)} and a FULL mask at least {needed}"
        )
    return _FULL


def _visible(
    kind: str, flat_mask: torch.Tensor | None, offset: int, ext: int, seq_len: int
) -> torch.Tensor | None:
    """``[ext, seq_len]`` visibility of one request's keys, or None when nothing is masked."""
    prefix = seq_len - ext
    if kind == _NO_MASK:
        return None
    if kind == _CAUSAL:
        query_pos = prefix + torch.arange(ext)[:, None]
        return torch.arange(seq_len)[None, :] <= query_pos
    assert flat_mask is not None
    if kind == _QLEN_ONLY:
        tree = flat_mask[offset : offset + ext * ext].view(ext, ext)
        return torch.cat([torch.ones(ext, prefix, dtype=torch.bool), tree], dim=1)
    return flat_mask[offset : offset + ext * seq_len].view(ext, seq_len)


def _one_row_sees_all(kind: str, tree_mask: torch.Tensor | None, lens: list[int]) -> bool:
    """Whether every request's one extend row sees all its keys (then the extend is exactly a decode): causal and
    unmasked rows do; a masked row does when its mask is all set (QLEN_ONLY: its 1 x 1 block; FULL: its 1 x seq
    block), as in a verify without drafts."""
    if kind in (_CAUSAL, _NO_MASK):
        return True
    used = len(lens) if kind == _QLEN_ONLY else sum(lens)
    return bool(tree_mask.reshape(-1)[:used].all())


BATCHED_MAX_ROWS = 16  # longer extends (prefill) loop per request: padding B x E x L scores would not pay


def _extend_batched(q_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale, req_to_token, pools, lens,
                    ext_lens, starts, kind, tree_mask, sm_scale, logit_cap) -> None:
    """``extend_attention_cpu`` for short extends, all requests in one padded pass (same masks as ``_visible``)."""
    key = (kind, tuple(pools), tuple(lens), tuple(ext_lens), tuple(starts),
           None if tree_mask is None or kind not in (_QLEN_ONLY, _FULL) else tree_mask.numpy().tobytes())
    layout = _layout(req_to_token, key, k_buffer,
                     lambda: _extend_layout(req_to_token, pools, lens, ext_lens, starts, kind, tree_mask))
    bs = len(ext_lens)
    if layout.rows is None:  # a decode: one row per request, request b's is row b
        out = _attend_padded(q_extend[:bs, None], k_buffer, v_buffer, key_scale, value_scale, layout, sm_scale,
                             logit_cap)
        o_extend[:bs] = out[:, 0].to(o_extend.dtype)
        return
    q = q_extend.index_select(0, layout.rows).view(bs, -1, *q_extend.shape[1:])
    out = _attend_padded(q, k_buffer, v_buffer, key_scale, value_scale, layout, sm_scale, logit_cap)
    out = out.reshape(-1, *out.shape[2:])
    if layout.real is not None:
        out = out.index_select(0, layout.real)
    o_extend.index_copy_(0, layout.dest, out.to(o_extend.dtype))


def _extend_layout(req_to_token, pools, lens, ext_lens, starts, kind, tree_mask) -> _Layout:
    """An extend's layout: its rows padded to the longest extend, each seeing what ``_visible`` gives it."""
    bs = len(ext_lens)
    pools_t, seq = torch.tensor(pools, dtype=torch.int64), torch.tensor(lens)
    if max(ext_lens) == 1 and starts == list(range(bs)) and _one_row_sees_all(kind, tree_mask, lens):  # a decode
        return _keys(req_to_token, pools_t, seq, None)
    ext = torch.tensor(ext_lens)
    prefix, width, longest = seq - ext, max(ext_lens), max(lens)
    j = torch.arange(width)
    row_ok = j[None, :] < ext[:, None]  # [B, E]
    rows = torch.where(row_ok, torch.tensor(starts)[:, None] + j[None, :], torch.tensor(starts)[:, None])
    key = torch.arange(longest)[None, None, :]  # [1, 1, L]
    if kind == _NO_MASK:
        visible = None
    elif kind == _CAUSAL:
        visible = key <= prefix[:, None, None] + j[None, :, None]
    else:
        flat = tree_mask.reshape(-1).to(torch.bool)
        sizes = ext * ext if kind == _QLEN_ONLY else ext * seq
        offset = (torch.cumsum(sizes, 0) - sizes)[:, None, None]
        if kind == _QLEN_ONLY:  # [ext, ext] over the new tokens; the prefix stays visible
            rel = key - prefix[:, None, None]
            inside = (rel >= 0) & (rel < ext[:, None, None]) & row_ok[:, :, None]
            idx = offset + j[None, :, None] * ext[:, None, None] + rel
            visible = (rel < 0) | (inside & flat[torch.where(inside, idx, 0)])
        else:  # FULL: [ext, prefix + ext]
            inside = (key < seq[:, None, None]) & row_ok[:, :, None]
            idx = offset + j[None, :, None] * seq[:, None, None] + key
            visible = inside & flat[torch.where(inside, idx, 0)]
    real = torch.nonzero(row_ok.reshape(-1)).reshape(-1)
    return _keys(req_to_token, pools_t, seq, visible, rows=rows.reshape(-1),
                 real=None if len(real) == row_ok.numel() else real, dest=rows.reshape(-1)[real])


def extend_attention_cpu(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor | None,
    v_extend: torch.Tensor | None,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attn: bool,
    sliding_window_size: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
    tree_mask: torch.Tensor | None,
    is_causal: bool,
) -> None:
    """Prefill / verify attention over prefix + new tokens, read entirely from the KV buffers.

    The backend has already written the new K/V (``set_kv_buffer``), so ``k_extend``/``v_extend`` are not
    read. Request b's queries are ``q_extend[extend_start_loc[b] : + extend_seq_lens[b]]``; its keys are the
    first ``seq_lens[b]`` slots of its table row, the prefix being ``seq_lens[b] - extend_seq_lens[b]``.
    Masking:

    - ``tree_mask`` with ``numel == sum(ext_b ** 2)`` (QLEN_ONLY, what CPU verify uses): each request consumes
      an ``[ext, ext]`` block over its new tokens, in batch order; the prefix stays fully visible;
    - any other non-empty ``tree_mask`` (FULL): each request consumes an ``[ext, prefix + ext]`` block;
    - no mask and ``is_causal``: query j sees keys ``[0, prefix + j]``; otherwise nothing is masked.

    In TARGET_VERIFY the backend derives ``extend_seq_lens = N``, ``extend_start_loc = arange(0, bs * N, N)``
    and ``seq_lens += N`` (``intel_amx_backend.py:70-104``); it passes no mask for chains (topk 1), where
    causal masking is exact.
    """
    del k_extend, v_extend, max_len_extend
    _reject_unsupported("extend_attention_cpu", is_cross_attn, sliding_window_size, encoder_lens, sinks)
    bs = extend_seq_lens.numel()
    ext_lens = [int(x) for x in extend_seq_lens.reshape(-1).tolist()]
    lens = [int(x) for x in seq_lens.reshape(-1)[:bs].tolist()]
    starts = [int(x) for x in extend_start_loc.reshape(-1)[:bs].tolist()]
    pools = [int(x) for x in req_pool_indices.reshape(-1)[:bs].tolist()]
    kind = _mask_kind(tree_mask, is_causal, ext_lens, lens)
    if bs and max(ext_lens) <= BATCHED_MAX_ROWS:  # decode-sized work (verify, one-row steps): one batched pass
        _extend_batched(q_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale, req_to_token, pools, lens,
                        ext_lens, starts, kind, tree_mask, sm_scale, logit_cap)
        return
    flat_mask = tree_mask.reshape(-1).to(torch.bool) if kind in (_QLEN_ONLY, _FULL) else None

    num_heads = q_extend.shape[1]
    offset = 0
    for ext, seq_len, start, pool in zip(ext_lens, lens, starts, pools):
        if seq_len < ext:
            raise ValueError(f"extend_attention_cpu: seq_len {seq_len} < extend length {ext}")
        fused = kind == _CAUSAL and seq_len == ext and logit_cap <= 0  # SDPA's own causal mask
        visible = None if fused else _visible(kind, flat_mask, offset, ext, seq_len)
        offset += ext * (ext if kind == _QLEN_ONLY else seq_len)
        if ext == 0:
            continue
        kv_slots = req_to_token[pool, :seq_len].to(torch.int64)
        if logit_cap > 0:  # a capped logit: softmax by hand
            k, v, group = _cache_rows(k_buffer, v_buffer, kv_slots, key_scale, value_scale, num_heads)
            k, v = (rows.repeat_interleave(group, dim=1).transpose(0, 1) for rows in (k, v))  # [H, L, D]
            out = _attend(q_extend[start : start + ext], k, v, visible, sm_scale, logit_cap)
        else:
            out = _attend_one(q_extend[start : start + ext], k_buffer, v_buffer, kv_slots, key_scale, value_scale,
                              visible, fused, sm_scale)
        o_extend[start : start + ext] = out.to(o_extend.dtype)
