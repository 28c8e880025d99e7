"""The depth tier of each step, handed to SGLang's ``AdaptiveController`` (adaptive_runtime_state.py).

One runtime state per draft depth is built at start-up; the step sets the depth just before SGLang asks for it.
"""

from __future__ import annotations


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
