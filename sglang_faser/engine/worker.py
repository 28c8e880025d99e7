"""``FaserWorker``: SGLang's EAGLE v2 worker (and its STANDALONE subclass) with FASER's decode step.

A few one-line overrides hand every decode step to :class:`~sglang_faser.engine.step.FaserEngine` (decide ->
draft -> verify -> commit -> record, in ``engine/step.py``) and SGLang's feedback hooks
(``on_verify_complete_cpu``, ``note_request_finished``; base_spec_worker.py:379-395) to its controller. Prefill,
idle batches and draft trees (topk > 1) run SGLang's own code unchanged.
"""

from __future__ import annotations

from sglang_faser.engine.step import FaserEngine


class FaserWorkerMixin:
    """Mixed in front of ``EAGLEWorkerV2`` or ``StandaloneWorkerV2`` (see :func:`faser_worker_class`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faser = FaserEngine(self)

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        return self.faser.forward(batch, on_publish, grammar_barrier, pp_proxy_tensors,
                                  stock=super().forward_batch_generation)

    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size: int = 0) -> None:
        super().on_verify_complete_cpu(num_correct_drafts_per_req, batch_size)
        self.faser.observe(num_correct_drafts_per_req)

    def note_request_finished(self, *, rid: str, natural_stop: bool) -> None:
        super().note_request_finished(rid=rid, natural_stop=natural_stop)
        self.faser.forget(rid)

    # the control plane (engine/control_bridge.py)
    def faser_apply_policy(self, config, version: int) -> None:
        self.faser.apply_policy(config, version)

    def faser_report(self) -> dict:
        return self.faser.report()


_CLASSES: dict[type, type] = {}


def faser_worker_class(base: type) -> type:
    """``FaserWorker`` over SGLang's worker class ``base`` (EAGLEWorkerV2 or a subclass of it)."""
    if base not in _CLASSES:
        _CLASSES[base] = type(f"Faser{base.__name__}", (FaserWorkerMixin, base), {})
    return _CLASSES[base]
