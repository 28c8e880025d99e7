"""A pure-PyTorch stand-in for the CPU ops of ``sgl_kernel`` that SGLang 0.5.23 needs on a CPU run.

The only ``sgl_kernel`` on PyPI is a CUDA build, and the real CPU kernels (``sgl-kernel/csrc/cpu``) must be
built from source. With ``SGLANG_USE_CPU_ENGINE=1`` several SGLang modules run
``from sgl_kernel import <op>_cpu`` at import time, and the intel_amx attention backend calls
``torch.ops.sgl_kernel.{decode,extend}_attention_cpu``.
This package provides those ops, ported from the Triton reference kernels that ship in the SGLang wheel (see
``shared/docs/sglang-on-cpu.md`` §4). It is meant to be used **only where no real ``sgl_kernel`` is
importable**; it favours readable, exact semantics over speed.

- ``CPU_OPS``: every top-level ``sgl_kernel`` name SGLang imports on CPU, mapped to its function (the two
  attention ops are included too, for direct calls; SGLang itself reaches them through ``torch.ops``).
- ``SPECULATIVE_OPS``: the names of ``sgl_kernel.speculative`` (NGRAM's
  ``reconstruct_indices_from_tree_mask``).
- ``register_torch_library_ops()``: registers the two attention ops as ``torch.ops.sgl_kernel.*``.

``convert_weight_packed`` is deliberately never registered: SGLang's ``cpu_has_amx_support()`` checks for it,
and its absence keeps every layer on ``forward_native`` (doc §4.1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sglang_faser.kernels.cpu.attention import decode_attention_cpu, extend_attention_cpu
from sglang_faser.kernels.cpu.kv_cache import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    copy_all_layer_kv_cache_cpu,
)
from sglang_faser.kernels.cpu.spec_tree import (
    build_tree_kernel_efficient_cpu,
    reconstruct_indices_from_tree_mask,
    verify_tree_greedy_cpu,
)
from sglang_faser.kernels.cpu.speculative import (
    build_draft_decode_metadata_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    rotate_input_ids_cpu,
)

CPU_OPS: dict[str, Callable] = {
    "assign_req_to_token_pool_cpu": assign_req_to_token_pool_cpu,
    "assign_extend_cache_locs_cpu": assign_extend_cache_locs_cpu,
    "assign_draft_cache_locs_contiguous_cpu": assign_draft_cache_locs_contiguous_cpu,
    "copy_all_layer_kv_cache_cpu": copy_all_layer_kv_cache_cpu,
    "fill_bonus_tokens_cpu": fill_bonus_tokens_cpu,
    "fill_accept_out_cache_loc_cpu": fill_accept_out_cache_loc_cpu,
    "build_draft_decode_metadata_cpu": build_draft_decode_metadata_cpu,
    "rotate_input_ids_cpu": rotate_input_ids_cpu,
    "build_tree_kernel_efficient_cpu": build_tree_kernel_efficient_cpu,
    "verify_tree_greedy_cpu": verify_tree_greedy_cpu,
    "decode_attention_cpu": decode_attention_cpu,
    "extend_attention_cpu": extend_attention_cpu,
}

SPECULATIVE_OPS: dict[str, Callable] = {
    "reconstruct_indices_from_tree_mask": reconstruct_indices_from_tree_mask,
}

# Schemas must match the positional calls in srt/layers/attention/intel_amx_backend.py (doc §4.4).
TORCH_LIBRARY_SCHEMAS: dict[str, str] = {
    "decode_attention_cpu": (
        "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float key_scale, "
        "float value_scale, Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, "
        "Tensor(d!) attn_logits, Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, "
        "float sm_scale, float logit_cap, bool is_cross_attn, int sliding_window_size, Tensor? encoder_lens, "
        "Tensor? sinks) -> ()"
    ),
    "extend_attention_cpu": (
        "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
        "Tensor k_buffer, Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
        "int max_len_extend, float sm_scale, float logit_cap, bool is_cross_attn, int sliding_window_size, "
        "Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()"
    ),
}

_LIBRARY: torch.library.Library | None = None  # kept alive: dropping it would unregister the ops


def _has_cpu_kernel(name: str) -> bool:
    """Whether ``sgl_kernel::<name>`` already has a CPU kernel (ours from an earlier call, or a real one)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"sgl_kernel::{name}", "CPU")


def _is_defined(name: str) -> bool:
    try:
        getattr(torch.ops.sgl_kernel, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register_torch_library_ops() -> None:
    """Register ``decode_attention_cpu`` and ``extend_attention_cpu`` under ``torch.ops.sgl_kernel``.

    Idempotent: an op that already has a CPU kernel (from an earlier call, or from a real ``sgl_kernel``) is
    left alone, and a schema defined elsewhere only gets our CPU implementation.
    """
    global _LIBRARY
    impls = {"decode_attention_cpu": decode_attention_cpu, "extend_attention_cpu": extend_attention_cpu}
    for name, fn in impls.items():
        if _is_defined(name) and _has_cpu_kernel(name):
            continue
        if _LIBRARY is None:
            _LIBRARY = torch.library.Library("sgl_kernel", "FRAGMENT")
        if not _is_defined(name):
            _LIBRARY.define(TORCH_LIBRARY_SCHEMAS[name])
        _LIBRARY.impl(name, fn, "CPU")


__all__ = [
    "CPU_OPS",
    "SPECULATIVE_OPS",
    "TORCH_LIBRARY_SCHEMAS",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "decode_attention_cpu",
    "extend_attention_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "reconstruct_indices_from_tree_mask",
    "register_torch_library_ops",
    "rotate_input_ids_cpu",
    "verify_tree_greedy_cpu",
]
