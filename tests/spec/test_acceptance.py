"""Per-request, per-position acceptance estimates."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.acceptance import FULL_VOTE_STEPS, AcceptanceTracker, expected_tokens


def test_new_requests_start_from_the_server_wide_estimate():
    tracker = AcceptanceTracker(max_len=4, prior=0.6)
    for _ in range(50):
        tracker.observe(["a"], proposed=np.array([4]), accepted=np.array([4]))
    tracker.forget("a")  # a finished request's own rate joins the server's
    fresh = tracker.estimates(["new"])[1][0]
    assert np.all(fresh > 0.6)


def test_the_server_wide_estimate_counts_requests_not_tokens():
    """Requests that drafted much do not outvote the others, and requests that were never tried pull the
    server's estimate back towards the initial prior: a run of doomed requests does not stop later ones from
    being tried."""
    tracker = AcceptanceTracker(max_len=4, prior=0.6, explore=0.0)
    for i in range(20):  # 30 steps each: sure requests drafting 4 every step, doomed ones failing at 1 twice
        for step in range(30):
            drafts = 4 if i % 2 == 0 else int(step < 2)
            tracker.observe([f"r{i}"], proposed=np.array([drafts]), accepted=np.array([drafts if i % 2 == 0 else 0]))
        tracker.forget(f"r{i}")
    first = tracker.global_accept_by_position[0]
    assert 0.35 < first < 0.65  # half of the requests, whatever their token counts
    for i in range(20):  # doomed requests only
        tracker.observe([f"d{i}"], proposed=np.array([1]), accepted=np.array([0]))
        _park(tracker, f"d{i}", 20)
        tracker.forget(f"d{i}")
    low = tracker.global_accept_by_position[0]
    assert low < 0.15
    for i in range(30):  # never tried
        tracker.estimates([f"n{i}"])
        _park(tracker, f"n{i}", 20)
        tracker.forget(f"n{i}")
    assert tracker.global_accept_by_position[0] > low + 0.3


def test_requests_too_short_to_be_tried_barely_move_the_server_wide_estimate():
    """A finished request votes by the decode steps it ran (a full vote from FULL_VOTE_STEPS on): a stream of
    requests finished after a step or two, never tried, does not erase what longer ones showed."""
    tracker = AcceptanceTracker(max_len=4, prior=0.6, explore=0.0)
    for i in range(20):
        for _ in range(FULL_VOTE_STEPS):
            tracker.observe([f"s{i}"], proposed=np.array([4]), accepted=np.array([4]))
        tracker.forget(f"s{i}")
    sure, (centre, _) = tracker.global_accept_by_position.copy(), tracker.untried_by_position()
    assert sure[0] > 0.85 and centre[0] > 0.85
    for i in range(40):
        _park(tracker, f"short{i}", 1)
        tracker.forget(f"short{i}")
    assert tracker.global_accept_by_position[0] > 0.8 and tracker.untried_by_position()[0][0] > 0.8
    for i in range(40):  # as many requests parked all their long lives do pull it back towards the prior
        _park(tracker, f"long{i}", FULL_VOTE_STEPS)
        tracker.forget(f"long{i}")
    assert tracker.global_accept_by_position[0] < 0.65


def _park(tracker: AcceptanceTracker, rid: str, steps: int) -> None:
    for _ in range(steps):
        tracker.observe([rid], proposed=np.array([0]), accepted=np.array([0]))


def test_a_request_parked_after_failed_probes_still_votes_with_its_rate():
    """Decay fades a parked request's counts but not its vote: a run of doomed requests, each parked for the
    rest of its life after one failed probe, brings the server's first-position estimate down (before, their
    faded counts voted mostly for the initial prior and every new request was probed at full depth)."""
    tracker = AcceptanceTracker(max_len=4, prior=0.6, explore=0.0)
    for i in range(20):
        tracker.observe([f"d{i}"], proposed=np.array([1]), accepted=np.array([0]))
        for _ in range(60):  # parked: nothing observed, evidence fades
            tracker.observe([f"d{i}"], proposed=np.array([0]), accepted=np.array([0]))
        tracker.forget(f"d{i}")
    g = tracker.global_accept_by_position
    assert g[0] < 0.15
    assert g[1:] == pytest.approx(0.6)  # positions none of them tried keep the prior


@pytest.mark.parametrize("width", [1, 2])  # batch 1 takes the scalar path, larger batches the array one
def test_a_request_votes_with_its_whole_record_not_its_last_probe(width):
    """A request whose first drafts passed four times in six, the last a failed probe after a parked spell,
    votes near 4/6 there: its faded counts' ratio, which that one probe outweighs, voted 0.07 and, five such
    votes at start-up, parked every request of a burst."""
    tracker = AcceptanceTracker(max_len=4, prior=0.6, explore=0.0)
    outcomes = [(4, 0), (4, 4), (3, 3), (3, 3), (3, 1)] + [(0, 0)] * 20 + [(1, 0)]
    for i in range(10):
        rids = [f"r{i}-{j}" for j in range(width)]
        for proposed, accepted in outcomes:
            tracker.observe(rids, proposed=np.full(width, proposed), accepted=np.full(width, accepted))
        for rid in rids:
            tracker.forget(rid)
    assert tracker.global_accept_by_position[0] == pytest.approx(4 / 6, abs=0.03)
    assert tracker.untried_by_position()[0][0] == pytest.approx(4 / 6, abs=0.03)


def test_accepted_run_and_first_rejection_are_observed_later_positions_are_not():
    tracker = AcceptanceTracker(max_len=4, prior=0.5, explore=0.0)
    tracker.observe(["a"], proposed=np.array([4]), accepted=np.array([1]))
    mean, sd = tracker.posterior(["a"])
    g = tracker.global_accept_by_position
    assert mean[0, 0] > g[0] and mean[0, 1] < g[1]
    assert mean[0, 2] == g[2] and mean[0, 3] == g[3]  # never observed: its own rate (1 of 2 = the server's)
    assert sd[0, 0] < sd[0, 2]  # and less certain than an observed position


def test_positions_a_request_never_tried_lean_towards_its_own_rate():
    tracker = AcceptanceTracker(max_len=4, prior=0.6, explore=0.0)
    for _ in range(3):
        tracker.observe(["sure", "doomed"], proposed=np.array([1, 1]), accepted=np.array([1, 0]))
    (sure, doomed), _ = tracker.posterior(["sure", "doomed"])
    assert sure[2] > 0.85 and doomed[2] < 0.25  # position 3 never tried by either; the server says 0.6


def test_a_request_in_back_off_is_probed_one_draft_deep():
    tracker = AcceptanceTracker(max_len=5, prior=0.6)
    assert tracker.probe_limits(["new"]).tolist() == [5]
    tracker.observe(["new", "ok"], proposed=np.array([5, 5]), accepted=np.array([0, 5]))  # its first draft failed
    tracker.observe(["new", "ok"], proposed=np.array([0, 0]), accepted=np.array([0, 0]))  # parked: evidence fades
    assert tracker.probe_limits(["new", "ok"]).tolist() == [1, 5]


def test_always_accepted_and_always_rejected_requests_diverge():
    tracker = AcceptanceTracker(max_len=3)
    for _ in range(30):
        tracker.observe(["sure", "random"], proposed=np.array([3, 3]), accepted=np.array([3, 0]))
    (sure, random), _ = tracker.posterior(["sure", "random"])
    assert sure.min() > 0.9 and random[0] < 0.1


def test_a_parked_request_regains_optimism_slower_after_each_failed_probe():
    tracker = AcceptanceTracker(max_len=2, prior=0.5, request_rate=0.3, explore=1.0)
    tracker.observe(["once", "often", "y"], proposed=np.array([2, 2, 2]), accepted=np.array([0, 0, 2]))
    for _ in range(29):
        tracker.observe(["often", "y"], proposed=np.array([2, 2]), accepted=np.array([0, 2]))
    low = tracker.estimates(["once", "often"])[1][:, 0]

    def park(steps):  # length 0: nothing observed, old failures fade
        for _ in range(steps):
            tracker.observe(["once", "often", "y"], proposed=np.array([0, 0, 2]), accepted=np.array([0, 0, 2]))
        return tracker.estimates(["once", "often"])[1][:, 0]

    once, often = park(5)
    assert once > low[0] + 0.2  # one failure: probed again soon
    assert often < low[1] + 0.05  # failed probe after failed probe: waits far longer
    assert park(1000)[1] > low[1] + 0.3  # but is not written off for good
    tracker.observe(["often"], proposed=np.array([1]), accepted=np.array([1]))  # a probe that passes ends the
    tracker.observe(["often"], proposed=np.array([1]), accepted=np.array([0]))  # back-off: after one failure,
    before = tracker.estimates(["often"])[1][0, 0]
    assert park(5)[1] > before + 0.1  # it is probed again soon


def test_a_step_without_drafts_fades_evidence_as_a_parked_row_of_a_drafting_step_does():
    """A batch where nobody drafts takes a short path; its parked requests must end where they would had a
    neighbour drafted in the same step."""
    trackers = [AcceptanceTracker(max_len=3, prior=0.5, request_rate=0.3) for _ in range(2)]
    for tracker in trackers:
        tracker.observe(["p", "q"], proposed=np.array([3, 2]), accepted=np.array([0, 2]))  # p enters back-off
        tracker.observe(["p", "q"], proposed=np.array([1, 3]), accepted=np.array([0, 1]))
    alone, beside = trackers
    for _ in range(4):
        alone.observe(["p", "q"], proposed=np.array([0, 0]), accepted=np.array([0, 0]))
        beside.observe(["p", "q", "z"], proposed=np.array([0, 0, 1]), accepted=np.array([0, 0, 1]))
    np.testing.assert_allclose(alone.estimates(["p", "q"])[1], beside.estimates(["p", "q"])[1])
    np.testing.assert_array_equal(alone.probe_limits(["p", "q"]), beside.probe_limits(["p", "q"]))
    for _ in range(7):  # steps without drafts are applied when next read: here by a finished request's vote
        alone.observe(["p", "q"], proposed=np.array([0, 0]), accepted=np.array([0, 0]))
        beside.observe(["p", "q", "z"], proposed=np.array([0, 0, 1]), accepted=np.array([0, 0, 1]))
    alone.forget("q")
    beside.forget("q")
    np.testing.assert_allclose(alone.global_accept_by_position, beside.global_accept_by_position)
    np.testing.assert_allclose(alone.estimates(["p"])[1], beside.estimates(["p"])[1])


def test_a_failing_request_drops_within_a_few_steps():
    tracker = AcceptanceTracker(max_len=3, prior=0.9)
    for _ in range(20):
        tracker.observe(["x"], proposed=np.array([3]), accepted=np.array([3]))
    assert tracker.posterior(["x"])[0][0, 0] > 0.9
    for _ in range(3):
        tracker.observe(["x"], proposed=np.array([3]), accepted=np.array([0]))
    assert tracker.posterior(["x"])[0][0, 0] < 0.6


def test_seldom_tried_positions_look_better_than_their_mean():
    tracker = AcceptanceTracker(max_len=4, prior=0.6, explore=1.0)
    for i in range(20):  # held at one draft, which passes every other step
        tracker.observe(["x"], proposed=np.array([1]), accepted=np.array([i % 2]))
    optimistic, (mean, _) = tracker.estimates(["x"])[1][0], tracker.posterior(["x"])
    assert optimistic[1] > mean[0, 1] + 0.1  # position 2 never tried: a bonus that invites a probe
    assert optimistic[0] - mean[0, 0] < optimistic[1] - mean[0, 1]


def test_rows_are_reused_and_capacity_grows():
    tracker = AcceptanceTracker(max_len=2, initial_capacity=2)
    tracker.estimates([f"r{i}" for i in range(5)])
    assert len(tracker) == 5
    for i in range(5):
        tracker.forget(f"r{i}")
    assert len(tracker) == 0
    tracker.estimates(["again"])
    assert len(tracker) == 1


def test_expected_tokens_matches_the_closed_form():
    a = 0.8
    probs = np.full((1, 6), a)
    for k in range(7):
        assert expected_tokens(probs, np.array([k]))[0] == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def test_a_new_request_starts_at_the_back_off_finished_requests_ended_with():
    """Where requests' first drafts keep failing, a new one starts in back-off (probed one draft deep, and less
    often); once requests pass again, new ones start at none (probed at full depth)."""
    tracker = AcceptanceTracker(max_len=5)

    def run(rid: str, accepted: int, probes: int) -> None:
        for _ in range(probes):
            tracker.observe([rid], proposed=np.array([5]), accepted=np.array([accepted]))
        for _ in range(16):  # parked steps: a full vote
            tracker.observe([rid], proposed=np.array([0]), accepted=np.array([0]))
        tracker.forget(rid)

    assert tracker.probe_limits(["first"]).tolist() == [5]
    for i in range(6):
        run(f"doomed-{i}", 0, probes=4)  # four failed probes in a row: back-off 4
    assert tracker.probe_limits(["after-doomed"]).tolist() == [1]
    for i in range(6):
        run(f"sure-{i}", 5, probes=4)
    assert tracker.probe_limits(["after-sure"]).tolist() == [5]


def test_a_short_first_probe_keeps_a_new_requests_hopes_along_its_chain_while_it_passes():
    """A new request probed one draft deep instead of the depth its hopes asked for (``probed_short``): once that
    draft passes it hopes along the rest of its chain, like a request never tried; a failure, or a deeper
    draft, ends that (then only the first position it has seldom tried gets the bonus)."""
    tracker = AcceptanceTracker(max_len=4, prior=0.3)
    rids = ["short-pass", "short-fail", "plain-pass"]
    tracker.probed_short(rids, np.array([True, True, False]))
    tracker.observe(rids, proposed=np.array([1, 1, 1]), accepted=np.array([1, 0, 1]))
    means, hopes = tracker.estimates(rids)
    assert (hopes[0, 1:] > means[0, 1:]).all()
    for row in (1, 2):  # bonus at the first position seldom tried only
        assert hopes[row, 1] > means[row, 1] and (hopes[row, 2:] == means[row, 2:]).all()
    tracker.observe(["short-pass"], proposed=np.array([3]), accepted=np.array([3]))
    means, hopes = tracker.estimates(["short-pass"])
    assert hopes[0, 3] > means[0, 3] and hopes[0, 1] == means[0, 1]
    tracker.observe(["short-pass"], proposed=np.array([4]), accepted=np.array([4]))
    means, hopes = tracker.estimates(["short-pass"])
    assert (hopes == means).all()  # every position tried lately: no bonus left


def test_a_forgotten_request_seen_again_is_tracked_anew():
    """The rows of the last batch are reused while the batch stays the same; a request forgotten in between (its
    row freed) and seen again under its id gets a row of its own again, not the freed one."""
    tracker = AcceptanceTracker(max_len=3)
    tracker.observe_parked(["a"])
    tracker.forget("a")
    tracker.observe_parked(["a"])
    assert len(tracker) == 1
    tracker.observe(["b"], np.array([3]), np.array([0]))  # b takes the next free row
    rows = tracker.rows_for(["a", "b"])
    assert rows[0] != rows[1]


def test_one_request_alone_is_observed_as_it_would_be_in_a_batch():
    """Batch 1 takes a scalar path (``_observe_one``); a request's evidence must come out the same as when the array
    path observes it beside another request: counts, back-off, idle positions and the short-probe flag."""
    alone, batched = AcceptanceTracker(max_len=5), AcceptanceTracker(max_len=5)
    rng = np.random.default_rng(1)
    alone.probed_short(["a"], np.array([True]))
    batched.probed_short(["a", "b"], np.array([True, False]))
    for _ in range(200):
        k = int(rng.integers(0, 6))
        passed = int(rng.integers(0, k + 1))
        alone.observe(["a"], np.array([k]), np.array([passed]))
        batched.observe(["a", "b"], np.array([k, 1]), np.array([passed, 0]))
        ra, rb = alone.rows_for(["a"])[0], batched.rows_for(["a", "b"])[0]
        assert np.allclose(alone._counts[:, ra], batched._counts[:, rb])
        assert alone._backoff[ra] == batched._backoff[rb] and alone._short[ra] == batched._short[rb]
        assert np.array_equal(alone._idle[ra], batched._idle[rb])
    assert alone.estimates(["a"])[1].tolist() == batched.estimates(["a", "b"])[1][:1].tolist()


def test_a_parked_step_that_grows_the_table_counts_its_steps_in_the_grown_one():
    """A parked step's feedback may be the first to see a request when the table is full: the table grows, and
    the step is counted in the grown table (indexing the old one raised an IndexError)."""
    tracker = AcceptanceTracker(max_len=2, initial_capacity=1)
    tracker.observe_parked(["a", "b"])
    tracker.observe(["a", "b"], np.array([1, 1]), np.array([1, 1]))  # settles the parked step: both seen once
    assert len(tracker) == 2 and tracker._steps[tracker.rows_for(["a", "b"])].tolist() == [2.0, 2.0]
