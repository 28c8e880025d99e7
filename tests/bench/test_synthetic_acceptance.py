"""The benchmark-only synthetic acceptance: parsing, per-request rates and the draws (no engine needed)."""

from __future__ import annotations

import numpy as np
import torch
import pytest

from sglang_faser.engine.synthetic_acceptance import ENV_VAR, SyntheticAcceptance


def test_parse_round_trips_through_the_environment(monkeypatch):
    setting = SyntheticAcceptance.parse("0.25:0.9:7")
    assert (setting.low, setting.high, setting.seed) == (0.25, 0.9, 7)
    monkeypatch.setenv(ENV_VAR, setting.to_env())
    assert SyntheticAcceptance.from_env() == setting
    monkeypatch.delenv(ENV_VAR)
    assert SyntheticAcceptance.from_env() is None


@pytest.mark.parametrize("spec", ["0.5", "a:b", "0.9:0.1", "-0.1:0.5", "0.1:1.5", "0.1:0.2:x:y"])
def test_bad_ranges_are_refused_with_a_reason(spec):
    with pytest.raises(ValueError, match="LOW"):
        SyntheticAcceptance.parse(spec)


def test_each_request_keeps_its_own_rate_inside_the_range():
    setting = SyntheticAcceptance(0.2, 0.8, seed=1)
    rates = [setting.rate(f"rid-{i}") for i in range(2000)]
    assert all(0.2 <= r <= 0.8 for r in rates)
    assert setting.rate("rid-3") == setting.rate("rid-3") != SyntheticAcceptance(0.2, 0.8, seed=2).rate("rid-3")
    assert np.mean(rates) == pytest.approx(0.5, abs=0.02) and np.std(rates) > 0.15  # spread, not one value


def test_draws_follow_the_rate_and_never_pass_the_chain():
    generator = torch.Generator().manual_seed(0)
    chains, rates = torch.tensor([7, 7, 7, 2, 0]), torch.tensor([1.0, 0.0, 0.6, 1.0, 1.0])
    draws = torch.stack([SyntheticAcceptance.draw(rates, chains, 7, generator) for _ in range(4000)]).numpy()
    assert (draws[:, 0] == 7).all() and (draws[:, 1] == 0).all()
    assert (draws[:, 3] == 2).all() and (draws[:, 4] == 0).all()
    # leading successes of Bernoulli(0.6), truncated at 7: mean sum_{j=1..7} 0.6^j
    assert draws[:, 2].mean() == pytest.approx(sum(0.6**j for j in range(1, 8)), rel=0.05)
