"""FASER's length controller and cost model in a closed loop against a machine whose costs are known.

    python benchmarks/closed_loop.py                                  # the package's cost model, 6 seeds
    python benchmarks/closed_loop.py --module variant.py --spell 0.25  # a variant of spec/cost_model.py
    python benchmarks/closed_loop.py --batch 4 --acceptance 0.1 0.2    # four in flight, drafts that seldom pass

A replay (``replay_costs.py``) prices the steps a server ran, so it cannot tell which depth a model would have
chosen instead, nor what that choice would have delivered. Here the controller chooses every step and the machine
answers: a batch of 32-63 requests (half of them accepting 0.61 a draft position, half 0.85, like the mixed
prompts), each depth's true step time (``TRUE_MS``: about what the embedded pair's steps took at 48 requests on CPU,
`traces/steps_s40-t64`), times the machine's speed, which moves in spells (an AR(1) process in log, ``--spell`` its
sd, ``--keep`` its step-to-step correlation), times a step's own noise (lognormal, ``--noise``). The model starts
from a prior with the shape of a linear fit that misprices depths at that size (the coefficients the same trace
fitted), is fed each step as the worker feeds it, and the score is its tokens per millisecond over the oracle's,
which runs the best uniform depth under the true costs at every step. Pure core only: no server, milliseconds a step.
``--batch N`` holds N requests in flight at the step costs of four (``SMALL_MS``, where a draft's fixed costs are
most of a drafting step's price and the prior, fitted at 32+ requests, prices drafting 2-3x too dear);
``--acceptance`` sets the two halves' acceptance.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.replay_costs import load_model  # noqa: E402
from sglang_faser.spec.config import FaserConfig  # noqa: E402
from sglang_faser.spec.controller import LengthController  # noqa: E402

TRUE_MS = np.array([40.0, 49, 64, 81, 91, 105, 118, 130])  # a step at depth d of 48 requests
VERIFY_SHARE = (30.0, 3.0)  # a step's verify ms at 48 requests: 30 + 3 per depth, the rest is the draft side's
# ``--batch 4``: four requests in flight, a step at depth d as the embedded pair's took at 4 in flight on CPU (the
# scheduler's work between steps included: `live_ab_s42-c4-probes` for depths 0-1, the deeper ones' ratios from
# `traces/steps_s42-live-c4`); one draft each costs 1.58x a parked step, and pays at acceptance 0.58 or more
SMALL_MS = np.array([11.3, 17.9, 21.8, 25.6, 28.2, 31.0, 34.0, 37.0])
SMALL_VERIFY = (8.9, 1.0)
CONTEXT = 200  # tokens a request
LINEAR_VERIFY = [0.0, 0.5491, 0.0184, 0.0003]  # the prior's shape: the fit at 32+ requests of that trace
LINEAR_DRAFT = [5.6096, 10.0149, 0.0395, 5.4628, 0.0495]
WINDOW = 7


def prior(cm, model, draft_scale: float = 1.0) -> None:
    """Profile samples of every depth at 1-48 requests from the linear fit's coefficients, the draft side's times
    ``draft_scale`` (below 1: a prior that prices drafting too cheaply)."""
    for batch in (1, 2, 4, 8, 16, 32, 48):
        for depth in range(WINDOW + 1):
            rows = batch * (depth + 1)
            drafting = batch if depth else 0
            verify = float(np.dot(LINEAR_VERIFY, [1, batch, rows, rows * CONTEXT]))
            draft = float(np.dot(LINEAR_DRAFT, [1, float(depth > 0), drafting * (depth + 1), depth,
                                                batch * max(depth - 1, 0)]))
            model.add_profile_sample(cm.VERIFY, batch, rows, verify, context=batch * CONTEXT)
            model.add_profile_sample(cm.DRAFT, batch, depth, draft * draft_scale, rows=batch * max(depth - 1, 0),
                                     drafting=drafting)
    model.refit()


def run(cm, seed: int, steps: int = 1500, spell: float = 0.25, keep: float = 0.97,
        noise: float = 0.15, draft_scale: float = 1.0, small: int | None = None,
        acceptance: tuple[float, float] = (0.61, 0.85),
        decision_ms: tuple[float, float] = (0.0, 0.0)) -> tuple[float, np.ndarray]:
    """(tokens/ms over the oracle's, steps run at each depth) of one closed loop: FASER's ``LengthController``
    decides every step (its acceptance posteriors fed each request's sampled acceptance, its cost model the
    machine's times as the worker feeds them); requests of 32-96 tokens leave and new ones take their place.
    ``small``: that many requests in flight throughout, at ``SMALL_MS``; ``acceptance``: a draft position's
    acceptance in the two halves of the requests; ``decision_ms`` (a, b): each step the controller decides
    anew (not ``held``) costs a + b x batch ms more, a decision's host time, which the oracle does not pay."""
    rng = np.random.default_rng(seed)
    model = cm.StepCostModel(draft_cut=True)
    prior(cm, model, draft_scale)
    controller = LengthController(FaserConfig(), window=WINDOW, cost=model)
    controller.explain = False
    live: dict[str, tuple[float, int]] = {}  # rid -> (its acceptance a draft position, tokens left)
    made, log_speed, got, oracle = 0, 0.0, [0.0, 0.0], [0.0, 0.0]
    depths = np.zeros(WINDOW + 1, dtype=np.int64)
    for t in range(steps):
        log_speed = keep * log_speed + math.sqrt(1 - keep ** 2) * spell * rng.standard_normal()
        speed = math.exp(log_speed)
        target = small or int(np.clip(48 + 8 * math.sin(t / 37.0) + rng.integers(-3, 4), 32, 63))
        while len(live) < target:
            live[f"r{made}"] = (acceptance[made % 2 == 0], int(rng.integers(32, 97)))
            made += 1
        rids = list(live)
        batch, context = len(rids), len(rids) * CONTEXT
        decision = controller.decide(rids, context=context)
        lengths, depth = decision.lengths, decision.depth
        depths[depth] += 1
        probs = np.array([live[r][0] for r in rids])
        passed = rng.random((batch, WINDOW)) < probs[:, None]
        accepted = np.minimum(np.argmin(np.c_[passed, np.zeros(batch, bool)], axis=1), lengths)
        controller.observe(accepted)
        table, share = (SMALL_MS, SMALL_VERIFY) if small else (TRUE_MS, VERIFY_SHARE)
        scale = 1.0 if small else 0.3 + 0.7 * batch / 48
        # a request left at 0 in a drafting step costs what it would parked
        true_ms = scale * (table[0] + (table[depth] - table[0]) * float((lengths > 0).mean()))
        ms = true_ms * speed * math.exp(noise * rng.standard_normal())
        rows, draft_rows = int(batch + lengths.sum()), int(np.maximum(lengths - 1, 0).sum())
        drafting = int((lengths > 0).sum())
        verify = ms * (share[0] + share[1] * depth) / table[depth]
        if decision.sampled:  # as the worker records a step (engine/step.py ``_record_costs``)
            step = controller.counters.steps
            controller.record_phase(cm.VERIFY, batch, rows, verify, context=context, step=step)
            controller.record_phase(cm.DRAFT, batch, depth, ms - verify, rows=draft_rows, drafting=drafting,
                                    step=step)
            controller.record_step(batch, rows, depth, draft_rows, drafting, context, ms, step=step)
        survival = np.cumprod(np.repeat(probs[:, None], WINDOW, axis=1), axis=1)
        got[0] += batch + float(np.where(np.arange(WINDOW)[None, :] < lengths[:, None], survival, 0.0).sum())
        got[1] += true_ms * speed + (0.0 if decision.held else decision_ms[0] + decision_ms[1] * batch)
        tokens = batch + np.concatenate([[0.0], np.cumsum(survival.sum(axis=0))])  # [d]: uniform depth d
        best = int(np.argmax(tokens / table))
        oracle[0] += tokens[best]
        oracle[1] += scale * table[best] * speed
        for rid, k in zip(rids, accepted + 1):
            p, left = live[rid]
            if left - k <= 0:
                del live[rid]
                controller.forget(rid)
            else:
                live[rid] = (p, left - int(k))
    return (got[0] / got[1]) / (oracle[0] / oracle[1]), depths


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", help="a variant file of sglang_faser/spec/cost_model.py")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--spell", type=float, default=0.25, help="sd of the machine's log speed")
    ap.add_argument("--keep", type=float, default=0.97, help="its correlation from one step to the next")
    ap.add_argument("--noise", type=float, default=0.15, help="sd of a step's own log noise")
    ap.add_argument("--draft-prior", type=float, default=1.0,
                    help="the prior's draft-side times, scaled (below 1: drafting priced too cheaply at start)")
    ap.add_argument("--batch", type=int, help="this many requests in flight at the 4-request step costs (SMALL_MS)")
    ap.add_argument("--acceptance", type=float, nargs=2, default=(0.61, 0.85),
                    help="a draft position's acceptance in either half of the requests")
    ap.add_argument("--decision-ms", type=float, nargs=2, default=(0.0, 0.0), metavar=("A", "B"),
                    help="host time of each step decided anew: A + B x batch ms (live on CPU about "
                         "0.4 + 0.025 B, traces/steps_s56-g16)")
    args = ap.parse_args(argv)
    cm = load_model(args.module)
    runs = [run(cm, seed, args.steps, args.spell, args.keep, args.noise, args.draft_prior, args.batch,
                tuple(args.acceptance), tuple(args.decision_ms))
            for seed in range(args.seeds)]
    ratios = [r for r, _ in runs]
    depths = sum(d for _, d in runs)
    print(f"tokens/ms over the oracle's: mean {statistics.fmean(ratios):.4f}, worst {min(ratios):.4f} "
          f"({args.seeds} seeds); steps at depths 0-{WINDOW}: {depths.tolist()}")
    return {"ratios": ratios, "depths": depths.tolist()}


if __name__ == "__main__":
    main()
