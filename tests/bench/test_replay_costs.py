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
