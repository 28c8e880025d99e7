"""The step-cost model fits measured step times and predicts candidate plans."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.cost_model import DRAFT, VERIFY, StepCostModel


def _profiled(verify_ms, widths) -> StepCostModel:
    """A model fitted on a start-up profile of ``verify_ms(batch, rows, context)``: 1-32 requests, ``widths`` rows
    a request, contexts of 32 and 256 tokens a request."""
    model = StepCostModel()
    for batch in (1, 2, 4, 8, 16, 32):
        for width in widths:
            for prefix in (32, 256):
                model.add_profile_sample(VERIFY, batch, batch * width, verify_ms(batch, batch * width, batch * prefix),
                                         context=batch * prefix)
    model.refit()
    return model


def test_profile_fit_recovers_a_linear_verify_cost():
    """Each verified row attends over its request's context: a pass of two rows a request reads twice the keys."""
    model = StepCostModel()
    for batch in (1, 4, 16):
        for tokens in (batch, 2 * batch, 4 * batch):
            for prefix in (32, 256):
                ms = 3.0 + 0.1 * batch + 0.5 * tokens + 0.01 * tokens * prefix
                model.add_profile_sample(VERIFY, batch, tokens, ms, context=batch * prefix)
    model.refit()
    assert model.verify_coef == pytest.approx([3.0, 0.1, 0.5, 0.01], rel=1e-2)  # the ridge's bias is tiny
    assert model.verify_ms(8, 16, context=8 * 200) == pytest.approx(3.0 + 0.8 + 8.0 + 0.01 * 16 * 200, rel=1e-2)


def test_a_parked_step_of_many_long_requests_is_priced_by_its_one_row_each():
    """Attention is rows times context: steps that verified four rows a request over long contexts do not make a
    parked step (one row each) over the same contexts dear. Priced by the batch's context alone, deep steps at 32
    requests and long contexts put their attention on the context term, and a parked step of 32 requests was
    priced at half as much again as it cost (CPU, bursty mixed prompts)."""
    def verify_ms(batch, rows, context):  # CPU attention: every row reads its request's context
        return 4.0 + 0.05 * batch + 0.1 * rows + 0.0015 * rows * context / batch

    model = _profiled(verify_ms, widths=(1, 2, 4, 8))
    rng = np.random.default_rng(0)
    for _ in range(128):  # a burst drafting 3-4 deep over contexts of 200-350 tokens a request
        rows, context = 32 * int(rng.integers(4, 6)), int(rng.integers(32 * 200, 32 * 350))
        model.record(VERIFY, 32, rows, verify_ms(32, rows, context) * rng.lognormal(0.0, 0.05), context=context)
        model.record(DRAFT, 32, 3, 10.0)
    assert model.verify_ms(32, 32, context=32 * 300) == pytest.approx(verify_ms(32, 32, 32 * 300), rel=0.1)


def test_draft_cost_grows_with_steps_and_coefficients_stay_nonnegative():
    model = StepCostModel()
    for batch in (1, 2, 8):
        for steps in (1, 3, 5):
            model.add_profile_sample(DRAFT, batch, steps, 1.0 + 0.4 * steps)
    model.add_profile_sample(DRAFT, 32, 1, 0.1)  # an outlier pushing a term negative
    model.refit()
    assert np.all(model.draft_coef >= 0)
    assert 0 < model.draft_ms(4, 0) < model.draft_ms(4, 1)  # a step that drafts also pays the draft-extend
    assert model.draft_ms(4, 3) > model.draft_ms(4, 1)


def test_online_samples_move_the_fit():
    model = StepCostModel(refit_every=4)
    for batch in (1, 8):
        for tokens in (batch, 3 * batch):
            model.add_profile_sample(VERIFY, batch, tokens, 1.0 + 0.1 * tokens)
    model.refit()
    before = float(model.verify_ms(8, 24))
    for _ in range(64):  # the machine got slower per token
        for batch, tokens in ((1, 1), (8, 24), (4, 12), (8, 8)):
            model.record(VERIFY, batch, tokens, 1.0 + 0.5 * tokens)
            model.record(DRAFT, batch, 1, 1.0)  # each step records both phases; refits count steps
    assert float(model.verify_ms(8, 24)) > before * 2
    assert model.mean_abs_pct_error(VERIFY) < 0.5


def test_vectorised_queries():
    model = StepCostModel(verify_coef=[1.0, 0.0, 1.0, 0.0], draft_coef=[0.5, 0.0, 0.0, 2.0, 0.0])
    ms = model.step_ms(4, np.array([4, 8, 12]), np.array([0, 1, 2]))
    assert ms.tolist() == [5.5, 11.5, 17.5]


def test_one_off_stalls_do_not_distort_the_fit():
    model = StepCostModel()
    for batch in (1, 4, 8):
        for steps in (0, 1, 3, 5):
            model.add_profile_sample(DRAFT, batch, steps, 2.0 + 3.0 * steps)
    model.add_profile_sample(DRAFT, 4, 3, 10_000.0)  # first use of a runtime state
    model.refit()
    assert model.draft_coef == pytest.approx([2.0, 0.0, 0.0, 3.0, 0.0], abs=1e-6)


def test_draft_rows_are_fitted_apart_from_draft_steps():
    model = StepCostModel()
    for batch in (1, 4, 16):
        for steps in range(0, 6):
            for rows in {0, batch * max(steps - 1, 0), max(steps - 1, 0)}:
                ms = 1.0 + (0.7 + 0.2 * batch * (steps + 1)) * (steps > 0) + 0.5 * steps + 0.3 * rows
                model.add_profile_sample(DRAFT, batch, steps, ms, rows=rows)
    model.refit()
    assert model.draft_coef == pytest.approx([1.0, 0.7, 0.2, 0.5, 0.3], rel=1e-3)
    assert model.draft_ms(16, 0) == pytest.approx(1.0)  # a step without drafts skips the draft-extend
    assert model.draft_ms(16, 5) == pytest.approx(1.0 + 0.7 + 0.2 * 16 * 6 + 2.5 + 0.3 * 64, rel=1e-3)  # full depth
    model.draft_cut = True
    assert model.plan_rows(np.array([5, 1, 0, 2])) == 5  # 4 + 0 + 0 + 1


def test_the_draft_extend_is_priced_per_request_that_drafts():
    """Requests with k = 0 are left out of the draft-extend: its rows are the drafting requests' (depth + 1 each),
    not the batch's."""
    model = StepCostModel()
    for batch in (4, 8, 16):
        for drafting in range(0, batch + 1, 2):
            for steps in (1, 3) if drafting else (0,):
                ms = 1.0 + (0.7 + 0.4 * drafting * (steps + 1)) * (steps > 0) + 0.5 * steps
                model.add_profile_sample(DRAFT, batch, steps, ms, rows=0, drafting=drafting)
    model.refit()
    assert model.draft_coef == pytest.approx([1.0, 0.7, 0.4, 0.5, 0.0], abs=1e-2)
    assert model.draft_ms(16, 3, 0, drafting=2) == pytest.approx(1.0 + 0.7 + 0.4 * 2 * 4 + 1.5, rel=1e-2)


def test_costs_seen_at_one_batch_size_are_taken_as_fixed_until_other_sizes_show_otherwise():
    """Steps of batch 1 cannot tell a fixed draft-extend cost from one per request: the fit takes it as fixed, so
    drafting at a larger batch is priced optimistically (the policy tries it and learns), never ruled out."""
    model = StepCostModel(refit_every=10_000)
    for _ in range(20):
        for steps in range(0, 6):  # a real step: 3 ms host, 3.5 ms draft-extend, 2 ms per draft forward
            model.record(DRAFT, 1, steps, 3.0 + 3.5 * (steps > 0) + 2.0 * steps, rows=max(steps - 1, 0))
    model.refit()
    assert model.draft_coef[1] == pytest.approx(3.5, rel=0.05)  # d_ext, not d_req
    assert model.draft_ms(32, 1, rows=0) - model.draft_ms(32, 0, rows=0) == pytest.approx(5.5, rel=0.05)
    for _ in range(20):  # larger batches arrive: the extend costs 0.1 ms per row (depth + 1 per request)
        for batch in (4, 16):
            for steps in range(0, 6):
                ms = 3.0 + (3.5 + 0.1 * batch * (steps + 1)) * (steps > 0) + 2.0 * steps
                model.record(DRAFT, batch, steps, ms, rows=max(steps - 1, 0))
    model.refit()
    assert model.draft_coef[2] == pytest.approx(0.1, rel=0.05)


def test_a_slope_fitted_on_small_batches_is_not_extrapolated_to_larger_ones_until_they_run():
    """Drafting steps of 1 and 8 requests set a steep draft-extend cost per row; a batch of 32 that has only parked
    is not priced by extrapolating it (on CPU that priced one draft at 32 requests at 2-3x a parked step where it
    cost 1.2x, and a price too dear is never tried, so never corrected); once such steps run, they price it."""
    model = StepCostModel(refit_every=10_000)

    def steep(batch, steps):
        return 3.0 + (3.5 + 0.5 * batch * (steps + 1)) * (steps > 0) + 2.0 * steps

    for _ in range(20):
        for batch in (1, 8):
            for steps in range(0, 6):
                model.record(DRAFT, batch, steps, steep(batch, steps), rows=0)
        model.record(DRAFT, 32, 0, 3.0, rows=0, drafting=0)  # parked steps of 32 requests
    model.refit()
    assert model.draft_ms(8, 1, rows=0) == pytest.approx(steep(8, 1), rel=0.05)  # where it was measured
    extrapolated = steep(32, 1)  # 37.5 ms
    assert model.draft_ms(32, 1, rows=0) < 0.6 * extrapolated
    for _ in range(10):  # one draft a request at 32 requests: its extend costs 0.1 ms a row
        model.record(DRAFT, 32, 1, 3.0 + 3.5 + 0.1 * 32 * 2 + 2.0, rows=0)
    model.refit()
    assert model.draft_ms(32, 1, rows=0) == pytest.approx(3.0 + 3.5 + 0.1 * 32 * 2 + 2.0, rel=0.1)


def test_a_step_is_priced_from_samples_of_batches_like_its_own():
    """Per-request cost grows with the batch (a CPU attention pass): one line through batch 1 and batch 32 would
    misprice both ends; the fit local to each batch-size bucket prices each."""
    model = StepCostModel(refit_every=10_000)

    def true_ms(batch, tokens):
        return 7.0 + (0.2 + 0.03 * batch) * batch + 0.1 * tokens

    for _ in range(30):
        for batch in (1, 2, 32, 40):
            for width in (1, 2, 4):
                model.record(VERIFY, batch, batch * width, true_ms(batch, batch * width))
    model.refit()
    for batch, width in ((1, 3), (2, 2), (36, 3)):
        assert model.verify_ms(batch, batch * width) == pytest.approx(true_ms(batch, batch * width), rel=0.05)
    assert model.mean_abs_pct_error(VERIFY) < 0.05


def test_a_burst_of_large_batches_is_kept_while_a_one_off_stall_is_dropped():
    """After a quiet spell of batch-1 steps, a burst's batch-64 steps are slow because of their shape: the robust
    filter compares each sample with the fit's prediction for that shape, not with the window's median."""
    model = StepCostModel(verify_coef=[1.0, 0.0, 0.05, 0.0], refit_every=10_000)
    for _ in range(200):
        model.record("verify", 1, 2, 1.0 + 0.05 * 2)
    model.refit()
    for _ in range(20):
        model.record("verify", 64, 128, 1.0 + 0.05 * 128)  # 7.4 ms: 6.7x the median, as predicted for its shape
    model.record("verify", 1, 2, 50.0)  # a stall: 45x its prediction
    model.refit()
    assert model.verify_ms(64, 128) == pytest.approx(7.4, rel=0.05)
    assert model.verify_ms(1, 2) == pytest.approx(1.1, rel=0.05)


def test_each_frontier_pass_pays_the_verify_intercept():
    model = StepCostModel(verify_coef=[2.0, 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.0, 0.0])
    assert model.step_ms(1, 5, 4) == pytest.approx(2.0)
    model.frontier_size = 1
    assert model.step_ms(1, 5, 4) == pytest.approx(8.0)  # frontiers [0,2) [2,3) [3,4) [4,5): four passes


def test_a_catch_up_is_priced_as_a_fixed_pass_plus_its_rows():
    model = StepCostModel()
    assert model.catch_up_ms([0, 5]).tolist() == [0.0, 0.0]  # nothing measured: resuming is free
    for _ in range(5):
        model.record_catch_up(1, 2.5)  # one size only: the cost goes to the fixed part, not to rows
    fixed, per_row = model.catch_up_coef
    assert fixed == pytest.approx(2.5, rel=0.01) and per_row < 0.01
    for rows in (4, 16, 40):
        model.record_catch_up(rows, 2.0 + 0.1 * rows)
    assert model.catch_up_ms([30]) == pytest.approx([2.0 + 0.1 * 30 + 0.2], abs=0.5)
    # the pass's fixed part is shared by the requests holding a backlog; one without pays nothing
    shared = model.catch_up_ms([10, 10, 0])
    assert shared[2] == 0.0 and shared[0] == pytest.approx(model.catch_up_coef[0] / 2 + model.catch_up_coef[1] * 10)
    before = model.catch_up_coef.copy()
    model.record_catch_up(0, 3.0)  # nothing caught up: no information
    assert model.catch_up_coef.tolist() == before.tolist()


def test_a_stalled_catch_up_no_other_supports_does_not_price_every_row():
    """The H200 trace of the third lease: the one long catch-up (64 rows) stalled on a kernel compile; a fit
    through it priced a row at 0.9 ms and a parked request never resumed. A second long one that costs as much
    confirms the price of rows."""
    model = StepCostModel()
    for rows, ms in [(1, 6.37), (2, 3.15), (64, 116.7), (3, 4.98), (4, 3.94), (14, 2.40), (21, 2.37), (9, 2.86)]:
        model.record_catch_up(rows, ms)
    fixed, per_row = model.catch_up_coef
    assert per_row < 0.1 and model.catch_up_ms([64])[0] < 10.0
    confirmed = StepCostModel()
    for rows, ms in [(1, 5.0), (2, 5.0), (64, 30.0), (3, 5.0), (64, 31.0), (4, 5.0)]:
        confirmed.record_catch_up(rows, ms)
    assert confirmed.catch_up_ms([64])[0] == pytest.approx(30.5, rel=0.1)



def test_measured_steps_correct_the_price_of_their_batch_size_and_depth():
    model = StepCostModel(verify_coef=[10.0, 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.0, 0.0])
    assert model.depth_factor(32, 3).tolist() == [1.0] * 4  # nothing measured: the fit's price
    for _ in range(3):
        model.record_step(32, 1, 10.0, 20.0)  # depth 1 at 32 requests runs twice the fit's price
    factor = model.depth_factor(32, 3)
    assert factor[1] == pytest.approx(2.0)
    assert factor[3] == pytest.approx(2.0)  # a depth not run yet in the bucket: the bucket's mean
    for _ in range(6):
        model.record_step(32, 3, 10.0, 10.0)
    factor = model.depth_factor(32, 3)
    assert factor[3] < 1.1 and factor[1] > 1.6  # each depth its own price
    assert factor[1] > factor[2] > factor[3]  # a depth not run: between the run ones on either side
    assert model.step_ms(32, 64, 1) == pytest.approx(10.0 * factor[1])
    assert model.step_ms(32, 64, 1, corrected=False) == pytest.approx(10.0)
    assert model.step_ms(32, np.array([64, 96]), np.array([1, 3])).tolist() == pytest.approx(
        [10.0 * factor[1], 10.0 * factor[3]])
    # a bucket not run yet: every drafting residual alike; nothing parked anywhere: the fit's parked price
    assert model.depth_factor(2, 1).tolist() == pytest.approx([1.0, np.sqrt(2.0)])


def test_a_depth_measured_once_or_long_ago_leans_towards_its_buckets_mean():
    """One noisy step must not price a depth for good: priced too dear, it is never chosen, so never measured
    again (a k = 0 step once priced at twice its cost kept a doomed request drafting for 38 steps)."""
    model = StepCostModel(verify_coef=[10.0, 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.0, 0.0])
    for _ in range(8):
        model.record_step(4, 1, 10.0, 10.0)
    model.record_step(4, 0, 10.0, 20.0)  # one slow step at depth 0
    once = model.depth_factor(4, 1)[0]
    assert 1.2 < once < 1.6  # between the bucket's mean and its own 2x
    for _ in range(200):  # depth 0 not run again
        model.record_step(4, 1, 10.0, 10.0)
    assert model.depth_factor(4, 1)[0] < 1.1


def test_a_depth_run_many_times_in_a_row_is_priced_at_what_it_measured():
    """The lean towards other buckets' level is for a depth measured a few times: 32 parked requests on CPU ran 20
    steps at about 2x the fit while the price leaned a fifth of the way (in log) towards parked steps of 2 requests
    at 1x, 29 ms for steps of 31-38, and parking looked faster than the drafting that beat it."""
    model = StepCostModel()
    for _ in range(20):
        model.record_step(2, 0, modelled_ms=5.0, ms=5.0)
    for steps in range(1, 21):
        model.record_step(32, 0, modelled_ms=16.0, ms=32.0)
        if steps == 2:
            assert model.depth_factor(32, 0)[0] < 1.8  # measured twice: still leaning
    assert model.depth_factor(32, 0)[0] == pytest.approx(2.0, rel=0.05)


def test_a_batch_size_new_to_the_fit_is_refitted_for_after_a_few_of_its_steps():
    """A burst of 32 requests after a quiet spell of 2: the fit made of two requests' steps prices the burst's
    steps until a refit holds some of them, and waiting ``refit_every`` steps for it parked a burst for 22 steps
    that the refit then drafted. A few steps of the new size refit the model."""
    model = StepCostModel(refit_every=10_000)

    def draft_side(batch, steps):
        return 2.0 + (1.0 + 0.25 * batch * (steps + 1)) * (steps > 0) + 1.0 * steps

    for _ in range(20):
        for steps in (0, 1, 2):
            model.record(DRAFT, 2, steps, draft_side(2, steps), rows=0)
    model.refit()
    for _ in range(3):
        model.record(DRAFT, 32, 1, draft_side(32, 1), rows=0)
    assert model.draft_ms(32, 1, rows=0) < 0.5 * draft_side(32, 1)  # not refitted yet: the per-request slope is held
    model.record(DRAFT, 32, 1, draft_side(32, 1), rows=0)  # the fourth step of 32 requests
    assert model.draft_ms(32, 1, rows=0) == pytest.approx(draft_side(32, 1), rel=0.1)
    for _ in range(8):  # a bucket the refit holds: no refit until ``refit_every``
        model.record(DRAFT, 32, 2, 100.0, rows=0)
    assert model.draft_ms(32, 2, rows=0) == pytest.approx(draft_side(32, 2), rel=0.1)


def test_one_stalled_step_moves_the_residual_a_bounded_step():
    model = StepCostModel(verify_coef=[10.0, 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.0, 0.0])
    for _ in range(4):
        model.record_step(8, 2, 10.0, 10.0)
    model.record_step(8, 2, 10.0, 30.0)  # another process had the CPU
    assert model.depth_factor(8, 2)[2] < 1.15
    unseen = model.depth_factor(64, 3)
    model.record_step(64, 3, 10.0, 500.0)  # the first use of a shape: beyond the outlier factor, not a price
    assert model.depth_factor(64, 3).tolist() == unseen.tolist()


def test_a_parked_step_is_priced_by_parked_steps_of_nearby_batch_sizes_not_by_its_buckets_drafting_steps():
    """At 32 requests with only drafting steps measured (here 2x the fit), a parked step is still the target's plain
    decode: it is priced by the parked steps nearest in batch size (1x at 16-31), not at drafting's 2x. Priced at
    drafting's level a parked step looked dearer than a three-deep one for a whole burst at 64 requests/s, and so
    was never measured."""
    model = StepCostModel()
    for _ in range(4):
        model.record_step(16, 0, modelled_ms=20.0, ms=20.0)  # 16-31 requests: parked steps as the fit prices them
        model.record_step(2, 0, modelled_ms=5.0, ms=3.0)  # a far bucket's parked steps weigh nothing here
    for depth in (1, 2, 3):
        for _ in range(4):
            model.record_step(32, depth, modelled_ms=40.0, ms=80.0)  # 32-63: drafting steps only, at 2x
    factor = model.depth_factor(32, 7)
    assert factor[0] == pytest.approx(1.0, rel=0.02)
    assert (factor[1:] > 1.8).all()
    assert model.depth_factor(64, 7)[0] == pytest.approx(1.0, rel=0.02)  # a batch size not run yet alike
    model.record_step(32, 0, modelled_ms=20.0, ms=26.0)  # its own parked step moves it
    assert 1.05 < model.depth_factor(32, 7)[0] < 1.3


def test_a_refit_keeps_the_price_measured_steps_gave_their_shape():
    """A residual is relative to the fit it was measured against. Parked steps of 32 requests run at 1.8x the
    profile's price (the machine slowed down); their residual prices them right. The refit then learns from the same
    steps and prices the shape dearer itself: left as it was, the residual would count the slow-down twice (at 32
    requests on CPU a parked step was priced at 82 ms where such steps had taken 54, and a burst drafted at a loss)."""
    model = _profiled(lambda batch, rows, context: 5.0 + 0.5 * batch + 0.01 * rows * context / batch, widths=(1, 2, 4))
    model.draft_coef = np.array([2.0, 0.0, 0.0, 0.0, 0.0])
    batch, context = 32, 32 * 200
    shape = (batch, 0, 0, context)  # verify rows, draft rows, drafting requests, context
    measured = 1.8 * model.modelled_step_ms(batch, batch, 0, 0, 0, context)
    for _ in range(3 * model.refit_every):
        model.record(VERIFY, batch, batch, measured - 2.0, context=context)
        model.record(DRAFT, batch, 0, 2.0, rows=0, drafting=0)  # refits every ``refit_every`` steps
        modelled = model.modelled_step_ms(batch, batch, 0, 0, 0, context)  # after the phases, as the controller
        model.record_step(batch, 0, modelled, measured, shape=shape)
        price = model.step_ms(batch, batch, 0, context=context)
        assert price == pytest.approx(measured, rel=0.1)
    assert model.modelled_step_ms(batch, batch, 0, 0, 0, context) > 1.3 * measured / 1.8  # the fit moved


def test_drafting_depths_long_unused_are_weighed_by_their_steps_and_age_not_alike():
    """At 32 requests on CPU a burst parked on a slow machine (parked steps at 1.9x the fit) while its drafting
    depths had last run over a thousand steps earlier: one depth 38 times as priced, four others once each at 2.2x
    a thousand steps before it. Counted alike, those four priced drafting at 1.66x and the burst parked throughout
    where a fixed length of one ran 1.36x faster; weighed by their steps and age, the depth run most and last
    speaks for drafting."""
    model = StepCostModel()

    def other_batch_sizes():
        for _ in range(1200):
            model.record_step(2, 0, modelled_ms=10.0, ms=10.0)

    for depth in (2, 3, 4, 5):
        model.record_step(32, depth, modelled_ms=10.0, ms=22.0)
    other_batch_sizes()
    for _ in range(38):
        model.record_step(32, 1, modelled_ms=10.0, ms=11.0)
    other_batch_sizes()
    for _ in range(20):
        model.record_step(32, 0, modelled_ms=10.0, ms=19.0)  # the burst's parked steps, on a slow machine
    factor = model.depth_factor(32, 5)
    assert factor[0] > 1.5
    assert factor[1] == pytest.approx(1.1, rel=0.05)


def test_a_batch_size_not_run_yet_prices_parking_at_the_fit_where_no_step_parked():
    """At 16 req/s a server whose only measured steps had drafted at one or two requests (at 1.8x the fit) met its
    first burst of 8: a parked step there took the drafting steps' level, priced at 25 ms where it took 13, and the
    burst drafted at 0.4 tokens/ms against parking's 0.6. No step parked anywhere: the fit prices parking."""
    model = StepCostModel(verify_coef=[5.0, 0.6, 0.0, 0.0], draft_coef=[3.0, 0.0, 0.0, 0.0, 0.0])
    for batch, depth in [(1, 1), (1, 2), (2, 3), (2, 1), (1, 5)]:
        model.record_step(batch, depth, modelled_ms=12.0, ms=21.6)
    factor = model.depth_factor(8, 3)
    assert factor[0] == pytest.approx(1.0)
    assert factor[1:] == pytest.approx([1.8] * 3)  # drafting: the drafting steps' level


def test_a_batch_size_not_run_yet_takes_the_price_its_neighbours_measured_not_their_fits_error():
    """A residual is relative to its own bucket's fit, and the buckets' fits differ (costs are not linear in the
    batch size). Parked steps of 2 requests measured at 1.3x their bucket's price; 8 requests, not run yet, price
    that same shape by their own fit, and their factor is what makes it the measured time."""
    model = _profiled(lambda batch, rows, context: 4.0 + 2.0 * batch ** 0.5 + 0.3 * rows + 0.002 * context,
                      widths=(1, 2, 4))
    model.draft_coef = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    small, context = 2, 2 * 200
    measured = 1.3 * model.modelled_step_ms(small, small, 0, 0, 0, context)
    for _ in range(8):
        modelled = model.modelled_step_ms(small, small, 0, 0, 0, context)
        model.record_step(small, 0, modelled, measured, shape=(small, 0, 0, context))
    own_fit = model.modelled_step_ms(small, small, 0, 0, 0, context, bucket=3)  # the fit of 8-15 requests
    assert abs(own_fit / model.modelled_step_ms(small, small, 0, 0, 0, context) - 1) > 0.1  # the fits differ
    assert model.depth_factor(8, 1)[0] * own_fit == pytest.approx(measured, rel=1e-6)


def test_a_bucket_long_unused_still_prices_its_depths():
    model = StepCostModel(verify_coef=[10.0, 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.0, 0.0])
    model.record_step(4, 1, 10.0, 20.0)
    for _ in range(3000):  # only another bucket runs
        model.record_step(64, 1, 10.0, 10.0)
    assert model.depth_factor(4, 2)[1] == pytest.approx(2.0)


def test_a_window_of_one_batch_size_at_two_depths_keeps_the_profiles_split_of_fixed_and_per_row_cost():
    """Sixteen requests drafting 4 deep, then 5 deep while the shared machine slowed down by 40 %: every online
    verify sample has 80 or 96 rows, and the slow-down looks like a steep cost per row. Fitted on the window alone,
    the pass's fixed cost and its cost per row trade against each other (a server fitted 1.2 ms + 0.15 ms a row
    where its refit before had 11.5 + 0.04, priced a parked step of 16 rows at a third of its time and parked 200
    steps); the profile's shapes weigh as much as the window's, so a parked step keeps its price."""
    rng = np.random.default_rng(0)

    def verify_ms(batch, rows, context):
        return 11.0 + 0.05 * batch + 0.04 * rows + 0.001 * context

    model = _profiled(verify_ms, widths=(1, 2, 4, 6))
    for step in range(256):
        deep = step >= 128
        rows, context = 16 * (6 if deep else 5), int(rng.integers(16 * 40, 16 * 120))
        slow = 1.4 if deep else 1.0
        model.record(VERIFY, 16, rows, slow * verify_ms(16, rows, context) * rng.lognormal(0.0, 0.1), context=context)
    model.refit()
    assert model.verify_ms(16, 16, context=16 * 80) > 0.8 * verify_ms(16, 16, 16 * 80)  # the window alone: 0.47x


def test_drafting_depths_lean_on_drafting_steps_until_a_long_parked_stretch_leaves_them_unpriced():
    """A drafting depth seldom run leans on the drafting steps' residuals (1.5x here), not on parked steps' (0.7x):
    a parked step is another shape. After a long parked stretch nothing recent prices drafting: it leans towards
    the lower parked level (one slow drafting step kept drafting at 16-31 requests dear for the rest of a run, and
    a price too dear is never tried again), until the next drafting step prices it."""
    model = StepCostModel()
    for depth in (3, 4):
        for _ in range(4):
            model.record_step(1, depth, modelled_ms=20.0, ms=30.0)
    for _ in range(4):
        model.record_step(1, 0, modelled_ms=10.0, ms=7.0)
    factor = model.depth_factor(1, 7)
    assert factor[0] < 0.8 and (factor[1:] > 1.3).all()  # near drafting's 1.5
    assert model.priced_depth(1) == 4
    for _ in range(300):  # a long parked stretch: the drafting depths' evidence fades
        model.record_step(1, 0, modelled_ms=10.0, ms=7.0)
    assert model.priced_depth(1) == 0
    assert model.depth_factor(1, 7) == pytest.approx(np.full(8, 0.7), rel=0.05)
    model.record_step(1, 3, modelled_ms=20.0, ms=30.0)  # a drafting step prices drafting again
    assert model.priced_depth(1) == 3
    assert model.depth_factor(1, 7)[5] > 1.2
    assert model.depth_factor(8, 7)[5] == pytest.approx(1.5, rel=0.02)  # a bucket not run yet: drafting's mean


def test_a_depth_not_run_since_a_slow_spell_follows_the_machine_when_another_depth_shows_it_sped_up():
    """The machine's speed moves every depth alike: at 32-63 requests on CPU depth 1, last run in a slow spell, kept
    its 1.25-1.6x while depth 3's steps followed a fast one, and FASER drafted 3-4 deep on most steps."""
    model = StepCostModel(verify_coef=[10.0, 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.0, 0.0])
    for _ in range(6):  # both depths at the fit's price: depth 3 costs 10 % more than the fit says
        model.record_step(32, 1, 10.0, 10.0)
        model.record_step(32, 3, 10.0, 11.0)
    before = model.depth_factor(32, 3)
    assert before[3] / before[1] == pytest.approx(1.1, rel=0.03)
    for _ in range(8):  # a slow spell (1.5x) while only depth 1 runs
        model.record_step(32, 1, 10.0, 15.0)
    slow = model.depth_factor(32, 3)
    assert slow[3] > 1.3 * before[3]  # depth 3, not run, is dearer too: the spell is the machine's
    for _ in range(8):  # the machine is fast again while only depth 3 runs
        model.record_step(32, 3, 10.0, 11.0)
    after = model.depth_factor(32, 3)
    assert after[1] < 1.25  # depth 1 is not left at the slow spell's price (moved by its own steps alone: 1.42)
    # depth 3 against depth 1 as their own steps showed it, 1.1, within what one depth's steps cannot tell of the
    # machine and of itself apart (a fifth of each spell's shift; moved by their own steps alone: 0.78)
    assert 0.9 < after[3] / after[1] < 1.2
