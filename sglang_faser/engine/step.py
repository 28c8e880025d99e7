"""One FASER decode step, top to bottom: decide -> draft -> verify -> commit -> record.

``FaserEngine`` is the long-lived state of one FASER worker (the length controller, depth tiers, telemetry) and
``decode`` is one step. It runs SGLang's own pieces in SGLang's order (``EAGLEWorkerV2.forward_batch_generation``,
eagle_worker_v2.py:1416) and changes only how much work each does:

* **decide**: the controller gives every request its length k_i; rank 0's lengths are broadcast so that every
  TP rank runs the same shapes; the step's depth d = max k_i selects a pre-built runtime state (depth tiers:
  one per depth, built at start-up with SGLang's ``AdaptiveController``);
* **draft**: draft forward s runs only for requests that need its token (``draft_cut.py``); with frontiers,
  finished frontiers are verified between draft forwards (``pipeline.py``);
* **verify**: request i's chain is cut after k_i drafts and the target verifies k_i + 1 rows for it, as ragged
  passes in SGLang's ``RaggedVerifyLayout`` (``verify.py``) where the backend supports it; elsewhere SGLang's
  single pass runs and every request gets the same length (a cut chain there would only lose tokens); a step
  whose every request drafts the whole depth in one frontier runs SGLang's own draft loop and single pass (its
  shapes are the plan's);
* **commit**: SGLang samples, accepts and commits; the scheduler is told the new lengths; the draft-extend
  brings the draft's state up to date for the requests that drafted; a request with k_i = 0 is left out (a step
  where every k_i = 0 runs no draft model at all, and is the target's plain decode with SGLang's sampler where
  nothing needs the verify path): its rows wait in the draft backlog until it drafts again and catches up in one
  pass; while the last decode step was parked, a prefill runs no draft model either (its prompt's last rows wait
  in the backlog alike);
* **record**: the step's counters and telemetry at once; its measured phase times feed the cost model when they
  can be read (at once on CPU, a step or two later from CUDA events on a GPU: ``step_clock.py``); acceptance
  arrives later too, through ``observe`` (SGLang's ``on_verify_complete_cpu``), matched to this step by the
  controller's decision queue.

Every SGLang object is reached through ``touchpoints`` (imported as ``sgl``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from sglang_faser.engine import touchpoints as sgl
from sglang_faser.engine.depth_tiers import DepthTiers
from sglang_faser.engine.draft_backlog import DraftBacklog
from sglang_faser.engine.draft_cut import DraftCut, DraftSchedule
from sglang_faser.engine.metrics import FaserMetrics
from sglang_faser.engine.pipeline import FrontierPipeline
from sglang_faser.engine.profiler import seed_cost_model
from sglang_faser.engine.rank_sync import broadcast_lengths
from sglang_faser.engine.step_clock import Mark, StepClock
from sglang_faser.engine.step_trace import StepTrace
from sglang_faser.engine.verify import RaggedVerifier
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController, LengthCounters, StepDecision
from sglang_faser.spec.cost_model import DRAFT, VERIFY
from sglang_faser.spec.frontier import frontier_bounds
from sglang_faser.spec.request_params import parse_or_none
from sglang_faser.spec.telemetry import TelemetryRecorder, subtract
from sglang_faser.spec.warmup import is_warmup

logger = logging.getLogger(__name__)
NO_DRAFTS = DraftCut(DraftSchedule([]), 0)  # a step where nobody drafts (never hooked: it stays as built)


@dataclass(frozen=True)
class StepMarks:
    """A decode step's phase boundaries (``StepClock`` marks); ``host_gap``: the end of the last decode step of
    some of these requests and this step's start (the scheduler's work between them), or None; ``catch_up``: the
    draft's catch-up pass, or None."""

    began: Mark
    verify_began: Mark
    verify_ended: Mark
    ended: Mark
    host_gap: tuple[Mark, Mark] | None = None
    catch_up: tuple[Mark, Mark] | None = None


class FaserEngine:
    def __init__(self, worker):
        self.worker = worker
        self.window, topk, device = sgl.worker_settings(worker)
        self.clock = StepClock.for_device(device)
        self.config = FaserConfig.from_env()
        # on CPU no depth's first use stalls (the server's first decode step does): the start-up sweep measures
        # from its second step, one sweep of live requests at depths the policy would seldom choose, not two
        self.controller = LengthController(self.config, window=self.window, calibration_sweeps=1,
                                           warm_steps=1 if device == "cpu" else None)
        self.tiers: DepthTiers | None = None
        self.backlog = DraftBacklog()
        if topk == 1:
            tiers = DepthTiers(self.window)
            if device == "cpu" and not sgl.decode_graphs_disabled():
                logger.warning("FASER: depth tiers on CPU need --disable-cuda-graph; drafting the whole window")
            elif sgl.install_depth_tiers(worker, tiers):
                self.tiers = tiers
        # decided with the start-up profile, once the target runner is complete: ragged | uniform | stock-tree
        self.verify_path = "stock-tree" if topk != 1 else "pending"
        self.draft_path = "none"
        self.profile = "pending"
        self.policy_version = 0
        self.telemetry = TelemetryRecorder()
        self.trace = StepTrace.from_env()  # SGLANG_FASER_STEP_TRACE: one JSON line per decode step
        self.controller.explain = self.trace is not None  # pricing a probe-cut plan again only serves the trace
        self.metrics = FaserMetrics.create({"worker": "faser"})
        self._metrics_at = 0.0
        self._last: tuple[Mark, frozenset, bool] | None = None  # last step's end, its requests, was it a decode
        self._parked = False  # the last decode step had every k = 0 (a prefill may skip the draft)
        self._limits: tuple[list, tuple] = ([], ())  # the last batch's custom_params objects, and _limits_of them
        self._group = None  # (TP group, source rank) of the decision's broadcast: fixed for the server's life
        logger.info("FASER worker on %s: window=%d topk=%d depth_tiers=%s config=%s", type(worker).__mro__[2].__name__,
                    self.window, topk, "on" if self.tiers is not None else "off", self.config.to_json())

    # -- the scheduler's entry -----------------------------------------------------------------------------
    def forward(self, batch, on_publish, grammar_barrier, pp_proxy_tensors, stock):
        kind = sgl.decode_step_kind(batch)
        if self.verify_path == "stock-tree":
            return stock(batch, on_publish, grammar_barrier, pp_proxy_tensors)
        if kind == "stock":  # SGLang's own step: its time is not the scheduler's work before the next decode
            result = stock(batch, on_publish, grammar_barrier, pp_proxy_tensors)
            self._last = (self.clock.mark(), self._last[1] if self._last else frozenset(), False)
            return result
        if kind == "prefill":
            if len(self.backlog):  # a mixed step decodes running requests with SGLang's own draft-extend
                self._drop_backlog(sgl.request_ids(batch))
            began = self.clock.mark()
            with self._prefill_draft():
                result = stock(batch, on_publish, grammar_barrier, pp_proxy_tensors)
            ended = self.clock.mark()
            self.clock.when_ready(ended, lambda: self._end_step([("prefill", began, ended)], batch_size=0))
            self._last = (ended, self._last[1] if self._last else frozenset(), False)
            return result
        return self.decode(batch, on_publish, grammar_barrier, pp_proxy_tensors)

    def decode(self, batch, on_publish, grammar_barrier, pp_proxy_tensors):
        self.clock.poll()  # earlier steps' GPU times, where the GPU is done with them
        began = self.clock.mark()
        view, start = sgl.step_batch(batch), sgl.draft_state(batch)  # the draft state the step begins from
        if self.profile == "pending":
            self._start_up(view.rids)
        members = frozenset(view.rids)
        phases, host_gap = self._host_gap(began, members)

        # decide
        decision = self._decide(view)
        sgl.activate_depth(self.worker, len(view.rids))  # the depth tiers answer with decision.depth

        # draft (with frontiers: finished frontiers verified between draft forwards); a step where nobody drafts
        # is the target's plain decode where SGLang allows it, else a one-row verify
        plain = decision.depth == 0 and sgl.plain_decode_supported(self.worker, batch)
        whole = self._whole_window(decision)
        verifier = None if plain or whole else self._verifier(batch, view, decision, phases)
        draft_began = catch_up = None
        if plain:
            verify_input, cut = None, NO_DRAFTS
        elif decision.depth == 0:
            verify_input, cut = sgl.plain_decode_input(self.worker, batch), NO_DRAFTS
        else:
            draft_began = self.clock.mark()
            catch_up = self._catch_up(batch, view, decision)
            schedule = (FrontierPipeline(verifier, decision.lengths, self.config.overlap, self.worker, batch)
                        if verifier is not None and len(verifier.bounds) > 1 else DraftSchedule(decision.lengths))
            cut = DraftCut(schedule, decision.depth, hooked=not whole)
            if whole:  # nothing to cut: SGLang's own draft loop
                verify_input = sgl.draft(self.worker, batch)
            else:
                with sgl.draft_runner_hook(self.worker, cut.hook):
                    verify_input = sgl.draft(self.worker, batch)

        # verify: chains cut at k_i; the target computes the planned rows only
        verify_began = self.clock.mark()
        if draft_began is not None:
            phases.append(("draft", draft_began, verify_began))  # less the verify passes inside it
        if plain:
            result, roots, width = *sgl.plain_decode(self.worker, batch), 1
        else:
            sgl.cut_chains(verify_input, decision.lengths)
            if verifier is not None:
                with sgl.target_verify_hook(self.worker, verifier.forward):
                    result = sgl.verify(self.worker, batch, verify_input, pp_proxy_tensors, grammar_barrier)
            else:
                result = sgl.verify(self.worker, batch, verify_input, pp_proxy_tensors, grammar_barrier)
            roots, width = sgl.verified_tokens(verify_input)
        verify_ended = self.clock.mark()
        phases.append(("verify", verify_began, verify_ended))

        # commit: the scheduler learns the new lengths, the draft catches up on the accepted tokens, except for
        # requests that drafted nothing (k_i = 0): they catch up when they draft again, and a step where nobody
        # drafted runs no draft model at all
        sgl.publish(on_publish, result)
        bs = len(view.rids)
        skipped = list(range(bs)) if decision.depth == 0 else np.flatnonzero(decision.lengths == 0).tolist()
        if skipped:  # their rows wait in the backlog
            self.backlog.record(view.rids, skipped, *sgl.skipped_rows(self.worker, result, roots, width, skipped))
        else:
            self.backlog.record(view.rids, [], None, None)
        counters = self.controller.counters if not decision.warmup else LengthCounters()  # warm-up: not counted
        if decision.depth == 0:
            sgl.skip_draft_extend(self.worker, batch, result, start)
            counters.skipped_extends += 1
            counters.plain_decodes += plain
        elif skipped:
            drafting = [i for i, k in enumerate(decision.lengths) if k > 0]
            sgl.draft_extend_members(self.worker, batch, result, verify_input, drafting)
            counters.extend_skipped_requests += len(skipped)
        else:
            sgl.draft_extend(self.worker, batch, result, verify_input)
        ended = self.clock.mark()
        phases.append(("draft_extend", verify_ended, ended))
        sgl.set_cap_lens(result, decision.lengths, parked=decision.depth == 0)

        # record
        marks = StepMarks(began, verify_began, verify_ended, ended, host_gap, catch_up)
        self._record(decision, cut, verifier, width, phases, marks, view)
        self._last = (ended, members, True)
        self._parked = decision.depth == 0 and not decision.warmup
        return result

    def _prefill_draft(self):
        """How a prefill step runs the draft: SGLang's draft prefill, or, while the last decode step was parked
        (every request at k = 0, a load where new requests are parked too), none: the new requests' prompt rows wait
        in the backlog (``--faser-lazy-prefill``). A parked request's draft model work is then nothing at all; at
        16 requests/s on CPU the draft's prefill was 6 % of a FASER server's busy time (py-spy), work no
        speculation does not have, and time per token rose faster than that near saturation."""
        if not (self.config.lazy_prefill and self._parked):
            return nullcontext()
        return sgl.lazy_draft_prefill(self.worker, self._seed_backlog, self.backlog.limit)

    def _seed_backlog(self, rids: list, counts: list[int], tokens, features) -> None:
        counters = self.controller.counters
        counters.lazy_prefills += 1
        if rids:  # (none where the step's one request is a chunk that more of its prompt follows)
            self.backlog.seed(rids, counts, tokens, features)
            counters.lazy_prefill_rows += sum(counts)

    def _drop_backlog(self, rids: list) -> None:
        """The backlog of requests that run a step outside FASER's decode (a mixed prefill-decode step): SGLang's
        draft-extend there moves their draft state one position past the skipped rows, so a catch-up would write
        them one position late; their draft KV stays stale there instead (acceptance, never correctness)."""
        dropped = sum(self.backlog.forget(rid) for rid in rids)
        self.controller.counters.backlog_dropped_rows += dropped

    def _catch_up(self, batch, view, decision: StepDecision) -> tuple[Mark, Mark] | None:
        """The draft state of requests that draft again after steps without drafts, caught up in one pass; its
        marks (a one-off per resumption, priced on its own, kept out of the per-step fit; a warm-up's not priced)."""
        catch_up = self.backlog.take(view.rids, np.flatnonzero(decision.lengths).tolist())
        if catch_up is None:
            return None
        rows, began = len(catch_up.tokens), self.clock.mark()
        sgl.catch_up_draft(self.worker, batch, catch_up)
        ended, clock = self.clock.mark(), self.clock
        if not decision.warmup:
            clock.when_ready(ended, lambda: self.controller.record_catch_up(rows, clock.ms(began, ended)))
        return began, ended

    # -- decide ----------------------------------------------------------------------------------------------
    def _start_up(self, rids: list) -> None:
        self.verify_path = sgl.verify_layout(self.worker)
        if is_warmup(rids):  # its steps are the profile: real steps, CUDA graphs and all (spec/controller.py)
            self.profile = "warm-up steps"
        else:  # eager passes: the machine's cost on CPU; launch-bound on a GPU (a flat 26 ms a pass on an H200)
            self.profile = seed_cost_model(self.controller.cost, sgl.target_runner(self.worker), self.window,
                                           on_samples=None if self.trace is None else self.trace.profile)
        logger.info("FASER verify path: %s", self.verify_path)
        if self.verify_path != "ragged" and self.config.frontier_size:
            logger.warning("FASER: --faser-frontier-size %d needs the ragged verify path; this backend verifies "
                           "each step in SGLang's single pass", self.config.frontier_size)

    def _limits_of(self, controls: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(caps, floors, critical) [B] from the requests' ``custom_params``; the same objects as the last step's
        (a request keeps its own all along) give the same arrays without parsing them again."""
        last, limits = self._limits
        if len(last) == len(controls) and all(a is b for a, b in zip(last, controls)):
            return limits
        parsed = [parse_or_none(c) for c in controls]
        limits = (np.array([self.window if c.max_len is None else c.max_len for c in parsed], dtype=np.int64),
                  np.array([c.floor for c in parsed], dtype=np.int64),
                  np.array([c.latency_class == "critical" for c in parsed], dtype=bool))
        self._limits = (list(controls), limits)
        return limits

    def _decide(self, view) -> StepDecision:
        caps, floors, critical = self._limits_of(view.controls)
        decision = self.controller.decide(view.rids, caps=caps, floors=floors, padded=self.tiers is None,
                                          uniform=self.verify_path != "ragged", critical=critical,
                                          context=lambda: view.context,
                                          backlog=lambda: self.backlog.pending(view.rids))
        if self._group is None:
            self._group = sgl.broadcast_group(self.worker)
        group, src = self._group
        if group is not None:  # every TP rank runs rank 0's lengths and depth: the same shapes in every collective
            plan = broadcast_lengths(np.append(decision.lengths, decision.depth), len(view.rids) + 1, group, src)
            decision = self.controller.replace_last(decision, plan[:-1], plan[-1])
        if self.tiers is not None:
            self.tiers.next_depth = decision.depth
        return decision

    def _host_gap(self, began: Mark, rids: frozenset) -> tuple[list, tuple[Mark, Mark] | None]:
        """The scheduler's host work since the last step (results, streaming, batch building), as a ``schedule``
        phase when some of these requests ran throughout it (otherwise the gap may be idle time); its marks
        count as step cost only between two decode steps, where one batch's work is all it holds."""
        last = self._last
        if last is None or last[1].isdisjoint(rids) or began.host <= last[0].host:
            return [], None
        ended, _, after_decode = last
        return [("schedule", ended, began)], (ended, began) if after_decode else None

    def _whole_window(self, decision: StepDecision) -> bool:
        """Every request drafts the step's whole depth, verified in one frontier: SGLang's own draft loop and
        single verify pass run exactly the plan's rows, so the step runs them without the draft cut's hook and the
        ragged verifier (at one sure request on CPU FASER's step cost 4-5 % more host work than stock SGLang's at the
        same depth, about half of it in those two, by py-spy)."""
        depth = decision.depth
        return (depth > 0 and len(frontier_bounds(depth, self.config.frontier_size)) == 1
                and bool((decision.lengths == depth).all()))

    def _verifier(self, batch, view, decision: StepDecision, phases: list) -> RaggedVerifier | None:
        """Ragged, frontier-chunked verification with early pruning (None: SGLang's single pass)."""
        if self.verify_path != "ragged" or sgl.target_call_wrapped(self.worker):
            return None
        controller, context_lens = self.controller, view.context_lens

        clock = self.clock

        def on_pass(vpass, began: Mark, ended: Mark) -> None:
            members, rows, context = len(vpass.members), vpass.rows, int(context_lens[vpass.members].sum())
            step, warmup = controller.counters.steps, decision.warmup
            if decision.sampled or not warmup:  # a warm-up shape's first run pays its compiles
                clock.when_ready(ended, lambda: controller.record_phase(VERIFY, members, rows, clock.ms(began, ended),
                                                                        context=context, step=step, warmup=warmup))
            phases.append(("verify", began, ended))

        target_forward = sgl.target_forward(self.worker)
        rows = (decision.depth if self.tiers is not None else self.window) + 1
        return RaggedVerifier(target_forward, decision.lengths, sgl.prunable_requests(batch),
                              self.config.frontier_size, rows, on_pass=on_pass, clock=clock)

    # -- record ----------------------------------------------------------------------------------------------
    def _record(self, decision, cut: DraftCut, verifier, width: int, phases, marks: StepMarks, view) -> None:
        """The step's counters now; its costs and telemetry once its marks can be read (``StepClock``); a warm-up
        step's costs only (as the profile prior) and its trace line. ``view``: the step's batch (its context tokens
        are summed only where the step is priced)."""
        controller, bs = self.controller, len(decision.lengths)
        if cut.path is not None:
            self.draft_path = cut.path
        draft_rows = cut.rows_run(bs)
        if not decision.warmup:
            controller.record_drafting(draft_rows, cut.skipped, cut=self.draft_path == "cut")
            if verifier is not None:
                stats = verifier.stats
                controller.record_verification(stats.verified_rows, stats.pruned_rows, stats.offset_passes)
            else:  # SGLang's single pass of ``width`` rows a request (or the plain decode's one)
                controller.record_verification(bs * width, 0, 0)
        if verifier is not None and verifier.mismatches:
            logger.error("FASER step: %d early-verified frontier(s) recomputed", verifier.mismatches)
        # what pricing needs, without the step's tensors (on a GPU it waits a step or two for the device)
        passes = verifier.pass_marks if verifier is not None else None
        verify_rows = verifier.stats.planned_rows if verifier is not None else bs * width
        traced = (self.trace.decided(decision, view.rids, ragged=verifier is not None) if self.trace is not None
                  else None)
        step = controller.counters.steps
        if decision.sampled or traced is not None:  # most held steps price nothing (``LengthController.decide``)
            self.clock.when_ready(marks.ended, lambda: self._record_costs(decision, draft_rows, passes, verify_rows,
                                                                          marks, view.context, traced, step))
        if not decision.warmup:
            self.clock.when_ready(marks.ended, lambda: self._end_step(phases, batch_size=bs))

    def _record_costs(self, decision, draft_rows: int, passes, verify_rows: int, marks: StepMarks,
                      context: int, traced: dict | None, step: int) -> None:
        """A step's milliseconds into the cost model and its trace line (``traced``); ``passes``: the ragged
        verifier's target passes, each recorded as it ended (None: SGLang's single pass, timed here); ``step``:
        its count (``LengthController.record_phase``)."""
        controller, bs, ms = self.controller, len(decision.lengths), self.clock.ms
        single = passes is None
        passes = [(marks.verify_began, marks.verify_ended)] if single else passes
        verify_ms = sum(ms(a, b) for a, b in passes)
        catch_up_ms = ms(*marks.catch_up) if marks.catch_up else 0.0
        host_ms = ms(*marks.host_gap) if marks.host_gap else 0.0
        # the rest of the step, with the scheduler's work since the last step, is the draft side's: a per-step
        # cost that longer drafts amortise (a catch-up is a one-off per resumption and stays out of it)
        total_ms = ms(marks.began, marks.ended)
        draft_ms = max(total_ms - verify_ms - catch_up_ms, 0.0) + host_ms
        if decision.sampled:  # one step of each hold, its last held one, stands for the shape (controller.py)
            warmup = decision.warmup  # a warm-up step's costs are the profile prior
            if single:
                controller.record_phase(VERIFY, bs, verify_rows, verify_ms, context=context, step=step, warmup=warmup)
            drafting = int(np.count_nonzero(decision.lengths))
            controller.record_phase(DRAFT, bs, decision.depth, draft_ms, rows=draft_rows, drafting=drafting,
                                    step=step, warmup=warmup)
            if not warmup:
                controller.record_step(bs, verify_rows, decision.depth, draft_rows, drafting, context,
                                       verify_ms + draft_ms, step=step)
        if traced is not None:
            self.trace.measured(traced, controller, context=context, verify_ms=verify_ms, draft_ms=draft_ms,
                                catch_up_ms=catch_up_ms, host_ms=host_ms, step_ms=total_ms)

    def _end_step(self, phases: list[tuple[str, Mark, Mark]], batch_size: int) -> None:
        """A step's phases into telemetry, on the machine's timeline (the device's on a GPU, where the host's
        would be launch times); a draft phase less the verify passes run inside it (frontiers)."""
        seconds = self.clock.seconds
        spans = [(name, seconds(a), seconds(b)) for name, a, b in phases]
        if any(name == "draft" for name, _, _ in spans):
            verify = [(a, b) for name, a, b in spans if name == "verify"]
            spans = [(name, a, b) for name, a, b in spans if name != "draft"] + [
                ("draft", a, b) for name, start, end in spans if name == "draft"
                for a, b in subtract(start, end, verify)]
        self.telemetry.record_step(spans, self.controller.counters, batch_size)
        now = time.monotonic()
        if self.metrics is not None and now - self._metrics_at >= 1.0:
            self._metrics_at = now
            window = self.telemetry.snapshot()["window"]
            self.metrics.update(self.controller.counters, window, self.policy_version)

    # -- feedback and the control plane --------------------------------------------------------------------
    def observe(self, num_correct_drafts_per_req) -> None:
        self.controller.observe(num_correct_drafts_per_req)
        if self.trace is not None:
            self.trace.observe(num_correct_drafts_per_req)

    def forget(self, rid: str) -> None:
        self.controller.forget(rid)
        self.backlog.forget(rid)

    def apply_policy(self, config: FaserConfig, version: int) -> None:
        """A new policy, taken between two scheduler steps; requests in flight get new lengths next step."""
        old, self.config = self.config, config
        self.controller.apply_config(config)
        self.policy_version = version
        logger.info("FASER policy v%d: %s (was %s)", version, config.to_json(), old.to_json())

    def report(self) -> dict:
        """What /server_info carries for the control service: policy, paths, counters, telemetry."""
        return {
            "policy": json.loads(self.config.to_json()),
            "version": self.policy_version,
            "window": self.window,
            "verify_path": self.verify_path,
            "depth_tiers": self.tiers is not None,
            "draft_path": self.draft_path,
            "profile": self.profile,
            "counters": dataclasses.asdict(self.controller.counters),
            "telemetry": self.telemetry.snapshot(),
            "model": self.controller.model_report(),
        }
