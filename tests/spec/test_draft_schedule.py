"""Who is drafted at each draft forward: the k_i cut, and the frontier pipeline's use of verification verdicts."""

from __future__ import annotations

import numpy as np

from sglang_faser.engine.draft_cut import DraftSchedule
from sglang_faser.engine.pipeline import FrontierPipeline
from sglang_faser.spec.frontier import frontier_bounds


def test_forward_s_runs_only_for_requests_that_need_token_s_plus_2():
    schedule = DraftSchedule(np.array([0, 1, 2, 3]))
    assert schedule.members(0, 4).tolist() == [2, 3]  # forward 0 makes draft token 2
    assert schedule.members(1, 4).tolist() == [3]
    assert schedule.members(2, 4).tolist() == []


class Verdicts:
    """The two things the pipeline reads from a FrontierVerifier: frontier bounds and live sets per verdict."""

    def __init__(self, depth, frontier_size, live_after):
        self.bounds = frontier_bounds(depth, frontier_size)
        self.live_after = live_after


def _pipeline(overlap, live_after):
    lengths = np.array([3, 3, 3])
    return FrontierPipeline(Verdicts(3, 1, live_after), lengths, overlap, batch=None, target_runner=None)


def test_serial_schedule_stops_drafting_a_request_rejected_in_the_previous_frontier():
    pipeline = _pipeline(overlap=False, live_after=[np.array([1])])  # frontier 0 rejected requests 0 and 2
    assert pipeline.members(0, 3).tolist() == [1]  # forward 0 makes token 2 (frontier 1): verdict 0 applies
    assert pipeline.members(1, 3).tolist() == [1]


def test_overlapped_schedule_applies_a_verdict_one_chunk_later():
    pipeline = _pipeline(overlap=True, live_after=[np.array([1])])
    assert pipeline.members(0, 3).tolist() == [0, 1, 2]  # drafted beside verify 0, before its verdict
    assert pipeline.members(1, 3).tolist() == [1]  # token 3 is in frontier 2: verdict 0 is known by then
