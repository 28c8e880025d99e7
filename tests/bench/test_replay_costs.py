"""benchmarks/replay_costs.py on hand-made traces of a machine whose steps follow a linear cost exactly."""

from __future__ import annotations

import json

from benchmarks import replay_costs

COST_MODEL = replay_costs.ROOT / "sglang_faser" / "spec" / "cost_model.py"


def _step(batch, depth, calibration=False, held=False):
    lengths = [depth] * batch
    rows = batch * (depth + 1)
    return {"batch": batch, "depth": depth, "lengths": lengths, "context": 64 * batch, "calibration": calibration,
            "held": held, "warmup": False, "verify_ms": 2.0 + 0.1 * rows + 0.3 * batch,
            "draft_ms": 1.0 + (2.0 + 0.8 * depth if depth else 0.0), "step_ms": 0.0}


def _server():
    sweep = [_step(1, d % 4, calibration=True) for d in range(8)]
    live = [_step(2 + (i // 8) % 3, i % 4) for i in range(90)]  # depth switches within each batch size
    live[10]["held"] = live[11]["held"] = True  # a hold: its first step was not priced by the worker
    return sweep + live


def test_a_linear_machine_is_priced_closely_once_fitted_and_a_variant_file_replays_alike(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in _server() + _server()) + "\n")
    assert [len(s) for s in replay_costs.servers(replay_costs.read(path))] == [98, 98]  # two servers
    total = replay_costs.main([str(path)])
    assert len(total["own"]) == 2 * 89  # the held step the worker skipped is not scored
    assert sum(map(abs, total["own"][60:89])) / 29 < 0.05  # the fitted model prices this machine's steps
    assert total["uses"][0] and total["switches"]
    variant = replay_costs.main([str(path), "--module", str(COST_MODEL)])
    assert variant["own"] == total["own"]


def test_a_traces_start_up_profile_is_the_replays_prior_and_its_sampled_flags_say_what_fed_the_model(tmp_path):
    """A server's first line holds its start-up profile: the replay starts from it (a new server there, no sweep
    needed to tell them apart), and a step marked unsampled is neither priced nor recorded, held or not."""
    profile = {"profile": [[b, b * w, 64 * b, 2.0 + 0.1 * b * w + 0.3 * b] for b in (1, 2, 4) for w in (1, 2, 4)]}
    live = [_step(2 + (i // 8) % 3, i % 4) for i in range(40)]
    for i, step in enumerate(live):
        step["sampled"] = i % 5 != 0
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in [profile, *live, profile, *live]) + "\n")
    found = replay_costs.servers(replay_costs.read(path))
    assert [len(s) for s in found] == [41, 41] and "profile" in found[1][0]
    total = replay_costs.main([str(path)])
    assert len(total["own"]) == 2 * 32  # eight unsampled steps a server are not scored
    # the profile prices this machine's verify passes before any step is recorded: without it the first steps are
    # priced from the model's defaults
    bare = tmp_path / "bare.jsonl"
    bare.write_text("\n".join(json.dumps(s) for s in live) + "\n")
    first = replay_costs.main([str(bare)])["own"][:4]
    assert sum(map(abs, total["own"][:4])) < 0.5 * sum(map(abs, first))


def test_a_replay_prices_each_decided_parked_step_as_the_server_did_on_a_trace_of_its_own_code():
    """A kept trace of the current code (the forty-first session's, with its start-up profiles and sampled flags):
    the package's model, replayed through it, prices every decided parked step exactly as each server had. A
    change to ``spec/cost_model.py`` or to what the worker records that moves prices on purpose fails this: keep a
    new trace then (``SGLANG_FASER_STEP_TRACE=... serve_bench.py --configs faser ...``, gzipped) and read it here."""
    trace = replay_costs.ROOT / "benchmarks" / "results" / "traces" / "steps_s41-c16-64.jsonl.gz"
    fidelity = replay_costs.main([str(trace)])["fidelity"]
    assert len(fidelity) > 100 and max(map(abs, fidelity)) < 1e-3


def test_parking_is_priced_where_steps_drafted_beside_the_parked_steps_run(tmp_path):
    """On a machine whose costs are linear, the fitted model's price for parking a batch that drafted is what the
    parked steps of the same batch sizes measure (a live trace's gap between the two is a mispriced choice)."""
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in _server()) + "\n")
    total = replay_costs.main([str(path)])
    # 90 live steps at depths i % 4: 23 parked; of the 67 that drafted, two held (not decided there)
    assert (len(total["parked_measured"]), len(total["parked_prices"])) == (23, 65)
    table = replay_costs.parked_table(total["parked_prices"][-30:], total["parked_measured"][-10:])
    assert [row[0] for row in table] == [2, 3, 4]  # every batch size that both drafted and parked
    for batch, n, price, m, ran in table:
        assert n and m and abs(price / ran - 1) < 0.1
    assert replay_costs.parked_table([(8, 20.0)], [(9, 18.0)]) == []  # no size in common: nothing compared
