"""Small forward passes on one intra-op thread (kernels/cpu/threads.py), and the hook that applies it."""

from __future__ import annotations

import types

import pytest
import torch

from sglang_faser.kernels.cpu.threads import ENV_VAR, SMALL_FORWARD_TOKENS, ForwardThreads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_small_passes_run_on_one_thread_and_large_ones_on_the_process_count(two_threads):
    threads = ForwardThreads(small_tokens=32)
    threads.before(1)
    assert torch.get_num_threads() == 1
    threads.before(32)
    assert torch.get_num_threads() == 1
    threads.before(33)
    assert torch.get_num_threads() == 2  # the count the process had at the first pass
    threads.before(8)
    assert torch.get_num_threads() == 1


def test_zero_keeps_every_pass_at_the_process_count(two_threads):
    threads = ForwardThreads(small_tokens=0)
    threads.before(1)
    assert torch.get_num_threads() == 2


def test_the_bound_comes_from_the_environment_and_bad_values_say_so(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert ForwardThreads.from_env().small_tokens == SMALL_FORWARD_TOKENS
    monkeypatch.setenv(ENV_VAR, "8")
    assert ForwardThreads.from_env().small_tokens == 8
    for bad in ("eight", "-1"):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(ValueError, match=ENV_VAR):
            ForwardThreads.from_env()


def test_the_hook_sizes_the_threads_of_sglang_model_runner_forward(two_threads, monkeypatch):
    """The registered BEFORE hook reads the pass's token count from its ForwardBatch, as SGLang calls it."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_faser.engine import touchpoints

    registered = []
    monkeypatch.setattr(HookRegistry, "register", lambda target, hook, kind: registered.append((target, hook)))
    threads = ForwardThreads(small_tokens=4)
    touchpoints.size_forward_threads(threads)
    (target, hook), = registered
    from sglang.srt.model_executor.model_runner import ModelRunner

    assert target == f"{ModelRunner.__module__}.ModelRunner.forward" and callable(ModelRunner.forward)
    hook(object(), types.SimpleNamespace(input_ids=torch.zeros(3, dtype=torch.long)))
    assert torch.get_num_threads() == 1
    hook(object(), forward_batch=types.SimpleNamespace(input_ids=torch.zeros(5, dtype=torch.long)))
    assert torch.get_num_threads() == 2
