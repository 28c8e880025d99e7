"""benchmarks/closed_loop.py: FASER's length controller and cost model against a machine of known costs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import closed_loop  # noqa: E402

BLIND = '''
from sglang_faser.spec.cost_model import *  # noqa: F401,F403
from sglang_faser.spec.cost_model import StepCostModel as _Model


class StepCostModel(_Model):
    """Prices every step from its start-up prior: it never learns from the steps it runs."""

    def record(self, *args, **kwargs):
        pass

    def record_step(self, *args, **kwargs):
        pass
'''


def test_the_package_model_learns_what_the_prior_mispriced_and_a_model_fed_nothing_does_not(tmp_path):
    """A prior that prices drafting at a third of its cost sends both deep; the steps FASER's controller records
    bring the package's model back to one or two drafts, a model fed nothing stays three or four deep."""
    learned = closed_loop.main(["--seeds", "2", "--steps", "600", "--draft-prior", "0.3"])
    assert sum(learned["depths"]) == 1200
    blind = tmp_path / "blind_cost_model.py"
    blind.write_text(BLIND)
    never = closed_loop.main(["--seeds", "2", "--steps", "600", "--draft-prior", "0.3", "--module", str(blind)])
    assert sum(never["depths"][3:]) > 0.9 * 1200
    assert sum(learned["depths"][1:3]) > 0.6 * 1200
    assert sum(learned["ratios"]) > sum(never["ratios"])


def test_with_the_default_prior_the_loop_runs_close_to_the_oracle():
    assert min(closed_loop.main(["--seeds", "2", "--steps", "600"])["ratios"]) > 0.95


def test_a_prior_that_prices_drafting_three_times_too_dear_is_probed_and_corrected_rather_than_parked_on():
    """Parked on a dear drafting price, no step measured drafting again (0.70 of the oracle, every step parked,
    before the cost probe of ``LengthController._cost_probe``); the probe's steps measure it and the batch drafts."""
    probed = closed_loop.main(["--seeds", "2", "--steps", "600", "--draft-prior", "3"])
    assert probed["depths"][0] < 0.1 * 1200
    assert min(probed["ratios"]) > 0.95


def test_four_requests_in_flight_draft_where_drafting_pays_and_park_where_it_does_not():
    """At four requests in flight (the embedded pair's measured step costs there, one draft each 1.58x a parked
    step) on a prior that prices drafting too dear, the batch parked every step, 0.82 of the oracle, before the
    small-batch cost and joint probes (``LengthController._cost_probe``, ``_joint_probe``); with requests whose
    drafts seldom pass it still parks nearly every step."""
    mixed = closed_loop.main(["--batch", "4", "--seeds", "2", "--steps", "600"])
    assert mixed["depths"][0] < 0.75 * 1200 and min(mixed["ratios"]) > 0.84
    doomed = closed_loop.main(["--batch", "4", "--seeds", "2", "--steps", "600", "--acceptance", "0.1", "0.2"])
    assert doomed["depths"][0] > 0.95 * 1200 and min(doomed["ratios"]) > 0.98


def test_charging_decisions_costs_the_loop_what_its_decisions_take():
    """``--decision-ms``: each step decided anew pays that host time, which the oracle does not, so the same loop
    scores lower by about its share of the steps."""
    free = closed_loop.main(["--seeds", "1", "--steps", "300"])
    charged = closed_loop.main(["--seeds", "1", "--steps", "300", "--decision-ms", "2", "0.05"])
    assert free["depths"] == charged["depths"]  # the same decisions
    assert 0.9 * free["ratios"][0] < charged["ratios"][0] < 0.99 * free["ratios"][0]
