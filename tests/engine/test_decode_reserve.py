"""A FASER server without the overlap scheduler reserves one step's KV slots ahead of each running request
(``touchpoints.reserve_one_step_ahead``), where SGLang's speculative v2 reserves two; with the overlap scheduler
SGLang's double buffer stays. Every engine test on CPU runs with it (greedy parity there is its correctness)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang_faser.engine import touchpoints

MODULES = ("sglang.srt.mem_cache.allocation_sizing", "sglang.srt.managers.schedule_batch",
           "sglang.srt.speculative.eagle_utils")


@pytest.fixture()
def modules(monkeypatch):
    import importlib

    loaded = [importlib.import_module(name) for name in MODULES]
    for module in loaded:  # restored after the test
        monkeypatch.setattr(module, "get_alloc_reserve_per_decode", module.get_alloc_reserve_per_decode)
    return loaded


def test_without_the_overlap_scheduler_the_allocation_and_the_admission_check_reserve_one_step(modules):
    sizing = modules[0]
    assert touchpoints.reserve_one_step_ahead(SimpleNamespace(disable_overlap_schedule=True))
    for module in modules:  # eagle_prepare_for_decode's allocation, the scheduler's decode-memory check
        assert module.get_alloc_reserve_per_decode is sizing.get_alloc_len_per_decode, module.__name__


def test_with_the_overlap_scheduler_sglangs_double_buffer_stays(modules):
    stock = [module.get_alloc_reserve_per_decode for module in modules]
    assert not touchpoints.reserve_one_step_ahead(SimpleNamespace(disable_overlap_schedule=False))
    assert [module.get_alloc_reserve_per_decode for module in modules] == stock
