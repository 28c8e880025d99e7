"""The start-up warm-up's plan (every depth at every batch bucket) and the controller steps it runs unseen."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController
from sglang_faser.spec.cost_model import DRAFT, VERIFY
from sglang_faser.spec.warmup import RID_PREFIX, batch_sizes, new_tokens, sweep_lengths, sweep_steps


def test_batch_sizes_take_both_edges_of_every_power_of_two_bucket():
    assert batch_sizes(64) == [2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64]
    assert batch_sizes(4096) == [2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 256]  # the lifted cap: to 256
    assert batch_sizes(48) == [2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 48]  # the largest batch itself, not an edge
    assert batch_sizes(4) == [2, 3, 4]
    assert batch_sizes(1) == []  # batch 1 is the start-up sweep's


@pytest.mark.parametrize("max_len", [1, 3, 7])
def test_one_sweep_runs_every_depth_all_drafting_and_half_parked_from_any_phase(max_len):
    for start in range(sweep_steps(max_len)):
        seen = set()
        for step in range(start, start + sweep_steps(max_len)):
            lengths = sweep_lengths(step, 4, max_len)
            seen.add((int(lengths.max()), bool(lengths.max() and not lengths.min())))
        assert seen == {(0, False)} | {(d, parked) for d in range(1, max_len + 1) for parked in (False, True)}


@pytest.mark.parametrize("max_len", [1, 3, 7])
def test_a_warmup_request_outlives_one_sweep_whatever_it_has_accepted(max_len):
    # every draft accepted: a step commits its length plus one; the prefill commits the first token
    for start in range(sweep_steps(max_len)):
        committed = 1
        for step in range(start, start + sweep_steps(max_len) - 1):
            committed += int(sweep_lengths(step, 2, max_len)[0]) + 1
        assert committed < new_tokens(max_len), "finished before the sweep's last step"


def test_a_uniform_verify_path_sweeps_without_parking_anyone():
    controller = LengthController(FaserConfig(), window=3)
    steps = [controller.decide([f"{RID_PREFIX}{i}" for i in range(3)], uniform=True) for _ in range(8)]
    assert [int(d.depth) for d in steps] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert all(len(set(d.lengths.tolist())) == 1 for d in steps)


def _warm(n: int) -> list[str]:
    return [f"{RID_PREFIX}{n}-{i}" for i in range(n)]


def test_warmup_steps_touch_no_statistic_no_counter_and_keep_the_observe_queue_aligned():
    controller = LengthController(FaserConfig(), window=3, calibration_sweeps=1)
    controller.decide(["a"])  # the start-up sweep's first step: length 0
    controller.observe([0])
    real = controller.decide(["a"])  # its second, length 1: observed after a warm-up step was decided (overlap)
    assert real.calibration and not real.warmup and real.lengths.tolist() == [1]
    warm = [controller.decide(_warm(4))]
    controller.observe([1])  # credited to "a"'s step, not to the warm-up's
    for _ in range(sweep_steps(3)):
        controller.observe(warm[-1].lengths)  # warm-up drafts all accepted: seen by no statistic
        warm.append(controller.decide(_warm(4)))
    assert all(d.warmup and not d.calibration for d in warm)
    assert {int(d.depth) for d in warm} == {0, 1, 2, 3}
    c = controller.counters
    assert (c.steps, c.warmup_steps, c.proposed, c.accepted, c.committed) == (2, len(warm), 1, 1, 3)
    assert len(controller.tracker) == 1 and sum(c.length_histogram) == 2  # "a" only
    # the warm-up's sweep measured every depth: live traffic's start-up sweep stops (each of its steps at a depth
    # the policy would not choose costs a real request time)
    assert not controller.decide(["a"]).calibration and controller.calibration_steps == 0


def test_a_batch_with_any_real_request_is_decided_as_usual():
    controller = LengthController(FaserConfig(mode="fixed", fixed_len=2), window=3)
    decision = controller.decide(_warm(2) + ["a"])
    assert not decision.warmup and decision.lengths.tolist() == [2, 2, 2]
    assert controller.counters.warmup_steps == 0


def test_warmup_lengths_respect_caps_and_the_source_ranks_lengths_replace_them_uncounted():
    controller = LengthController(FaserConfig(), window=3)
    for _ in range(3):  # to the depth-2 step
        controller.decide(_warm(2))
    decision = controller.decide(_warm(2), caps=np.array([3, 1]))
    assert decision.lengths.tolist() == [3, 1]
    replaced = controller.replace_last(decision, np.array([2, 2]), 2)
    assert replaced.warmup and replaced.lengths.tolist() == [2, 2] and replaced.depth == 2
    assert controller.counters.proposed == 0 and controller.counters.length_histogram == []


def test_each_warmup_shape_from_its_second_run_on_is_a_prior_sample_fitted_before_the_first_real_step():
    controller = LengthController(FaserConfig(), window=2)
    runs = []
    for _ in range(2 * sweep_steps(2)):
        runs.append(controller.decide(_warm(3)))
        controller.observe(runs[-1].lengths)
    assert [d.sampled for d in runs] == [False] * sweep_steps(2) + [True] * sweep_steps(2)
    for d in runs[sweep_steps(2):]:  # as the engine records a sampled warm-up step
        rows = 3 * (d.depth + 1)
        controller.record_phase(VERIFY, 3, rows, 4.0 + 0.5 * rows, context=300, warmup=True)
        controller.record_phase(DRAFT, 3, d.depth, 1.0 + 0.8 * d.depth, rows=3 * max(d.depth - 1, 0),
                                drafting=int((d.lengths > 0).sum()), warmup=True)
    cost = controller.cost
    assert len(cost.samples(VERIFY, online=False)[1]) == sweep_steps(2)
    assert len(cost.samples(VERIFY)[1]) == 0  # none online
    before = cost.verify_ms(3, 9, 300)
    controller.decide(["a"])  # the warm-up is over: the prior is fitted
    assert cost.verify_ms(3, 9, 300) == pytest.approx(4.0 + 0.5 * 9, rel=0.05) != before
