"""``FaserWorker``: SGLang's EAGLE v2 worker (and its STANDALONE subclass) with per-request draft lengths.

Each decode step, before the target verifies the drafts, the :class:`LengthController` picks a length k_i for every
request. This first execution path is the *padded* one (sglang-0.5.23-map.md §9.3, "masked uniform"): the draft
chain keeps SGLang's uniform width, and request i's chain is cut after k_i drafts by setting
``retrieve_next_token[i, k_i] = -1``. Greedy verification and target-only sampling then stop at k_i and take the
bonus/correction token from the target at position k_i, so the output is exactly the target's own. KV slots past
the accepted tokens are never committed: SGLang advances ``seq_len`` by the accepted count only (map §6).

What this path does not save yet: the draft still runs the full window and the target still computes B x (K+1)
rows. ``verify_path`` says so in telemetry ("padded"); the ragged layout is the next step.

Only the topk = 1 chain is cut; with a draft tree (topk > 1) the worker runs SGLang's stock behaviour and reports
``verify_path = "stock-tree"``.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController
from sglang_faser.spec.cost_model import VERIFY

logger = logging.getLogger(__name__)


class FaserWorkerMixin:
    """Mixed in front of ``EAGLEWorkerV2`` or ``StandaloneWorkerV2`` (see :func:`faser_worker_class`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faser_config = FaserConfig.from_env()
        self.faser = LengthController(self.faser_config, window=self.speculative_num_steps)
        self.faser_verify_path = "padded" if self.topk == 1 else "stock-tree"
        logger.info(
            "FASER worker on %s: window=%d topk=%d path=%s config=%s",
            type(self).__mro__[2].__name__,
            self.speculative_num_steps,
            self.topk,
            self.faser_verify_path,
            self.faser_config.to_json(),
        )

    # -- one decode step ---------------------------------------------------------------------------------
    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        spec_info = batch.spec_info
        if self.faser_verify_path != "padded" or batch.forward_mode.is_idle() or not batch.reqs:
            return super().verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)

        rids = [req.rid for req in batch.reqs]
        lengths = self.faser.decide(rids, padded_width=self.speculative_num_steps)
        self._cut_chains(spec_info, lengths)

        start = time.perf_counter()
        result = super().verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        self.faser.record_phase(
            VERIFY, len(rids), len(rids) * (self.speculative_num_steps + 1), (time.perf_counter() - start) * 1e3
        )
        result.cap_lens = torch.as_tensor(lengths, dtype=torch.int32)
        return result

    def _cut_chains(self, spec_info, lengths: np.ndarray) -> None:
        """End request i's draft chain after ``lengths[i]`` drafts (node k_i gets no successor)."""
        next_token = spec_info.retrieve_next_token
        width = next_token.shape[1]
        cut = torch.as_tensor(lengths, dtype=torch.long, device=next_token.device)
        rows = torch.nonzero(cut < width - 1).flatten()
        if rows.numel():
            next_token[rows, cut[rows]] = -1

    # -- SGLang's feedback hooks (base_spec_worker.py:379-403) ---------------------------------------------
    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size: int = 0) -> None:
        super().on_verify_complete_cpu(num_correct_drafts_per_req, batch_size)
        self.faser.observe(num_correct_drafts_per_req)

    def note_request_finished(self, *, rid: str, natural_stop: bool) -> None:
        super().note_request_finished(rid=rid, natural_stop=natural_stop)
        self.faser.forget(rid)


_CLASSES: dict[type, type] = {}


def faser_worker_class(base: type) -> type:
    """``FaserWorker`` over SGLang's worker class ``base`` (EAGLEWorkerV2 or a subclass of it)."""
    if base not in _CLASSES:
        _CLASSES[base] = type(f"Faser{base.__name__}", (FaserWorkerMixin, base), {})
    return _CLASSES[base]
