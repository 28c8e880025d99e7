"""The goodput policy: per-request lengths from acceptance and measured step costs."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.cost_model import StepCostModel
from sglang_faser.spec.policy import FixedPolicy, GoodputPolicy, evaluate, make_policy

K = 8


def linear_cost(per_token: float, overhead: float = 5.0, draft_step: float = 0.0) -> StepCostModel:
    return StepCostModel(verify_coef=[overhead, 0.0, per_token], draft_coef=[0.0, 0.0, draft_step, 0.0])


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
        verify_coef=[rng.uniform(1, 20), 0.0, 0.0], draft_coef=[0.0, 0.0, rng.uniform(0, 3), 0.0]
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
        verify_coef=[rng.uniform(1, 20), rng.uniform(0, 0.1), rng.uniform(0, 1)],
        draft_coef=[rng.uniform(0, 2), 0.0, rng.uniform(0, 3), rng.uniform(0, 0.05)],
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
        verify_coef=[rng.uniform(1, 20), rng.uniform(0, 0.1), rng.uniform(0, 1)],
        draft_coef=[rng.uniform(0, 2), 0.0, rng.uniform(0, 3), rng.uniform(0, 2)],
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
    cost = StepCostModel(verify_coef=[10.0, 0.0, 0.01], draft_coef=[0.0, 0.0, 0.1, 2.0], draft_cut=True)
    assert plan(accept, cost).lengths.tolist() == [K, 1]
    cost.draft_cut = False  # every request drafted to the step's depth: going deep for one costs rows for both
    assert plan(accept, cost).lengths.tolist() == [1, 1]


@pytest.mark.parametrize("seed", range(10))
def test_uniform_gives_every_request_one_length_up_to_its_bounds(seed):
    rng = np.random.default_rng(500 + seed)
    batch = int(rng.integers(2, 32))
    accept = rng.uniform(0.0, 1.0, size=(batch, K))
    caps = np.where(rng.uniform(size=batch) < 0.2, rng.integers(0, K + 1, size=batch), K)
    mins = np.minimum(np.where(rng.uniform(size=batch) < 0.2, rng.integers(0, 3, size=batch), 0), caps)
    cost = StepCostModel(verify_coef=[rng.uniform(1, 20), 0.0, rng.uniform(0, 1)],
                         draft_coef=[0.0, 0.0, rng.uniform(0, 3), 0.0])
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
