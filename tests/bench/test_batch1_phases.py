"""benchmarks/batch1_phases.py's table on hand-made runs and phase summaries."""

from __future__ import annotations

import pytest

from benchmarks import batch1_phases


def test_each_configuration_runs_as_copies_side_by_side():
    assert batch1_phases.server_names(["no-spec", "faser"], 2) == ["no-spec", "no-spec#2", "faser", "faser#2"]
    assert batch1_phases.server_names(["faser"], 1) == ["faser"]


def test_servers_are_compared_with_the_first_repeat_by_repeat_beside_their_phase_medians():
    tok_per_s = {"no-spec": [80.0, 60.0, 90.0], "no-spec#2": [84.0, 57.0, 90.0], "faser": [76.0, 57.0, 81.0]}
    phases = {"no-spec": {"1": {"steps": 700, "median_us": {"forward": 11600.0, "host": 760.0, "schedule": 197.0,
                                                             "results": 139.0}}},
              "faser": {"1": {"steps": 650, "median_us": {"forward": 11470.0, "host": 1070.0}}, "4": {}}}
    rows = batch1_phases.summarise(tok_per_s, phases)
    assert rows["no-spec"]["vs_first"] == 1.0
    assert rows["no-spec#2"]["repeats_vs_first"] == pytest.approx([1.05, 0.95, 1.0])
    assert rows["faser"]["vs_first"] == pytest.approx(0.95)  # the median of 0.95, 0.95, 0.9
    assert rows["faser"]["median_us"]["host"] == 1070.0 and rows["no-spec#2"]["steps"] == 0  # no phase file
    text = batch1_phases.report(rows, {"kind": "doomed"})
    assert "| faser | 76.0 | 0.950x | 650 | 11470 | 1070 | - | - |" in text
    assert "| no-spec#2 | 84.0 | 1.000x | 0 | - | - | - | - |" in text
