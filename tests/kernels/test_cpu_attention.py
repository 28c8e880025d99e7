"""The intel_amx attention ops of the CPU sgl_kernel stand-in against a per-request, per-head naive loop."""

from __future__ import annotations

import math

import pytest
import torch

from sglang_faser.kernels.cpu import attention, register_torch_library_ops
from sglang_faser.kernels.cpu.attention import decode_attention_cpu, extend_attention_cpu

D, DV = 8, 8
SM_SCALE = 1.0 / math.sqrt(D)
NUM_KV_SPLITS = 8  # IntelAMXAttnBackend.num_kv_splits


@pytest.fixture(autouse=True, params=["batched", "per-request"])
def extend_path(request, monkeypatch):
    """Every test on both extend paths: short extends batched, long ones (prefill) one request at a time."""
    if request.param == "per-request":
        monkeypatch.setattr(attention, "BATCHED_MAX_ROWS", 0)
    return request.param


def _naive_row(q_h, keys, values, visible, sm_scale, logit_cap, key_scale=1.0, value_scale=1.0):
    """softmax(q k^T) v for one query row of one head, over the visible keys only."""
    scores = []
    for key, vis in zip(keys, visible):
        if vis:
            s = float(torch.dot(q_h.double(), key.double() * key_scale)) * sm_scale
            if logit_cap > 0:
                s = logit_cap * math.tanh(s / logit_cap)
            scores.append(s)
        else:
            scores.append(None)
    top = max(s for s in scores if s is not None)
    weights = [0.0 if s is None else math.exp(s - top) for s in scores]
    total = sum(weights)
    out = torch.zeros(values[0].shape[-1], dtype=torch.float64)
    for w, val in zip(weights, values):
        out += (w / total) * val.double() * value_scale
    return out


def _naive(q, k_buf, v_buf, req_to_token, pools, seq_lens, starts, ext_lens, visible_fn, **kw):
    """Per request b, query row j, head h: attend to the request's slots with ``visible_fn(b, j, l)``."""
    out = torch.zeros(q.shape[0], q.shape[1], v_buf.shape[-1], dtype=torch.float64)
    group = q.shape[1] // k_buf.shape[1]
    for b in range(len(pools)):
        slots = req_to_token[pools[b], : seq_lens[b]].tolist()
        for j in range(ext_lens[b]):
            visible = [visible_fn(b, j, pos) for pos in range(seq_lens[b])]
            for h in range(q.shape[1]):
                keys = [k_buf[s, h // group] for s in slots]
                values = [v_buf[s, h // group] for s in slots]
                out[starts[b] + j, h] = _naive_row(q[starts[b] + j, h], keys, values, visible, **kw)
    return out


def _setup(num_reqs, pool_len, num_slots, h_kv, seed):
    gen = torch.Generator().manual_seed(seed)
    k_buf = torch.randn(num_slots, h_kv, D, generator=gen)
    v_buf = torch.randn(num_slots, h_kv, DV, generator=gen)
    req_to_token = torch.randperm(num_slots, generator=gen)[: num_reqs * pool_len].view(num_reqs, pool_len)
    return gen, k_buf, v_buf, req_to_token.to(torch.int32)


def _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, ext_lens, tree_mask=None, causal=True, cap=0.0):
    starts = [sum(ext_lens[:b]) for b in range(len(ext_lens))]
    o = torch.empty(q.shape[0], q.shape[1], DV, dtype=q.dtype)
    extend_attention_cpu(
        q,
        None,
        None,
        o,
        k_buf,
        v_buf,
        1.0,
        1.0,
        req_to_token,
        torch.tensor(pools),
        torch.tensor(seq_lens),
        torch.tensor(ext_lens, dtype=torch.int32),
        torch.tensor(starts, dtype=torch.int32),
        max(ext_lens),
        SM_SCALE,
        cap,
        False,
        0,
        None,
        None,
        tree_mask,
        causal,
    )
    return o, starts


def test_extend_causal_prefill_matches_naive():
    _, k_buf, v_buf, req_to_token = _setup(3, 12, 64, 2, seed=0)
    pools, ext_lens = [2, 0], [5, 3]
    seq_lens = ext_lens  # plain prefill: no prefix
    q = torch.randn(sum(ext_lens), 4, D)
    o, starts = _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, ext_lens)
    ref = _naive(
        q,
        k_buf,
        v_buf,
        req_to_token,
        pools,
        seq_lens,
        starts,
        ext_lens,
        lambda b, j, pos: pos <= j,
        sm_scale=SM_SCALE,
        logit_cap=0.0,
    )
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)


def test_extend_with_prefix_is_causal_over_prefix_plus_new():
    _, k_buf, v_buf, req_to_token = _setup(2, 16, 40, 1, seed=1)
    pools, ext_lens, seq_lens = [1, 0], [3, 4], [9, 4]  # request 0 has a 6-token prefix
    q = torch.randn(sum(ext_lens), 2, D)
    o, starts = _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, ext_lens)
    prefix = [s - e for s, e in zip(seq_lens, ext_lens)]
    ref = _naive(
        q,
        k_buf,
        v_buf,
        req_to_token,
        pools,
        seq_lens,
        starts,
        ext_lens,
        lambda b, j, pos: pos <= prefix[b] + j,
        sm_scale=SM_SCALE,
        logit_cap=0.0,
    )
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)


# A 4-node verify tree per request (rows: ancestors including self), as build_tree / NGRAM produce it.
TREES = [
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]],
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]],
]


def test_extend_target_verify_qlen_only_tree_mask():
    _, k_buf, v_buf, req_to_token = _setup(3, 16, 48, 2, seed=2)
    n, pools, committed = 4, [2, 1], [5, 3]
    seq_lens = [c + n for c in committed]  # the backend adds num_draft_tokens (intel_amx_backend.py:103)
    q = torch.randn(2 * n, 4, D)
    tree_mask = torch.tensor(TREES, dtype=torch.bool).flatten()  # numel == sum(ext^2): QLEN_ONLY
    o, starts = _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, [n, n], tree_mask=tree_mask)
    ref = _naive(
        q,
        k_buf,
        v_buf,
        req_to_token,
        pools,
        seq_lens,
        starts,
        [n, n],
        lambda b, j, pos: pos < committed[b] or bool(TREES[b][j][pos - committed[b]]),
        sm_scale=SM_SCALE,
        logit_cap=0.0,
    )
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)


def test_extend_full_mask():
    gen, k_buf, v_buf, req_to_token = _setup(2, 12, 30, 2, seed=3)
    n, pools, seq_lens = 3, [0, 1], [5, 7]
    full = [torch.rand(n, s, generator=gen) > 0.4 for s in seq_lens]
    for block in full:
        block[:, 0] = True  # every query sees at least one key
    q = torch.randn(2 * n, 2, D)
    tree_mask = torch.cat([block.flatten() for block in full])  # [ext, prefix + ext] per request
    o, starts = _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, [n, n], tree_mask=tree_mask)
    ref = _naive(
        q,
        k_buf,
        v_buf,
        req_to_token,
        pools,
        seq_lens,
        starts,
        [n, n],
        lambda b, j, pos: bool(full[b][j, pos]),
        sm_scale=SM_SCALE,
        logit_cap=0.0,
    )
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)


def test_a_row_that_sees_no_key_gets_zeros():
    gen, k_buf, v_buf, req_to_token = _setup(2, 12, 30, 2, seed=3)
    n, pools, seq_lens = 3, [0, 1], [5, 7]
    full = [torch.rand(n, s, generator=gen) > 0.4 for s in seq_lens]
    for block in full:
        block[:, 0] = True
    full[1][2] = False  # request 1's last row sees nothing
    q = torch.randn(2 * n, 2, D)
    o, starts = _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, [n, n],
                        tree_mask=torch.cat([block.flatten() for block in full]))
    assert torch.equal(o[starts[1] + 2], torch.zeros_like(o[0]))
    assert torch.isfinite(o).all() and o[: starts[1] + 2].abs().sum() > 0


def test_one_layout_serves_every_layer_of_a_pass_and_a_new_pass_builds_its_own():
    """The keys and masks a verify pass reads are built by its first layer and reused by the others; the table
    a request's keys come from may change between passes (a new request in a freed row), with or without a
    version bump, and each pass must read its own."""
    _, k_buf, v_buf, req_to_token = _setup(3, 16, 64, 2, seed=5)
    layers = [(k_buf, v_buf), (k_buf.clone(), v_buf.clone() * 2)]
    pools, seq_lens, ext = [2, 0], [9, 6], [3, 3]
    q = torch.randn(6, 4, D)

    def naive(table, layer):
        return _naive(q, *layer, table, pools, seq_lens, [0, 3], ext,
                      lambda b, j, pos: pos <= seq_lens[b] - ext[b] + j, sm_scale=SM_SCALE, logit_cap=0.0)

    def check(table):
        for layer in layers:
            o, _ = _extend(q, *layer, table, pools, seq_lens, ext)
            torch.testing.assert_close(o.double(), naive(table, layer), atol=1e-5, rtol=1e-5)

    check(req_to_token)
    req_to_token[2] = torch.flip(req_to_token[2], [0])  # a write: the table's version moves
    check(req_to_token)
    req_to_token.data[0] = torch.roll(req_to_token[0], 3)  # a write the version does not see: a new pass
    check(req_to_token)


def test_extend_logit_cap_and_non_causal():
    _, k_buf, v_buf, req_to_token = _setup(1, 10, 10, 1, seed=4)
    q = torch.randn(6, 2, D) * 4  # large logits so the cap matters
    o, starts = _extend(q, k_buf, v_buf, req_to_token, [0], [6], [6], causal=False, cap=2.0)
    ref = _naive(
        q,
        k_buf,
        v_buf,
        req_to_token,
        [0],
        [6],
        starts,
        [6],
        lambda b, j, pos: True,
        sm_scale=SM_SCALE,
        logit_cap=2.0,
    )
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)
    uncapped, _ = _extend(q, k_buf, v_buf, req_to_token, [0], [6], [6], causal=False, cap=0.0)
    assert not torch.allclose(o, uncapped, atol=1e-3)


def _decode(
    q, k_cache, v_cache, loc, req_to_token, pools, seq_lens, key=None, value=None, cap=0.0, scales=(1.0, 1.0)
):
    bs, h = q.shape[0], q.shape[1]
    out = torch.empty(bs, h, DV, dtype=q.dtype)
    attn_logits = torch.zeros(bs, h, NUM_KV_SPLITS, DV + 1)
    decode_attention_cpu(
        q,
        k_cache,
        v_cache,
        scales[0],
        scales[1],
        out,
        key,
        value,
        loc,
        attn_logits,
        req_to_token,
        torch.tensor(pools),
        torch.tensor(seq_lens),
        SM_SCALE,
        cap,
        False,
        0,
        None,
        None,
    )
    return out


def test_decode_gqa_writes_new_kv_then_attends():
    _, k_cache, v_cache, req_to_token = _setup(3, 10, 40, 2, seed=5)
    pools, seq_lens = [1, 2, 0], [4, 7, 1]
    loc = torch.stack([req_to_token[p, s - 1] for p, s in zip(pools, seq_lens)]).long()
    key, value = torch.randn(3, 2, D), torch.randn(3, 2, DV)
    q = torch.randn(3, 4, D)  # H=4 query heads over H_kv=2
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    expected_k[loc], expected_v[loc] = key, value
    out = _decode(q, k_cache, v_cache, loc, req_to_token, pools, seq_lens, key=key, value=value)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    ref = _naive(
        q,
        expected_k,
        expected_v,
        req_to_token,
        pools,
        seq_lens,
        [0, 1, 2],
        [1, 1, 1],
        lambda b, j, pos: True,
        sm_scale=SM_SCALE,
        logit_cap=0.0,
    )
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_decode_key_value_scale_logit_cap_and_bf16_output():
    _, k_cache, v_cache, req_to_token = _setup(2, 8, 20, 2, seed=6)
    q = (torch.randn(2, 4, D) * 3).to(torch.bfloat16)
    loc = torch.tensor([0, 1])
    out = _decode(q, k_cache, v_cache, loc, req_to_token, [0, 1], [8, 5], cap=1.5, scales=(0.5, 2.0))
    assert out.dtype == torch.bfloat16
    ref = _naive(
        q.float(),
        k_cache,
        v_cache,
        req_to_token,
        [0, 1],
        [8, 5],
        [0, 1],
        [1, 1],
        lambda b, j, pos: True,
        sm_scale=SM_SCALE,
        logit_cap=1.5,
        key_scale=0.5,
        value_scale=2.0,
    )
    torch.testing.assert_close(out.double(), ref, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize(
    "kwargs",
    [{"is_cross_attn": True}, {"sliding_window_size": 5}, {"sinks": torch.zeros(4)}],
)
def test_unsupported_features_raise(kwargs):
    _, k_cache, v_cache, req_to_token = _setup(1, 4, 4, 2, seed=7)
    args = {"is_cross_attn": False, "sliding_window_size": 0, "sinks": None}
    args.update(kwargs)
    q = torch.randn(1, 4, D)
    with pytest.raises(NotImplementedError):
        decode_attention_cpu(
            q,
            k_cache,
            v_cache,
            1.0,
            1.0,
            torch.empty(1, 4, DV),
            None,
            None,
            torch.tensor([0]),
            torch.zeros(1, 4, NUM_KV_SPLITS, DV + 1),
            req_to_token,
            torch.tensor([0]),
            torch.tensor([4]),
            SM_SCALE,
            0.0,
            args["is_cross_attn"],
            args["sliding_window_size"],
            None,
            args["sinks"],
        )


def test_registered_ops_called_like_intel_amx_backend():
    """Positional calls exactly as intel_amx_backend.py:290 (extend) and :383 (decode) make them."""
    register_torch_library_ops()
    register_torch_library_ops()  # idempotent
    _, key_buffer, value_buffer, req_to_token = _setup(2, 16, 40, 2, seed=8)
    tp_q_head_num, qk_head_dim, v_head_dim = 4, D, DV
    scaling, logit_cap, sliding_window_size = SM_SCALE, 0.0, -1

    # TARGET_VERIFY extend with topk 1: no tree mask, causal; metadata as _build_extend_metadata derives it.
    n, bs = 3, 2
    req_pool_indices = torch.tensor([1, 0])
    committed = torch.tensor([4, 6])
    seq_lens = (committed + n).to(torch.int64)
    extend_seq_lens = torch.full((bs,), n, dtype=torch.int32)
    extend_start_loc = torch.arange(0, bs * n, n, dtype=torch.int32)
    q = torch.randn(bs * n, tp_q_head_num * qk_head_dim)
    k = torch.randn(bs * n, 2 * qk_head_dim)
    v = torch.randn(bs * n, 2 * v_head_dim)
    o = torch.empty_like(q)
    torch.ops.sgl_kernel.extend_attention_cpu(
        q.view(-1, tp_q_head_num, qk_head_dim),
        k,
        v,
        o.view(-1, tp_q_head_num, v_head_dim),
        key_buffer,
        value_buffer,
        1.0,
        1.0,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        n,
        scaling,
        logit_cap,
        False,
        sliding_window_size + 1,
        None,
        None,
        None,
        True,
    )
    q3 = q.view(-1, tp_q_head_num, qk_head_dim)
    pools, lens = req_pool_indices.tolist(), seq_lens.tolist()
    ref = _naive(
        q3,
        key_buffer,
        value_buffer,
        req_to_token,
        pools,
        lens,
        [0, n],
        [n, n],
        lambda b, j, pos: pos <= int(committed[b]) + j,
        sm_scale=scaling,
        logit_cap=logit_cap,
    )
    torch.testing.assert_close(o.view(-1, tp_q_head_num, v_head_dim).double(), ref, atol=1e-5, rtol=1e-5)

    # Decode: k/v are written by the kernel at cache_loc.
    q = torch.randn(bs, tp_q_head_num * qk_head_dim)
    k = torch.randn(bs, 2, qk_head_dim)
    v = torch.randn(bs, 2, v_head_dim)
    seq_lens = torch.tensor([5, 9])
    cache_loc = torch.stack([req_to_token[p, s - 1] for p, s in zip(pools, seq_lens.tolist())]).long()
    attn_logits = torch.zeros(bs, tp_q_head_num, NUM_KV_SPLITS, v_head_dim + 1)
    o = torch.empty_like(q)
    torch.ops.sgl_kernel.decode_attention_cpu(
        q.view(-1, tp_q_head_num, qk_head_dim),
        key_buffer,
        value_buffer,
        1.0,
        1.0,
        o.view(-1, tp_q_head_num, v_head_dim),
        k,
        v,
        cache_loc,
        attn_logits,
        req_to_token,
        req_pool_indices,
        seq_lens,
        scaling,
        logit_cap,
        False,
        sliding_window_size + 1,
        None,
        None,
    )
    assert torch.equal(key_buffer[cache_loc], k) and torch.equal(value_buffer[cache_loc], v)
    ref = _naive(
        q.view(-1, tp_q_head_num, qk_head_dim),
        key_buffer,
        value_buffer,
        req_to_token,
        pools,
        seq_lens.tolist(),
        [0, 1],
        [1, 1],
        lambda b, j, pos: True,
        sm_scale=scaling,
        logit_cap=logit_cap,
    )
    torch.testing.assert_close(o.view(-1, tp_q_head_num, v_head_dim).double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mask", ["causal", "qlen_only", "qlen_only_hidden", "full", "full_hidden"])
def test_extend_one_row_per_request_matches_naive(mask):
    """Verify of one row per request (a step without drafts) runs as a decode when every row sees all its keys; a
    mask that hides a key (the row itself in a 1x1 tree, a prefix key in a FULL block) takes the masked path."""
    _, k_buf, v_buf, req_to_token = _setup(3, 16, 48, 2, seed=7)
    pools, seq_lens = [2, 0, 1], [9, 3, 14]
    q = torch.randn(3, 4, D)
    hidden = mask.endswith("_hidden")
    if mask == "causal":
        tree_mask = None
    elif mask.startswith("qlen_only"):
        tree_mask = torch.tensor([True, not hidden, True])
    else:  # FULL: one [1, seq_len] block per request; the hidden variant masks the middle request's last key
        tree_mask = torch.ones(sum(seq_lens), dtype=torch.bool)
        tree_mask[seq_lens[0] + seq_lens[1] - 1] = not hidden
    o, starts = _extend(q, k_buf, v_buf, req_to_token, pools, seq_lens, [1, 1, 1], tree_mask=tree_mask)

    def visible(b, j, pos):  # hidden: the middle request's row does not see its own (last) key
        return not hidden or b != 1 or pos < seq_lens[b] - 1

    ref = _naive(q, k_buf, v_buf, req_to_token, pools, seq_lens, starts, [1, 1, 1], visible, sm_scale=SM_SCALE,
                 logit_cap=0.0)
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)
