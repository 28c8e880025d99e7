"""Per-request, per-position acceptance estimates."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_faser.spec.acceptance import AcceptanceTracker, expected_tokens


def test_new_requests_start_from_the_server_wide_estimate():
    tracker = AcceptanceTracker(max_len=4, prior=0.6)
    for _ in range(50):
        tracker.observe(["a"], proposed=np.array([4]), accepted=np.array([4]))
    fresh = tracker.accept_probs(["new"])[0]
    assert np.all(fresh > 0.6)


def test_accepted_run_and_first_rejection_are_observed_later_positions_are_not():
    tracker = AcceptanceTracker(max_len=4, prior=0.5, relax_rate=0.0, global_rate=0.0)
    tracker.observe(["a"], proposed=np.array([4]), accepted=np.array([1]))
    a = tracker.accept_probs(["a"])[0]
    assert a[0] > 0.5 and a[1] < 0.5 and a[2] == 0.5 and a[3] == 0.5


def test_always_accepted_and_always_rejected_requests_diverge():
    tracker = AcceptanceTracker(max_len=3)
    for _ in range(30):
        tracker.observe(["sure", "random"], proposed=np.array([3, 3]), accepted=np.array([3, 0]))
    sure, random = tracker.accept_probs(["sure", "random"])
    assert sure.min() > 0.95 and random[0] < 0.05


def test_unobserved_positions_relax_towards_the_global_estimate():
    tracker = AcceptanceTracker(max_len=2, prior=0.5, relax_rate=0.1, global_rate=0.0)
    for _ in range(30):
        tracker.observe(["x"], proposed=np.array([2]), accepted=np.array([0]))
    low = tracker.accept_probs(["x"])[0, 0]
    for _ in range(30):  # parked at length 0: nothing observed
        tracker.observe(["x"], proposed=np.array([0]), accepted=np.array([0]))
    assert tracker.accept_probs(["x"])[0, 0] > low + 0.2


def test_rows_are_reused_and_capacity_grows():
    tracker = AcceptanceTracker(max_len=2, initial_capacity=2)
    tracker.accept_probs([f"r{i}" for i in range(5)])
    assert len(tracker) == 5
    for i in range(5):
        tracker.forget(f"r{i}")
    assert len(tracker) == 0
    tracker.accept_probs(["again"])
    assert len(tracker) == 1


def test_expected_tokens_matches_the_closed_form():
    a = 0.8
    probs = np.full((1, 6), a)
    for k in range(7):
        assert expected_tokens(probs, np.array([k]))[0] == pytest.approx((1 - a ** (k + 1)) / (1 - a))
