"""Frontier-chunked, ragged, early-pruned target verification inside SGLang's verify step.

SGLang's ``run_eagle_verify`` makes one call ``target_worker.forward_batch_generation(forward_batch=..., is_verify=
True)`` over B x (d + 1) rows and then samples, accepts and commits from the returned logits. For the duration
of that call the FASER worker swaps in :meth:`FrontierVerifier.forward`, which computes the same logits as the
planner's passes (``sglang_faser/spec/frontier.py``): frontier by frontier, each pass a uniform TARGET_VERIFY over
a subset of requests and a window of rows. Everything downstream (sampling, acceptance, KV commit, draft-extend)
is SGLang's own and sees a logits tensor of the usual shape.

Why this is exact:

* with a draft chain (topk 1) the verify mask is plain causal, and row j of request i sits at position
  seq_len_i + j with its KV slot at ``req_to_token[i, seq_len_i + j]`` (``eagle_prepare_for_verify``). A pass over
  rows [o, o + w) is therefore a TARGET_VERIFY with ``seq_lens = seq_len + o`` and ``draft_token_num = w``: it
  attends to the committed prefix plus rows [0, o), whose KV the earlier passes wrote;
* rows that are not computed are rows SGLang never reads: rows past k_i (the worker cuts every chain at k_i) and
  rows after a rejection. The latter is only decided here for requests whose acceptance is a deterministic
  argmax check (greedy, no grammar, penalties, logit bias or watermark): ``prunable``. Other requests are verified
  up to k_i. Uncomputed rows are filled with zeros; their KV slots lie past the committed length and are rewritten
  before they are ever read.

On CPU the passes simply run in turn; the draft for the whole step has already run (SGLang drafts all d steps in
one call), so the pipeline's overlap of verify f with draft f + 1 is modelled by the planner's schedule and
reported by the telemetry as zero overlap here.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from sglang_faser.spec.frontier import (
    FrontierStepStats,
    PassCost,
    VerifyPass,
    first_rejection,
    frontier_bounds,
    plan_frontier,
)


class FrontierVerifier:
    """One step's verification as passes; ``forward`` has the signature of ``TpModelWorker.forward_batch_generation``."""

    def __init__(self, target_forward, lengths: np.ndarray, prunable: np.ndarray, frontier_size: int,
                 pass_ms: PassCost | None = None, on_pass=None):
        self._target_forward = target_forward
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.prunable = np.asarray(prunable, dtype=bool)
        self.frontier_size = frontier_size
        self.pass_ms = pass_ms
        self.on_pass = on_pass  # on_pass(VerifyPass, start_s, end_s) for phase timing and the cost model
        self.stats = FrontierStepStats()

    def forward(self, batch=None, forward_batch=None, pp_proxy_tensors=None, is_verify=False, **kwargs):
        assert batch is None and is_verify, "FrontierVerifier only replaces the verify call"
        fb = forward_batch
        bs = fb.batch_size
        n = fb.spec_info.draft_token_num
        tokens = fb.input_ids.view(bs, n).cpu().numpy()
        lengths = np.minimum(self.lengths[:bs], n - 1)
        stats = self.stats
        stats.planned_rows = int((lengths + 1).sum())
        logits = hidden = last = None
        predictions = np.full((bs, n), -1, dtype=np.int64)
        live = np.arange(bs)
        bounds = frontier_bounds(n - 1, self.frontier_size)
        for f, (start, end) in enumerate(bounds):
            if len(live) == 0:
                break
            stats.frontiers += 1
            for vpass in plan_frontier(f, (start, end), live, lengths, self.pass_ms):
                began = time.perf_counter()
                last = self._target_forward(
                    batch=None, forward_batch=_sub_batch(fb, vpass, n), pp_proxy_tensors=pp_proxy_tensors,
                    is_verify=True,
                )
                out = last.logits_output
                rows = _row_index(vpass, n, fb.input_ids.device)
                if logits is None:
                    logits = out.next_token_logits.new_zeros((bs * n, out.next_token_logits.shape[-1]))
                    if out.hidden_states is not None:
                        hidden = out.hidden_states.new_zeros((bs * n, out.hidden_states.shape[-1]))
                logits[rows] = out.next_token_logits
                if hidden is not None:
                    hidden[rows] = out.hidden_states
                grid = out.next_token_logits.argmax(dim=-1).view(len(vpass.members), vpass.width)
                predictions[vpass.members, vpass.offset : vpass.offset + vpass.width] = grid.cpu().numpy()
                stats.passes += 1
                stats.verified_rows += vpass.rows
                if self.on_pass is not None:
                    self.on_pass(vpass, began, time.perf_counter())
            if end < n:
                live = self._survivors(live, end, lengths, tokens, predictions)
        if last is None:  # empty batch: nothing to split
            return self._target_forward(batch=None, forward_batch=fb, pp_proxy_tensors=pp_proxy_tensors,
                                        is_verify=True)
        merged = copy.copy(last.logits_output)
        merged.next_token_logits = logits
        merged.hidden_states = hidden
        result = copy.copy(last)
        result.logits_output = merged
        result.can_run_cuda_graph = False
        return result

    def _survivors(self, live, end, lengths, tokens, predictions) -> np.ndarray:
        """Requests that go on into the next frontier: rows left, and (if prunable) no rejection so far."""
        more = lengths[live] + 1 > end
        rows = np.arange(tokens.shape[1] - 1)
        valid = (rows[None, :] + 1 <= lengths[live][:, None]) & (rows[None, :] < end)
        nxt = tokens[live][:, 1:]
        rejected = first_rejection(predictions[live][:, :-1], nxt, valid) >= 0
        pruned = more & rejected & self.prunable[live]
        self.stats.pruned_rows += int((lengths[live][pruned] + 1 - end).sum())
        return live[more & ~pruned]


def _row_index(vpass: VerifyPass, n: int, device) -> torch.Tensor:
    members = torch.as_tensor(vpass.members, dtype=torch.long, device=device)
    cols = torch.arange(vpass.offset, vpass.offset + vpass.width, dtype=torch.long, device=device)
    return (members[:, None] * n + cols[None, :]).flatten()


def _sub_batch(fb, vpass: VerifyPass, n: int):
    """A TARGET_VERIFY ForwardBatch for rows [offset, offset + width) of the pass's requests."""
    if len(vpass.members) == fb.batch_size and vpass.offset == 0 and vpass.width == n:
        return fb
    device = fb.seq_lens.device
    members = torch.as_tensor(vpass.members, dtype=torch.long, device=device)
    rows = _row_index(vpass, n, device)
    sub = copy.copy(fb)
    sub.batch_size = len(vpass.members)
    sub.input_ids = fb.input_ids[rows]
    sub.positions = fb.positions[rows]
    sub.out_cache_loc = fb.out_cache_loc[rows]
    sub.req_pool_indices = fb.req_pool_indices[members]
    sub.seq_lens = fb.seq_lens[members] + vpass.offset
    if fb.seq_lens_cpu is not None:
        sub.seq_lens_cpu = fb.seq_lens_cpu[members.cpu()] + vpass.offset
        sub.seq_lens_sum = int(sub.seq_lens_cpu.sum())
    else:
        sub.seq_lens_sum = int(sub.seq_lens.sum())
    if fb.orig_seq_lens is not None:
        sub.orig_seq_lens = fb.orig_seq_lens[members] + vpass.offset
    if fb.req_pool_indices_cpu is not None:
        sub.req_pool_indices_cpu = fb.req_pool_indices_cpu[members.cpu()]
    if fb.num_token_non_padded is not None:
        sub.num_token_non_padded = torch.as_tensor(len(rows), dtype=fb.num_token_non_padded.dtype, device=device)
    for name in ("rids", "lora_ids"):
        values = getattr(fb, name, None)
        if values is not None:
            setattr(sub, name, [values[i] for i in vpass.members])
    sub.return_logprob = False  # SGLang computes verify logprobs from the merged logits afterwards
    spec = copy.copy(fb.spec_info)
    spec.draft_token_num = vpass.width
    sub.spec_info = spec
    return sub
