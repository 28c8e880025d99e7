"""benchmarks/spec_lengths_cpu.py --batch-one's table on hand-made runs: FASER's ratio per repeat, then the median."""

from __future__ import annotations

import pytest

from benchmarks import spec_lengths_cpu


def _run(tok_per_s: float, histogram=()) -> dict:
    return {"tokens": 256, "latency_s": 256 / tok_per_s, "accept_length": None, "mean_len": None,
            "histogram": list(histogram)}


def test_faser_is_compared_with_its_target_repeat_by_repeat():
    # the machine slows down in the second repeat and speeds up in the third: every config moves together
    speed = (1.0, 0.7, 1.2)
    doomed = {"no-spec": [100 * s for s in speed], "no-spec-2": [102, 69, 118], "fixed-1": [70 * s for s in speed],
              "fixed-3": [55 * s for s in speed], "fixed-5": [50 * s for s in speed],
              "faser": [98 * speed[0], 96 * speed[1], 99 * speed[2]]}
    sure = {"no-spec": [80 * s for s in speed], "fixed-1": [120 * s for s in speed],
            "fixed-3": [200 * s for s in speed], "fixed-5": [230 * s for s in speed],
            "faser": [225 * s for s in speed]}
    runs = {"sure": {n: [_run(v, [0, 1, 0, 0, 0, 44]) for v in vs] for n, vs in sure.items()},
            "doomed": {n: [_run(v, [251, 3, 1]) for v in vs] for n, vs in doomed.items()}}
    table = spec_lengths_cpu.batch_one_table(runs)

    assert table["doomed"]["target"] == "no-spec" and table["sure"]["target"] == "fixed-5"
    assert table["doomed"]["repeats_vs_target"] == pytest.approx([0.98, 0.96, 0.99])
    assert table["doomed"]["faser_vs_target"] == pytest.approx(0.98)  # the median repeat's own ratio
    assert table["doomed"]["medians_vs_target"] == pytest.approx(98 / 100)  # beside it: the medians' ratio
    assert table["doomed"]["aa_repeats"] == pytest.approx([1.02, 69 / 70, 118 / 120])  # the A/A control
    assert table["doomed"]["aa"] == pytest.approx(69 / 70) and "aa" not in table["sure"]
    assert table["sure"]["faser_vs_target"] == pytest.approx(225 / 230)
    assert table["sure"]["rows"]["faser"]["steps_below_max_len"] == 1  # 1 + 0 + 0 + 0 + 0 steps below length 5
    text = spec_lengths_cpu.batch_one_report(table, {"pair": "deep"}, "deep")
    assert "FASER against no-spec: 0.980x" in text and "repeats 0.96, 0.98, 0.99" in text
    assert "A/A: no-spec-2 against no-spec (the same flags, another server) 0.986x, repeats 0.98, 0.99, 1.02" in text


def test_the_run_order_puts_faser_beside_both_of_its_targets_and_the_control_beside_no_spec():
    order = list(spec_lengths_cpu.BATCH_ONE_ORDER)
    assert set(order) == {*spec_lengths_cpu.configurations(), spec_lengths_cpu.AA_CONTROL}
    at = order.index("faser")
    assert {order[at - 1], order[at + 1]} == {"no-spec", f"fixed-{spec_lengths_cpu.WINDOW}"}
    assert abs(order.index(spec_lengths_cpu.AA_CONTROL) - order.index("no-spec")) == 1
