"""The draft backlog's bookkeeping: rows per request in position order, capped, dropped when a request leaves or
drafts, taken for the requests that draft again."""

from __future__ import annotations

import torch

from sglang_faser.engine.draft_backlog import DraftBacklog


def _step(backlog, rids, base, skipped=None):
    skipped = list(range(len(rids))) if skipped is None else skipped
    tokens = torch.tensor([base + i for i in skipped])
    backlog.record(rids, skipped, tokens, tokens.float()[:, None].repeat(1, 2))


def test_take_returns_each_members_rows_in_position_order_and_empties_the_backlog():
    backlog = DraftBacklog()
    _step(backlog, ["a", "b"], 100)
    _step(backlog, ["b", "a", "c"], 200)  # c joined (after its prefill), the batch order changed
    _step(backlog, ["a", "b", "c"], 300)
    got = backlog.take(["c", "x", "a", "b"])
    assert got.members == [0, 2, 3] and got.counts == [2, 3, 3]
    assert got.tokens.tolist() == [202, 302, 100, 201, 300, 101, 200, 301]
    assert got.features[:, 0].tolist() == [float(t) for t in got.tokens.tolist()]
    assert backlog.take(["a"]) is None and len(backlog) == 0


def test_a_request_missing_from_a_step_loses_its_backlog():
    backlog = DraftBacklog()
    _step(backlog, ["a", "b"], 100)
    _step(backlog, ["b"], 200)  # a finished or was retracted
    got = backlog.take(["a", "b"])
    assert got.members == [1] and got.tokens.tolist() == [101, 200]


def test_only_the_last_limit_rows_are_kept():
    backlog = DraftBacklog(limit=3)
    for step in range(5):
        _step(backlog, ["a"], 100 * step)
    got = backlog.take(["a"])
    assert got.counts == [3] and got.tokens.tolist() == [200, 300, 400]


def test_standalone_rows_carry_no_features():
    backlog = DraftBacklog()
    backlog.record(["a"], [0], torch.tensor([5]), None)
    assert backlog.take(["a"]).features is None


def test_requests_that_draft_catch_up_alone_and_the_others_keep_their_rows():
    backlog = DraftBacklog()
    _step(backlog, ["a", "b", "c"], 100)  # nobody drafted
    _step(backlog, ["a", "b", "c"], 200, skipped=[0, 2])  # b drafted (it was caught up before: take below)
    got = backlog.take(["a", "b", "c"], members=[1])
    assert got is None  # b's rows went with the catch-up that preceded its drafting step
    backlog = DraftBacklog()
    _step(backlog, ["a", "b", "c"], 100)
    got = backlog.take(["a", "b", "c"], members=[1])  # b drafts next step: it catches up alone
    assert got.members == [1] and got.tokens.tolist() == [101]
    _step(backlog, ["a", "b", "c"], 200, skipped=[0, 2])
    _step(backlog, ["c", "a", "b"], 300, skipped=[0, 1])
    got = backlog.take(["a", "b", "c"], members=[0, 2])
    assert got.members == [0, 2] and got.counts == [3, 3]
    assert got.tokens.tolist() == [100, 200, 301, 102, 202, 300]
    assert len(backlog) == 0


def test_a_request_that_drafts_without_catching_up_loses_its_rows():
    backlog = DraftBacklog()
    _step(backlog, ["a", "b"], 100)
    _step(backlog, ["a", "b"], 200, skipped=[1])  # a drafted
    got = backlog.take(["a", "b"])
    assert got.members == [1] and got.tokens.tolist() == [101, 201]


def test_pending_counts_each_requests_rows_in_batch_order():
    backlog = DraftBacklog()
    _step(backlog, ["a", "b", "c"], 100)
    _step(backlog, ["a", "b", "c"], 200, skipped=[0, 2])
    assert backlog.pending(["c", "b", "a", "x"]).tolist() == [2, 0, 2, 0]


def _seed(backlog, rids, counts, tokens):
    tokens = torch.tensor(tokens)
    backlog.seed(rids, counts, tokens, tokens.float()[:, None].repeat(1, 2))


def test_seeded_prompt_rows_come_first_and_survive_other_requests_prefills():
    """A prefill that skipped the draft seeds its requests' last prompt rows; parked steps add rows after them, the
    cap keeps the newest, and other requests' prefills in between (each a step of the backlog's own) evict none of
    the rows still held."""
    backlog = DraftBacklog(limit=4)
    _seed(backlog, ["a", "b"], [3, 1], [10, 11, 12, 20])
    for step in range(1, 7):
        _step(backlog, ["a", "b", *(f"n{j}" for j in range(step))], 100 * step, skipped=[0, 1])
        _seed(backlog, [f"n{step}"], [2], [900, 901])  # the next one's prefill
    got = backlog.take(["a", "b"])
    assert got.counts == [4, 4] and got.tokens.tolist() == [300, 400, 500, 600, 301, 401, 501, 601]
    backlog = DraftBacklog(limit=4)
    _seed(backlog, ["a"], [3], [10, 11, 12])
    for step in range(1, 3):
        _seed(backlog, [f"n{step}"], [2], [900, 901])
        _step(backlog, ["a", f"n{step}"], 100 * step, skipped=[0])
    got = backlog.take(["a"])
    assert got.tokens.tolist() == [11, 12, 100, 200] and got.features[:, 0].tolist() == [11.0, 12.0, 100.0, 200.0]


def test_a_seeded_request_missing_from_a_step_that_repeats_the_last_batch_holds_nothing():
    """A parked batch's step that skips the same requests as the last only appends its rows; a request seeded
    between two such steps but missing from the second loses its seed as any request missing from a step does."""
    backlog = DraftBacklog()
    _step(backlog, ["a", "b"], 100)
    _seed(backlog, ["n"], [2], [900, 901])
    _step(backlog, ["a", "b"], 200)  # n's decode is not in this step
    assert backlog.pending(["n", "a"]).tolist() == [0, 2]
    got = backlog.take(["a", "b", "n"])
    assert got.members == [0, 1] and got.tokens.tolist() == [100, 200, 101, 201]


def test_a_long_parked_run_keeps_the_newest_rows_of_every_request_alike():
    backlog = DraftBacklog(limit=4)
    for step in range(10):
        _step(backlog, ["a", "b"], 100 * step)
    _step(backlog, ["b", "a", "c"], 1000)
    got = backlog.take(["c", "b", "a"])
    assert got.counts == [1, 4, 4]
    assert got.tokens.tolist() == [1002, 701, 801, 901, 1000, 700, 800, 900, 1001]
