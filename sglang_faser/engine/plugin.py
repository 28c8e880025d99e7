"""sglang-faser's entry point in SGLang's ``sglang.srt.plugins`` group.

SGLang calls :func:`register` in every process it starts (launcher, ``sgl.Engine``, scheduler and detokenizer
children; sglang-0.5.23-map.md §8.1), before server arguments are resolved in the main process. It makes the
CPU path work and swaps SGLang's EAGLE / STANDALONE worker for the FASER worker whenever the launcher exported
``SGLANG_FASER_CONFIG`` (any mode: ``off`` still runs the worker, at length 0, so the control plane can turn it
back on). ``--faser-mode stock``, or a plain ``sglang.launch_server`` / ``sgl.Engine`` without that variable,
keeps stock SGLang behaviour.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def register() -> None:
    from sglang_faser import cpu_bootstrap

    cpu_bootstrap.install()
    if cpu_bootstrap.using_standin():
        from sglang_faser.engine import touchpoints
        from sglang_faser.kernels.cpu import allocator, threads

        allocator.retain_heap()  # a forward pass's temporaries reuse the heap instead of faulting it back in
        touchpoints.size_forward_threads(threads.ForwardThreads.from_env())  # small passes on one thread

        touchpoints.report_amx_on_cpu()
        touchpoints.enable_cpu_speculative_sampling()
        touchpoints.eager_draft_top_k_on_cpu()
        logger.info("sglang-faser: CPU stand-in for sgl_kernel active; intel_amx attention enabled")

    from sglang_faser.engine import touchpoints

    touchpoints.hook_worker_creation(_choose_worker)
    touchpoints.teach_intel_amx_ragged_verify()  # FASER's ragged verify passes on the CPU backend
    from sglang_faser.engine import control_bridge

    touchpoints.hook_internal_state(control_bridge.around_update_handlers, control_bridge.around_add_speculative)
    from sglang_faser.engine import request_checks

    touchpoints.hook_sampling_params_verify(request_checks.around_verify)
    touchpoints.hook_request_validation(request_checks.around_validate_one_request)
    from sglang_faser.engine import synthetic_acceptance

    synthetic_acceptance.install()  # benchmark-only; does nothing unless its environment variable is set
    from sglang_faser.engine import phase_times

    phase_times.install_from_env()  # benchmark-only, likewise
    from sglang_faser.engine import warmup

    warmup.register()  # SGLang's --warmups faser_depths (the launcher adds it where a GPU serves)


def _choose_worker(original_create_worker, algorithm, server_args):
    """AROUND hook on ``SpeculativeAlgorithm.create_worker`` (spec_info.py:311)."""
    worker_cls = original_create_worker(algorithm, server_args)
    from sglang_faser.engine import touchpoints
    from sglang_faser.spec.config import ENV_VAR

    if not os.environ.get(ENV_VAR):
        return worker_cls
    if touchpoints.dp_attention_enabled(server_args):
        # attention-DP ranks run different batches inside one TP group: rank 0's lengths cannot be theirs
        logger.warning("FASER: --enable-dp-attention is not supported yet; running %s unchanged", worker_cls.__name__)
        return worker_cls
    if not touchpoints.is_faser_capable_worker(worker_cls):
        logger.warning("FASER: %s is not an EAGLE v2 worker; running it unchanged", worker_cls.__name__)
        return worker_cls
    from sglang_faser.engine.worker import faser_worker_class

    touchpoints.lighten_forward_isolation()  # this scheduler process's speculative steps, parked ones too
    touchpoints.reserve_one_step_ahead(server_args)  # KV slots ahead of each running request: one step's
    return faser_worker_class(worker_cls)
