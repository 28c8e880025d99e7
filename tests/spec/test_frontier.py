"""The frontier planner: chunk bounds, the ragged pass of each frontier, pruning, and who is drafted when."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.frontier import drafted_at, first_rejection, frontier_bounds, plan_frontier, rows_needed


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


def test_plan_frontier_is_one_ragged_pass_over_live_requests_with_rows_left():
    lengths = np.array([3, 0, 5, 5])
    vpass = plan_frontier(1, (3, 5), live=np.array([0, 2]), lengths=lengths)
    assert (vpass.frontier, vpass.members.tolist(), vpass.offset, vpass.widths.tolist()) == (1, [0, 2], 3, [1, 2])
    assert vpass.rows == 3
    member, row = vpass.columns
    assert member.tolist() == [0, 1, 1] and row.tolist() == [3, 3, 4]  # request 0: row 3; request 2: rows 3, 4
    assert plan_frontier(2, (5, 6), live=np.array([0, 1]), lengths=lengths) is None  # nobody needs row 5


def test_whole_step_pass_takes_k_plus_one_rows_each():
    lengths = np.array([0, 2, 4])
    vpass = plan_frontier(0, (0, 5), live=np.arange(3), lengths=lengths)
    assert vpass.widths.tolist() == [1, 3, 5] and vpass.rows == int((lengths + 1).sum())


def test_first_rejection_finds_the_first_mismatch_on_the_chain():
    predictions = np.array([[5, 6, 7], [5, 9, 7], [1, 6, 7]])
    next_tokens = np.array([[5, 6, 8], [5, 6, 7], [5, 6, 7]])
    valid = np.array([[True, True, False], [True, True, True], [True, True, True]])
    # row 0: mismatch at r=2 is past k_i (not valid); row 1: r=1; row 2: r=0
    assert first_rejection(predictions, next_tokens, valid).tolist() == [-1, 1, 0]


def test_forward_s_drafts_only_requests_that_need_token_s_plus_2():
    lengths = np.array([0, 1, 2, 3])
    assert drafted_at(0, lengths).tolist() == [2, 3]  # forward 0 makes draft token 2
    assert drafted_at(1, lengths).tolist() == [3]
    assert drafted_at(2, lengths).tolist() == []


def test_serial_schedule_stops_drafting_a_request_rejected_in_the_previous_frontier():
    bounds, lengths = frontier_bounds(3, 1), np.array([3, 3, 3])
    live_after = [np.array([1])]  # frontier 0 rejected requests 0 and 2
    assert drafted_at(0, lengths, bounds, live_after, overlap=False).tolist() == [1]  # token 2: verdict 0 applies
    assert drafted_at(1, lengths, bounds, live_after, overlap=False).tolist() == [1]


def test_overlapped_schedule_applies_a_verdict_one_chunk_later():
    bounds, lengths = frontier_bounds(3, 1), np.array([3, 3, 3])
    live_after = [np.array([1])]
    assert drafted_at(0, lengths, bounds, live_after, overlap=True).tolist() == [0, 1, 2]  # beside verify 0
    assert drafted_at(1, lengths, bounds, live_after, overlap=True).tolist() == [1]  # token 3: verdict 0 known


def test_first_rejection_with_no_draft_rows():
    empty = np.zeros((3, 0), dtype=np.int64)
    assert first_rejection(empty, empty, empty.astype(bool)).tolist() == [-1, -1, -1]
