"""Ragged, frontier-chunked, early-pruned target verification inside SGLang's verify step.

SGLang's ``run_eagle_verify`` makes one call ``target_worker.forward_batch_generation(forward_batch=..., is_verify=
True)`` over B x (d + 1) rows and then samples, accepts and commits from the returned logits. For that one call
the step swaps in :meth:`RaggedVerifier.forward`, which computes only the rows the plan needs
(``sglang_faser/spec/frontier.py``): per frontier, one TARGET_VERIFY pass in SGLang's ``RaggedVerifyLayout``
where request i takes the rows it still needs. Frontiers whose drafts were finished early may already have been
verified during drafting (``engine/pipeline.py`` calls :meth:`run_frontier` between draft forwards, on a verify
batch built as SGLang will build it); ``forward`` checks those rows against SGLang's own batch token for token,
then verifies the rest. Everything downstream (sampling, acceptance, KV commit, draft-extend) is SGLang's own and
sees a logits tensor of the usual [B x (d + 1)] shape; rows not computed hold zeros.

Why this is exact:

* with a draft chain (topk 1) the verify mask is plain causal, and row j of request i sits at position
  seq_len_i + j with its KV slot at ``req_to_token[i, seq_len_i + j]`` (``eagle_prepare_for_verify``). A pass
  over rows [o, o + w_i) is a ragged TARGET_VERIFY with ``seq_lens = seq_len + o``: it attends to the committed
  prefix plus rows [0, o), whose KV the earlier passes wrote;
* rows not computed are rows SGLang never reads: rows past k_i (the step cuts every chain at k_i) and rows after
  a rejection, decided here only for requests whose acceptance is a plain argmax check (``prunable``). Their KV
  slots lie past the committed length and are rewritten before they are ever read;
* if an early row ever disagreed with SGLang's batch (a bug, or an SGLang change), every frontier is recomputed
  from SGLang's batch, which rewrites the same KV slots: the output stays exact and the mismatch is logged.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from sglang_faser.engine import touchpoints as sgl
from sglang_faser.engine.step_clock import Mark, StepClock
from sglang_faser.spec.frontier import FrontierStepStats, VerifyPass, first_rejection, frontier_bounds, plan_frontier

logger = logging.getLogger(__name__)


class RaggedVerifier:
    """One step's verification as ragged passes; ``forward`` has the signature of SGLang's target call."""

    def __init__(self, target_forward, lengths: np.ndarray, prunable: np.ndarray, frontier_size: int, rows: int,
                 on_pass=None, clock: StepClock | None = None):
        self._target_forward = target_forward
        self.lengths = np.minimum(np.asarray(lengths, dtype=np.int64), rows - 1)
        self.prunable = np.asarray(prunable, dtype=bool)
        self.n = rows  # verify rows per request in SGLang's layout: depth + 1
        self.bounds = frontier_bounds(rows - 1, frontier_size)
        self.on_pass = on_pass  # on_pass(VerifyPass, began, ended: Mark) for phase timing and the cost model
        self.clock = clock or StepClock()
        bs = len(self.lengths)
        self.live = np.arange(bs)
        self.live_after: list[np.ndarray] = []  # the live set after each verified frontier
        self.predictions = np.full((bs, rows), -1, dtype=np.int64)
        self.computed = np.zeros((bs, rows), dtype=bool)
        self._early_batch = None
        self._logits = self._hidden = self._last = None
        self._whole = False  # the one pass covered every row: its result is the step's
        self.stats = FrontierStepStats(planned_rows=int((self.lengths + 1).sum()))
        self.mismatches = 0
        self.pass_marks: list[tuple[Mark, Mark]] = []  # each target pass's boundaries

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
        if known_rows is not None:
            self._early_batch = fb
        vpass = plan_frontier(f, (start, end), self.live, self.lengths)
        if vpass is not None:
            self.stats.frontiers += 1
            began = self.clock.mark()
            rows = _flat_rows(vpass, self.n, sgl.verify_tokens(fb).device)
            sub = fb if vpass.rows == len(self.lengths) * self.n else sgl.ragged_verify_batch(
                fb, vpass.members, vpass.offset, vpass.widths, rows)
            self._last = sgl.run_target_pass(self._target_forward, sub, pp_proxy_tensors)
            self._store(vpass, rows, *sgl.pass_outputs(self._last))
            ended = self.clock.mark()
            self.pass_marks.append((began, ended))
            if self.on_pass is not None:
                self.on_pass(vpass, began, ended)
        known = self.n if known_rows is None else known_rows
        if end < self.n:
            tokens = sgl.verify_tokens(fb).view(-1, self.n).cpu().numpy()
            self.live = self._survivors(end, known, tokens)
        else:
            self.live = self.live[:0]
        self.live_after.append(self.live)

    def _store(self, vpass: VerifyPass, rows: torch.Tensor, logits: torch.Tensor, hidden) -> None:
        total = len(self.lengths) * self.n
        self.stats.passes += 1
        self.stats.verified_rows += vpass.rows
        self.stats.offset_passes += int(vpass.offset > 0)
        if vpass.rows == total:  # the whole window in one pass (uniform lengths, a k = 0 step): its result is
            self._whole = True  # the step's as it is, and no frontier follows that would need predictions
            return
        if self._logits is None:
            self._logits = logits.new_zeros((total, logits.shape[-1]))
            if hidden is not None:
                self._hidden = hidden.new_zeros((total, hidden.shape[-1]))
        self._logits[rows] = logits
        if self._hidden is not None:
            self._hidden[rows] = hidden
        member, col = vpass.columns
        self.predictions[vpass.members[member], col] = logits.argmax(dim=-1).cpu().numpy()
        self.computed[vpass.members[member], col] = True

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
        assert batch is None and is_verify, "RaggedVerifier only replaces the verify call"
        fb = forward_batch
        if sgl.verify_shape(fb) != (len(self.lengths), self.n):
            logger.error("FASER: verify batch shape differs from the plan; running SGLang's single pass")
            return sgl.run_target_pass(self._target_forward, fb, pp_proxy_tensors)
        if self.frontiers_done and not self._early_rows_match(fb):
            self.mismatches += 1
            self._restart()
        while self.frontiers_done < len(self.bounds):
            self.run_frontier(fb, pp_proxy_tensors)
        return self._last if self._whole else sgl.merged_verify_result(self._last, self._logits, self._hidden)

    def _early_rows_match(self, fb) -> bool:
        mask = torch.as_tensor(self.computed.reshape(-1), device=sgl.verify_tokens(fb).device)
        same = sgl.same_verify_rows(self._early_batch, fb, mask)
        if not same:
            logger.error("FASER: rows verified during drafting differ from SGLang's verify batch; recomputing")
        return same

    def _restart(self) -> None:
        bs = len(self.lengths)
        self.live, self.live_after = np.arange(bs), []
        self.predictions[:] = -1
        self.computed[:] = False
        self._logits = self._hidden = self._last = None
        self._whole = False
        self.stats = FrontierStepStats(planned_rows=self.stats.planned_rows)


def _flat_rows(vpass: VerifyPass, n: int, device) -> torch.Tensor:
    """The pass's rows as indices into SGLang's flat [B x n] verify layout, request by request."""
    member, col = vpass.columns
    return torch.as_tensor(vpass.members[member] * n + col, dtype=torch.long, device=device)
