"""The frontier planner: chunk bounds, who takes part in which pass, pass grouping, pruning and the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.frontier import (
    first_rejection,
    frontier_bounds,
    group_passes,
    pipeline_schedule,
    plan_frontier,
    rows_needed,
)


@pytest.mark.parametrize(
    "depth, size, expected",
    [
        (4, 0, [(0, 5)]),  # 0 = one frontier over the whole window
        (4, 4, [(0, 5)]),
        (4, 9, [(0, 5)]),
        (4, 1, [(0, 2), (2, 3), (3, 4), (4, 5)]),
        (5, 2, [(0, 3), (3, 5), (5, 6)]),
        (0, 2, [(0, 1)]),
    ],
)
def test_frontier_bounds_cover_every_row_once(depth, size, expected):
    bounds = frontier_bounds(depth, size)
    assert bounds == expected
    assert bounds[0][0] == 0 and bounds[-1][1] == depth + 1
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def test_rows_needed_is_ragged():
    lengths = np.array([0, 1, 4, 2])
    assert rows_needed(lengths, 0, 3).tolist() == [1, 2, 3, 3]
    assert rows_needed(lengths, 3, 5).tolist() == [0, 0, 2, 0]


def test_without_a_cost_model_each_width_is_its_own_pass():
    groups = group_passes(np.arange(5), np.array([1, 3, 1, 0, 2]))
    assert [(g.tolist(), w) for g, w in groups] == [([0, 2], 1), ([4], 2), ([1], 3)]  # width 0 takes no pass


def test_cost_model_merges_passes_when_the_overhead_outweighs_padding():
    members, widths = np.arange(4), np.array([1, 2, 2, 3])
    expensive_pass = group_passes(members, widths, lambda requests, rows: 100.0 + rows)
    assert [(g.tolist(), w) for g, w in expensive_pass] == [([0, 1, 2, 3], 3)]
    expensive_rows = group_passes(members, widths, lambda requests, rows: 0.1 + 10.0 * rows)
    assert [(g.tolist(), w) for g, w in expensive_rows] == [([0], 1), ([1, 2], 2), ([3], 3)]


def test_plan_frontier_takes_only_live_requests_with_rows_left():
    lengths = np.array([3, 0, 5, 5])
    passes = plan_frontier(1, (3, 5), live=np.array([0, 2]), lengths=lengths)
    assert [(p.frontier, p.members.tolist(), p.offset, p.width) for p in passes] == [(1, [0], 3, 1), (1, [2], 3, 2)]
    assert sum(p.rows for p in passes) == 3


def test_first_rejection_finds_the_first_mismatch_on_the_chain():
    predictions = np.array([[5, 6, 7], [5, 9, 7], [1, 6, 7]])
    next_tokens = np.array([[5, 6, 8], [5, 6, 7], [5, 6, 7]])
    valid = np.array([[True, True, False], [True, True, True], [True, True, True]])
    # row 0: mismatch at r=2 is past k_i (not valid); row 1: r=1; row 2: r=0
    assert first_rejection(predictions, next_tokens, valid).tolist() == [-1, 1, 0]


def test_pipeline_overlaps_verify_f_with_draft_f_plus_one():
    events = pipeline_schedule(3, overlap=True)
    slots = {}
    for e in events:
        slots.setdefault(e.slot, []).append((e.phase, e.frontier))
    assert slots == {0: [("draft", 0)], 1: [("verify", 0), ("draft", 1)], 2: [("verify", 1), ("draft", 2)],
                     3: [("verify", 2)]}
    serial = pipeline_schedule(3, overlap=False)
    assert [e.slot for e in serial] == list(range(len(serial)))
    assert [(e.phase, e.frontier) for e in serial] == [(e.phase, e.frontier) for e in events]


def test_first_rejection_with_no_draft_rows():
    empty = np.zeros((3, 0), dtype=np.int64)
    assert first_rejection(empty, empty, empty.astype(bool)).tolist() == [-1, -1, -1]
