"""The goodput policy: per-request lengths from acceptance and measured step costs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_faser.spec.cost_model import StepCostModel
from sglang_faser.spec.policy import FixedPolicy, GoodputPolicy, evaluate, make_policy

K = 8


def linear_cost(per_token: float, overhead: float = 5.0, draft_step: float = 0.0) -> StepCostModel:
    return StepCostModel(verify_coef=[overhead, 0.0, per_token, 0.0], draft_coef=[0.0, 0.0, 0.0, draft_step, 0.0])


def plan(accept, cost, caps=None, min_lens=None):
    accept = np.asarray(accept, dtype=float)
    b = accept.shape[0]
    caps = np.full(b, accept.shape[1]) if caps is None else np.asarray(caps)
    min_lens = np.zeros(b, dtype=int) if min_lens is None else np.asarray(min_lens)
    return GoodputPolicy().plan(accept, caps, min_lens, cost)


def test_sure_request_gets_max_len_and_hopeless_request_gets_zero_in_one_batch():
    accept = np.stack([np.ones(K), np.zeros(K)])
    result = plan(accept, linear_cost(per_token=0.5))
    assert result.lengths.tolist() == [K, 0]


def test_no_speculation_when_every_draft_is_rejected():
    result = plan(np.zeros((4, K)), linear_cost(per_token=0.5))
    assert result.lengths.tolist() == [0, 0, 0, 0]


def test_confident_deep_slot_outranks_doubtful_first_slot():
    accept = np.array([[0.99] * K, [0.3] + [0.9] * (K - 1)])
    result = plan(accept, linear_cost(per_token=1.0, overhead=2.0))
    assert result.lengths[0] > 1 and result.lengths[1] == 0


def test_lengths_shrink_as_the_batch_grows_when_verify_cost_rises_with_tokens():
    cost = linear_cost(per_token=0.2, overhead=10.0, draft_step=1.0)
    mean_lengths = []
    for batch in (1, 4, 16, 64, 256):
        accept = np.full((batch, K), 0.8)
        mean_lengths.append(plan(accept, cost).lengths.mean())
    assert all(a >= b for a, b in zip(mean_lengths, mean_lengths[1:])), mean_lengths
    assert mean_lengths[0] > mean_lengths[-1]


@pytest.mark.parametrize("seed", range(20))
def test_flat_cost_never_loses_to_the_best_fixed_length(seed):
    rng = np.random.default_rng(seed)
    batch = int(rng.integers(1, 64))
    accept = rng.uniform(0.0, 1.0, size=(batch, K)) ** rng.uniform(0.2, 3.0, size=(batch, 1))
    cost = StepCostModel(
        verify_coef=[rng.uniform(1, 20), 0.0, 0.0, 0.0], draft_coef=[0.0, 0.0, 0.0, rng.uniform(0, 3), 0.0]
    )
    caps, mins = np.full(batch, K), np.zeros(batch, dtype=int)
    chosen = GoodputPolicy().plan(accept, caps, mins, cost)
    best_fixed = max(FixedPolicy(k).plan(accept, caps, mins, cost).goodput for k in range(K + 1))
    assert chosen.goodput >= best_fixed * (1 - 1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_rising_cost_never_loses_to_the_best_fixed_length(seed):
    rng = np.random.default_rng(100 + seed)
    batch = int(rng.integers(1, 128))
    accept = rng.uniform(0.0, 1.0, size=(batch, K))
    cost = StepCostModel(
        verify_coef=[rng.uniform(1, 20), rng.uniform(0, 0.1), rng.uniform(0, 1), 0.0],
        draft_coef=[rng.uniform(0, 2), rng.uniform(0, 2), 0.0, rng.uniform(0, 3), rng.uniform(0, 0.05)],
    )
    caps, mins = np.full(batch, K), np.zeros(batch, dtype=int)
    chosen = GoodputPolicy().plan(accept, caps, mins, cost)
    best_fixed = max(FixedPolicy(k).plan(accept, caps, mins, cost).goodput for k in range(K + 1))
    assert chosen.goodput >= best_fixed * (1 - 1e-12)


def test_per_request_caps_and_minimums_are_respected():
    accept = np.full((3, K), 0.95)
    result = plan(accept, linear_cost(per_token=0.01), caps=[2, 0, K], min_lens=[1, 0, 3])
    assert result.lengths[0] <= 2 and result.lengths[1] == 0 and 3 <= result.lengths[2] <= K
    hopeless = plan(np.zeros((2, K)), linear_cost(per_token=1.0), min_lens=[2, 0])
    assert hopeless.lengths.tolist() == [2, 0]


def test_a_policy_kept_between_steps_follows_new_bounds():
    """The bounds' arrays are kept between steps (most steps have the same requests and limits): a step with new
    caps or floors plans as a fresh policy does."""
    accept, cost = np.full((3, K), 0.95), linear_cost(per_token=0.01)
    kept = GoodputPolicy()
    for caps, floors in (([K, K, K], [0, 0, 0]), ([2, 0, K], [1, 0, 3]), ([K, K, K], [0, 0, 0]), ([1, 1, 1], [1, 1, 1])):
        caps, floors = np.array(caps), np.array(floors)
        assert (kept.plan(accept, caps, floors, cost).lengths.tolist()
                == GoodputPolicy().plan(accept, caps, floors, cost).lengths.tolist())


def test_a_policy_kept_between_steps_plans_as_a_fresh_one():
    """A kept policy starts each step from the last step's ratios and drops the depth caps whose bound shows they
    cannot win: over steps whose estimates drift, whose bounds, context and weights change and whose measured
    residuals by depth move (which switches the policy between its two pricing paths), it finds the goodput a
    fresh policy finds."""
    rng = np.random.default_rng(7)
    kept, width = GoodputPolicy(), 4
    cost = StepCostModel(verify_coef=[2.0, 0.3, 0.5, 0.001], draft_coef=[0.4, 0.2, 0.1, 0.6, 0.05], draft_cut=True)
    for step in range(400):
        if step % 7 == 0:  # requests join or leave, or get new limits
            batch = int(rng.integers(1, 6))
            caps = rng.integers(0, width + 1, batch)
            mins = np.minimum(rng.integers(0, 3, batch), caps) * rng.integers(0, 2)
            accept = rng.uniform(0.0, 1.0, (batch, width))
        if step % 5 == 0:
            cost.record_step(batch, int(rng.integers(0, width + 1)), 10.0, 10.0 * rng.uniform(0.3, 3.0))
        accept = np.clip(accept + rng.normal(0.0, 0.1, accept.shape), 0.0, 1.0)
        weights, context = rng.choice([1.0, 4.0], batch), int(rng.integers(0, 500))
        plans = [policy.plan(accept, caps, mins, cost, weights=weights, context=context)
                 for policy in (kept, GoodputPolicy())]
        assert np.all(plans[0].lengths >= mins) and np.all(plans[0].lengths <= caps)
        assert plans[0].goodput == pytest.approx(plans[1].goodput, rel=1e-9), step


def test_plan_reports_model_expectations():
    accept = np.full((2, K), 0.5)
    cost = linear_cost(per_token=1.0)
    result = plan(accept, cost)
    assert (result.expected_tokens, result.expected_ms) == pytest.approx(evaluate(accept, result.lengths, cost))


def test_mode_off_and_fixed():
    accept = np.full((2, K), 0.9)
    caps, mins = np.full(2, 5), np.zeros(2, dtype=int)
    assert make_policy("off", 3).plan(accept, caps, mins, linear_cost(0.1)).lengths.tolist() == [0, 0]
    assert make_policy("fixed", 7).plan(accept, caps, mins, linear_cost(0.1)).lengths.tolist() == [5, 5]


@pytest.mark.parametrize("seed", range(10))
def test_with_drafting_cut_per_request_the_plan_is_priced_as_it_runs(seed):
    rng = np.random.default_rng(300 + seed)
    batch = int(rng.integers(1, 64))
    accept = rng.uniform(0.0, 1.0, size=(batch, K))
    cost = StepCostModel(
        verify_coef=[rng.uniform(1, 20), rng.uniform(0, 0.1), rng.uniform(0, 1), 0.0],
        draft_coef=[rng.uniform(0, 2), rng.uniform(0, 2), 0.0, rng.uniform(0, 3), rng.uniform(0, 2)],
        draft_cut=True,
    )
    caps, mins = np.full(batch, K), rng.integers(0, 3, size=batch)
    chosen = GoodputPolicy().plan(accept, caps, mins, cost)
    assert (chosen.expected_tokens, chosen.expected_ms) == pytest.approx(evaluate(accept, chosen.lengths, cost))
    best_fixed = max(FixedPolicy(k).plan(accept, caps, mins, cost).goodput for k in range(K + 1))
    assert chosen.goodput >= best_fixed * (1 - 1e-12)


def test_costly_draft_rows_keep_a_weak_request_at_one_draft_beside_a_sure_one():
    # a draft row (one request in one draft forward) costs 2 ms; the first draft token needs no row of its own
    accept = np.stack([np.ones(K), np.full(K, 0.3)])
    cost = StepCostModel(verify_coef=[10.0, 0.0, 0.01, 0.0], draft_coef=[0.0, 0.0, 0.0, 0.1, 2.0], draft_cut=True)
    assert plan(accept, cost).lengths.tolist() == [K, 1]
    cost.draft_cut = False  # every request drafted to the step's depth: going deep for one costs rows for both
    assert plan(accept, cost).lengths.tolist() == [1, 1]


def test_a_weak_request_beside_a_sure_one_is_held_at_zero_when_its_draft_extend_costs():
    """A request with k = 0 is left out of the draft-extend, so its first draft costs its extend rows too: with
    costly extend rows (depth + 1 of them) a weak request gets no draft at all beside a sure one, which drafts to
    the end."""
    accept = np.array([[0.95] * 4, [0.3] * 4])
    caps, mins = np.full(2, 4), np.zeros(2, dtype=np.int64)
    costly = StepCostModel(verify_coef=[10.0, 0.0, 0.1, 0.0], draft_coef=[0.0, 1.0, 1.0, 0.5, 0.1], draft_cut=True)
    assert GoodputPolicy().plan(accept, caps, mins, costly).lengths.tolist() == [4, 0]
    free = StepCostModel(verify_coef=[10.0, 0.0, 0.1, 0.0], draft_coef=[0.0, 1.0, 0.0, 0.5, 0.1], draft_cut=True)
    assert GoodputPolicy().plan(accept, caps, mins, free).lengths[1] >= 1


def test_a_request_whose_draft_must_catch_up_resumes_only_when_it_pays_for_the_catch_up():
    accept = np.array([[0.95] * 4, [0.6] * 4])
    caps, mins = np.full(2, 4), np.zeros(2, dtype=np.int64)
    cost = StepCostModel(verify_coef=[10.0, 0.0, 0.1, 0.0], draft_coef=[0.0, 1.0, 0.1, 0.5, 0.1], draft_cut=True)
    assert GoodputPolicy().plan(accept, caps, mins, cost).lengths[1] >= 1
    assert GoodputPolicy().plan(accept, caps, mins, cost, resume_ms=np.array([0.0, 0.3])).lengths[1] >= 1
    assert GoodputPolicy().plan(accept, caps, mins, cost, resume_ms=np.array([0.0, 20.0])).lengths.tolist() == [4, 0]


@pytest.mark.parametrize("seed", range(10))
def test_uniform_gives_every_request_one_length_up_to_its_bounds(seed):
    rng = np.random.default_rng(500 + seed)
    batch = int(rng.integers(2, 32))
    accept = rng.uniform(0.0, 1.0, size=(batch, K))
    caps = np.where(rng.uniform(size=batch) < 0.2, rng.integers(0, K + 1, size=batch), K)
    mins = np.minimum(np.where(rng.uniform(size=batch) < 0.2, rng.integers(0, 3, size=batch), 0), caps)
    cost = StepCostModel(verify_coef=[rng.uniform(1, 20), 0.0, rng.uniform(0, 1), 0.0],
                         draft_coef=[0.0, 0.0, 0.0, rng.uniform(0, 3), 0.0])
    result = GoodputPolicy().plan(accept, caps, mins, cost, uniform=True)
    uniform = [np.clip(j, mins, caps).tolist() for j in range(K + 1)]  # equal wherever no cap or floor clips
    assert result.lengths.tolist() in uniform
    assert (result.expected_tokens, result.expected_ms) == pytest.approx(
        evaluate(accept, result.lengths, cost, uniform=True))
    best_fixed = max(FixedPolicy(j).plan(accept, caps, mins, cost, uniform=True).goodput for j in range(K + 1))
    assert result.goodput >= best_fixed * (1 - 1e-12)


def test_uniform_keeps_a_sure_and_a_hopeless_request_at_the_same_length():
    accept = np.stack([np.ones(K), np.zeros(K)])
    assert plan(accept, linear_cost(per_token=0.5)).lengths.tolist() == [K, 0]
    together = GoodputPolicy().plan(accept, np.full(2, K), np.zeros(2, dtype=int), linear_cost(per_token=0.5),
                                    uniform=True)
    assert together.lengths[0] == together.lengths[1]


def _brute_force(accept, caps, mins, cost, weights, context=0, resume=None):
    """Every plan in the product of the per-request ranges, scored under the model (small cases only)."""
    resume = np.zeros(len(caps)) if resume is None else resume
    import itertools

    batch = len(caps)
    survival = np.cumprod(accept, axis=1)
    best, best_plan = -np.inf, None
    for plan in itertools.product(*(range(int(lo), int(hi) + 1) for lo, hi in zip(mins, caps))):
        lengths = np.array(plan, dtype=np.int64)
        tokens = float((weights * (1.0 + np.where(np.arange(accept.shape[1])[None, :] < lengths[:, None],
                                                  survival, 0.0).sum(axis=1))).sum())
        ms = float(cost.step_ms(batch, batch + int(lengths.sum()), int(lengths.max(initial=0)),
                                cost.plan_rows(lengths), drafting=int(np.count_nonzero(lengths)), context=context)
                   + resume[lengths > 0].sum())
        if tokens / ms > best + 1e-12:
            best, best_plan = tokens / ms, lengths
    return best, best_plan


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_plan_is_the_exact_optimum_of_its_model(data):
    """Dinkelbach over every depth cap returns what brute force over every plan finds (weighted goodput, with
    the batch's context, each request's cost of resuming and measured residuals by depth)."""
    batch = data.draw(st.integers(1, 3))
    width = data.draw(st.integers(1, 4))
    unit = st.floats(0.0, 1.0)
    accept = np.array(data.draw(st.lists(st.lists(unit, min_size=width, max_size=width), min_size=batch,
                                         max_size=batch)))
    caps = np.array(data.draw(st.lists(st.integers(0, width), min_size=batch, max_size=batch)))
    mins = np.minimum(np.array(data.draw(st.lists(st.integers(0, 2), min_size=batch, max_size=batch))), caps)
    weights = np.array(data.draw(st.lists(st.sampled_from([1.0, 4.0]), min_size=batch, max_size=batch)))
    coef = st.floats(0.0, 3.0)
    cost = StepCostModel(verify_coef=[data.draw(st.floats(0.1, 10.0)), data.draw(coef), data.draw(coef), data.draw(coef)],
                         draft_coef=[data.draw(coef) for _ in range(5)],
                         draft_cut=data.draw(st.booleans()))
    context = data.draw(st.integers(0, 500))
    resume = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 5.0]), min_size=batch, max_size=batch)))
    if data.draw(st.booleans()):  # measured steps priced off the fit by depth (cost_model.depth_factor): far off
        # (a plan may cost less at a deeper cap) or a little (the prices still grow with depth)
        off = data.draw(st.sampled_from([st.floats(0.3, 3.0), st.floats(0.95, 1.05)]))
        for depth in data.draw(st.lists(st.integers(0, width), max_size=4)):
            cost.record_step(batch, depth, 10.0, 10.0 * data.draw(off))
    policy = GoodputPolicy()
    if data.draw(st.booleans()):  # warm: started from the optimal ratios of an unrelated previous step, as in serving
        previous = np.array(data.draw(st.lists(st.lists(unit, min_size=width, max_size=width), min_size=batch,
                                               max_size=batch)))
        policy.plan(previous, np.full(batch, width), np.zeros(batch, dtype=np.int64), cost)
    plan = policy.plan(accept, caps, mins, cost, weights=weights, context=context, resume_ms=resume)
    best, _ = _brute_force(accept, caps, mins, cost, weights, context, resume)
    assert np.all(plan.lengths >= mins) and np.all(plan.lengths <= caps)
    tokens, ms = evaluate(accept, plan.lengths, cost, context=context, resume_ms=resume)  # unweighted tokens
    weighted = float((weights * (1.0 + np.where(np.arange(width)[None, :] < plan.lengths[:, None],
                                                np.cumprod(accept, axis=1), 0.0).sum(axis=1))).sum())
    assert weighted / ms >= best * (1 - 1e-9), (plan.lengths, weighted / ms, best)
    assert (plan.expected_tokens, plan.expected_ms) == pytest.approx((weighted, ms), rel=1e-9)  # priced as it runs


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 64))
def test_the_plan_never_loses_to_the_best_uniform_length(seed, batch):
    rng = np.random.default_rng(seed)
    width = 8
    accept = rng.uniform(0.0, 1.0, (batch, width)) ** rng.uniform(0.2, 3.0)
    caps, mins = np.full(batch, width), np.zeros(batch, dtype=np.int64)
    cost = StepCostModel(verify_coef=rng.uniform(0.0, [10.0, 1.0, 1.0, 0.01]),
                         draft_coef=rng.uniform(0.0, [2.0, 2.0, 0.5, 2.0, 0.5]), draft_cut=bool(rng.integers(2)))
    for depth in rng.integers(0, width + 1, size=rng.integers(0, 4)):
        cost.record_step(batch, int(depth), 10.0, 10.0 * rng.uniform(0.3, 3.0))
    plan = GoodputPolicy().plan(accept, caps, mins, cost)
    best_uniform = max(FixedPolicy(k).plan(accept, caps, mins, cost).goodput for k in range(width + 1))
    assert plan.goodput >= best_uniform * (1 - 1e-9)


def test_a_critical_request_keeps_its_speculation_under_load():
    """Under a rising row cost a plain request gets shorter; the same request counted at latency_weight keeps
    more of its draft (its tokens are worth more to the objective)."""
    batch = 32
    accept = np.full((batch, 6), 0.7)
    caps, mins = np.full(batch, 6), np.zeros(batch, dtype=np.int64)
    cost = linear_cost(0.4)
    plain = GoodputPolicy().plan(accept, caps, mins, cost).lengths
    weights = np.ones(batch)
    weights[0] = 4.0
    weighted = GoodputPolicy().plan(accept, caps, mins, cost, weights=weights).lengths
    assert weighted[0] > plain[0] and weighted[0] > weighted[1]


def test_per_request_lengths_replace_one_length_only_when_they_expect_clearly_more():
    """``uniform_margin``: a mixed plan must expect that much more goodput than the best single length."""
    cost = StepCostModel(verify_coef=[10.0, 0.0, 0.2, 0.0], draft_coef=[0.0, 0.0, 0.0, 1.0, 0.0])
    caps, mins = np.full(2, K), np.zeros(2, dtype=np.int64)
    close = np.stack([np.full(K, 0.9), np.full(K, 0.6)])  # a little apart: the exact optimum splits them a little
    exact = GoodputPolicy().plan(close, caps, mins, cost)
    assert exact.lengths[0] != exact.lengths[1]
    best_single = max(FixedPolicy(k).plan(close, caps, mins, cost).goodput for k in range(K + 1))
    assert exact.goodput < best_single * 1.25
    held = GoodputPolicy(uniform_margin=0.25).plan(close, caps, mins, cost)
    assert held.lengths[0] == held.lengths[1] and held.goodput == pytest.approx(best_single)
    apart = np.stack([np.ones(K), np.zeros(K)])  # sure and hopeless: splitting them pays far more than 25 %
    assert GoodputPolicy(uniform_margin=0.25).plan(apart, caps, mins, linear_cost(per_token=0.5)).lengths.tolist() == [K, 0]


@pytest.mark.parametrize("uniform", [False, True])
def test_drafting_replaces_no_drafts_only_when_it_expects_clearly_more(uniform):
    """``draft_margin``: a plan that drafts must expect that much more goodput than every request at length 0
    (exploration's hopes and late costs ride on its expectation); a floor that asks for drafts still gets them."""
    cost = linear_cost(per_token=0.5, overhead=5.0)
    caps, mins = np.full(4, K), np.zeros(4, dtype=np.int64)
    rest = FixedPolicy(0).plan(np.full((4, K), 0.3), caps, mins, cost, uniform=uniform)
    for accept, drafts_by_margin in ((0.3, False), (0.9, True)):
        probs = np.full((4, K), accept)
        exact = GoodputPolicy().plan(probs, caps, mins, cost, uniform=uniform)
        assert exact.lengths.any() and exact.goodput > rest.goodput  # the exact optimum drafts in both cases
        gain = exact.goodput / rest.goodput - 1
        assert (gain > 0.25) == drafts_by_margin, gain
        kept = GoodputPolicy(draft_margin=0.25).plan(probs, caps, mins, cost, uniform=uniform)
        if drafts_by_margin:
            assert kept.lengths.tolist() == exact.lengths.tolist()
        else:
            assert not kept.lengths.any() and kept.goodput == pytest.approx(rest.goodput)
    floors = np.array([1, 0, 0, 0])
    held = GoodputPolicy(draft_margin=0.25).plan(np.full((4, K), 0.3), caps, floors, cost, uniform=uniform)
    assert held.lengths[0] >= 1


@pytest.mark.parametrize("uniform", [False, True])
def test_the_draft_margin_holds_back_hopes_not_what_the_posterior_means_show(uniform):
    """A plan that drafts below ``draft_margin`` still runs when it pays on the posterior means alone; a plan
    whose gain rests on exploration's optimism does not."""
    cost = linear_cost(per_token=0.5, overhead=5.0)
    caps, mins = np.full(4, K), np.zeros(4, dtype=np.int64)
    hopes = np.full((4, K), 0.3)
    rest = FixedPolicy(0).plan(hopes, caps, mins, cost, uniform=uniform)
    exact = GoodputPolicy().plan(hopes, caps, mins, cost, uniform=uniform)
    assert 0 < exact.goodput / rest.goodput - 1 < 0.25  # below the margin
    policy = GoodputPolicy(draft_margin=0.25)
    shown = policy.plan(hopes, caps, mins, cost, uniform=uniform, sure_probs=hopes)  # no optimism in them
    assert shown.lengths.tolist() == exact.lengths.tolist()
    hoped = policy.plan(hopes, caps, mins, cost, uniform=uniform, sure_probs=np.full((4, K), 0.05))
    assert not hoped.lengths.any()
