"""Every SGLang 0.5.23 symbol sglang-faser touches, in one place.

Line numbers refer to the sglang==0.5.23 wheel (see shared/docs/sglang-0.5.23-map.md). When SGLang is bumped,
re-check each entry here, then re-scan the wheel for new ``from sgl_kernel import *_cpu`` names
(``sglang_faser/kernels/cpu`` must provide them).

| symbol | why |
|---|---|
| ``sglang.srt.runtime_context.override_platform`` (:1950) | report AMX so that ``intel_amx`` attention, the only CPU backend with TARGET_VERIFY, is not replaced by ``torch_native`` (``srt/arg_groups/overrides.py:1301``) |
| ``sglang.srt.plugins.load_plugins`` (:103) | run our plugin in the launcher process before argument resolution |
| ``sglang.srt.server_args.prepare_server_args`` (:668) | parse the SGLang half of the launcher's command line |
| ``sglang.launch_server.run_server`` | start the real HTTP server |
| ``sglang.srt.utils.kill_process_tree`` | reap scheduler/detokenizer children when the launcher exits |
| ``sglang.srt.plugins.hook_registry.HookRegistry`` (AROUND) | install hooks from the plugin |
| ``sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker`` (:311) | hand the scheduler the FASER worker |
| ``sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2`` (:1297) | the class FaserWorker extends: ``forward_batch_generation`` (:1416), ``verify`` (:1979), ``adaptive_controller``, ``_draft_worker``, ``speculative_num_steps``, ``topk`` |
| ``sglang.srt.model_executor.cuda_graph_config.check_cuda_graph_backend`` | depth tiers on CPU need decode graphs off (a target graph runner cannot be built there) |
| ``sglang.srt.speculative.adaptive_runtime_state.AdaptiveController`` (:69) | builds one runtime state per draft depth at start-up and switches them per step |
| ``BaseSpecWorker.on_verify_complete_cpu`` / ``note_request_finished`` (base_spec_worker.py:379-395) | acceptance feedback, request end |
| ``EagleVerifyInput.retrieve_next_token`` (eagle_info.py:17) | cut a request's draft chain after k_i drafts |
| ``GenerationBatchResult.cap_lens`` (managers/utils.py:105) | per-request lengths into SGLang's metrics and ``meta_info`` |
| ``TpModelWorker.forward_batch_generation(forward_batch=..., is_verify=True)`` (tp_worker.py:622), called once by ``run_eagle_verify`` (eagle_worker_common.py:654) | replaced for that one call by FASER's frontier passes (``engine/frontier_verify.py``); each pass is a TARGET_VERIFY ``ForwardBatch`` copy with a subset of requests and ``seq_lens`` advanced by the rows before it; needs the intel_amx/chain semantics of ``_build_extend_metadata`` (intel_amx_backend.py:70): uniform ``draft_token_num`` rows, causal when ``tree_topk == 1`` |
| ``EagleDraftWorker.draft`` / ``draft_runner.forward`` / ``draft_attn_backend.attn_backends[i].draft_decode_metadata`` (eagle_worker_v2.py:660, :841; intel_amx_backend.py:483) | per-forward draft sub-batches (``engine/draft_cut.py``) and frontier verification between draft forwards (``engine/pipeline.py``) |
| ``forward_context`` / ``ForwardContext`` (model_executor/forward_context.py:86) | a target pass inside the draft loop must name the target's attention backend |
| ``EagleDraftInput.bonus_tokens``, ``ScheduleBatch.req_to_token_pool`` / ``seq_lens`` / ``req_pool_indices`` | the verify batch built during drafting: root token, positions ``seq_len + j``, KV slots ``req_to_token[req, seq_len + j]`` (eagle_utils.py:305, :152) |
| ``IntelAMXAttnBackend`` (intel_amx_backend.py:20) | the one target backend whose chain verify FASER splits into passes today (``verify_passes_supported``) |
| ``ForwardBatch``, ``ForwardMode.TARGET_VERIFY``, ``CaptureHiddenMode.FULL``, ``EagleVerifyInput`` (forward_batch_info.py:493, eagle_info.py:17), ``ModelRunner.forward`` (model_runner.py:1813) | dummy verify passes for the start-up cost profile (``engine/profiler.py``), as SGLang's cpu_graph_runner.py:841 builds them for capture |
| ``SchedulerInternalStateController._update_handlers`` / ``_add_speculative`` / ``_UpdateHandler`` / ``UpdateRejected`` (internal_state.py:146-170, :119, :290) | policy changes via ``/set_internal_state`` (numeric ``faser_*`` keys, ``SetInternalStateReq`` io_struct.py:2348) and FASER's telemetry in ``/server_info`` ``internal_states[i]["faser"]`` |
| ``Scheduler.draft_worker`` | the FASER worker the control bridge talks to |
| ``SamplingParams.verify`` (sampling_params.py:252, tokenizer_manager.py:1567), ``SamplingParams.custom_params`` (:180), ``Req.sampling_params`` | per-request ``{"faser": {...}}`` controls: checked in the HTTP process (400 on a bad value), read by the worker |
| ``sglang.srt.speculative.eagle_utils.eagle_sample`` (:521; returns ``predict``, ``accept_lens``, ``accept_index``), ``EagleVerifyInput.draft_token`` / ``retrieve_next_token`` / ``draft_token_num`` / ``tree_topk``, ``ScheduleBatch.reqs[i].rid`` | BENCHMARK-ONLY synthetic acceptance (``engine/synthetic_acceptance.py``, only when ``SGLANG_FASER_SYNTHETIC_ACCEPTANCE`` is set) |
| ``sglang.srt.speculative.eagle_utils``: ``_verify_uses_greedy`` (:485), ``tree_speculative_sampling_target_only``, ``top_k_renorm_prob``, ``top_p_renorm_prob`` | on CPU, verify by speculative sampling instead of SGLang's greedy-only path |
"""

from __future__ import annotations

_cpu_platform_override = None


def report_amx_on_cpu() -> None:
    """Make SGLang keep ``--attention-backend intel_amx`` on a CPU without AMX (idempotent).

    Only argument resolution reads ``has_amx``; ``cpu_has_amx_support()`` stays false because the stand-in never
    registers ``convert_weight_packed``, so every non-attention layer keeps its native PyTorch path
    (sglang-on-cpu.md §5).
    """
    global _cpu_platform_override
    if _cpu_platform_override is None:
        from sglang.srt.runtime_context import override_platform

        _cpu_platform_override = override_platform(has_amx=True)
        _cpu_platform_override.install()


def prepare_server_args(argv: list[str]):
    from sglang.srt.server_args import prepare_server_args as _prepare

    return _prepare(argv)


def load_plugins() -> None:
    from sglang.srt.plugins import load_plugins as _load

    _load()


def run_server(server_args) -> None:
    from sglang.launch_server import run_server as _run

    _run(server_args)


def kill_child_processes() -> None:
    import os

    from sglang.srt.utils import kill_process_tree

    kill_process_tree(os.getpid(), include_parent=False)


CREATE_WORKER = "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker"


def hook_worker_creation(hook) -> None:
    """Register ``hook(original, algorithm, server_args)`` AROUND ``create_worker`` (applied by load_plugins)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(CREATE_WORKER, hook, HookType.AROUND)


def is_faser_capable_worker(worker_cls) -> bool:
    """FASER extends the EAGLE v2 worker family (EAGLE, EAGLE3, STANDALONE), not multi-layer EAGLE."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    return (
        isinstance(worker_cls, type)
        and issubclass(worker_cls, EAGLEWorkerV2)
        and "MultiLayer" not in worker_cls.__name__
    )


def enable_cpu_speculative_sampling() -> None:
    """Make EAGLE/STANDALONE verification sample on CPU instead of committing the argmax (idempotent).

    SGLang forces greedy verification on CPU only because the platform lacks the sampling kernels; we supply
    PyTorch ones (``sglang_faser.kernels.cpu.sampling``) and drop the CPU clause from the greedy predicate.
    All-greedy batches still take SGLang's greedy path.
    """
    from sglang.srt.speculative import eagle_utils

    from sglang_faser.kernels.cpu import sampling

    if getattr(eagle_utils, "_faser_cpu_sampling", False):
        return
    original = eagle_utils._verify_uses_greedy

    def verify_uses_greedy(*, is_cpu: bool, **kwargs) -> bool:
        return original(is_cpu=False, **kwargs)

    eagle_utils._verify_uses_greedy = verify_uses_greedy
    eagle_utils.tree_speculative_sampling_target_only = sampling.tree_speculative_sampling_target_only_cpu
    if eagle_utils.top_k_renorm_prob is None:
        eagle_utils.top_k_renorm_prob = sampling.top_k_renorm_prob
    if eagle_utils.top_p_renorm_prob is None:
        eagle_utils.top_p_renorm_prob = sampling.top_p_renorm_prob
    eagle_utils._faser_cpu_sampling = True


def adaptive_controller(worker, policy):
    """SGLang's controller that pre-builds a runtime state per step count and applies one per step."""
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController

    return AdaptiveController(worker, policy)


def decode_graphs_disabled() -> bool:
    """Whether decode CUDA graphs are off (always so in practice on CPU, where none can be captured)."""
    from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, check_cuda_graph_backend

    return check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED)


# -- dummy target passes for the start-up cost profile (engine/profiler.py) ---------------------------------
def target_verify_mode():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ForwardMode.TARGET_VERIFY


def capture_full():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    return CaptureHiddenMode.FULL


def capture_null():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    return CaptureHiddenMode.NULL


def target_forward_context(runner, forward_batch):
    """The target's own attention backend for a target pass run inside the draft loop's forward context
    (``ModelRunner._forward_raw`` reuses an enclosing context, model_runner.py:1973)."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    return forward_context(ForwardContext(attn_backend=runner.attn_backend), forward_batch=forward_batch)


def forward_batch(**fields):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    return ForwardBatch(**fields)


def eagle_verify_input(*, topk: int, draft_token_num: int, spec_steps: int, capture_hidden_mode):
    """A verify input that only carries shapes (what SGLang's graph runners build for capture)."""
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    return EagleVerifyInput(
        draft_token=None, custom_mask=None, positions=None, retrieve_index=None, retrieve_next_token=None,
        retrieve_next_sibling=None, retrieve_cum_len=None, spec_steps=spec_steps, topk=topk,
        draft_token_num=draft_token_num, capture_hidden_mode=capture_hidden_mode, seq_lens_sum=None,
        seq_lens_cpu=None,
    )


# -- the control plane's path into every scheduler rank (engine/control_bridge.py) ---------------------------
INTERNAL_STATE = "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController"


def hook_internal_state(update_handlers_hook, add_speculative_hook) -> None:
    """AROUND ``_update_handlers`` (accept ``faser_*`` keys) and ``_add_speculative`` (report FASER's state)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(f"{INTERNAL_STATE}._update_handlers", update_handlers_hook, HookType.AROUND)
    HookRegistry.register(f"{INTERNAL_STATE}._add_speculative", add_speculative_hook, HookType.AROUND)


def update_handler(validate, apply):
    from sglang.srt.managers.scheduler_components.internal_state import _UpdateHandler

    return _UpdateHandler(validate, apply)


def update_rejected(message: str) -> Exception:
    from sglang.srt.managers.scheduler_components.internal_state import UpdateRejected

    return UpdateRejected(message)


# -- per-request controls checked in the HTTP process (engine/request_checks.py) ------------------------------
def hook_sampling_params_verify(hook) -> None:
    """AROUND ``SamplingParams.verify`` (sampling_params.py:252), called by the tokenizer manager (:1567)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.sampling.sampling_params.SamplingParams.verify", hook, HookType.AROUND)


def verify_passes_supported(worker) -> bool:
    """Whether FASER may split TARGET_VERIFY into ragged / frontier passes on this target backend.

    A pass is a TARGET_VERIFY ``ForwardBatch`` with fewer requests and rows; that is exact when the backend derives
    a plain causal chain mask from ``seq_lens`` and ``draft_token_num`` (intel_amx: ``_build_extend_metadata``,
    intel_amx_backend.py:70, no custom mask when ``tree_topk == 1``). GPU backends read ``spec_info.custom_mask``
    and plan per batch size; until their pass layout is built and measured they keep SGLang's single pass.
    """
    from sglang.srt.layers.attention.intel_amx_backend import IntelAMXAttnBackend

    backend = getattr(worker.target_worker.model_runner, "attn_backend", None)
    return worker.topk == 1 and isinstance(backend, IntelAMXAttnBackend)


# -- benchmark-only synthetic acceptance (engine/synthetic_acceptance.py) ------------------------------------
def hook_eagle_sample(hook) -> None:
    """AROUND ``eagle_utils.eagle_sample`` (:521); the registry also rebinds ``eagle_worker_common``'s import."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.speculative.eagle_utils.eagle_sample", hook, HookType.AROUND)
