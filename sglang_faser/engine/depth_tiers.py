"""Two small pieces of per-step state the FASER worker hands to SGLang: the depth tier and who may be pruned.

``DepthTiers`` is the ``AdaptiveSpecPolicy`` protocol SGLang's ``AdaptiveController`` drives
(adaptive_runtime_state.py): one runtime state per draft depth is built at start-up, and the worker sets the depth
of each step just before SGLang asks for it. ``prunable_requests`` says which requests' acceptance is a plain
argmax check, so that a rejection seen in an early frontier is final (frontier_verify.py).
"""

from __future__ import annotations

import numpy as np


class DepthTiers:
    """The ``AdaptiveSpecPolicy`` protocol SGLang's ``AdaptiveController`` drives (adaptive_runtime_state.py).

    Candidates are every depth 0..window; the depth for the next step is whatever the FASER worker decided just
    before ``activate_step_by_batch`` asks for it.
    """

    def __init__(self, window: int):
        self.candidate_steps = list(range(window + 1))
        self.next_depth = window
        self._cuda_graph_bs = None

    def set_cuda_graph_bs(self, cuda_graph_bs) -> None:
        self._cuda_graph_bs = cuda_graph_bs

    def cuda_graph_bs_for_step(self, step: int):
        return self._cuda_graph_bs

    def get_steps_for_batch(self, batch_size: int) -> int:
        return self.next_depth

    def on_verify_complete(self, num_correct_drafts_per_req, batch_size: int):
        return None  # FASER switches tiers before drafting, never after verification


def prunable_requests(batch) -> np.ndarray:
    """Requests whose acceptance is a plain argmax check, so a rejection seen early is final (frontier_verify.py)."""
    bs = len(batch.reqs)
    info = batch.sampling_info
    modified = info is None or batch.has_grammar or getattr(info, "has_watermark_candidates", False) or any(
        getattr(info, name, None) is not None
        for name in ("acc_additive_penalties", "acc_scaling_penalties", "logit_bias")
    )
    if modified:
        return np.zeros(bs, dtype=bool)
    if info.is_all_greedy:
        return np.ones(bs, dtype=bool)
    return (info.top_ks[:bs] <= 1).cpu().numpy()
