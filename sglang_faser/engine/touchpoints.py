"""The SGLang adapter: every SGLang 0.5.23 import, attribute access and patch sglang-faser makes, in one place.

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
| ``ModelRunner.forward`` (model_runner.py:1813; BEFORE, its ``ForwardBatch.input_ids``) | small forward passes on one intra-op thread on CPU (``kernels/cpu/threads.py``) |
| ``sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker`` (:311) | hand the scheduler the FASER worker |
| ``sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2`` (:1297) | the class FaserWorker extends; ``engine/step.py`` runs its decode branch's pieces in its order (:1445-1505): ``activate_step_by_batch``, ``draft_worker.draft`` (in ``draft_tp_context`` / MoE contexts / ``spec_stage_span``), ``_build_trivial_verify_input`` (depth 0), ``verify`` (:1979), ``_draft_extend_for_decode`` or ``_stub_skipped_draft_extend`` (``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND``); ``adaptive_controller``, ``_draft_worker``, ``speculative_num_steps``, ``topk`` |
| ``sglang.srt.runtime_context.get_parallel`` (``pp_size``, ``tp_group.cpu_group`` / ``ranks`` / ``world_size``) | PP runs SGLang's step; rank 0's lengths are broadcast over the TP group's CPU group (``engine/rank_sync.py``) |
| ``sglang.srt.model_executor.cuda_graph_config.check_cuda_graph_backend`` | depth tiers on CPU need decode graphs off (a target graph runner cannot be built there) |
| ``sglang.srt.speculative.adaptive_runtime_state.AdaptiveController`` (:69) | builds one runtime state per draft depth at start-up and switches them per step |
| ``BaseSpecWorker.on_verify_complete_cpu`` / ``note_request_finished`` (base_spec_worker.py:379-395) | acceptance feedback, request end |
| ``TpModelWorker.forward_batch_generation(batch, capture_hidden_mode=...)`` on a ``ForwardMode.DECODE`` copy of the ``ScheduleBatch`` (tp_worker.py:622; ``req_to_token_pool``, ``seq_lens`` / ``seq_lens_cpu`` / ``orig_seq_lens``, ``EagleDraftInput.bonus_tokens``), ``GenerationBatchResult`` (managers/utils.py:56), ``ModelRunner.decode_cuda_graph_runner`` / ``watermark_state``, ``SamplingBatchInfo.penalizer_orchestrator`` / ``logit_bias`` / ``has_custom_logit_processor``, ``ScheduleBatch.has_grammar`` / ``return_logprob`` / ``hisparse_coordinator`` / ``mamba_track_indices`` | a step where nobody drafts runs as the target's plain decode (``plain_decode``) where none of the features SGLang's verify handles is in play and the target runs eagerly |
| ``EagleDraftWorker.cuda_graph_runner_for_draft_extend`` (its ``can_run_graph`` / ``execute(forward_batch, select_index)`` contract, eagle_worker_v2.py:1182-1243) / ``seed_dsa_topk_from_draft_extend``, ``EagleDraftExtendInput.select_index`` (read by ``LogitsMetadata`` in DRAFT_EXTEND_V2, logits_processor.py:392), ``draft_runner.attn_backend.init_forward_metadata``, ``ForwardBatch.mark_forward_metadata_ready`` | an eager draft's draft-extend runs its LM head on each request's last accepted row only, as SGLang's graph runner does (``_SelectedRowsExtend``) |
| ``EagleVerifyInput.draft_token`` / ``draft_token_num``, ``LogitsProcessorOutput.hidden_states`` | the verified windows' roots (and EAGLE's target features there) of requests at k_i = 0, kept for their draft's catch-up (``skipped_rows``) |
| ``EagleDraftWorker._draft_extend_for_prefill`` (eagle_worker_v2.py:961; ``ScheduleBatch.extend_lens`` / ``input_ids`` / ``chunked_req_next_prompt_token``, ``EagleDraftInput``, ``EAGLEWorkerV2._stub_skipped_draft_extend``) | a prefill while decode steps are parked skips the draft model; its prompt's last rows go to the draft backlog (``lazy_draft_prefill``) |
| ``EagleVerifyInput.retrieve_next_token`` (eagle_info.py:17) | cut a request's draft chain after k_i drafts |
| ``GenerationBatchResult.cap_lens`` (managers/utils.py:105) | per-request lengths into SGLang's metrics and ``meta_info`` |
| ``ScheduleBatch.spec_info`` at a step's start, ``EagleDraftInput.topk_p`` / ``topk_index`` / ``hidden_states`` (eagle_info.py:157) | a step where nobody drafts reuses the draft state it began with as the next state's stubs (``skip_draft_extend``; ``filter_batch`` / ``merge_batch`` copy them, the overlap FutureMap stashes copies) |
| ``TpModelWorker.forward_batch_generation(forward_batch=..., is_verify=True)`` (tp_worker.py:622), called once by ``run_eagle_verify`` (eagle_worker_common.py:654) | replaced for that one call by FASER's ragged passes (``engine/verify.py``): one TARGET_VERIFY ``ForwardBatch`` copy per frontier with the live requests, ``seq_lens`` advanced by the frontier's row offset and a ``RaggedVerifyLayout`` (``speculative/ragged_verify.py:46``) of each request's rows |
| ``EagleDraftWorker.draft`` / ``draft_runner.forward`` / ``draft_attn_backend.attn_backends[i].draft_decode_metadata`` (eagle_worker_v2.py:660, :841; intel_amx_backend.py:483) | per-forward draft sub-batches (``engine/draft_cut.py``) and frontier verification between draft forwards (``engine/pipeline.py``); under CUDA-graph replay the hooked ``forward`` is never called, which the step reports as ``full-depth`` |
| ``forward_context`` / ``ForwardContext`` (model_executor/forward_context.py:86) | a target pass inside the draft loop must name the target's attention backend |
| ``EagleDraftInput.bonus_tokens``, ``ScheduleBatch.req_to_token_pool`` / ``seq_lens`` / ``req_pool_indices`` | the verify batch built during drafting: root token, positions ``seq_len + j``, KV slots ``req_to_token[req, seq_len + j]`` (eagle_utils.py:305, :152) |
| ``IntelAMXAttnBackend._build_extend_metadata`` (intel_amx_backend.py:70, AROUND) | TARGET_VERIFY with a ``RaggedVerifyLayout``: per-request extend lengths instead of the uniform ``draft_token_num`` (causal chain, topk 1); fa3 / trtllm_mha / flashinfer read the layout themselves (enabled with ``SGLANG_FASER_GPU_RAGGED=1`` until checked on a GPU) |
| ``ForwardBatch``, ``ForwardMode.TARGET_VERIFY``, ``CaptureHiddenMode.FULL``, ``EagleVerifyInput`` (forward_batch_info.py:493, eagle_info.py:17), ``ModelRunner.forward`` (model_runner.py:1813) | dummy verify passes for the start-up cost profile (``engine/profiler.py``), as SGLang's cpu_graph_runner.py:841 builds them for capture |
| ``SchedulerInternalStateController._update_handlers`` / ``_add_speculative`` / ``_UpdateHandler`` / ``UpdateRejected`` (internal_state.py:146-170, :119, :290) | policy changes via ``/set_internal_state`` (numeric ``faser_*`` keys, ``SetInternalStateReq`` io_struct.py:2348) and FASER's telemetry in ``/server_info`` ``internal_states[i]["faser"]`` |
| ``Scheduler.draft_worker`` | the FASER worker the control bridge talks to |
| ``Scheduler._forward_isolation`` (scheduler.py:4570; ``record_batch_in_overlap``, ``SamplingBatchInfo.copy_for_forward``, ``ScheduleBatch.spec_algorithm``) | a FASER server's speculative batch snapshot and restore through the batch's ``__dict__`` (``lighten_forward_isolation``) |
| ``SamplingParams.verify`` (sampling_params.py:252, tokenizer_manager.py:1567), ``SamplingParams.custom_params`` (:180), ``Req.sampling_params`` | per-request ``{"faser": {...}}`` controls: checked in the HTTP process (400 on a bad value), read by the worker |
| ``TokenizerManager._validate_one_request`` (tokenizer_manager.py:1307), ``TokenizerManager.model_config.vocab_size``, ``GenerateReqInput.image_data`` / ``video_data`` / ``audio_data`` / ``input_embeds`` | a request's ``input_ids`` checked against the vocabulary in the HTTP process (400; SGLang's scheduler died on one past it) |
| ``sglang.srt.speculative.eagle_utils.eagle_sample`` (:521; returns ``predict``, ``accept_lens``, ``accept_index``), ``EagleVerifyInput.draft_token`` / ``retrieve_next_token`` / ``draft_token_num`` / ``tree_topk``, ``ScheduleBatch.reqs[i].rid`` | BENCHMARK-ONLY synthetic acceptance (``engine/synthetic_acceptance.py``, only when ``SGLANG_FASER_SYNTHETIC_ACCEPTANCE`` is set) |
| ``Scheduler.ingest_requests`` / ``get_next_batch_to_run`` / ``run_batch`` / ``process_batch_result`` (scheduler.py:2184, :3894, :4614, :5074), ``TpModelWorker.forward_batch_generation`` (tp_worker.py:622), ``ScheduleBatch.forward_mode`` | BENCHMARK-ONLY phase times of each scheduler iteration (``engine/phase_times.py``, only when ``SGLANG_FASER_PHASE_TIMES`` is set) |
| ``sglang.srt.entrypoints.warmup.warmup`` (registry of ``--warmups`` names, run before the HTTP server serves), ``TokenizerManager.generate_request`` / ``get_internal_state`` (``effective_max_running_requests_per_dp``, ``faser``), ``GenerateReqInput`` | the start-up warm-up (``engine/warmup.py``) |
| ``sglang.srt.speculative.eagle_utils``: ``_verify_uses_greedy`` (:485), ``tree_speculative_sampling_target_only``, ``top_k_renorm_prob``, ``top_p_renorm_prob`` | on CPU, verify by speculative sampling instead of SGLang's greedy-only path |
"""

from __future__ import annotations

import copy
import functools
import logging
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np

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


def time_scheduler_phases(times) -> None:
    """BENCHMARK-ONLY (``engine/phase_times.py``): time ``Scheduler.ingest_requests`` / ``get_next_batch_to_run`` /
    ``run_batch`` / ``process_batch_result`` and the target's ``TpModelWorker.forward_batch_generation`` in this
    process, each scheduler iteration (from one ``ingest_requests`` to the next) a sample under the size of the
    decode batch it ran."""
    import time

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.tp_worker import TpModelWorker

    def timed(cls, name: str, phase: str, before=None):
        original = getattr(cls, name)

        @functools.wraps(original)
        def run(self, *args, **kwargs):
            if before is not None:
                before(*args, **kwargs)
            began = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                times.add(phase, time.perf_counter() - began)

        setattr(cls, name, run)

    def decode_batch(batch, *args, **kwargs):
        if batch is not None and batch.forward_mode.is_decode():
            times.ran(len(batch.reqs))

    timed(Scheduler, "ingest_requests", "ingest", before=lambda *a, **k: times.next_iteration())
    timed(Scheduler, "get_next_batch_to_run", "schedule")
    timed(Scheduler, "run_batch", "run", before=decode_batch)
    timed(Scheduler, "process_batch_result", "results")
    timed(TpModelWorker, "forward_batch_generation", "forward")


@functools.cache
def _field_names(cls) -> tuple[str, ...]:
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(cls))


def reserve_one_step_ahead(server_args) -> bool:
    """In a FASER server's scheduler process without the overlap scheduler (every speculative server on CPU):
    each running request reserves one step's KV slots ahead of its committed length (``get_alloc_len_per_decode``:
    the window's rows) instead of SGLang's two (``get_alloc_reserve_per_decode``, allocation_sizing.py:64, a
    double buffer for the overlap scheduler's lag of ``kv_committed_len``; without that scheduler the committed
    length is current when the next step allocates, and a step writes at most the window's rows past it). The
    second step's slots held 16 of every running request's KV slots at a window of 7, where no speculation
    holds one: at 16384 tokens and Gamma 64 on CPU (96 requests running) FASER's worker held at length 0 had its KV
    0.80 used against no speculation's 0.71 and queued arrivals that no speculation ran, at 0.90-0.91x of its
    tokens/s (two runs; 1.11x with a KV pool 4x as large; 1.01x with one step reserved, `serve_bench_s60-g64-*`).
    Returns whether it applies (idempotent)."""
    if not server_args.disable_overlap_schedule:
        return False
    from sglang.srt.managers import schedule_batch
    from sglang.srt.mem_cache import allocation_sizing
    from sglang.srt.speculative import eagle_utils

    one_step = allocation_sizing.get_alloc_len_per_decode
    for module in (allocation_sizing, schedule_batch, eagle_utils):  # each imported the name for itself
        module.get_alloc_reserve_per_decode = one_step
    return True


def lighten_forward_isolation() -> None:
    """In a FASER server's scheduler process (idempotent): ``Scheduler._forward_isolation`` (scheduler.py:4570)
    snapshots every dataclass field of a speculative batch around the forward and restores them afterwards, with a
    ``dataclasses.fields`` walk and 99 ``getattr`` and ``setattr`` calls a step: 30 us on a warm CPU, more after a
    forward has cooled the caches, and as much for a parked step (a plain decode) as for a drafting one. Here the
    same snapshot is one C-level read of the batch's ``__dict__`` by the field names (cached per class) and the
    restore one ``__dict__.update``; the rest calls SGLang's own pieces (the forward-only sampling-info copy, the
    overlap pin).
    A batch without speculation, or one missing a field in its ``__dict__``, runs SGLang's own."""
    import operator

    from sglang.srt.managers.scheduler import Scheduler

    original = Scheduler._forward_isolation
    if getattr(original, "faser_light", False):
        return

    @contextmanager
    def isolation(self, batch, *, overlap: bool):
        names = _field_names(type(batch))
        state = vars(batch)
        try:
            snapshot = None if batch.spec_algorithm.is_none() else operator.itemgetter(*names)(state)
        except KeyError:
            snapshot = None
        if snapshot is None:
            with original(self, batch, overlap=overlap):
                yield
            return
        if batch.sampling_info is not None:
            batch.sampling_info = batch.sampling_info.copy_for_forward()
        if overlap:
            self.record_batch_in_overlap(batch)
        try:
            yield
        finally:
            state.update(zip(names, snapshot))

    isolation.faser_light = True
    Scheduler._forward_isolation = isolation


def is_faser_capable_worker(worker_cls) -> bool:
    """FASER extends the EAGLE v2 worker family (EAGLE, EAGLE3, STANDALONE), not multi-layer EAGLE."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    return (
        isinstance(worker_cls, type)
        and issubclass(worker_cls, EAGLEWorkerV2)
        and "MultiLayer" not in worker_cls.__name__
    )


def dp_attention_enabled(server_args) -> bool:
    return bool(getattr(server_args, "enable_dp_attention", False))


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


def eager_draft_top_k_on_cpu() -> None:
    """Run SGLang's draft token pick (``spec_utils._select_top_k_tokens_later``, ``torch.compile(dynamic=True)``)
    eagerly on CPU (idempotent). On a GPU its compiles happen in CUDA-graph capture at start-up; on CPU nothing
    captures it, so a server's first steps that drafted two tokens or more stalled for its compiles (3.2 s at batch
    1 and 0.5 s more at batch 2 with a draft's hidden state, the same again without), and the compiled call costs
    more than the eager one at these sizes (52-65 against 24-49 us, batches of 1-16, one thread)."""
    from sglang.srt.speculative import spec_utils

    compiled = spec_utils._select_top_k_tokens_later
    spec_utils._select_top_k_tokens_later = getattr(compiled, "__wrapped__", compiled)


def size_forward_threads(threads) -> None:
    """BEFORE every ``ModelRunner.forward`` (model_runner.py:1813), target and draft alike: ``threads.before``
    with the pass's token count (``kernels/cpu/threads.py``: small passes on one intra-op thread)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def before(runner, *args, **kwargs):
        forward_batch = args[0] if args else kwargs.get("forward_batch")
        input_ids = getattr(forward_batch, "input_ids", None)
        if input_ids is not None:
            threads.before(int(input_ids.shape[0]))

    HookRegistry.register("sglang.srt.model_executor.model_runner.ModelRunner.forward", before, HookType.BEFORE)


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


def hook_request_validation(hook) -> None:
    """AROUND ``TokenizerManager._validate_one_request(obj, input_ids)`` (tokenizer_manager.py:1307), which runs
    in the HTTP process for every generate and embedding request, after tokenization."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request", hook,
                          HookType.AROUND)


def text_vocab_size(manager, obj) -> int | None:
    """The vocabulary a request's ``input_ids`` index, or None where they may hold other ids (a multimodal request's
    placeholders, which its processor expands) or there are none to check (``input_embeds``)."""
    other = ("image_data", "video_data", "audio_data", "input_embeds")
    if any(getattr(obj, name, None) is not None for name in other):
        return None
    return manager.model_config.vocab_size


# -- benchmark-only synthetic acceptance (engine/synthetic_acceptance.py) ------------------------------------
def hook_eagle_sample(hook) -> None:
    """AROUND ``eagle_utils.eagle_sample`` (:521); the registry also rebinds ``eagle_worker_common``'s import."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.speculative.eagle_utils.eagle_sample", hook, HookType.AROUND)


# == the decode step's SGLang side (engine/step.py, verify.py, draft_cut.py, pipeline.py) ======================
# Every read or write of an SGLang object the decode step makes is one of the functions below; the step works on
# NumPy arrays and plain tensors. ``SGLANG_NAMES`` lists the SGLang attributes involved so that a test can check
# that no other engine module reaches them directly (tests/engine/test_adapter_boundary.py).
SGLANG_NAMES = frozenset({
    "attn_backend", "attn_backends", "bonus_tokens", "cap_lens", "custom_params", "draft_attn_backend",
    "draft_decode_metadata", "draft_runner", "draft_token", "draft_token_num", "draft_worker", "forward_mode",
    "hidden_states", "input_ids", "is_extend_in_batch", "logits_output", "model_runner", "next_token_logits",
    "out_cache_loc", "positions", "ragged_verify_layout", "req_pool_indices", "req_to_token_pool", "reqs",
    "retrieve_next_token", "sampling_info", "sampling_params", "scheduler", "seq_lens", "seq_lens_cpu",
    "spec_algorithm", "spec_info", "speculative_num_steps", "target_worker", "topk", "tree_topk",
    "adaptive_controller", "_draft_worker", "activate_step_by_batch", "forward_batch_generation",
    "_draft_extend_for_decode", "_build_trivial_verify_input", "tp_group", "tp_size", "new_seq_lens",
    "accept_lens", "kv_loc_plan", "_stub_skipped_draft_extend", "_draft_extend_for_prefill", "speculative_algorithm",
    "topk_p", "topk_index", "req_pool_indices_cpu", "orig_seq_lens", "prefix_lens", "extend_lens",
    "extend_logprob_start_lens", "extend_num_tokens", "return_logprob", "has_grammar", "chunked_req",
    "chunked_req_next_prompt_token", "multimodal_inputs", "input_embeds", "decoding_reqs", "seq_lens_sum",
})


@dataclass
class StepBatch:
    """What the FASER step needs to know about a decode batch, read once."""

    rids: list
    controls: list  # each request's ``custom_params`` (checked in the HTTP process)
    context_lens: np.ndarray  # [B] each request's committed length: the context its verify rows attend to

    @functools.cached_property
    def context(self) -> int:
        """The batch's context tokens: summed only where a step is priced (a held step is not; the sum, the first
        NumPy call after the scheduler's work, cost a batch-1 step on CPU about 18 us)."""
        return int(self.context_lens.sum())


def worker_settings(worker) -> tuple[int, int, str]:
    """(draft window = speculative_num_steps, topk, device) of an EAGLE v2 worker."""
    return worker.speculative_num_steps, worker.topk, str(worker.device)


def install_depth_tiers(worker, tiers) -> bool:
    """One runtime state per draft depth, switched per step by SGLang's own ``AdaptiveController``
    (eagle_worker_v2.py:1777); False where SGLang's adaptive mode already owns it or there is no draft worker."""
    if worker.adaptive_controller is not None or worker._draft_worker is None:
        return False
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController

    worker.adaptive_controller = AdaptiveController(worker, tiers)
    logging.getLogger("sglang.srt.speculative.eagle_worker_v2").addFilter(_quiet_tier_switches)
    return True


def _quiet_tier_switches(record: logging.LogRecord) -> bool:
    """SGLang logs every runtime-state switch at INFO; with depth tiers FASER switches most steps by design (154
    lines in a 3-minute CPU run), so those lines are dropped and the rest of the module's log kept."""
    return not str(record.msg).startswith("Switch adaptive runtime state")


def decode_step_kind(batch) -> str:
    """"prefill", "stock" (idle, empty, PP pre-built verify input or no draft state: SGLang's own path) or
    "decode" (a step FASER plans)."""
    if batch.forward_mode.is_idle() or not batch.reqs:
        return "stock"
    if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
        return "prefill"
    spec = batch.spec_info
    if spec is None or spec.is_verify_input() or _pp_size() > 1:
        return "stock"
    return "decode"


@functools.cache
def _pp_size() -> int:
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().pp_size


def request_ids(batch) -> list:
    return [req.rid for req in batch.reqs]


def step_batch(batch) -> StepBatch:
    return StepBatch(
        rids=request_ids(batch),
        controls=[req.sampling_params.custom_params for req in batch.reqs],
        context_lens=(batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens.cpu()).numpy(),
    )


def prunable_requests(batch) -> np.ndarray:
    """[B] bool: requests whose acceptance is a plain argmax check (greedy; no grammar, penalties, bias or
    watermark), so an early rejection is final."""
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


def broadcast_group(worker):
    """(CPU process group, source rank) over which rank 0's decision reaches every TP rank; (None, 0) without TP.

    SGLang broadcasts verify results from TP rank 0 over the same group (tp_worker.py:373). With DP attention the
    attention-DP ranks of one TP group share it, so one broadcast covers both."""
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().tp_group
    if group is None or group.world_size <= 1:
        return None, 0
    return group.cpu_group, group.ranks[0]


def activate_depth(worker, batch_size: int) -> None:
    """SGLang's tier switch (``activate_step_by_batch``): the depth tiers answer with this step's depth."""
    worker.activate_step_by_batch(batch_size)


def draft(worker, batch):
    """SGLang's draft for the batch (``EagleDraftWorker.draft``, in the contexts its own decode step uses)."""
    with _draft_contexts(worker, "draft"):
        return worker.draft_worker.draft(batch)


def plain_decode_input(worker, batch):
    """A one-node verify input (``_build_trivial_verify_input``): the target decodes one token per request."""
    return worker._build_trivial_verify_input(batch)


def plain_decode_supported(worker, batch) -> bool:
    """Whether a step where nobody drafts can run as the target's plain decode (``plain_decode``): an eager target
    (a captured TARGET_VERIFY graph already makes the one-row verify a plain decode), a single-node chain, and none
    of the features SGLang's verify handles itself (grammar, logprobs, penalties, logit bias, custom logit
    processors, hierarchical sparse KV, mamba state, watermarks)."""
    runner = worker.target_worker.model_runner
    info = batch.sampling_info
    penalties = getattr(info, "penalizer_orchestrator", None)
    return (runner.decode_cuda_graph_runner is None and worker.topk == 1 and not batch.forward_mode.is_idle()
            and not batch.has_grammar and not batch.return_logprob and info is not None
            and (penalties is None or not penalties.is_required) and info.logit_bias is None
            and not info.has_custom_logit_processor and batch.hisparse_coordinator is None
            and batch.mamba_track_indices is None and runner.watermark_state is None)


def plain_decode(worker, batch):
    """A step where nobody drafts, as the target's plain decode (``TpModelWorker.forward_batch_generation`` on a
    DECODE copy of the batch: KV slot ``req_to_token[req, seq_len]``, the last verified token as input, SGLang's
    sampler) instead of a one-row TARGET_VERIFY with its verify bookkeeping. Returns (result, tokens): a result
    shaped like the one-node verify's (``_build_trivial_verify_input``: one accepted row per request, the sampled
    token as the next bonus token) and the token each request decoded from (its row for the draft backlog).
    Each tensor op here costs a small CPU batch's step about 1 % (cold caches after the forward), so the step does
    only the ones a decode needs."""
    import torch

    result_type, decode_mode, draft_input_type = _plain_decode_types()
    bs, tokens = len(batch.reqs), batch.spec_info.bonus_tokens
    runner = worker.target_worker.model_runner
    step = copy.copy(batch)
    step.forward_mode, step.spec_info, step.input_ids = decode_mode, None, tokens
    step.out_cache_loc = batch.req_to_token_pool.req_to_token[batch.req_pool_indices, batch.seq_lens].to(torch.int64)
    step.seq_lens = batch.seq_lens + 1
    step.seq_lens_cpu = None if batch.seq_lens_cpu is None else batch.seq_lens_cpu + 1
    step.orig_seq_lens = None if batch.orig_seq_lens is None else batch.orig_seq_lens + 1
    step.seq_lens_sum = None if batch.seq_lens_sum is None else batch.seq_lens_sum + bs
    capture = capture_null() if runner.spec_algorithm.is_standalone() else capture_full()
    out = worker.target_worker.forward_batch_generation(step, capture_hidden_mode=capture)
    predict = out.next_token_ids.to(torch.int32)
    accept_lens, accept_index = _one_row_each(bs, predict.device)
    result = result_type(
        logits_output=out.logits_output,
        next_token_ids=predict,
        can_run_cuda_graph=out.can_run_cuda_graph,
        speculative_num_draft_tokens=1,
        next_draft_input=draft_input_type(bonus_tokens=predict),
        accept_lens=accept_lens,
        accept_index=accept_index,
        new_seq_lens=step.seq_lens,
    )
    batch.input_ids, batch.out_cache_loc = tokens, step.out_cache_loc  # what the one-row verify leaves there
    return result, tokens


@functools.cache
def _plain_decode_types():
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    return GenerationBatchResult, ForwardMode.DECODE, EagleDraftInput


_BATCH_CONSTANTS: dict = {}


def _batch_constant(name: str, bs: int, device, make):
    """A tensor (or tuple of them) that depends on the batch size alone, made once per (name, size, device) by
    ``make``: SGLang only reads these (``tolist`` in its result processing, indexing elsewhere), and making them
    each step was a parked step's host work."""
    key = (name, bs, device)
    value = _BATCH_CONSTANTS.get(key)
    if value is None:
        value = _BATCH_CONSTANTS[key] = make()
    return value


def _one_row_each(bs: int, device):
    """(accept_lens [bs] of ones, accept_index [bs, 1] = row i) of a plain decode's result."""
    import torch

    return _batch_constant("one_row_each", bs, device, lambda: (
        torch.ones(bs, dtype=torch.int32, device=device),
        torch.arange(bs, dtype=torch.int64, device=device).unsqueeze(1)))


def verify(worker, batch, verify_input, pp_proxy_tensors, grammar_barrier):
    """SGLang's verify (``EAGLEWorkerV2.verify`` -> ``run_eagle_verify``): sample, accept, commit."""
    batch.spec_info = verify_input
    return worker.verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)


def publish(on_publish, result) -> None:
    """Tell the scheduler the new sequence lengths before the draft-extend (its overlap FutureMap, :1490)."""
    if on_publish is not None:
        on_publish(result.new_seq_lens)


def draft_extend(worker, batch, result, verify_input) -> None:
    """SGLang's draft-extend over the verify window (``_draft_extend_for_decode``)."""
    with _draft_contexts(worker, "draft_extend"), _selected_rows_extend(worker.draft_worker):
        worker.draft_worker._draft_extend_for_decode(batch, result, kv_loc_plan=verify_input.kv_loc_plan)


class _SelectedRowsExtend:
    """SGLang's draft-extend graph runner's contract (``can_run_graph``, ``execute(forward_batch, select_index)``)
    for an eager draft: the extend runs over every verified row (B x (d + 1)), but the draft's LM head only over
    each request's last accepted row (``EagleDraftExtendInput.select_index``, which SGLang's logits processor
    honours in DRAFT_EXTEND_V2), as SGLang's graph runner does. SGLang's eager path computes every row's logits and
    keeps B of them; on CPU the LM head (vocabulary x hidden) is most of a small draft's cost a row."""

    def __init__(self, runner):
        self.runner = runner

    def can_run_graph(self, forward_batch) -> bool:
        return not forward_batch.forward_mode.is_idle()

    def execute(self, forward_batch, select_index):
        runner = self.runner
        forward_batch.spec_info.select_index = select_index
        runner.attn_backend.init_forward_metadata(forward_batch)  # skipped by SGLang where a graph runner replays
        forward_batch.mark_forward_metadata_ready()
        out = runner.forward(forward_batch).logits_output
        hidden = out.hidden_states  # FULL capture keeps every row's: the selected ones, as the graph returns
        if hidden is not None and hidden.shape[0] != select_index.shape[0]:
            out.hidden_states = hidden[select_index]
        return out


def _selected_rows_extend(draft_worker):
    """For one draft-extend of an eager draft: ``_SelectedRowsExtend`` in the graph runner's place (none there;
    not where SGLang seeds a DSA indexer from the extend, which reads the graph runner's buffers)."""
    if draft_worker.cuda_graph_runner_for_draft_extend is not None or draft_worker.seed_dsa_topk_from_draft_extend:
        return nullcontext()
    return patched(draft_worker, "cuda_graph_runner_for_draft_extend", _SelectedRowsExtend(draft_worker.draft_runner))


def draft_state(batch):
    """The draft state a decode step begins from (``batch.spec_info``: an ``EagleDraftInput`` until the verify
    replaces it with its verify input)."""
    return batch.spec_info


# -- k = 0: no draft-extend for a request that drafts nothing, then one catch-up pass (engine/draft_backlog.py) ----
def skip_draft_extend(worker, batch, result, start) -> None:
    """Skip the draft-extend of a step where nobody drafted. The next step's draft state needs shape-valid stubs
    (SGLang's ``_stub_skipped_draft_extend`` allocates zeroed ones); ``start``, the draft state the step began
    from (``batch.spec_info`` before the verify replaced it), serves where it has the batch's shape, so a parked
    batch's steps allocate none. No draft reads these rows before the requests draft again, and each catches up
    first (a parked step puts every request's row in the backlog; the catch-up writes its new state into a
    copy); the overlap scheduler's FutureMap copies them, and filtering a batch index-copies them."""
    bs = batch.seq_lens.shape[0]
    topk_p, topk_index = getattr(start, "topk_p", None), getattr(start, "topk_index", None)
    hidden = getattr(start, "hidden_states", None)
    if (topk_p is not None and topk_index is not None and topk_p.shape[0] == bs and topk_index.shape[0] == bs
            and (worker.speculative_algorithm.is_standalone() if hidden is None else hidden.shape[0] == bs)):
        out = result.next_draft_input
        out.topk_p, out.topk_index = topk_p, topk_index
        if hidden is not None:  # STANDALONE's stub leaves the hidden state as it is
            out.hidden_states = hidden
        return
    worker._stub_skipped_draft_extend(batch, result)


def draft_extend_members(worker, batch, result, verify_input, members: list[int]) -> None:
    """SGLang's draft-extend (``_draft_extend_for_decode``) over the verify windows of the requests at batch rows
    ``members`` only: a sub-batch and a sub-result hold their rows, and their new draft state is written into the
    step's ``next_draft_input``; the other requests keep SGLang's stubs there until they catch up."""
    import torch

    bs, width = len(batch.reqs), verify_input.draft_token_num
    worker._stub_skipped_draft_extend(batch, result)
    index = host_to_device(members, batch.seq_lens.device)
    rows = (index[:, None] * width + torch.arange(width, device=index.device)).flatten()
    sub = _sub_batch(batch, members, index)
    assert batch.out_cache_loc.numel() == bs * width, (batch.out_cache_loc.shape, bs, width)
    sub.out_cache_loc = batch.out_cache_loc[rows]
    part = copy.copy(result)
    part.logits_output = copy.copy(result.logits_output)
    if result.logits_output.hidden_states is not None:
        part.logits_output.hidden_states = result.logits_output.hidden_states[rows]
    part.next_token_ids, part.accept_lens = result.next_token_ids[rows], result.accept_lens[index]
    part.new_seq_lens = result.new_seq_lens[index]
    part.prepared_draft_extend_inputs = None  # recomputed from the sub-result's own rows
    part.next_draft_input = copy.copy(result.next_draft_input)
    with _draft_contexts(worker, "draft_extend"), _selected_rows_extend(worker.draft_worker):
        worker.draft_worker._draft_extend_for_decode(sub, part)
    _scatter_draft_state(result.next_draft_input, part.next_draft_input, index)


def verified_tokens(verify_input):
    """(tokens [B * width], width) of a verify pass: each request's window, its root first."""
    return verify_input.draft_token, verify_input.draft_token_num


def skipped_rows(worker, result, roots, width: int, skipped: list[int]):
    """The rows the draft-extend would have consumed for the requests at batch rows ``skipped``: the token each
    verified (its window's root; ``roots`` holds ``width`` tokens a request) and, for EAGLE, the target's feature
    there (indexing by a tensor copies, and so does a whole batch's copy after a CUDA-graph pass, so a graph buffer
    replayed later does not change them; an eager pass's features are its own)."""
    standalone = worker.speculative_algorithm.is_standalone()
    if width == 1 and len(skipped) == len(roots):  # a step where nobody drafted: every row
        if standalone:
            return roots.clone(), None
        hidden = result.logits_output.hidden_states  # an eager pass's output is its own tensor
        hidden = hidden if hidden.shape[0] == len(roots) else hidden[: len(roots)]
        return roots.clone(), hidden.clone() if result.can_run_cuda_graph else hidden
    root = host_to_device(np.asarray(skipped) * width, roots.device)
    features = None if standalone else result.logits_output.hidden_states[root]
    return roots[root], features


def _sub_batch(batch, members: list[int], index):
    """A shallow copy of ``batch`` holding only the requests at rows ``members`` (``index`` on the device), for a
    draft pass over them; SGLang's preparation then writes its own fields on the copy, not the step's batch. Its
    host copies come from the batch's (a device-to-host copy would wait for the GPU: a sync a step)."""
    sub = copy.copy(batch)
    sub.reqs = [batch.reqs[i] for i in members]
    sub.req_pool_indices = batch.req_pool_indices[index]
    sub.req_pool_indices_cpu = _host_rows(batch.req_pool_indices_cpu, sub.req_pool_indices, members)
    sub.seq_lens = batch.seq_lens[index]
    sub.seq_lens_cpu = _host_rows(batch.seq_lens_cpu, sub.seq_lens, members)
    sub.seq_lens_sum = int(sub.seq_lens_cpu.sum())
    sub.orig_seq_lens = None if batch.orig_seq_lens is None else batch.orig_seq_lens[index]
    if batch.multimodal_inputs is not None:
        sub.multimodal_inputs = [batch.multimodal_inputs[i] for i in members]
    sub.return_logprob, sub.has_grammar, sub.sampling_info = False, False, None
    return sub


def _host_rows(host, device_rows, members):
    """Rows ``members`` of a batch's host copy ``host``; where it has none, a copy of ``device_rows``."""
    return device_rows.cpu() if host is None else host[members]


def _scatter_draft_state(full, part, index) -> None:
    """The members' new draft state (next-token guess, feature) into the whole batch's rows."""
    for name in ("topk_p", "topk_index", "hidden_states"):
        new, old = getattr(part, name), getattr(full, name)
        if new is not None and old is not None:
            old = old.clone()
            old[index] = new.to(old.dtype)
            setattr(full, name, old)


def catch_up_draft(worker, batch, catch_up) -> None:
    """One batched draft extend over every member's skipped positions, then its draft state in ``batch.spec_info``.

    Member i's rows are positions ``seq_len - n_i .. seq_len - 1`` holding the skipped tokens; SGLang's prefill
    draft-extend (``_draft_extend_for_prefill``) runs them as an extend of a sub-batch, shifting the tokens by one
    with the current bonus token as the tail, exactly as after a prefill. Its next-token guess and hidden state
    replace the stubs the skipped steps left."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    spec = batch.spec_info
    device = batch.seq_lens.device
    index, counts = host_to_device(catch_up.members, device), host_to_device(catch_up.counts, device)
    total = int(sum(catch_up.counts))
    sub = _sub_batch(batch, catch_up.members, index)
    offsets = torch.cumsum(counts, 0) - counts  # where each member's rows begin in the catch-up
    # with output_size, repeat_interleave need not read the counts back from the device
    positions = torch.arange(total, device=device) + torch.repeat_interleave(
        sub.seq_lens - counts - offsets, counts, output_size=total)
    sub.forward_mode = ForwardMode.EXTEND
    sub.input_ids = catch_up.tokens.to(torch.int64)
    rows = torch.repeat_interleave(sub.req_pool_indices, counts, output_size=total)
    sub.out_cache_loc = batch.req_to_token_pool.req_to_token[rows, positions].to(torch.int64)
    sub.prefix_lens = [n - k for n, k in zip(sub.seq_lens_cpu.tolist(), catch_up.counts)]
    sub.extend_lens = list(catch_up.counts)
    sub.extend_logprob_start_lens = [0] * len(catch_up.members)
    sub.extend_num_tokens = total
    sub.chunked_req, sub.chunked_req_next_prompt_token = None, None
    sub.multimodal_inputs, sub.input_embeds, sub.decoding_reqs = None, None, None
    sub.is_extend_in_batch = False
    with _draft_contexts(worker, "draft_extend"):
        state = worker.draft_worker._draft_extend_for_prefill(sub, catch_up.features, spec.bonus_tokens[index])
    _scatter_draft_state(spec, state, index)


def _draft_contexts(worker, stage: str):
    from contextlib import ExitStack

    from sglang.srt.speculative import eagle_worker_v2 as ew

    stack = ExitStack()
    stack.enter_context(ew.draft_tp_context(worker.draft_worker.parallel_layout))
    stack.enter_context(ew.speculative_moe_backend_context())
    stack.enter_context(ew.speculative_moe_a2a_backend_context())
    stack.enter_context(ew.spec_stage_span(stage))
    return stack


def lazy_draft_prefill(worker, keep, limit: int):
    """For one prefill step: the draft's prefill extend (``_draft_extend_for_prefill``, eagle_worker_v2.py:961) does
    not run where the prefill is plain (not mixed with decodes, no multimodal embeddings); ``keep(rids, counts,
    tokens, features)`` gets each whole prompt's last ``limit`` rows (token and, for EAGLE, the target's feature
    there) for the draft backlog instead, and the next draft state holds SGLang's zeroed stubs
    (``_stub_skipped_draft_extend``) with the target's next token as the bonus token. A chunk that more of its
    prompt follows (``batch.chunked_req``) keeps no rows: its prompt's last rows come with its last chunk, and its
    draft KV here stays stale (acceptance, never correctness). A burst's prefill fills SGLang's chunk (4096 tokens
    on CPU), so its last request is most often such a chunk: deferring only whole prefills ran the draft over every
    burst's prompts (3 % of a parked server's time at 32 requests in flight on CPU, by py-spy)."""
    from types import SimpleNamespace

    from sglang.srt.speculative.eagle_info import EagleDraftInput

    draft_worker = worker.draft_worker
    original = draft_worker._draft_extend_for_prefill
    standalone = worker.speculative_algorithm.is_standalone()

    def deferred(batch, target_hidden_states, next_token_ids, mm_input_embeds=None, kv_loc_plan=None):
        if (mm_input_embeds is not None or batch.forward_mode.is_idle() or batch.forward_mode.is_mixed()
                or (target_hidden_states is None) != standalone):
            return original(batch, target_hidden_states, next_token_ids, mm_input_embeds, kv_loc_plan=kv_loc_plan)
        whole = [i for i, req in enumerate(batch.reqs) if req is not batch.chunked_req]
        ends = np.cumsum(batch.extend_lens)
        counts = [min(batch.extend_lens[i], limit) for i in whole]
        rows = np.concatenate([np.arange(ends[i] - n, ends[i]) for i, n in zip(whole, counts)] or [[]])
        index = host_to_device(rows, batch.input_ids.device)
        keep([batch.reqs[i].rid for i in whole], counts, batch.input_ids[index],
             None if standalone else target_hidden_states[index])
        state = EagleDraftInput(bonus_tokens=next_token_ids, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1)
        worker._stub_skipped_draft_extend(batch, SimpleNamespace(next_draft_input=state))  # reads only that field
        return state

    return patched(draft_worker, "_draft_extend_for_prefill", deferred)


def set_cap_lens(result, lengths: np.ndarray, parked: bool = False) -> None:
    """Per-request lengths into SGLang's metrics and ``meta_info`` (``GenerationBatchResult.cap_lens``); a parked
    step's zeros are made once per batch size (SGLang only reads them)."""
    import torch

    bs = len(lengths)
    result.cap_lens = (_batch_constant("no_caps", bs, "cpu", lambda: torch.zeros(bs, dtype=torch.int64)) if parked
                       else torch.from_numpy(lengths))  # read with ``tolist`` (batch_result_processor.py:798)


def cut_chains(verify_input, lengths: np.ndarray) -> None:
    """End request i's draft chain after ``lengths[i]`` drafts (node k_i gets no successor); the rows are chosen
    on the host, so nothing waits for the device."""
    next_token = verify_input.retrieve_next_token
    width = next_token.shape[1]
    rows = np.flatnonzero(np.asarray(lengths) < width - 1)
    if rows.size:
        device = next_token.device
        next_token[host_to_device(rows, device), host_to_device(np.asarray(lengths)[rows], device)] = -1


def host_to_device(values, device, dtype=np.int64):
    """Host numbers as a tensor on ``device`` (int64 by default). On a GPU through pinned memory without blocking:
    a plain copy from pageable memory waits for everything queued on the stream, a sync in every step that would
    stop the host from running ahead of the device under overlap scheduling."""
    import torch

    host = torch.from_numpy(np.ascontiguousarray(values, dtype=dtype))
    if torch.device(device).type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


@contextmanager
def patched(obj, name: str, value):
    """Shadow ``obj.name`` with an instance attribute for one call, then restore exactly what was there."""
    own = vars(obj)
    had, old = name in own, own.get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


# -- drafting: per-forward sub-batches (engine/draft_cut.py) --------------------------------------------------
def draft_runner_hook(worker, make_forward):
    """For one ``draft()``: the draft runner's ``forward`` becomes ``make_forward(original, backends)``.

    Under CUDA-graph replay SGLang never calls ``forward``, so a hook that is not called saw nothing: callers
    measure the path from what ran."""
    runner = worker.draft_worker.draft_runner
    backends = getattr(worker.draft_worker.draft_attn_backend, "attn_backends", None) or []
    return patched(runner, "forward", make_forward(runner.forward, backends))


def draft_forward_view(forward_batch) -> tuple[int, "torch.Tensor"]:
    """(batch size, input token ids) of one draft forward: forward s feeds draft token s + 1."""
    return forward_batch.batch_size, forward_batch.input_ids


def draft_cut_supported(backend) -> bool:
    """The backend's per-step decode tables can be sub-set (intel_amx multi-step draft backend)."""
    return getattr(backend, "draft_decode_metadata", None) is not None


def run_draft_subset(forward, backend, forward_batch, members: np.ndarray, *args, **kwargs):
    """Run one draft forward over the requests ``members`` only; the output has the full batch's shapes with
    zeros for the others (their tokens lie past their chain cut, so nothing reads them)."""
    bs = forward_batch.batch_size
    saved = backend.draft_decode_metadata
    table, seq_lens, rows = saved
    index = host_to_device(members, forward_batch.seq_lens.device)
    backend.draft_decode_metadata = (table, seq_lens[index], rows[index])
    try:
        out = forward(_sub_decode_batch(forward_batch, members, index), *args, **kwargs)
    finally:
        backend.draft_decode_metadata = saved
    return _scatter_output(out, index, bs)


def _sub_decode_batch(fb, members: np.ndarray, index):
    sub = _select(fb, members, index, index, 0)
    spec = fb.spec_info
    if spec is not None and getattr(spec, "hidden_states", None) is not None:
        spec = copy.copy(spec)
        spec.hidden_states = spec.hidden_states[index]
        sub.spec_info = spec
    return sub


def _select(fb, members: np.ndarray, index, rows, offset: int):
    """A copy of ``fb`` with requests ``members`` (``index`` on the device) and token rows ``rows``, its sequences
    ``offset`` tokens further on (rows a verify pass at that offset attends past)."""
    import torch

    host = torch.from_numpy(np.asarray(members, dtype=np.int64))
    sub = copy.copy(fb)
    sub.batch_size = len(index)
    sub.input_ids = fb.input_ids[rows]
    sub.positions = fb.positions[rows]
    sub.out_cache_loc = fb.out_cache_loc[rows]
    sub.req_pool_indices = fb.req_pool_indices[index]
    sub.seq_lens = fb.seq_lens[index] + offset
    if fb.seq_lens_cpu is not None:
        sub.seq_lens_cpu = fb.seq_lens_cpu[host] + offset
        sub.seq_lens_sum = int(sub.seq_lens_cpu.sum())
    else:
        sub.seq_lens_sum = int(sub.seq_lens.sum())
    if getattr(fb, "orig_seq_lens", None) is not None:
        sub.orig_seq_lens = fb.orig_seq_lens[index] + offset
    if fb.req_pool_indices_cpu is not None:
        sub.req_pool_indices_cpu = fb.req_pool_indices_cpu[host]
    if fb.num_token_non_padded is not None:
        sub.num_token_non_padded = torch.as_tensor(len(rows), dtype=fb.num_token_non_padded.dtype,
                                                   device=fb.num_token_non_padded.device)
    _subset_lists(fb, sub, host.tolist())
    return sub


def _subset_lists(fb, sub, members: list[int]) -> None:
    for name in ("rids", "lora_ids"):
        values = getattr(fb, name, None)
        if values is not None:
            setattr(sub, name, [values[i] for i in members])


def _scatter_output(out, index, bs: int):
    logits_output = copy.copy(out.logits_output)
    for name in ("next_token_logits", "hidden_states"):
        value = getattr(logits_output, name, None)
        if value is not None:
            full = value.new_zeros((bs, *value.shape[1:]))
            full[index] = value
            setattr(logits_output, name, full)
    result = copy.copy(out)
    result.logits_output = logits_output
    return result


# -- verification: ragged passes on SGLang's RaggedVerifyLayout (engine/verify.py) -------------------------------
RAGGED_BACKENDS = ("IntelAMXAttnBackend",)  # ragged TARGET_VERIFY checked for parity (CPU; hook below)
RAGGED_BACKENDS_UNVERIFIED = ("FlashAttentionBackend", "TRTLLMHAAttnBackend", "FlashInferAttnBackend")


def verify_layout(worker) -> str:
    """"ragged" where the target's attention backend runs a TARGET_VERIFY with per-request ``verify_lens``,
    "uniform" where it does not (SGLang's single pass; the worker gives every request the same length).

    intel_amx honours the layout through :func:`teach_intel_amx_ragged_verify`. fa3, trtllm_mha and flashinfer
    read ``RaggedVerifyLayout`` in SGLang 0.5.23 (DSpark's path) but FASER's use of them has not been checked on a
    GPU yet, so they run it only with ``SGLANG_FASER_GPU_RAGGED=1``. ``SGLANG_FASER_VERIFY_LAYOUT=uniform`` runs
    the single pass whatever the backend: the path a GPU serves on (triton attention), tested on CPU with it."""
    import os

    backend = type(getattr(worker.target_worker.model_runner, "attn_backend", None)).__name__
    if worker.topk != 1:
        return "stock-tree"
    if os.environ.get("SGLANG_FASER_VERIFY_LAYOUT") == "uniform":
        return "uniform"
    if backend in RAGGED_BACKENDS:
        return "ragged"
    if backend in RAGGED_BACKENDS_UNVERIFIED and os.environ.get("SGLANG_FASER_GPU_RAGGED") == "1":
        return "ragged"
    return "uniform"


def teach_intel_amx_ragged_verify() -> None:
    """AROUND ``IntelAMXAttnBackend._build_extend_metadata`` (intel_amx_backend.py:70): a TARGET_VERIFY batch
    whose verify input carries a ``RaggedVerifyLayout`` extends request i by ``verify_lens[i]`` rows (causal
    chain, topk 1) instead of the uniform ``draft_token_num``. The CPU attention kernels are ours
    (kernels/cpu/attention.py) and take per-request extend lengths as prefill does."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(
        "sglang.srt.layers.attention.intel_amx_backend.IntelAMXAttnBackend._build_extend_metadata",
        _ragged_extend_metadata, HookType.AROUND)


def _ragged_extend_metadata(original, backend, forward_batch):
    spec = forward_batch.spec_info
    layout = getattr(spec, "ragged_verify_layout", None)
    if layout is None or not forward_batch.forward_mode.is_target_verify():
        return original(backend, forward_batch)
    if spec.tree_topk != 1:
        raise RuntimeError("FASER: a ragged verify layout needs a draft chain (topk 1)")
    lens = layout.verify_lens.to(forward_batch.seq_lens.dtype)
    return forward_batch.seq_lens + lens, layout.verify_lens, layout.extend_start_loc, None


def ragged_layout(widths: np.ndarray, device):
    """SGLang's ``RaggedVerifyLayout`` for per-request row counts ``widths`` (no graph tier on CPU: the token
    count is the layout's own total)."""
    import torch
    from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

    lens = [int(w) for w in widths]
    verify_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device=device)
    indptr[1:] = torch.cumsum(verify_lens, dim=0)
    total = int(indptr[-1])
    return RaggedVerifyLayout(verify_lens=verify_lens, graph_num_tokens=total, extend_start_loc=indptr[:-1],
                              qo_indptr_device=indptr, verify_lens_cpu=lens, total_verify_tokens=total)


def verify_shape(fb) -> tuple[int, int]:
    """(requests, rows per request) of SGLang's verify batch."""
    return fb.batch_size, fb.spec_info.draft_token_num


def verify_tokens(fb) -> "torch.Tensor":
    return fb.input_ids


def ragged_verify_batch(fb, members: np.ndarray, offset: int, widths: np.ndarray, rows: "torch.Tensor"):
    """A TARGET_VERIFY ``ForwardBatch`` over flat rows ``rows`` of ``fb``: request ``members[m]`` takes
    ``widths[m]`` rows from ``offset`` on, at positions seq_len + offset.. (its committed prefix plus the rows
    earlier passes wrote), in SGLang's ragged layout."""
    device = fb.seq_lens.device
    sub = _select(fb, members, host_to_device(members, device), rows, offset)
    sub.return_logprob = False  # SGLang computes verify logprobs from the merged logits afterwards
    spec = copy.copy(fb.spec_info)
    spec.draft_token_num = int(widths.max())
    spec.ragged_verify_layout = ragged_layout(widths, device)
    sub.spec_info = spec
    return sub


def run_target_pass(target_forward, fb, pp_proxy_tensors):
    """One target TARGET_VERIFY forward (``TpModelWorker.forward_batch_generation(..., is_verify=True)``)."""
    return target_forward(batch=None, forward_batch=fb, pp_proxy_tensors=pp_proxy_tensors, is_verify=True)


def pass_outputs(result) -> tuple["torch.Tensor", "torch.Tensor | None"]:
    """(logits, hidden states) of a target pass, one row per verified row."""
    return result.logits_output.next_token_logits, result.logits_output.hidden_states


def merged_verify_result(result, logits, hidden):
    """The last pass's result carrying the whole window's logits and hidden states, as SGLang's one pass would."""
    merged = copy.copy(result.logits_output)
    merged.next_token_logits = logits
    merged.hidden_states = hidden
    out = copy.copy(result)
    out.logits_output = merged
    out.can_run_cuda_graph = False
    return out


def same_verify_rows(early, fb, mask) -> bool:
    """Whether the rows ``mask`` of two verify batches hold the same tokens, positions and KV slots."""
    import torch

    return all(
        torch.equal(getattr(early, name)[mask].long(), getattr(fb, name)[mask].long())
        for name in ("input_ids", "positions", "out_cache_loc")
    ) and torch.equal(early.req_pool_indices.long(), fb.req_pool_indices.long())


def target_forward(worker):
    """The target's forward call (``TpModelWorker.forward_batch_generation``, tp_worker.py:622)."""
    return worker.target_worker.forward_batch_generation


def target_verify_hook(worker, forward):
    """For one ``verify()``: SGLang's single target call (run_eagle_verify, eagle_worker_common.py:654) becomes
    ``forward`` (the ragged passes)."""
    return patched(worker.target_worker, "forward_batch_generation", forward)


def target_call_wrapped(worker) -> bool:
    """Someone else already wraps the target call: keep SGLang's single pass."""
    return "forward_batch_generation" in vars(worker.target_worker)


def early_verify_batch(worker, batch, n: int, tokens):
    """The verify batch SGLang will build after drafting (rows at seq_len + j, KV slots req_to_token[req,
    seq_len + j], eagle_utils.py:305), over the token grid ``tokens`` [B, n] the draft fills in as it goes."""
    import torch

    runner = worker.target_worker.model_runner
    device = batch.seq_lens.device
    tokens[:, 0] = batch.spec_info.bonus_tokens.to(torch.int64)  # the root: last committed token
    offsets = torch.arange(n, device=device)
    seq_lens = batch.seq_lens.to(torch.int64)
    slots = batch.req_to_token_pool.req_to_token[batch.req_pool_indices.to(torch.int64)[:, None],
                                                 seq_lens[:, None] + offsets[None, :]]
    capture = capture_null() if runner.spec_algorithm.is_standalone() else capture_full()
    return forward_batch(
        forward_mode=target_verify_mode(),
        batch_size=len(batch.reqs),
        input_ids=tokens.view(-1),
        req_pool_indices=batch.req_pool_indices,
        seq_lens=batch.seq_lens,
        seq_lens_cpu=batch.seq_lens_cpu,
        out_cache_loc=slots.reshape(-1).to(torch.int64),
        seq_lens_sum=int(batch.seq_lens_cpu.sum()) if batch.seq_lens_cpu is not None else int(seq_lens.sum()),
        positions=(seq_lens[:, None] + offsets[None, :]).reshape(-1),
        spec_algorithm=runner.spec_algorithm,
        spec_info=eagle_verify_input(topk=1, draft_token_num=n, spec_steps=n - 1, capture_hidden_mode=capture),
        capture_hidden_mode=capture,
        sampling_info=batch.sampling_info,
        return_logprob=False,
    )


def target_pass_context(worker, fb):
    """A target pass run inside the draft loop must name the target's attention backend."""
    return target_forward_context(worker.target_worker.model_runner, fb)


def target_runner(worker):
    return worker.target_worker.model_runner


def run_model(runner, fb):
    return runner.forward(fb)


def runner_device(runner):
    return runner.device


def runner_spec_algorithm(runner):
    return runner.spec_algorithm


def register_warmup(name: str, run) -> None:
    """``run(disaggregation_mode, tokenizer_manager)`` as SGLang's ``--warmups`` entry ``name``."""
    from sglang.srt.entrypoints.warmup import warmup

    warmup(name)(run)


async def serving_limits(tokenizer_manager) -> tuple[int | None, dict | None]:
    """(the scheduler's max running requests, the FASER report of its first rank, None without FASER)."""
    state = (await tokenizer_manager.get_internal_state())[0]
    return state.get("effective_max_running_requests_per_dp"), state.get("faser")


async def generate_batch(tokenizer_manager, disaggregation_mode: str, texts: list[str], rids: list[str],
                         sampling_params: dict) -> None:
    """One batch of requests through the tokenizer manager, run to their end (outputs dropped)."""
    from sglang.srt.disaggregation.utils import FAKE_BOOTSTRAP_HOST
    from sglang.srt.managers.io_struct import GenerateReqInput

    req = GenerateReqInput(text=texts, rid=rids, sampling_params=[dict(sampling_params) for _ in texts])
    if disaggregation_mode != "null":  # as SGLang's own warm-ups (entrypoints/warmup.py)
        req.bootstrap_room = [0] * len(texts)
        req.bootstrap_host = [FAKE_BOOTSTRAP_HOST] * len(texts)
    async for _ in tokenizer_manager.generate_request(req, None):
        pass


def faser_worker_of(controller):
    """The FASER worker behind a ``SchedulerInternalStateController`` (None: stock SGLang)."""
    worker = getattr(controller.scheduler, "draft_worker", None)
    return worker if hasattr(worker, "faser_apply_policy") else None


def verify_chain(verify_input, batch, logits_output, bs: int):
    """(width, retrieve_next_token [B, width], draft tokens [B, width], target argmax [B, width], rids) of a
    chain verify (None for trees), for the benchmark-only synthetic acceptance."""
    if verify_input.tree_topk != 1:
        return None
    width = verify_input.draft_token_num
    return (width, verify_input.retrieve_next_token.reshape(bs, width), verify_input.draft_token.reshape(bs, width),
            logits_output.next_token_logits.argmax(dim=-1).reshape(bs, width), [req.rid for req in batch.reqs[:bs]])
