"""FASER's lighter ``Scheduler._forward_isolation`` (``touchpoints.lighten_forward_isolation``) does what SGLang's
does: on a real ``ScheduleBatch``, every field the forward changes is back afterwards, the forward sees a
forward-only sampling-info copy, the overlap path pins the batch, and a batch without speculation runs SGLang's
own context manager."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sglang_faser.engine import touchpoints


class _Sampling:
    def __init__(self, name: str = "scheduler's"):
        self.name = name

    def copy_for_forward(self):
        return _Sampling("forward-only copy")


class _Scheduler:
    def __init__(self):
        self.pinned = []

    def record_batch_in_overlap(self, batch):
        self.pinned.append((batch, batch.sampling_info.name))


@pytest.fixture()
def scheduler_cls(monkeypatch):
    from sglang.srt.managers.scheduler import Scheduler

    stock = Scheduler._forward_isolation
    monkeypatch.setattr(Scheduler, "_forward_isolation", stock)  # restored after the test
    touchpoints.lighten_forward_isolation()
    touchpoints.lighten_forward_isolation()  # idempotent: one layer
    assert Scheduler._forward_isolation is not stock and Scheduler._forward_isolation.faser_light
    return Scheduler, stock


def _batch(algorithm: str):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    batch = ScheduleBatch(reqs=[], spec_algorithm=SpeculativeAlgorithm.from_string(algorithm))
    batch.seq_lens, batch.input_ids, batch.sampling_info = torch.tensor([5, 7]), None, _Sampling()
    return batch


def _run(isolation, batch, overlap: bool):
    scheduler, seen = _Scheduler(), {}
    before = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    with isolation(scheduler, batch, overlap=overlap):
        seen["sampling"] = batch.sampling_info.name
        batch.seq_lens, batch.input_ids, batch.spec_info = torch.tensor([6, 8]), torch.tensor([1, 2]), object()
        batch.reqs = ["changed"]
    after = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    return before, after, seen, scheduler.pinned


@pytest.mark.parametrize("overlap", [False, True])
def test_a_speculative_batch_gets_back_every_field_as_with_sglangs_own(scheduler_cls, overlap):
    scheduler, stock = scheduler_cls
    results = [_run(isolation, _batch("EAGLE"), overlap) for isolation in (scheduler._forward_isolation, stock)]
    (before, after, seen, pinned), (stock_before, stock_after, stock_seen, stock_pinned) = results
    assert all(after[name] is before[name] for name in before)  # the very objects, as SGLang restores them
    assert all(stock_after[name] is stock_before[name] for name in stock_before)
    assert seen == stock_seen == {"sampling": "forward-only copy"}
    assert [name for _, name in pinned] == [name for _, name in stock_pinned] == (["forward-only copy"] if overlap
                                                                                   else [])


def test_a_batch_without_speculation_runs_sglangs_own(scheduler_cls):
    scheduler, _ = scheduler_cls
    before, after, seen, _ = _run(scheduler._forward_isolation, _batch("NONE"), overlap=False)
    assert seen == {"sampling": "forward-only copy"}
    assert after["sampling_info"] is before["sampling_info"]  # SGLang restores only the sampling info there
    assert after["reqs"] == ["changed"] and torch.equal(after["seq_lens"], torch.tensor([6, 8]))
