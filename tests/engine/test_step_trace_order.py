"""The step trace writes a step once both its measured times and its acceptance arrived, in either order (on a
GPU the times come a step or two after SGLang reports the acceptance)."""

from __future__ import annotations

import json

from sglang_faser.engine.step_trace import StepTrace
from sglang_faser.spec.config import FaserConfig
from sglang_faser.spec.controller import LengthController


def test_lines_wait_for_times_and_acceptance_and_keep_step_order(tmp_path):
    path = tmp_path / "steps.jsonl"
    trace, controller = StepTrace(str(path)), LengthController(FaserConfig(mode="fixed", fixed_len=2), window=3)
    first = trace.decided(controller.decide(["a"]))
    second = trace.decided(controller.decide(["a", "b"]))
    trace.observe([2])  # the first step's acceptance, before any time was read
    trace.observe([1, 0])
    assert path.read_text() == ""
    trace.measured(second, controller, step_ms=2.0)  # the second's times first: still waits for the first's
    assert path.read_text() == ""
    trace.measured(first, controller, step_ms=1.0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(s["batch"], s["step_ms"], s["accepted"]) for s in lines] == [(1, 1.0, [2]), (2, 2.0, [1, 0])]
    means = lines[1]["means"]  # what the policy believed of each request, by position (the window's 3)
    assert len(means) == 2 and all(len(row) == 3 and all(0.0 <= p <= 1.0 for p in row) for row in means)
    assert lines[1]["held"] is False
    third = trace.decided(controller.decide(["a"]))
    trace.measured(third, controller, step_ms=3.0)  # on CPU: times at once, acceptance after
    assert len(path.read_text().splitlines()) == 2
    trace.observe([1])
    assert json.loads(path.read_text().splitlines()[-1])["accepted"] == [1]
