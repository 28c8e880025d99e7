"""``FaserWorker``: SGLang's EAGLE v2 worker (and its STANDALONE subclass) with per-request draft lengths.

Each decode step, *before drafting*, the :class:`LengthController` picks a length k_i for every request and the
step's depth d = max k_i. Two mechanisms then make the step do only that much work:

* **depth tiers** (real savings): one runtime state per depth 0..K (draft and target attention backends, CUDA
  graphs where captured), built at start-up and switched per step with SGLang's own adaptive machinery
  (``AdaptiveController`` + ``build_adaptive_runtime_state`` / ``apply_runtime_state``, eagle_worker_v2.py:1777).
  The draft then runs d steps and the target verifies B x (d + 1) rows; at d = 0 the step is a plain decode
  (``_build_trivial_verify_input``) while the draft-extend keeps the draft's state current.
* **per-request cut** inside the tier: request i's chain ends after k_i drafts (``retrieve_next_token[i, k_i] =
  -1``), so greedy verification and speculative sampling stop at k_i and take the bonus/correction token from the
  target at that position: output is exactly the target's. KV slots past the accepted tokens are never committed
  (SGLang advances ``seq_len`` by the accepted count only, map §6).

* **ragged, frontier-chunked verification** (``engine/frontier_verify.py``): the target computes only the rows
  each request needs (k_i + 1, grouped into uniform passes when the cost model says a saved pass is worth the
  padding), frontier by frontier when ``frontier_size`` > 0, and a greedy request rejected in one frontier takes
  no part in the next (early pruning, counted in ``counters.pruned``).

``verify_path`` reports "tiered" (depth tiers + ragged passes); "padded" when tiers could not be built (the draft
runs the whole window; the ragged passes still verify only k_i + 1 rows); "stock-tree" for draft trees (topk > 1),
which run SGLang's behaviour unchanged. What is not saved yet: within a tier the draft runs d steps for every
request (SGLang drafts the batch as one), and on CPU the frontiers run in turn, not overlapped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

import numpy as np
import torch

from sglang_faser.engine import touchpoints
from sglang_faser.engine.depth_tiers import DepthTiers, prunable_requests
from sglang_faser.engine.draft_cut import DraftCut, DraftSchedule, patched
from sglang_faser.engine.frontier_verify import FrontierVerifier
from sglang_faser.engine.metrics import FaserMetrics
from sglang_faser.engine.pipeline import FrontierPipeline
from sglang_faser.engine.profiler import seed_cost_model
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController, StepDecision
from sglang_faser.spec.cost_model import DRAFT, VERIFY
from sglang_faser.spec.request_params import parse_or_none
from sglang_faser.spec.telemetry import TelemetryRecorder, subtract

logger = logging.getLogger(__name__)


class FaserWorkerMixin:
    """Mixed in front of ``EAGLEWorkerV2`` or ``StandaloneWorkerV2`` (see :func:`faser_worker_class`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faser_window = self.speculative_num_steps
        self.faser_config = FaserConfig.from_env()
        self.faser = LengthController(self.faser_config, window=self.faser_window, calibration_sweeps=2)
        self.faser_tiers: DepthTiers | None = None
        self.faser_verify_path = "stock-tree"
        self.faser_draft_path = "full-depth"  # "cut" once a step drafted only what each request needs
        self._faser_decision: StepDecision | None = None
        self._faser_verifier: FrontierVerifier | None = None
        self._faser_verify_ms = 0.0
        if self.topk == 1:
            self.faser_verify_path = "padded"
            on_cpu_with_graphs = str(self.device) == "cpu" and not touchpoints.decode_graphs_disabled()
            if on_cpu_with_graphs:
                logger.warning("FASER: depth tiers on CPU need --disable-cuda-graph; using the padded path")
            elif self.adaptive_controller is None and self._draft_worker is not None:
                self.faser_tiers = DepthTiers(self.faser_window)
                self.adaptive_controller = touchpoints.adaptive_controller(self, self.faser_tiers)
                self.faser_verify_path = "tiered"
        # ragged / frontier passes need chain verification to be plain causal attention over uniform rows, which
        # is what intel_amx does; other backends keep SGLang's single verify pass (with the cut at k_i)
        self.faser_verify_layout = "pending"  # decided with the start-up profile, once the target runner is complete
        self.faser_profile = "pending"  # run before the first decode step (the runner is complete by then)
        self.faser_policy_version = 0
        self.faser_telemetry = TelemetryRecorder()
        self.faser_metrics = FaserMetrics.create({"worker": "faser"})
        self._faser_metrics_at = 0.0
        self._faser_phases: list[tuple[str, float, float]] = []
        self._faser_last: tuple[float, frozenset, bool] | None = None  # last step's end, decode rids, was decode
        logger.info(
            "FASER worker on %s: window=%d topk=%d path=%s config=%s",
            type(self).__mro__[2].__name__,
            self.faser_window,
            self.topk,
            self.faser_verify_path,
            self.faser_config.to_json(),
        )

    # -- one decode step ---------------------------------------------------------------------------------
    def forward_batch_generation(self, batch, *args, **kwargs):
        decode = not (batch.forward_mode.is_extend() or batch.is_extend_in_batch)
        if self.faser_verify_path == "stock-tree" or batch.forward_mode.is_idle() or not batch.reqs:
            return super().forward_batch_generation(batch, *args, **kwargs)
        began = time.perf_counter()
        if not decode:
            result = super().forward_batch_generation(batch, *args, **kwargs)
            ended = time.perf_counter()
            self._faser_end_step([("prefill", began, ended)], batch_size=0)
            self._faser_last = (ended, self._faser_last[1] if self._faser_last else frozenset(), False)
            return result

        if self.faser_profile == "pending":
            self.faser_verify_layout = "ragged-passes" if touchpoints.verify_passes_supported(self) else "one-pass"
            self.faser_profile = seed_cost_model(self.faser.cost, self.target_worker, self.faser_window)
            logger.info("FASER verify layout: %s", self.faser_verify_layout)
        rids = frozenset(req.rid for req in batch.reqs)
        host, host_ms = self._host_gap(began, rids)
        controls = [parse_or_none(req.sampling_params.custom_params) for req in batch.reqs]
        window = self.faser_window
        decision = self.faser.decide(
            [req.rid for req in batch.reqs],
            caps=np.array([window if c.max_len is None else c.max_len for c in controls], dtype=np.int64),
            floors=np.array([c.floor for c in controls], dtype=np.int64),
            padded=self.faser_tiers is None,
        )
        self._faser_decision = decision
        if self.faser_tiers is not None:
            self.faser_tiers.next_depth = decision.depth  # applied by activate_step_by_batch
        self._faser_verifier = self._frontier_verifier(batch, decision)
        self._faser_verify_ms = 0.0
        self._faser_draft_rows = 0  # a depth-0 step drafts nothing (draft() is not called)
        self._faser_phases = host
        try:
            with patched(self.draft_worker, "draft", self._draft_with_schedule(batch, decision)), patched(
                self.draft_worker, "_draft_extend_for_decode", self._timed("draft_extend",
                                                                           self.draft_worker._draft_extend_for_decode)
            ):
                result = super().forward_batch_generation(batch, *args, **kwargs)
        finally:
            self._faser_verifier = self._faser_decision = None
        ended = time.perf_counter()
        self._faser_last = (ended, rids, True)
        total_ms = (ended - began) * 1e3
        bs = len(batch.reqs)
        # verify samples are recorded per target pass (FrontierVerifier.on_pass); the rest of the step, with the
        # scheduler's host work since the last step, is the draft side's: a per-step cost longer drafts amortise
        self.faser.record_phase(DRAFT, bs, decision.depth, max(total_ms - self._faser_verify_ms, 0.0) + host_ms,
                                rows=self._faser_draft_rows)
        result.cap_lens = torch.as_tensor(decision.lengths, dtype=torch.int32)
        self._faser_end_step(self._faser_phases, batch_size=bs)
        if self.faser.counters.steps % 1000 == 0:
            cost = self.faser.cost
            logger.info(
                "FASER cost model after %d steps: verify_coef=%s draft_coef=%s",
                self.faser.counters.steps,
                np.round(cost.verify_coef, 3).tolist(),
                np.round(cost.draft_coef, 3).tolist(),
            )
        return result

    def _host_gap(self, began: float, rids: frozenset) -> tuple[list, float]:
        """The scheduler's host work since the last step (results, streaming, batch building), as a ``schedule``
        phase when some of these requests ran throughout it (otherwise the gap may be idle time); its
        milliseconds count as step cost only between two decode steps, where one batch's work is all it holds."""
        last = self._faser_last
        if last is None or last[1].isdisjoint(rids) or began <= last[0]:
            return [], 0.0
        ended, _, after_decode = last
        return [("schedule", ended, began)], (began - ended) * 1e3 if after_decode else 0.0

    def _draft_with_schedule(self, batch, decision: StepDecision):
        """``draft_worker.draft`` for this step: each draft forward runs only for requests that need its token,
        and with frontiers, finished frontiers are verified between draft forwards (engine/pipeline.py)."""
        draft_worker = self.draft_worker
        original = draft_worker.draft
        verifier = self._faser_verifier
        if verifier is not None and len(verifier.bounds) > 1:
            schedule = FrontierPipeline(verifier, decision.lengths, self.faser.config.overlap, batch,
                                        self.target_worker.model_runner)
        else:
            schedule = DraftSchedule(decision.lengths)

        def draft(batch, **kwargs):
            runner = draft_worker.draft_runner
            backends = getattr(draft_worker.draft_attn_backend, "attn_backends", None) or []
            cut = DraftCut(runner.forward, backends, schedule)
            began = time.perf_counter()
            with patched(runner, "forward", cut.forward):
                out = original(batch, **kwargs)
            passes = [(a, b) for phase, a, b in self._faser_phases if phase == "verify"]
            self._faser_phases += [("draft", a, b) for a, b in subtract(began, time.perf_counter(), passes)]
            self.faser_draft_path = cut.path
            self._faser_draft_rows = cut.rows
            self.faser.record_drafting(cut.rows, cut.skipped, cut=cut.supported)
            return out

        return draft

    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        decision, verifier = self._faser_decision, self._faser_verifier
        if decision is not None:
            self._cut_chains(batch.spec_info, decision.lengths)
        early_ms = verifier.pass_seconds * 1e3 if verifier is not None else 0.0
        start = time.perf_counter()
        if verifier is not None:
            with patched(self.target_worker, "forward_batch_generation", verifier.forward):  # see frontier_verify
                result = super().verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        else:
            result = super().verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        ended = time.perf_counter()
        self._faser_phases.append(("verify", start, ended))
        self._faser_verify_ms = (ended - start) * 1e3 + early_ms  # + passes run during drafting
        if verifier is not None:
            stats = verifier.stats
            self.faser.record_verification(stats.verified_rows, stats.pruned_rows)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("FASER step: lengths=%s early_frontiers=%d %s mismatches=%d", decision.lengths.tolist(),
                             len(verifier.live_after) if early_ms else 0, stats, verifier.mismatches)
        elif decision is not None:
            self.faser.record_verification(len(decision.lengths) * (decision.depth + 1), 0)
        return result

    def _frontier_verifier(self, batch, decision: StepDecision) -> FrontierVerifier | None:
        """Ragged, frontier-chunked verification with early pruning (None: SGLang's single pass)."""
        if self.faser_verify_layout != "ragged-passes" or "forward_batch_generation" in vars(self.target_worker):
            return None  # SGLang's single pass (unsupported backend, or someone else wraps the target call)
        cost = self.faser.cost

        def on_pass(vpass, began: float, ended: float) -> None:
            self.faser.record_phase(VERIFY, len(vpass.members), vpass.rows, (ended - began) * 1e3)
            self._faser_phases.append(("verify", began, ended))

        return FrontierVerifier(
            self.target_worker.forward_batch_generation,
            decision.lengths,
            prunable_requests(batch),
            self.faser.config.frontier_size,
            rows=(decision.depth if self.faser_tiers is not None else self.faser_window) + 1,
            pass_ms=lambda requests, rows: float(cost.verify_ms(requests, rows)),
            on_pass=on_pass,
        )

    def _timed(self, phase: str, fn):
        def run(*args, **kwargs):
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._faser_phases.append((phase, began, time.perf_counter()))

        return run

    def _faser_end_step(self, phases, batch_size: int) -> None:
        self.faser_telemetry.record_step(phases, self.faser.counters, batch_size)
        now = time.monotonic()
        if self.faser_metrics is not None and now - self._faser_metrics_at >= 1.0:
            self._faser_metrics_at = now
            window = self.faser_telemetry.snapshot()["window"]
            self.faser_metrics.update(self.faser.counters, window, self.faser_policy_version)

    # -- the control plane (engine/control_bridge.py) -------------------------------------------------------
    def faser_apply_policy(self, config: FaserConfig, version: int) -> None:
        """A new policy, taken between two scheduler steps; requests in flight get new lengths next step."""
        old = self.faser_config
        self.faser_config = config
        self.faser.apply_config(config)
        self.faser_policy_version = version
        logger.info("FASER policy v%d: %s (was %s)", version, config.to_json(), old.to_json())

    def faser_report(self) -> dict:
        """What /server_info carries for the control service: policy, paths, counters, telemetry."""
        return {
            "policy": json.loads(self.faser_config.to_json()),
            "version": self.faser_policy_version,
            "window": self.faser_window,
            "verify_path": f"{self.faser_verify_path}/{self.faser_verify_layout}",
            "draft_path": self.faser_draft_path,
            "profile": self.faser_profile,
            "counters": dataclasses.asdict(self.faser.counters),
            "telemetry": self.faser_telemetry.snapshot(),
            "model": self.faser.model_report(),
        }

    @staticmethod
    def _cut_chains(spec_info, lengths: np.ndarray) -> None:
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
