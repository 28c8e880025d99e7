"""The draft path FASER reports is the path that ran (``DraftCut``), not the one it meant to run.

Unit-level: a fake draft forward stands in for SGLang's runner, with a backend table that can be sub-set
(intel_amx's ``draft_decode_metadata``) or not (any other backend); a hook SGLang never calls stands for CUDA-graph
replay. The engine-level counterpart is in test_faser_worker.py (``draft_skipped`` on a real engine).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from sglang_faser.engine.draft_cut import DraftCut, DraftSchedule

BS = 3


def _batch():
    ids = torch.arange(BS)
    return SimpleNamespace(batch_size=BS, input_ids=ids, positions=ids, out_cache_loc=ids, req_pool_indices=ids,
                           seq_lens=ids + 5, seq_lens_cpu=None, req_pool_indices_cpu=None, num_token_non_padded=None,
                           spec_info=None)


def _forward(calls):
    def forward(fb, *args, **kwargs):
        calls.append(fb.batch_size)
        logits = SimpleNamespace(next_token_logits=torch.ones(fb.batch_size, 4), hidden_states=None)
        return SimpleNamespace(logits_output=logits)

    return forward


def _run(cut: DraftCut, backend, forwards: int):
    calls = []
    run = cut.hook(_forward(calls), [backend] * forwards)
    outs = [run(_batch()) for _ in range(forwards)]
    return calls, outs


def test_a_sub_settable_backend_drafts_only_the_requests_that_need_it():
    table = (torch.zeros(BS, 8), torch.arange(BS), torch.arange(BS))
    backend = SimpleNamespace(draft_decode_metadata=table)
    cut = DraftCut(DraftSchedule(np.array([1, 3, 2])), depth=3)  # forward 0: k >= 2; forward 1: k >= 3
    calls, outs = _run(cut, backend, forwards=2)
    assert calls == [2, 1] and (cut.rows, cut.skipped) == (3, 3)
    assert cut.path == "cut"
    assert backend.draft_decode_metadata is table  # restored after each forward
    assert outs[1].logits_output.next_token_logits[:, 0].tolist() == [0.0, 1.0, 0.0]  # zeros for the skipped


def test_a_backend_without_a_sub_settable_table_reports_full_depth():
    cut = DraftCut(DraftSchedule(np.array([1, 3, 2])), depth=3)
    calls, _ = _run(cut, SimpleNamespace(draft_decode_metadata=None), forwards=2)
    assert calls == [BS, BS] and cut.skipped == 0
    assert cut.path == "full-depth" and cut.rows_run(BS) == cut.rows == 2 * BS


def test_a_hook_never_called_reports_full_depth():
    """CUDA-graph replay drafts inside the graph and never calls the runner's forward."""
    cut = DraftCut(DraftSchedule(np.array([1, 3, 2])), depth=3)
    assert cut.path == "full-depth"
    assert cut.rows == 0 and cut.rows_run(3) == 3 * 2  # every request at both forwards, as the cost model prices it


def test_a_step_without_draft_forwards_reports_nothing():
    assert DraftCut(DraftSchedule(np.array([1, 1])), depth=1).path is None
    assert DraftCut(DraftSchedule(np.array([0, 0])), depth=0).path is None


def test_depth_tier_switches_are_not_logged_and_the_rest_of_sglangs_log_is():
    """FASER switches SGLang's runtime state most steps; SGLang logs each switch at INFO."""
    import logging

    from sglang_faser.engine import touchpoints

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("sglang.srt.speculative.eagle_worker_v2", logging.INFO, __file__, 1, msg, (), None)

    switch = record("Switch adaptive runtime state: steps 4 -> 6, draft_tokens 5 -> 7")
    assert not touchpoints._quiet_tier_switches(switch)
    assert touchpoints._quiet_tier_switches(record("Built adaptive runtime state steps=3: elapsed=1.00s"))


def test_chains_are_cut_at_each_requests_length_with_rows_chosen_on_the_host(monkeypatch):
    """Node k_i loses its successor; no device-side nonzero (on a GPU it waits for the whole queue)."""
    from sglang_faser.engine import touchpoints

    next_token = torch.tensor([[1, 2, 3, -1], [1, 2, 3, -1], [1, 2, 3, -1]])
    monkeypatch.setattr(torch, "nonzero", lambda *a, **k: (_ for _ in ()).throw(AssertionError("device sync")))
    touchpoints.cut_chains(SimpleNamespace(retrieve_next_token=next_token), np.array([0, 3, 2]))
    assert next_token.tolist() == [[-1, 2, 3, -1], [1, 2, 3, -1], [1, 2, -1, -1]]
    assert touchpoints.host_to_device([4, 5], "cpu").tolist() == [4, 5]


def test_the_draft_token_pick_runs_eagerly_on_cpu_with_the_compiled_ones_results(monkeypatch):
    """SGLang compiles its draft token pick; on CPU nothing captures it at start-up, so FASER's plugin runs the
    function it wraps (the same code, eagerly): its results are the compiled one's. (An in-process engine of an
    earlier test may have patched this process already: the test compiles the plain function itself, as SGLang
    does.)"""
    from sglang.srt.speculative import spec_utils

    from sglang_faser.engine import touchpoints

    current = spec_utils._select_top_k_tokens_later
    plain = getattr(current, "__wrapped__", current)
    compiled = torch.compile(plain, dynamic=True)
    monkeypatch.setattr(spec_utils, "_select_top_k_tokens_later", compiled)
    touchpoints.eager_draft_top_k_on_cpu()
    touchpoints.eager_draft_top_k_on_cpu()  # idempotent
    assert spec_utils._select_top_k_tokens_later is plain
    torch.manual_seed(0)
    topk_p, scores, hidden = torch.rand(3, 1), torch.rand(3, 1), torch.rand(3, 8)
    topk_index = torch.randint(0, 50, (3, 1))
    want = spec_utils.select_top_k_tokens(2, topk_p, topk_index, hidden, scores, 1)  # through the module global
    monkeypatch.setattr(spec_utils, "_select_top_k_tokens_later", compiled)
    got = spec_utils.select_top_k_tokens(2, topk_p, topk_index, hidden, scores, 1)
    for a, b in zip(torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)):
        assert torch.equal(a, b)
