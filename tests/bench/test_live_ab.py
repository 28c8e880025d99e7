"""benchmarks/live_ab.py: the policy schedule, the policies it accepts, and the per-cycle ratios it reports."""

import argparse

import pytest

from benchmarks import live_ab
from sglang_faser.spec.config import FaserConfig, Mode


def test_each_cycle_runs_every_policy_and_every_other_cycle_reverses_the_order():
    order = live_ab.schedule(["a", "b", "c"], 3)
    assert order == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (2, "c")]


def test_policies_are_adaptive_off_or_a_fixed_length_and_anything_else_is_refused():
    assert live_ab.policy_config("adaptive").mode is Mode.ADAPTIVE
    assert live_ab.policy_config("off").mode is Mode.OFF
    fixed = live_ab.policy_config("fixed:3")
    assert (fixed.mode, fixed.fixed_len) == (Mode.FIXED, 3)
    for bad in ("fixed", "fixed:x", "off:1", "greedy"):
        with pytest.raises(argparse.ArgumentTypeError, match="adaptive, off or fixed:K"):
            live_ab.policy_config(bad)
    with pytest.raises(SystemExit):
        live_ab.parse_args(["--policies", "adaptive", "adaptive"])


def test_a_policy_names_its_own_knobs_and_every_other_knob_is_at_its_default():
    exact = live_ab.policy_config("adaptive,uniform_margin=0,draft_margin=0.5,lazy_prefill=off")
    assert (exact.mode, exact.uniform_margin, exact.draft_margin, exact.lazy_prefill) == (Mode.ADAPTIVE, 0.0, 0.5,
                                                                                          False)
    assert exact.explore == FaserConfig().explore
    assert live_ab.policy_config("fixed:2,max_len=4").fixed_len == 2
    for bad, message in (("adaptive,margin=0", "not knob=value"), ("adaptive,mode=off", "not knob=value"),
                         ("adaptive,explore=", "not knob=value"), ("adaptive,explore=x", "takes a number"),
                         ("adaptive,explore=9", r"explore: must be in \[0.0, 4.0\]"),
                         ("adaptive,lazy_prefill=maybe", "takes on/off")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            live_ab.policy_config(bad)


def test_ratios_are_taken_within_each_cycle_so_a_slow_cycle_does_not_count_against_one_policy():
    windows = []
    for cycle, speed in enumerate([1.0, 0.5, 2.0]):  # the machine's speed moves between cycles
        windows += [{"cycle": cycle, "policy": "ref", "tokens_per_s": 100 * speed, "drafts_per_request_step": 1.0},
                    {"cycle": cycle, "policy": "new", "tokens_per_s": 110 * speed, "drafts_per_request_step": 0.0}]
    windows[-1]["tokens_per_s"] = 90 * 2.0  # one cycle where the new policy lost
    summary = live_ab.summarise(windows, ["ref", "new"])
    assert summary["new"]["ratio"] == pytest.approx(1.1)
    assert (summary["new"]["above"], summary["new"]["below"]) == (2, 1)
    assert summary["new"]["ratio_min"] == pytest.approx(0.9)
    assert summary["new"]["tokens_per_s"] == pytest.approx(110)  # the median window: 55, 110, 180
    assert summary["ref"]["ratio"] == 1.0 and summary["new"]["drafts_per_request_step"] == 0.0
