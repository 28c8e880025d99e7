"""A cost model replayed through step traces: how well it prices each step before that step is measured.

    python benchmarks/replay_costs.py steps.jsonl [more.jsonl.gz ...]
    python benchmarks/replay_costs.py --module /tmp/variant_cost_model.py traces...   # a variant of spec/cost_model.py

Each server in a trace (``SGLANG_FASER_STEP_TRACE``; a new server starts at its start-up profile's line, or in
older traces where a start-up sweep starts again) is replayed into a fresh ``StepCostModel`` as the worker feeds it:
the start-up profile's verify passes (traces since the fortieth session; older ones lack this CPU prior, so their
replays price from the sweep alone), the sweep's steps (the first only warming up) and the warm-up's repeated shapes
as the profile prior, then every live step that fed the model (``sampled``; in older traces inferred: a hold's last
step, every decided one) is priced first and recorded after, and the ragged verifier's passes of the others too.
Scored: each step's own price against what it measured, with the host gap before it (log error), overall and for
the first three steps of each (batch bucket, drafting depth), where a new shape's price comes from elsewhere; and
consecutive steps of one bucket that switched depth (the price ratio against the measured one), which is what a
choice between depths rests on; and, by batch size, parking's price at each decision that drafted beside what the
trace's parked steps measured (``parked_table``). The variant is any copy of
``sglang_faser/spec/cost_model.py`` with the same interface, so a change to the model is tried against every kept
trace before a server runs it (benchmarks/results/HISTORY.md, the thirty-ninth session's paragraph, has two such
tries). Shapes are the ragged path's (each request's own rows): GPU traces, verified uniformly, are priced a little
low at mixed lengths.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.trace_report import read  # noqa: E402

FIRST_USES = 3  # steps of a (bucket, drafting depth) reported one by one


def load_model(module: str | None):
    """``spec/cost_model.py``, or a variant file of it."""
    if module is None:
        return importlib.import_module("sglang_faser.spec.cost_model")
    spec = importlib.util.spec_from_file_location("cost_model_variant", module)
    variant = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = variant  # dataclasses look their module up
    spec.loader.exec_module(variant)
    return variant


def servers(lines: list[dict]) -> list[list[dict]]:
    """A trace's steps, cut where a server's start-up profile is (its first line, where the trace has one) or
    where a start-up sweep begins again (a new server of the same configuration); a server's profile line first."""
    found, current, sweeping = [], [], False
    for line in lines:
        if "profile" in line:
            if current:
                found.append(current)
            current, sweeping = [line], True  # its sweep follows
            continue
        if "step_ms" not in line:
            continue
        if line.get("calibration") and current and not sweeping:
            found.append(current)
            current = []
        current.append(line)
        sweeping = bool(line.get("calibration"))
    return found + [current] if current else found


def shape(step: dict) -> tuple:
    """(batch, verify rows, depth, draft rows, drafting requests, context) as the worker prices a step."""
    lengths = step["lengths"]
    batch = len(lengths)
    return (batch, sum(lengths) + batch, int(step["depth"]), sum(max(k - 1, 0) for k in lengths),
            sum(1 for k in lengths if k), int(step["context"]))


def sampled(steps: list[dict], i: int) -> bool:
    """Whether step ``i`` fed the cost model: as its trace line says, or (older traces) unless it was a held step
    before the last of its hold."""
    if "sampled" in steps[i]:
        return steps[i]["sampled"]
    return not (steps[i].get("held") and i + 1 < len(steps) and steps[i + 1].get("held"))


def replay(cm, steps: list[dict]) -> dict:
    """One server's steps through a fresh model: {"own": [log errors], "uses": {n: [...]}, "switches": [...],
    "fidelity": [log(replayed / the server's price) of each decided parked step]}."""
    model = cm.StepCostModel(draft_cut=True)
    own, uses, switches, fidelity = [], {n: [] for n in range(FIRST_USES)}, [], []
    parked_prices, parked_measured = [], []  # (batch, ms): parking priced at drafting decisions; parked steps run
    sweep, warm_shapes, last, ran = 0, set(), {}, Counter()  # ran: live steps recorded by (bucket, depth)
    for i, step in enumerate(steps):
        if "profile" in step:  # the start-up profile's verify passes: the prior the first steps decide on
            for batch, rows, context, ms in step["profile"]:
                model.add_profile_sample(cm.VERIFY, batch, rows, ms, context=context)
            model.refit()
            continue
        s = shape(step)
        batch, rows, depth, draft_rows, drafting, context = s
        if step.get("warmup") or step.get("calibration"):
            key = (batch, depth)
            sweep += bool(step.get("calibration"))
            if (step.get("warmup") and key in warm_shapes) or sweep > 1:  # a shape's first run warms it up
                model.add_profile_sample(cm.VERIFY, batch, rows, step["verify_ms"], context=context)
                model.add_profile_sample(cm.DRAFT, batch, depth, step["draft_ms"], rows=draft_rows, drafting=drafting,
                                         warmup=bool(step.get("warmup")))
            warm_shapes.add(key)
            if step.get("calibration") and (i + 1 == len(steps) or not steps[i + 1].get("calibration")):
                model.refit()
            continue
        if not step.get("held") and depth == 0 and step.get("expected_ms"):  # the server priced this very shape
            fidelity.append(math.log(float(model.step_ms(batch, rows, 0, 0, 0, context)) / step["expected_ms"]))
        if not step.get("held") and depth:  # what parking this batch would have cost, as the model stood
            parked_prices.append((batch, float(model.step_ms(batch, batch, 0, 0, 0, context))))
        elif depth == 0:
            parked_measured.append((batch, step["verify_ms"] + step["draft_ms"]))
        if not sampled(steps, i):
            if step.get("ragged"):  # the ragged verifier's passes are cost samples all the same
                model.record(cm.VERIFY, batch, rows, step["verify_ms"], context=context)
            continue
        ms = step["verify_ms"] + step["draft_ms"]  # the draft side's time holds the host gap before the step
        bucket = cm.bucket_of(batch)
        price = float(model.step_ms(batch, rows, depth, draft_rows, drafting, context))
        if ms > 0 and price > 0:
            error = math.log(ms / price)
            own.append(error)
            if depth and ran[(bucket, depth)] < FIRST_USES:
                uses[ran[(bucket, depth)]].append(error)
            before = last.get(bucket)
            if before is not None and before[0][2] != depth and before[2] == i - 1:
                earlier = float(model.step_ms(*before[0]))
                switches.append(math.log(price / earlier) - math.log(ms / before[1]))
            last[bucket] = (s, ms, i)
        ran[(bucket, depth)] += 1
        model.record(cm.VERIFY, batch, rows, step["verify_ms"], context=context)
        model.record(cm.DRAFT, batch, depth, step["draft_ms"], rows=draft_rows, drafting=drafting)
        modelled = model.modelled_step_ms(batch, rows, depth, draft_rows, drafting, context)
        model.record_step(batch, depth, modelled, ms, shape=(rows, draft_rows, drafting, context))
    return {"own": own, "uses": uses, "switches": switches, "fidelity": fidelity, "parked_prices": parked_prices,
            "parked_measured": parked_measured}


def parked_table(prices: list[tuple[int, float]], measured: list[tuple[int, float]]) -> list[tuple]:
    """Per batch size where both are found: (batch, decisions, median price of parking where the step drafted,
    parked steps, their median measured ms, with the host gap before them): a model that overprices parking drafts
    where parking pays. By batch size, not bucket: a bucket's drafting decisions and its parked steps fall at
    different sizes in it (a Gamma 16 trace of the fifty-sixth session: 24 % / 39 % apart by the medians of the
    16-31 / 32+ buckets, -6 % to +24 % size by size)."""
    at, ran = defaultdict(list), defaultdict(list)
    for batch, ms in prices:
        at[batch].append(ms)
    for batch, ms in measured:
        ran[batch].append(ms)
    return [(batch, len(at[batch]), statistics.median(at[batch]), len(ran[batch]), statistics.median(ran[batch]))
            for batch in sorted(set(at) & set(ran))]


def summary(errors: list[float], ratio: str = "measured / priced") -> str:
    if not errors:
        return "n 0"
    return (f"n {len(errors)}, {ratio} {math.exp(statistics.fmean(errors)):.3f} (median "
            f"{math.exp(statistics.median(errors)):.3f}), mean |log error| {statistics.fmean(map(abs, errors)):.3f}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--module", help="a variant of sglang_faser/spec/cost_model.py (default: the package's)")
    args = parser.parse_args(argv)
    cm = load_model(args.module)
    total = {"own": [], "uses": {n: [] for n in range(FIRST_USES)}, "switches": [], "fidelity": [], "parked_prices": [],
             "parked_measured": []}
    for path in args.traces:
        for steps in servers(read(path)):
            scored = replay(cm, steps)
            for key in ("own", "switches", "fidelity", "parked_prices", "parked_measured"):
                total[key] += scored[key]
            for n, errors in scored["uses"].items():
                total["uses"][n] += errors
    print(f"every priced step: {summary(total['own'])}")
    for n, errors in total["uses"].items():
        print(f"step {n + 1} of a (bucket, drafting depth): {summary(errors)}")
    print(f"depth switches: {summary(total['switches'], 'priced ratio / measured ratio')}")
    # the package's model on a trace of the same code prices as the server did: 1.000 (older traces lack the profile)
    print(f"decided parked steps: {summary(total['fidelity'], 'replayed price / server price')}")
    print("parking as priced where a step drafted, beside the parked steps run (median ms, by batch size):")
    for batch, n, price, m, ran in parked_table(total["parked_prices"], total["parked_measured"]):
        print(f"  {batch:3d}: priced {price:.1f} at {n} drafting decisions, measured {ran:.1f} over {m} parked steps")
    return total


if __name__ == "__main__":
    main()
