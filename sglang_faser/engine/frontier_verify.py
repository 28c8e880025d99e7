"""Frontier-chunked, ragged, early-pruned target verification inside SGLang's verify step.

SGLang's ``run_eagle_verify`` makes one call ``target_worker.forward_batch_generation(forward_batch=..., is_verify=
True)`` over B x (d + 1) rows and then samples, accepts and commits from the returned logits. For the duration
of that call the FASER worker swaps in :meth:`FrontierVerifier.forward`, which produces the same logits as the
planner's passes (``sglang_faser/spec/frontier.py``): frontier by frontier, each pass a uniform TARGET_VERIFY over
a subset of requests and a window of rows. Frontiers whose draft tokens were finished early may already have
been verified during drafting (``engine/pipeline.py`` calls :meth:`run_frontier` between draft forwards, on a
verify batch it built itself); ``forward`` checks that those rows match SGLang's own batch token for token, then
verifies the remaining frontiers. Everything downstream (sampling, acceptance, KV commit, draft-extend) is SGLang's
own and sees a logits tensor of the usual shape.

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
* if an early row ever disagreed with SGLang's batch (a bug, or an SGLang change), every frontier is recomputed
  from SGLang's batch, which rewrites the same KV slots: the output stays exact and the mismatch is logged.
"""

from __future__ import annotations

import copy
import logging
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

logger = logging.getLogger(__name__)


class FrontierVerifier:
    """One step's verification as passes; ``forward`` has the signature of ``TpModelWorker.forward_batch_generation``."""

    def __init__(self, target_forward, lengths: np.ndarray, prunable: np.ndarray, frontier_size: int, rows: int,
                 pass_ms: PassCost | None = None, on_pass=None):
        self._target_forward = target_forward
        self.lengths = np.minimum(np.asarray(lengths, dtype=np.int64), rows - 1)
        self.prunable = np.asarray(prunable, dtype=bool)
        self.n = rows  # verify rows per request in SGLang's layout: depth + 1
        self.bounds = frontier_bounds(rows - 1, frontier_size)
        self.pass_ms = pass_ms
        self.on_pass = on_pass  # on_pass(VerifyPass, start_s, end_s) for phase timing and the cost model
        bs = len(self.lengths)
        self.live = np.arange(bs)
        self.live_after: list[np.ndarray] = []  # the live set after each verified frontier
        self.predictions = np.full((bs, rows), -1, dtype=np.int64)
        self.computed = np.zeros((bs, rows), dtype=bool)
        self._early_batch = None
        self._logits = self._hidden = self._last = None
        self.stats = FrontierStepStats(planned_rows=int((self.lengths + 1).sum()))
        self.mismatches = 0
        self.pass_seconds = 0.0  # wall time of all target passes so far

    @property
    def frontiers_done(self) -> int:
        return len(self.live_after)

    def frontier_end(self, f: int) -> int:
        return self.bounds[f][1]

    # -- one frontier ----------------------------------------------------------------------------------------
    def run_frontier(self, fb, pp_proxy_tensors=None, known_rows: int | None = None) -> None:
        """Verify the next frontier for the live requests on ``fb`` (a full B x n verify batch).

        ``known_rows``: during drafting only rows [0, known_rows) hold real tokens (the rest are placeholders),
        so a rejection can only be judged for drafts in them; None means the whole batch is real (SGLang's).
        """
        f = self.frontiers_done
        start, end = self.bounds[f]
        known = self.n if known_rows is None else known_rows
        if known_rows is not None:
            self._early_batch = fb
        if len(self.live):
            self.stats.frontiers += 1
        for vpass in plan_frontier(f, (start, end), self.live, self.lengths, self.pass_ms):
            began = time.perf_counter()
            self._last = self._target_forward(
                batch=None, forward_batch=_sub_batch(fb, vpass, self.n), pp_proxy_tensors=pp_proxy_tensors,
                is_verify=True,
            )
            self._store(vpass, self._last.logits_output, fb.input_ids.device)
            ended = time.perf_counter()
            self.pass_seconds += ended - began
            if self.on_pass is not None:
                self.on_pass(vpass, began, ended)
        if end < self.n:
            self.live = self._survivors(end, known, fb.input_ids.view(-1, self.n).cpu().numpy())
        else:
            self.live = self.live[:0]
        self.live_after.append(self.live)

    def _store(self, vpass: VerifyPass, out, device) -> None:
        bs, n = len(self.lengths), self.n
        rows = _row_index(vpass, n, device)
        if self._logits is None:
            self._logits = out.next_token_logits.new_zeros((bs * n, out.next_token_logits.shape[-1]))
            if out.hidden_states is not None:
                self._hidden = out.hidden_states.new_zeros((bs * n, out.hidden_states.shape[-1]))
        self._logits[rows] = out.next_token_logits
        if self._hidden is not None:
            self._hidden[rows] = out.hidden_states
        grid = out.next_token_logits.argmax(dim=-1).view(len(vpass.members), vpass.width).cpu().numpy()
        cols = slice(vpass.offset, vpass.offset + vpass.width)
        self.predictions[vpass.members, cols] = grid
        self.computed[vpass.members, cols] = True
        self.stats.passes += 1
        self.stats.verified_rows += vpass.rows

    def _survivors(self, end: int, known: int, tokens: np.ndarray) -> np.ndarray:
        """Requests that go on into the next frontier: rows left, and (if prunable) no rejection so far."""
        live, lengths = self.live, self.lengths
        more = lengths[live] + 1 > end
        rows = np.arange(self.n - 1)
        valid = (rows[None, :] + 1 <= lengths[live][:, None]) & (rows[None, :] < end) & (rows[None, :] + 1 < known)
        rejected = first_rejection(self.predictions[live][:, :-1], tokens[live][:, 1:], valid) >= 0
        pruned = more & rejected & self.prunable[live]
        self.stats.pruned_rows += int((lengths[live][pruned] + 1 - end).sum())
        return live[more & ~pruned]

    # -- SGLang's verify call ----------------------------------------------------------------------------------
    def forward(self, batch=None, forward_batch=None, pp_proxy_tensors=None, is_verify=False, **kwargs):
        assert batch is None and is_verify, "FrontierVerifier only replaces the verify call"
        fb = forward_batch
        if fb.batch_size != len(self.lengths) or fb.spec_info.draft_token_num != self.n:
            logger.error("FASER: verify batch shape differs from the plan; running SGLang's single pass")
            return self._target_forward(batch=None, forward_batch=fb, pp_proxy_tensors=pp_proxy_tensors,
                                        is_verify=True)
        if self.frontiers_done and not self._early_rows_match(fb):
            self.mismatches += 1
            self._restart()
        while self.frontiers_done < len(self.bounds):
            self.run_frontier(fb, pp_proxy_tensors)
        if self._last is None:  # nothing to verify (cannot happen with B > 0: every request has its root row)
            return self._target_forward(batch=None, forward_batch=fb, pp_proxy_tensors=pp_proxy_tensors,
                                        is_verify=True)
        merged = copy.copy(self._last.logits_output)
        merged.next_token_logits = self._logits
        merged.hidden_states = self._hidden
        result = copy.copy(self._last)
        result.logits_output = merged
        result.can_run_cuda_graph = False
        return result

    def _early_rows_match(self, fb) -> bool:
        early = self._early_batch
        mask = torch.as_tensor(self.computed.reshape(-1), device=fb.input_ids.device)
        same = all(
            torch.equal(getattr(early, name)[mask].long(), getattr(fb, name)[mask].long())
            for name in ("input_ids", "positions", "out_cache_loc")
        ) and torch.equal(early.req_pool_indices.long(), fb.req_pool_indices.long())
        if not same:
            logger.error("FASER: rows verified during drafting differ from SGLang's verify batch; recomputing")
        return same

    def _restart(self) -> None:
        bs = len(self.lengths)
        self.live, self.live_after = np.arange(bs), []
        self.predictions[:] = -1
        self.computed[:] = False
        self._logits = self._hidden = self._last = None
        self.stats = FrontierStepStats(planned_rows=self.stats.planned_rows)


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
