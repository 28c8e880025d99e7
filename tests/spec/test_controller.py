"""The per-step controller: bounds, depth, counters, lengths that rise and fall with acceptance, decisions queued by step."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.acceptance import AcceptanceTracker
from sglang_faser.spec.cost_model import DRAFT, PRICED_EVIDENCE, StepCostModel
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import (MAX_PENDING_STEPS, PROBE_BATCH, PROBE_STEPS, RESUME_HORIZON,
                                          LengthController)
from sglang_faser.spec.policy import plan_ms


def test_depth_is_the_deepest_length_and_counters_add_up():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=2), window=4)
    decision = controller.decide(["a", "b"], caps=np.array([4, 1]))
    assert decision.lengths.tolist() == [2, 1] and decision.depth == 2
    controller.observe([2, 0])
    controller.record_verification(verified_rows=5, pruned_rows=1)  # ragged: (2 + 1) + (1 + 1), one row pruned
    c = controller.counters
    assert (c.proposed, c.verified, c.pruned, c.accepted, c.committed) == (3, 5, 1, 2, 4)
    assert c.length_histogram == [0, 1, 1]


def test_padded_steps_verify_the_whole_window():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=1), window=3)
    decision = controller.decide(["a"], padded=True)
    assert decision.depth == 3 and decision.lengths.tolist() == [1]


def test_operator_max_len_caps_the_window_and_mode_off_proposes_nothing():
    controller = LengthController(FaserConfig(max_len=2), window=5)
    assert controller.decide(["a", "b", "c"]).lengths.max() <= 2
    controller.apply_config(FaserConfig(mode="off"))
    decision = controller.decide(["a", "b", "c"])
    assert decision.lengths.tolist() == [0, 0, 0] and decision.depth == 0


def _cheap_drafts() -> StepCostModel:
    """A GPU-like batch-1 cost: a verify pass costs about the same at 1 or 9 rows, a draft forward a tenth."""
    return StepCostModel(verify_coef=[10.0, 0.5, 0.05, 0.0], draft_coef=[1.0, 0.0, 0.1, 1.0, 0.0])


def test_at_batch_one_a_sure_request_reaches_max_len_within_ten_steps():
    controller = LengthController(FaserConfig(max_len=8), window=8, cost=_cheap_drafts())
    controller.tracker = AcceptanceTracker(max_len=8, prior=0.3)  # a pessimistic server-wide start
    lengths = []
    for _ in range(10):
        decision = controller.decide(["sure"])
        controller.observe(decision.lengths)  # every draft passes
        lengths.append(int(decision.lengths[0]))
    assert lengths[-1] == 8, lengths


def test_a_sure_request_is_tried_even_when_the_server_expects_little():
    """CPU-like batch-1 costs (a draft step costs about as much as the plain step) and a server-wide estimate of
    0.3 after a run of doomed requests: myopic goodput never tries the request, the optimism that grows with the
    steps it has gone untried does, and once tried it keeps drafting."""
    cost = StepCostModel(verify_coef=[2.0, 0.0, 0.05, 0.0], draft_coef=[1.5, 1.0, 0.0, 2.0, 0.0])
    controller = LengthController(FaserConfig(max_len=5), window=5, cost=cost)
    controller.tracker = AcceptanceTracker(max_len=5, prior=0.3)
    lengths = []
    for _ in range(40):
        decision = controller.decide(["sure"])
        controller.observe(decision.lengths)  # every draft passes
        lengths.append(int(decision.lengths[0]))
    first = next(i for i, k in enumerate(lengths) if k > 0)
    assert 0 < first <= 20 and min(lengths[first:]) > 0 and lengths[-1] == 5, lengths


def test_drafting_at_a_batch_size_goes_one_depth_deeper_than_its_recent_steps_measured():
    """Sure requests drafting deep at 16 requests; 16 more join, and 32 requests have no drafting step of their
    own to price them: the step drafts one deep (a depth's price otherwise comes from the depths that ran, and at
    32 requests on CPU three drafts cost 3x a parked step where one cost 1.2x), and each step after it one deeper
    than the last measured, while the model's prices keep justifying it."""
    controller = LengthController(FaserConfig(max_len=5), window=5, cost=_cheap_drafts(), calibration_sweeps=0)

    def step(rids):
        decision = controller.decide(rids)
        controller.observe(decision.lengths)  # every draft passes
        lengths = decision.lengths
        shape = (len(rids), len(rids) + int(lengths.sum()), decision.depth, int(np.maximum(lengths - 1, 0).sum()),
                 int(np.count_nonzero(lengths)), 0)
        controller.record_step(*shape, ms=controller.cost.modelled_step_ms(*shape))  # as the fit prices it
        return lengths

    first = [f"a{i}" for i in range(16)]
    for _ in range(8):
        lengths = step(first)
    assert lengths.min() == 5
    both = first + [f"b{i}" for i in range(16)]
    assert step(both).max() == 1
    assert [int(step(both)[:16].min()) for _ in range(5)] == [2, 3, 4, 5, 5]


def test_a_batch_size_the_start_up_warm_up_ran_every_depth_at_drafts_deep_at_once():
    """As above, but the start-up warm-up ran every depth at 32 requests (its steps, CUDA graphs and all, are what
    serving runs): that bucket's prices are measured, and the 32 requests draft the window from their first step
    (on an H200 the climb cost a burst of 16-31 requests a dozen steps at one to six drafts, the fourth lease)."""
    results = {}
    for warmed in (False, True):
        controller = LengthController(FaserConfig(max_len=5), window=5, cost=_cheap_drafts(), calibration_sweeps=0)
        cost = controller.cost
        if warmed:  # as the engine records a warm-up step's draft phase, priced as the fit would
            for depth in range(1, 6):
                ms = cost.modelled_step_ms(32, 32 * (depth + 1), depth, 32 * (depth - 1), 32, 0)
                controller.record_phase(DRAFT, 32, depth, ms, rows=32 * (depth - 1), drafting=32, warmup=True)

        def step(rids):
            decision = controller.decide(rids)
            controller.observe(decision.lengths)  # every draft passes
            lengths = decision.lengths
            shape = (len(rids), len(rids) + int(lengths.sum()), decision.depth,
                     int(np.maximum(lengths - 1, 0).sum()), int(np.count_nonzero(lengths)), 0)
            controller.record_step(*shape, ms=cost.modelled_step_ms(*shape))
            return lengths

        first = [f"a{i}" for i in range(16)]
        for _ in range(8):
            step(first)
        results[warmed] = int(step(first + [f"b{i}" for i in range(16)])[:16].min())
    assert results == {False: 1, True: 5}


def test_at_batch_one_on_cpu_a_new_request_is_probed_short_and_a_passing_one_deeper_at_once():
    """The tiny cycle pair's measured costs (a draft forward costs about a plain step; one draft does not pay
    even when it passes, five do): after a sure and a doomed request finished, a new request is drafted on hope
    alone (the posterior means would not draft it), so its first probe is short: two drafts, the shortest that
    pays on its hopes (one, run before, was priced below a plain step even if it passed); a sure one drafts the
    window from its third step on, a doomed one is not tried again within 64 steps (a full-depth first probe cost
    a doomed request several plain steps)."""
    cost = StepCostModel(verify_coef=[1.86, 0.0, 0.068, 0.0], draft_coef=[1.27, 1.59, 0.0, 1.93, 0.0])
    controller = LengthController(FaserConfig(max_len=5), window=5, cost=cost, calibration_sweeps=0)

    def run(rid: str, sure: bool) -> list[int]:
        lengths = []
        for _ in range(64):
            k = int(controller.decide([rid]).lengths[0])
            controller.observe([k if sure else 0])
            lengths.append(k)
        controller.forget(rid)
        return lengths

    run("warm-sure", True), run("warm-doomed", False)
    sure = run("sure", True)
    assert sure[0] == 2 and sure[2:] == [5] * 62, sure
    doomed = run("doomed", False)
    assert doomed[0] == 2 and sum(doomed) == 2, doomed


def test_after_a_run_of_doomed_requests_new_ones_are_seldom_probed_and_sure_ones_still_are():
    """A server whose finished requests all failed their first draft: a new request is seldom probed (its hope is
    what the finished ones that tried were, not the server-wide estimate that requests never tried pull back
    towards the prior; each probe was a full-depth step for every request before); sure requests arriving after
    that run are still tried within three requests, and the fifth drafts the window from its second step on (its
    first probe is one draft deep: hope alone drafts it)."""
    costs = {"cpu": StepCostModel(verify_coef=[1.86, 0.0, 0.068, 0.0], draft_coef=[1.27, 1.59, 0.0, 1.93, 0.0]),
             "cheap drafts": StepCostModel(verify_coef=[2.0, 0.0, 0.05, 0.0], draft_coef=[1.5, 1.0, 0.0, 2.0, 0.0])}
    for name, cost in costs.items():
        controller = LengthController(FaserConfig(max_len=5), window=5, cost=cost)

        def run(rid: str, sure: bool) -> int:
            drafted = 0
            for _ in range(256):
                k = int(controller.decide([rid]).lengths[0])
                controller.observe([k if sure else 0])
                drafted += k
            controller.forget(rid)
            return drafted

        doomed = [run(f"doomed-{i}", False) for i in range(24)]
        assert doomed[0] > 0 and np.count_nonzero(doomed[4:]) <= 10, (name, doomed)  # every one before
        sure = [run(f"sure-{i}", True) for i in range(5)]
        assert max(sure[:3]) > 0 and sure[-1] >= 5 * 255 + 1, (name, sure)


def test_at_batch_one_a_hopeless_request_stops_speculating():
    controller = LengthController(FaserConfig(max_len=8), window=8, cost=_cheap_drafts())
    lengths = []
    for _ in range(30):
        decision = controller.decide(["hopeless"])
        controller.observe([0])  # the first draft always fails
        lengths.append(int(decision.lengths[0]))
    last = lengths[-20:]  # parked at 0, probed now and then as its old failures fade
    assert last.count(0) >= 10 and sum(last) / len(last) < 1.0, lengths


def test_per_request_caps_and_floors_and_mode_off_wins():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=2), window=4)
    decision = controller.decide(["a", "b", "c"], caps=np.array([0, 4, 1]), floors=np.array([0, 3, 1]))
    assert decision.lengths.tolist() == [0, 3, 1]  # cap 0 = no speculation; floor 3 lifts b; c capped at 1
    controller.apply_config(FaserConfig(mode="off", min_len=2))
    assert controller.decide(["a", "b"], floors=np.array([1, 1])).lengths.tolist() == [0, 0]


def test_a_latency_critical_request_keeps_speculating_when_the_policy_would_stop():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=0), window=4)
    assert controller.decide(["a", "b"]).lengths.tolist() == [0, 0]
    assert controller.decide(["a", "b"], floors=np.array([1, 0])).lengths.tolist() == [1, 0]


def test_start_up_sweep_runs_every_depth_and_feeds_the_profile_prior():
    controller = LengthController(FaserConfig(), window=3, calibration_sweeps=1)
    controller.cost.draft_coef[:] = 99.0  # the default prior is replaced by the sweep's measurements
    depths = []
    for _ in range(8):
        decision = controller.decide(["a", "b"], caps=np.array([3, 1]))
        depths.append(decision.lengths.tolist())
        controller.record_phase("verify", 2, int(decision.lengths.sum()) + 2, 1.0 + decision.lengths.sum())
        stall = 100.0 if len(depths) <= 4 else 0.0  # first use of each depth: a one-off stall, ignored
        controller.record_phase("draft", 2, decision.depth, 0.5 + 2 * decision.depth + stall)
    assert depths == [[0, 0], [1, 1], [2, 1], [3, 1]] * 2  # every depth, clipped to each request's cap
    assert not controller.calibrating
    assert controller.cost.draft_ms(2, 3) == pytest.approx(6.5, rel=0.05)  # fitted from the sweep
    fixed = LengthController(FaserConfig(mode="fixed", fixed_len=1), window=3, calibration_sweeps=1)
    assert fixed.decide(["a"]).lengths.tolist() == [1]  # fixed mode is never swept


def test_a_start_up_sweep_without_stalls_at_first_use_measures_from_its_second_step():
    """On CPU no depth stalls at its first use, only the server's first decode step does: one sweep after that
    step (window + 2 steps of live requests, not two sweeps' 2 x (window + 1)) gives every depth its sample."""
    controller = LengthController(FaserConfig(), window=3, calibration_sweeps=1, warm_steps=1)
    depths = []
    while controller.calibrating:
        decision = controller.decide(["a"])
        depths.append(int(decision.depth))
        stall = 1000.0 if len(depths) == 1 else 0.0  # the server's first decode step
        controller.record_phase("draft", 1, decision.depth, 0.5 + 2 * decision.depth + stall)
    assert depths == [0, 1, 2, 3, 0]
    assert controller.cost.draft_ms(1, 0) == pytest.approx(0.5, abs=0.05)  # the stall is not in the prior
    assert controller.cost.draft_ms(1, 3) == pytest.approx(6.5, rel=0.05)


def test_a_large_batch_ends_the_start_up_sweep_and_is_decided_by_the_policy():
    """A burst meeting the sweep would run its deep depths on every request (at 48 requests on CPU: 210-320 ms
    steps against a parked 40 ms) and those samples alone would price drafting at its batch size. The sweep ends
    where it stands: the depths it measured are the prior, fitted at once."""
    from sglang_faser.spec.controller import SWEEP_MAX_BATCH

    controller = LengthController(FaserConfig(), window=5, calibration_sweeps=1, warm_steps=1)
    for _ in range(4):  # one request: the warm step, then depths 1 to 3, all accepted, drafts next to free
        decision = controller.decide(["a"])
        controller.record_phase("verify", 1, int(decision.lengths.sum()) + 1, 1.0)
        controller.record_phase("draft", 1, decision.depth, 0.5 + 0.01 * decision.depth)
        controller.observe(decision.lengths)
    controller.forget("a")
    assert controller.calibrating
    burst = [f"r{i}" for i in range(SWEEP_MAX_BATCH)]
    decision = controller.decide(burst)
    assert not decision.calibration and not controller.calibrating
    assert controller.cost.draft_ms(1, 2) == pytest.approx(0.52, rel=0.05)  # the sweep's depths: the prior
    assert decision.lengths.tolist() == [1] * SWEEP_MAX_BATCH  # the plan (5 deep on drafts that cheap), probed one
    # draft deep: no depth was measured at its batch size
    small = LengthController(FaserConfig(), window=5, calibration_sweeps=1, warm_steps=1)
    for step in range(4):
        assert small.decide([f"r{i}" for i in range(SWEEP_MAX_BATCH - 1)]).lengths.tolist() == [step] * 7


def test_model_report_shows_the_fitted_costs_and_the_acceptance_it_learned():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=1), window=3)
    before = controller.model_report()
    assert before["verify_mape"] is None and len(before["accept_by_position"]) == 3
    for _ in range(40):
        controller.decide(["a", "b"])
        controller.observe([0, 0])  # every first draft rejected
        controller.record_phase("verify", 2, 4, 2.0)
    controller.forget("a")  # finished requests vote on what the next one starts from
    controller.forget("b")
    after = controller.model_report()
    assert after["accept_by_position"][0] < before["accept_by_position"][0] - 0.1
    assert after["verify_mape"] is not None and len(after["verify_coef"]) == 4 and len(after["draft_coef"]) == 5


def test_overlap_order_credits_each_result_to_the_step_it_belongs_to():
    # SGLang's overlap scheduler decides step 2 before step 1's accepted counts reach observe()
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=3), window=3)
    first = controller.decide(["a", "b"], caps=np.array([0, 3]))
    second = controller.decide(["a", "b"], caps=np.array([3, 0]))
    assert first.lengths.tolist() == [0, 3] and second.lengths.tolist() == [3, 0]
    prior = controller.tracker.posterior(["a"])[0][0].copy()
    # a single pending slot would credit [0, 2] against step 2's lengths [3, 0], then drop step 2's result
    controller.observe([0, 2])  # step 1: b accepted 2 of its 3
    controller.observe([2, 0])  # step 2: a accepted 2 of its 3
    c = controller.counters
    assert (c.accepted, c.committed, c.unobserved) == (4, 8, 0)
    assert c.proposed_by_position == [2, 2, 2] and c.accepted_by_position == [2, 2, 0]
    a = controller.tracker.posterior(["a"])[0][0]
    assert a[0] > prior[0] and a[1] > prior[1] and a[2] < prior[2]  # accepted, accepted, rejected


def test_pending_decisions_are_bounded_when_results_go_missing():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=1), window=3)
    for step in range(MAX_PENDING_STEPS + 2):
        controller.decide(["a"], caps=np.array([step % 2]))  # lengths 0, 1, 0, 1, 0, 1
    assert controller.counters.unobserved == 2
    for _ in range(MAX_PENDING_STEPS + 1):
        controller.observe([1])
    c = controller.counters
    assert c.accepted == 2 and c.committed == MAX_PENDING_STEPS + 2  # the 4 kept steps: lengths 0, 1, 0, 1


def test_uniform_backend_gets_one_length_for_the_whole_batch():
    rows_cost = StepCostModel(verify_coef=[1.0, 0.0, 0.5, 0.0], draft_coef=[0.2, 0.0, 0.0, 0.2, 0.0])  # rows matter
    controller = LengthController(FaserConfig(uniform_margin=0.0), window=4, cost=rows_cost)
    split = []
    for _ in range(30):  # a always accepts, b never does: per-request lengths split them (b probed now and then)
        decision = controller.decide(["a", "b"])
        controller.observe([decision.lengths[0], 0])
        split.append(decision.lengths)
    late = np.array(split[-10:])
    assert (late[:, 0] == 4).all() and late[:, 1].mean() < 2
    uniform = controller.decide(["a", "b", "c"], caps=np.array([4, 4, 1]), uniform=True)
    assert uniform.lengths[0] == uniform.lengths[1] and uniform.lengths[2] == min(uniform.lengths[0], 1)


def test_the_source_ranks_decision_replaces_this_ranks_own():
    """With tensor parallelism every rank runs rank 0's lengths: queue and counters follow them."""
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=1), window=4)
    mine = controller.decide(["a", "b"])
    assert mine.lengths.tolist() == [1, 1]
    theirs = controller.replace_last(mine, np.array([3, 0]), 3)
    assert theirs.lengths.tolist() == [3, 0] and theirs.depth == 3
    c = controller.counters
    assert c.proposed == 3 and c.length_histogram[:4] == [1, 0, 0, 1]
    controller.observe([2, 0])
    assert c.accepted == 2 and c.proposed_by_position[:3] == [1, 1, 1]  # credited against [3, 0]


def test_a_parked_batch_is_decided_again_every_few_steps_and_a_new_request_at_once():
    from sglang_faser.spec.controller import HOLD_RECHECK

    controller = LengthController(FaserConfig(mode="off"), window=3)
    plans = []
    plan = controller.policy.plan
    controller.policy.plan = lambda *args, **kwargs: plans.append(1) or plan(*args, **kwargs)
    for _ in range(2 * HOLD_RECHECK):
        assert controller.decide(["a"]).lengths.tolist() == [0]
        controller.observe([0])
    assert len(plans) == 2 and controller.counters.steps == 2 * HOLD_RECHECK
    controller.decide(["a", "b"])  # a new request joined
    controller.decide(["a", "b"], floors=np.array([0, 1]))  # or the same requests ask for something else
    assert len(plans) == 4


def test_a_batch_that_parks_again_is_held_twice_as_long_up_to_a_bound():
    """Deciding a parked batch again costs a CPU decode step of a small batch 4-5 %: each decision that parks the
    same batch again holds it twice as long (4, 8, 16, 16, ... steps); held steps say so (they decide nothing;
    one of them is a cost sample), deciding steps do not."""
    from sglang_faser.spec.controller import HOLD_MAX, HOLD_RECHECK

    controller = LengthController(FaserConfig(mode="off"), window=3)
    decided = []
    for step in range(64):
        decision = controller.decide(["a"])
        assert decision.lengths.tolist() == [0]
        if not decision.held:
            decided.append(step)
        controller.observe([0])
    assert HOLD_RECHECK == 4 and HOLD_MAX == 16
    assert decided == [0, 4, 12, 28, 44, 60]
    assert controller.counters.steps == 64 and controller.counters.length_histogram[0] == 64
    assert not controller.decide(["a", "b"]).held  # a new batch decides at once, and holds 4 again
    assert [controller.decide(["a", "b"]).held for _ in range(4)] == [True, True, True, False]


def _deciding_steps(controller, steps: int, accepted: int) -> list[int]:
    decided = []
    for step in range(steps):
        if not controller.decide(["a"]).held:
            decided.append(step)
        controller.observe([accepted])
    return decided


def test_a_parked_batch_in_back_off_is_held_longer():
    """A parked request whose last b probes failed fades at request_rate / 2^b a step, so its batch's holds double
    up to HOLD_MAX x 2^b (at most LONG_HOLD_MAX) rather than HOLD_MAX: at one doomed request on the deep pair each
    full decision cost 0.8-1.7 ms of a 12 ms step."""
    from sglang_faser.spec.controller import HOLD_MAX, LONG_HOLD_MAX

    controller = LengthController(FaserConfig(mode="off"), window=3)
    for _ in range(2):  # two failed probes in a row
        controller.tracker.observe(["a"], np.array([1]), np.array([0]))
    assert controller.tracker.failed_probes(["a"]).tolist() == [2] and HOLD_MAX << 2 <= LONG_HOLD_MAX
    assert _deciding_steps(controller, 200, 0) == [0, 4, 12, 28, 60, 124, 188]  # holds of 4, 8, ... 64, 64


def test_a_batch_drafting_its_caps_is_held_up_to_the_long_bound():
    """A batch whose every request drafts its cap is decided again at its first rejection anyway; while its drafts
    pass its holds double up to LONG_HOLD_MAX."""
    from sglang_faser.spec.controller import LONG_HOLD_MAX

    controller = LengthController(FaserConfig(mode="fixed", fixed_len=2), window=3)
    assert LONG_HOLD_MAX == 128
    assert _deciding_steps(controller, 400, 2) == [0, 4, 12, 28, 60, 124, 252, 380]


def test_a_batch_whose_steps_are_long_is_decided_and_priced_every_step():
    """A hold saves a decision's share of a short step; a parked batch of ``HOLD_STEP_BATCH`` requests or more
    whose batch size's last measured step took longer than ``HOLD_STEP_MS``, or that no step of its size has been
    priced for yet, is decided and priced every step (at 32 requests on CPU a parked batch's holds priced 3 steps in
    28 while the model still put a parked step at 23 ms against 35-45; a burst of 44-48 after steps of two was held
    unpriced for seven steps), and is held again once its steps are short; a smaller batch keeps its holds."""
    from sglang_faser.spec.controller import HOLD_STEP_BATCH, HOLD_STEP_MS

    controller = LengthController(FaserConfig(), window=3, calibration_sweeps=0)
    rids = [f"r{i}" for i in range(HOLD_STEP_BATCH)]
    caps = np.zeros(len(rids), dtype=np.int64)  # every request at its bound: parked

    def steps(n, rids=rids, caps=caps):
        decisions = [controller.decide(rids, caps=caps) for _ in range(n)]
        for _ in decisions:
            controller.observe([0] * len(rids))
        return decisions

    controller.record_step(2, 2, 0, 0, 0, 64, HOLD_STEP_MS / 4)  # a short step of another batch size
    unpriced = steps(3)
    assert not any(d.held for d in unpriced) and all(d.sampled for d in unpriced)
    controller.record_step(len(rids), len(rids), 0, 0, 0, 64, HOLD_STEP_MS / 2)
    assert [d.held for d in steps(4)] == [False, True, True, True]
    controller.record_step(len(rids), len(rids), 0, 0, 0, 64, 2 * HOLD_STEP_MS)
    long = steps(6)
    assert not any(d.held for d in long) and all(d.sampled for d in long)
    controller.record_step(len(rids), len(rids), 0, 0, 0, 64, HOLD_STEP_MS / 2)
    assert [d.held for d in steps(4)] == [False, True, True, True]
    few, few_caps = rids[: HOLD_STEP_BATCH - 1], caps[: HOLD_STEP_BATCH - 1]
    controller.record_step(len(few), len(few), 0, 0, 0, 64, 2 * HOLD_STEP_MS)
    assert [d.held for d in steps(4, few, few_caps)] == [False, True, True, True]

    # a batch drafting its caps keeps its holds however long its steps: a rejection already ends them, and each
    # prices its deciding step
    drafting = LengthController(FaserConfig(mode="adaptive", min_len=2), window=2, calibration_sweeps=0)
    drafting.record_step(len(rids), 3 * len(rids), 2, 2 * len(rids), len(rids), 64, 2 * HOLD_STEP_MS)
    decisions = [drafting.decide(rids) for _ in range(4)]
    assert [d.lengths.tolist() for d in decisions] == [[2] * len(rids)] * 4 and [d.held for d in decisions] == [
        False, True, True, True]


def test_a_batch_drafting_its_caps_is_held_while_drafts_pass_and_decided_at_once_after_a_rejection():
    """A sure request at max-len: passing drafts can only confirm the decision, so the batch keeps it for 3 more
    steps (held: no decision) like a parked batch; one rejected draft makes the next step decide."""
    controller = LengthController(FaserConfig(max_len=8), window=8, cost=_cheap_drafts(), calibration_sweeps=0)
    plans = []
    plan = controller.policy.plan
    controller.policy.plan = lambda *args, **kwargs: plans.append(1) or plan(*args, **kwargs)
    decisions = []
    for _ in range(12):
        decision = controller.decide(["sure"])
        controller.observe(decision.lengths)  # every draft passes
        decisions.append(decision)
    at_cap = next(i for i, d in enumerate(decisions) if d.lengths[0] == 8)
    held = [d.held for d in decisions[at_cap:at_cap + 5]]
    assert held == [False, True, True, True, False], [(int(d.lengths[0]), d.held) for d in decisions]
    assert all(d.lengths[0] == 8 for d in decisions[at_cap:])
    # one plan per decision, and one on the posterior means alone at the new request's first step
    assert len(plans) == sum(not d.held for d in decisions) + 1
    held = controller.decide(["sure"])
    assert held.held or controller.decide(["sure"]).held  # held again (or the recheck, then held)
    controller.observe([2])  # two of eight passed
    assert not controller.decide(["sure"]).held


def test_a_batch_drafting_below_its_caps_keeps_a_plan_it_decided_twice_on_its_means():
    """Drafting below its caps (two drafts pass, the third fails), a batch decides every step while its plan moves
    or a probe on hope runs (eight deep); a plan decided twice in a row on the means alone is steady, kept through
    the rejections of the next ``HOLD_RECHECK`` - 1 steps (deciding again cost a small batch's CPU step 4-8 %), each
    of them priced, then decided again."""
    controller = LengthController(FaserConfig(max_len=8), window=8, cost=_cheap_drafts(), calibration_sweeps=0)
    steps = []
    for _ in range(14):
        decision = controller.decide(["half"])
        steps.append((int(decision.lengths[0]), decision.held, decision.sampled))
        controller.observe([min(int(decision.lengths[0]), 2)])  # two pass, the third fails
    assert [k for k, _, _ in steps] == [8, 2, 6, 2, 2, 2, 2, 2, 8, 2, 2, 2, 2, 2]
    assert [held for _, held, _ in steps] == [False] * 5 + [True] * 3 + [False] * 3 + [True] * 3
    assert all(sampled for _, _, sampled in steps)


def test_fixed_mode_holds_its_lengths_until_the_batch_changes():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=2), window=4)
    held = []
    for _ in range(8):
        decision = controller.decide(["a", "b"], caps=np.array([4, 1]))
        assert decision.lengths.tolist() == [2, 1]
        controller.observe([0, 0])  # rejections change nothing in fixed mode
        held.append(decision.held)
    assert held == [False, True, True, True, False, True, True, True]
    assert not controller.decide(["a"]).held


def test_optimism_goes_to_one_request_a_step():
    """Sixteen new requests, each optimistic along its whole chain: on their hopes every one drafts 3, on their
    posterior means 1. The step decides on the means but for one request (optimism on all at once compounded into
    deep steps drafted on hope), the one whose optimism adds most; ties go to the first."""
    from sglang_faser.spec.controller import _explore_few
    from sglang_faser.spec.policy import GoodputPolicy

    cost = StepCostModel(verify_coef=[2.0, 0.05, 0.05, 0.0], draft_coef=[0.1, 0.1, 0.02, 0.2, 0.01])
    rids = [f"r{i}" for i in range(16)]
    means, hopes = AcceptanceTracker(max_len=5, prior=0.5).estimates(rids)
    caps, mins = np.full(16, 5), np.zeros(16, dtype=np.int64)
    plan = GoodputPolicy(FaserConfig().uniform_margin).plan
    assert plan(hopes, caps, mins, cost).lengths.tolist() == [3] * 16
    assert plan(means, caps, mins, cost).lengths.tolist() == [1] * 16
    controller = LengthController(FaserConfig(max_len=5, draft_margin=0.0), window=5, cost=cost)
    controller.tracker = AcceptanceTracker(max_len=5, prior=0.5)
    assert controller.decide(rids).lengths.tolist() == [1] * 16

    seen = _explore_few(means, hopes, 1)
    assert np.flatnonzero((seen != means).any(axis=1)).tolist() == [0]
    np.testing.assert_array_equal(seen[0], hopes[0])
    hopes[5, 1:] = 1.0  # request 5's optimism adds most
    assert np.flatnonzero((_explore_few(means, hopes, 1) != means).any(axis=1)).tolist() == [5]
    np.testing.assert_array_equal(_explore_few(means[:1], hopes[:1], 1), hopes[:1])  # alone: all its optimism


def test_a_parked_holds_deciding_step_is_no_cost_sample_and_a_drafting_holds_is():
    parked = LengthController(FaserConfig(mode="off"), window=3)
    assert [parked.decide(["a"]).sampled for _ in range(4)] == [False, False, False, True]
    drafting = LengthController(FaserConfig(mode="fixed", fixed_len=2), window=3)
    assert [drafting.decide(["a"]).sampled for _ in range(4)] == [True, False, False, True]


def test_a_large_parked_batchs_deciding_step_is_a_cost_sample():
    """From ``HOLD_STEP_BATCH`` requests a parked hold's deciding step is priced too: such a batch changes every
    few steps at 16 req/s and seldom reaches its hold's last step, and unsampled its parked steps ran 1.12-1.27x
    their price on CPU while drafting steps ran at theirs."""
    from sglang_faser.spec.controller import HOLD_STEP_BATCH

    for batch, first in ((HOLD_STEP_BATCH - 1, False), (HOLD_STEP_BATCH, True)):
        parked = LengthController(FaserConfig(mode="off"), window=3)
        rids = [f"r{i}" for i in range(batch)]
        runs = [parked.decide(rids) for _ in range(4)]
        assert [d.held for d in runs] == [False, True, True, True]
        assert [d.sampled for d in runs] == [first, False, False, True]


def test_a_start_up_sweep_sample_read_steps_late_still_joins_the_prior():
    """On a GPU a step's times arrive a step or two after it (engine/step_clock.py): the sweep's last samples
    must go where their own step puts them (the profile prior), not where the step count is when they arrive."""
    from sglang_faser.spec.cost_model import DRAFT

    window = 3
    controller = LengthController(FaserConfig(), window=window, calibration_sweeps=1)
    for _ in range(controller.calibration_steps + 2):
        controller.decide(["a"])
        controller.observe([0])
    cost = controller.cost
    prior, online = len(cost.samples(DRAFT, online=False)[1]), len(cost.samples(DRAFT)[1])
    controller.record_phase(DRAFT, 1, 2, 5.0, rows=1, drafting=1, step=controller.calibration_steps)
    assert (len(cost.samples(DRAFT, online=False)[1]), len(cost.samples(DRAFT)[1])) == (prior + 1, online)
    controller.record_phase(DRAFT, 1, 2, 5.0, rows=1, drafting=1)  # default: the last decided step's
    assert (len(cost.samples(DRAFT, online=False)[1]), len(cost.samples(DRAFT)[1])) == (prior + 1, online + 1)


def test_one_requests_hope_drafts_that_request_alone():
    """Three requests whose first two drafts pass 40 % of the time each (the deep cycle pair's fitted costs: on
    their means, drafting does not pay) and a new one: a step that drafts on one request's hope drafts that
    request alone, the others keep their means' length 0 (and its probe is as deep as pays on its hopes). Before,
    the uniform plan one hope lifted drafted all four (lengths 3, 3, 3, 1 in this sequence). A step of five drafts
    each, measured as priced, makes every drafting price at four requests a recent one (no cost probe)."""
    cost = StepCostModel(verify_coef=[12.41, 0.0, 0.78, 0.0027], draft_coef=[1.40, 4.47, 0.0, 1.72, 0.0])
    controller = LengthController(FaserConfig(max_len=5), window=5, cost=cost, calibration_sweeps=0)
    old, rng = ["a", "b", "c"], np.random.default_rng(0)
    for _ in range(12):
        accepted = [int(np.argmin(np.append(rng.random(2) < 0.4, False))) for _ in old]
        controller.tracker.observe(old, proposed=np.array([2, 2, 2]), accepted=np.array(accepted))
    five = cost.modelled_step_ms(4, 24, 5, 16, 4, 0)
    cost.record_step(4, 5, five, five, shape=(24, 16, 4, 0))
    plans = []
    for _ in range(8):
        decision = controller.decide(old + ["new"])
        plans.append(decision.lengths.tolist())
        controller.observe(np.zeros(4, dtype=np.int64))
    drafted = [lengths for lengths in plans if any(lengths)]
    assert drafted and all(lengths[:3] == [0, 0, 0] and lengths[3] > 0 for lengths in drafted), plans


def test_a_held_decision_reads_neither_context_nor_backlog():
    """``context`` and ``backlog`` may be functions: the step that decides reads them, the steps that reuse its
    held decision do not (the context's sum was a batch-1 CPU step's largest single host cost of FASER's own)."""
    controller = LengthController(FaserConfig(mode="off"), window=3)
    reads = []

    def context() -> int:
        reads.append("context")
        return 100

    def backlog() -> np.ndarray:
        reads.append("backlog")
        return np.zeros(1, dtype=np.int64)

    first = controller.decide(["a"], context=context, backlog=backlog)
    assert reads == ["context", "backlog"]
    for _ in range(3):
        held = controller.decide(["a"], context=context, backlog=backlog)
        controller.observe([0])
        assert held.held and not held.lengths.any()
    assert reads == ["context", "backlog"] and not first.held


def test_a_probe_pays_its_catch_up_in_full_and_a_request_drafting_on_its_means_a_share_of_it():
    """Batch-1 costs fitted live on CPU (a trace at 1 req/s), a catch-up pass of 3 ms + 0.028 ms a row: a new
    request, which only hope drafts, probes its whole window where its draft holds nothing to catch up; where a lazy
    prefill left 64 prompt rows its probe pays their catch-up in full (a failed probe parks it again: no later step
    shares that price), so it probes shallower. A request whose own record drafts it resumes beside the same
    backlog paying an eighth of it (``RESUME_HORIZON``)."""
    context, rows = 200, np.array([64])

    def controller() -> LengthController:
        cost = StepCostModel(verify_coef=[4.82, 0.0, 0.118, 0.0001], draft_coef=[2.22, 2.57, 0.0, 1.73, 0.0])
        cost.catch_up_coef = np.array([3.0, 0.028])
        return LengthController(FaserConfig(max_len=7), window=7, cost=cost, calibration_sweeps=0)

    def priced(controller: LengthController, decision) -> float:
        return float(plan_ms(controller.cost, 1, decision.lengths, context=context))

    fresh = controller().decide(["new"], context=context, backlog=np.zeros(1))
    lazy_controller = controller()
    lazy = lazy_controller.decide(["new"], context=context, backlog=rows)
    catch_up = float(lazy_controller.cost.catch_up_ms(rows)[0])
    assert fresh.depth == 7 and lazy.depth < fresh.depth, (fresh, lazy)
    assert lazy.expected_ms == pytest.approx(priced(lazy_controller, lazy) + catch_up * lazy.lengths.any())

    sure = controller()
    for _ in range(8):
        decision = sure.decide(["sure"], context=context)
        sure.observe(list(decision.lengths))  # every draft accepted: its own record drafts it
    sure.apply_config(sure.config)  # ends its hold at its caps: the next step is decided, its backlog read
    resumed = sure.decide(["sure"], context=context, backlog=rows)
    assert resumed.lengths.any() and not resumed.held, resumed
    assert resumed.expected_ms == pytest.approx(priced(sure, resumed) + catch_up / RESUME_HORIZON), resumed


def test_a_probe_is_never_priced_below_parking_on_the_hopes_that_chose_it():
    """The embedded pair's fitted batch-2 costs on CPU (a draft-extend and the verify's fixed costs are about a
    plain step: a step one draft deep costs 1.7x a parked one, five deep 2.8x) and requests whose drafts pass half the
    time: a probe cut to one draft (a request in back-off, or a new one hope alone drafts) expected fewer tokens a
    millisecond than parking, even on the hopes that chose it, and ran; it is now raised to the shortest length
    that does not, or the batch parks. (A cost probe, which nothing here ends by measuring the price, is not hope's:
    it runs to measure a price, whatever the estimates say.)"""
    cost = StepCostModel(verify_coef=[3.68, 0.12, 0.0155, 0.0004], draft_coef=[1.32, 2.11, 0.37, 1.03, 0.0])
    controller = LengthController(FaserConfig(max_len=7), window=7, cost=cost, calibration_sweeps=0)
    rng, context = np.random.default_rng(0), 400
    parked_ms = float(plan_ms(cost, 2, np.zeros(2, dtype=np.int64), context=context))
    drafted = []
    for first in range(0, 12, 2):
        rids = [f"r{first}", f"r{first + 1}"]
        for _ in range(64):
            decision = controller.decide(rids, context=context)
            if decision.lengths.any() and decision.probe != "cost":
                drafted.append(decision.expected_tokens / decision.expected_ms)
            controller.observe([int(np.argmin(np.append(rng.random(k) < 0.5, False))) for k in decision.lengths])
        for rid in rids:
            controller.forget(rid)
    assert drafted and min(drafted) >= 2 / parked_ms, (len(drafted), min(drafted), 2 / parked_ms)


def test_a_batch_size_priced_only_parked_runs_the_best_plan_within_one_draft_not_a_deeper_one_cut_to_it():
    """32 sure requests at a batch size whose steps have all been parked: the optimum over every depth drafts five
    deep (a draft-extend's fixed cost is large, each draft after it cheap), a depth not measured there yet, so the
    step may draft one deep at most. One draft a request prices below parking (a fixed cost for one token); the
    deeper plan cut to one draft ran anyway (Gamma 64 on CPU: 1.25 tokens/ms expected against parking's 1.97). Now
    the step is a cost probe of one draft (nothing measured drafting there), and once that is measured, the optimum
    within one draft deeper than it: two drafts (which pay here), not the five-deep plan cut to two."""
    cost = StepCostModel(verify_coef=[10.0, 0.1, 0.01, 0.0], draft_coef=[1.0, 15.0, 0.0, 0.5, 0.0])
    controller = LengthController(FaserConfig(max_len=5), window=5, cost=cost, calibration_sweeps=0)
    rids = [f"r{i}" for i in range(32)]
    for _ in range(30):  # their record: every draft passes
        controller.tracker.observe(rids, proposed=np.full(32, 5), accepted=np.full(32, 5))
    parked = cost.modelled_step_ms(32, 32, 0, 0, 0, 0)
    for _ in range(4):  # parked steps of 32, as the fit prices them
        cost.record_step(32, 0, parked, parked, shape=(32, 0, 0, 0))
    assert controller.cost.priced_depth(32) == 0
    probe = controller.decide(rids)
    parked_ms = float(plan_ms(cost, 32, np.zeros(32, dtype=np.int64)))
    assert probe.lengths.tolist() == [1] * 32 and probe.expected_tokens / probe.expected_ms < 32 / parked_ms
    controller.observe(probe.lengths)
    one = cost.modelled_step_ms(32, 64, 1, 0, 32, 0)
    cost.record_step(32, 1, one, one, shape=(64, 0, 32, 0))  # as priced
    decision = controller.decide(rids)
    assert decision.lengths.tolist() == [2] * 32 and controller._cost_probe_left == 0


def _parked_on_a_dear_price(batch: int = 32, passing: float = 0.85):
    """A controller whose fit prices one draft at ``batch`` requests at 3x a parked step, after parked steps there
    that measured the parked price, and ``batch`` requests whose first drafts pass ``passing`` of the time."""
    cost = StepCostModel(verify_coef=[10.0, 0.1, 0.01, 0.0], draft_coef=[1.0, 40.0, 0.0, 0.5, 0.0])
    controller = LengthController(FaserConfig(max_len=3), window=3, cost=cost, calibration_sweeps=0)
    rids = [f"r{i}" for i in range(batch)]
    for t in range(30):
        passed = int(t % 20 < passing * 20)
        controller.tracker.observe(rids, proposed=np.full(batch, 1), accepted=np.full(batch, passed))
    parked = cost.modelled_step_ms(batch, batch, 0, 0, 0, 0)
    for _ in range(4):
        cost.record_step(batch, 0, parked, parked, shape=(batch, 0, 0, 0))
    return controller, rids


def test_a_batch_parked_on_a_price_no_recent_step_measured_probes_one_draft_and_drafts_where_it_measured_cheap():
    """Parked at 32 requests on a fit that prices one draft at 3x a parked step, nothing would ever measure it: the
    cost probe drafts one for ``PROBE_STEPS`` steps; measured at 1.3x a parked step, drafting then pays and the
    batch keeps drafting."""
    controller, rids = _parked_on_a_dear_price()
    cost = controller.cost
    parked = cost.modelled_step_ms(32, 32, 0, 0, 0, 0)
    assert cost.modelled_step_ms(32, 64, 1, 0, 32, 0) > 2.5 * parked
    for step in range(PROBE_STEPS + 3):
        decision = controller.decide(rids)
        assert decision.lengths.any(), step
        controller.observe(np.minimum(decision.lengths, 1))
        lengths = decision.lengths
        shape = (int(32 + lengths.sum()), int(np.maximum(lengths - 1, 0).sum()), int((lengths > 0).sum()), 0)
        cost.record_step(32, decision.depth, cost.modelled_step_ms(32, shape[0], decision.depth, *shape[1:]),
                         1.3 * parked * (1 + 0.2 * (decision.depth - 1)), shape=shape)
    assert controller._cost_probe_left == 0  # drafting on its own plan now, not probing


def test_no_cost_probe_for_a_small_batch_doomed_requests_or_a_recently_measured_drafting_price():
    controller, rids = _parked_on_a_dear_price(batch=PROBE_BATCH - 1)
    assert not controller.decide(rids).lengths.any()
    controller, rids = _parked_on_a_dear_price(passing=0.3)
    assert not controller.decide(rids).lengths.any()
    controller, rids = _parked_on_a_dear_price()
    cost = controller.cost
    dear = cost.modelled_step_ms(32, 64, 1, 0, 32, 0)
    cost.record_step(32, 1, dear, dear, shape=(64, 0, 32, 0))  # one draft measured as dear as priced, just now
    assert cost.drafting_evidence(32) >= PRICED_EVIDENCE
    assert not controller.decide(rids).lengths.any()

def test_a_request_probed_deeper_than_the_rest_of_its_batch_drafts_only_as_deep_as_pays_on_its_hopes():
    """One explored request set a step of 48 to six drafts beside 47 at one (Poisson 64 on CPU: 95-105 ms steps
    of a 56 ms depth): every draft forward past one, and the draft-extend's rows of every drafting request at that
    depth, were paid for its hopes alone. It now drafts the depth that prices best on its hopes: one here, where
    a forward's fixed cost is large; six where drafts are nearly free."""
    explored = np.zeros(48, dtype=bool)
    explored[0] = True
    lengths = np.where(explored, 6, 1)
    probs = np.full((48, 7), 0.7)
    probs[0] = 0.95
    verify = [10.0, 0.1, 0.01, 0.0]
    dear = LengthController(FaserConfig(max_len=7), window=7, calibration_sweeps=0,
                            cost=StepCostModel(verify_coef=verify, draft_coef=[1.0, 5.0, 0.05, 3.0, 0.02]))
    assert dear._shallow_probe(lengths, explored, probs, 0, None).tolist() == [1] * 48
    cheap = LengthController(FaserConfig(max_len=7), window=7, calibration_sweeps=0,
                             cost=StepCostModel(verify_coef=verify, draft_coef=[1.0, 5.0, 0.0, 0.01, 0.0]))
    assert cheap._shallow_probe(lengths, explored, probs, 0, None).tolist() == lengths.tolist()


def _parked_on_faded_evidence(batch: int = 4):
    """A controller whose fit prices one draft each at ``batch`` requests at 1.64x a parked step (so it pays from
    a first-draft acceptance of 0.64 on, above the server-wide 0.6 a request whose own evidence has faded is
    estimated at), that price just measured, and ``batch`` requests whose first drafts passed 0.7 of the time, long
    ago."""
    cost = StepCostModel(verify_coef=[10.0, 0.1, 0.01, 0.0], draft_coef=[1.0, 3.3, 0.0, 4.0, 0.0])
    controller = LengthController(FaserConfig(max_len=3), window=3, cost=cost, calibration_sweeps=0)
    rids = [f"r{i}" for i in range(batch)]
    for t in range(20):
        controller.tracker.observe(rids, proposed=np.full(batch, 1), accepted=np.full(batch, int(t % 10 >= 3)))
    for _ in range(60):
        controller.tracker.observe_parked(rids)
    one = cost.modelled_step_ms(batch, 2 * batch, 1, 0, batch, 0)
    cost.record_step(batch, 1, one, one, shape=(2 * batch, 0, batch, 0))  # as priced, just now
    return controller, rids


def test_a_small_parked_batch_whose_evidence_faded_probes_one_draft_each_together():
    """Four requests parked on means just short of paying (first drafts 0.6, one draft each 1.64x a parked step):
    one request's probe alone never pays for a draft's fixed costs at four requests, so it never ran and the batch
    learned nothing more; their joint hopes do, so all four draft one (a joint probe, priced on those hopes), and
    once it has passed they draft on their means. Fresh evidence, or a batch of ``JOINT_BATCH``, runs no joint
    probe."""
    from sglang_faser.spec.controller import JOINT_BATCH
    from sglang_faser.spec.policy import evaluate
    controller, rids = _parked_on_faded_evidence()
    cost = controller.cost
    means, _ = controller.tracker.estimates(rids)
    parked = float(plan_ms(cost, 4, np.zeros(4, dtype=np.int64)))
    for depth in range(1, 4):  # on the means, parking prices better than any depth
        tokens, ms = evaluate(means, np.full(4, depth), cost)
        assert tokens / ms < 4 / parked
    probe = controller.decide(rids)
    assert probe.probe == "joint" and probe.lengths.tolist() == [1, 1, 1, 1]
    assert probe.expected_tokens / probe.expected_ms > 4 / parked
    for _ in range(3):
        controller.observe([1, 1, 1, 1])
        decision = controller.decide(rids)
    assert decision.lengths.all() and decision.probe == ""
    fresh, rids = _parked_on_faded_evidence()
    fresh.tracker.observe(rids, proposed=np.ones(4, dtype=np.int64), accepted=np.array([1, 0, 1, 0]))
    assert not fresh.decide(rids).lengths.any()
    large, rids = _parked_on_faded_evidence(batch=JOINT_BATCH)
    assert large.decide(rids).probe != "joint"


@pytest.mark.parametrize("mode", ["fixed", "adaptive"])
def test_a_request_finished_with_a_step_in_flight_leaves_no_row_behind(mode):
    """SGLang's overlap scheduler launches step t + 1 before step t's result finishes a request on a stop token, so
    that step's acceptance arrives after ``forget``: it must not bring the request back. Brought back, every such
    request kept a tracker row for good (and a parked step's feedback could grow a full table, which raised an
    IndexError: ``test_a_parked_step_that_grows_the_table_counts_its_steps_in_the_grown_one``)."""
    controller = LengthController(FaserConfig(mode=mode, fixed_len=1), window=3)
    live = ["keep"]
    for i in range(600):
        rid = f"r{i}"
        controller.decide(live + [rid])
        controller.decide(live + [rid])  # step t + 1, decided before step t's result
        controller.observe([0, 0])
        controller.forget(rid)  # step t's result: rid stopped
        controller.observe([1, 1])  # step t + 1's: rid's token is dropped
        assert len(controller.tracker) == 1, i
    decision = controller.decide(live)
    assert decision.lengths.shape == (1,)
