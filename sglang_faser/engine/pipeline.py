"""FASER's Pipeline Overlapper for one decode step: verify frontier f while the draft works on frontier f + 1.

SGLang drafts the whole chain in one call (``EagleDraftWorker.draft``: forward s turns draft token s + 1 into
s + 2) and verifies afterwards. With ``frontier_size`` F > 0, :class:`FrontierPipeline` is the draft schedule
(``engine/draft_cut.py``) for the step: as soon as the draft tokens of frontier f exist, it verifies frontier f
with the target, on a verify batch it builds exactly as SGLang will (rows at ``seq_len + j``, KV slots
``req_to_token[req, seq_len + j]``; ``FrontierVerifier`` checks this against SGLang's own batch later), and a
greedy request rejected there is no longer drafted:

* overlap on (the pipeline): verify f runs beside draft chunk f + 1, so its verdict stops drafting from chunk
  f + 2 on; on CPU the two run in turn (draft forward first), on a GPU they would run on separate streams;
* overlap off (serial): verify f runs before draft chunk f + 1, whose drafting already skips rejected requests.

The last frontier (its final draft token comes out of the draft loop's last selection, after its last forward)
and anything not yet verified are verified in SGLang's verify call, as before. Output is exact either way: the
schedule only decides which rows are computed, never what is accepted.
"""

from __future__ import annotations

import numpy as np
import torch

from sglang_faser.engine import touchpoints
from sglang_faser.engine.draft_cut import DraftSchedule
from sglang_faser.engine.frontier_verify import FrontierVerifier


class FrontierPipeline(DraftSchedule):
    def __init__(self, verifier: FrontierVerifier, lengths: np.ndarray, overlap: bool, batch, target_runner):
        super().__init__(lengths)
        self.verifier = verifier
        self.overlap = overlap
        self._batch = batch
        self._runner = target_runner
        self._fb = None
        self._tokens = None

    # -- the draft side ------------------------------------------------------------------------------------------
    def members(self, step: int, bs: int) -> np.ndarray:
        members = super().members(step, bs)
        chunk = self._frontier_of(step + 2)
        verdict = chunk - (2 if self.overlap else 1)  # the latest verification this draft chunk may use
        done = self.verifier.live_after  # live sets only shrink: the latest verdict up to ``verdict`` holds
        if verdict >= 0 and done:
            members = np.intersect1d(members, done[min(verdict, len(done) - 1)])
        return members

    def before(self, step: int, forward_batch) -> None:
        if self._fb is None:
            self._build(forward_batch)
        self._tokens[:, step + 1] = forward_batch.input_ids.to(self._tokens.dtype)  # draft token step + 1
        if not self.overlap:
            self._verify_ready(known_rows=step + 2)

    def after(self, step: int, forward_batch) -> None:
        if self.overlap:
            self._verify_ready(known_rows=step + 2)

    # -- the verify side -----------------------------------------------------------------------------------------
    def _verify_ready(self, known_rows: int) -> None:
        verifier = self.verifier
        while verifier.frontiers_done < len(verifier.bounds) and verifier.frontier_end(verifier.frontiers_done) <= known_rows:
            with touchpoints.target_forward_context(self._runner, self._fb):
                verifier.run_frontier(self._fb, known_rows=known_rows)

    def _frontier_of(self, row: int) -> int:
        for f, (start, end) in enumerate(self.verifier.bounds):
            if start <= row < end:
                return f
        return len(self.verifier.bounds)

    def _build(self, draft_batch) -> None:
        """The verify batch SGLang will build after drafting, with tokens filled in as the draft makes them."""
        batch, n = self._batch, self.verifier.n
        device = batch.seq_lens.device
        bs = len(self.lengths)
        self._tokens = torch.zeros((bs, n), dtype=torch.int64, device=device)
        self._tokens[:, 0] = batch.spec_info.bonus_tokens.to(torch.int64)  # the root: last committed token
        offsets = torch.arange(n, device=device)
        seq_lens = batch.seq_lens.to(torch.int64)
        slots = batch.req_to_token_pool.req_to_token[batch.req_pool_indices.to(torch.int64)[:, None],
                                                     seq_lens[:, None] + offsets[None, :]]
        standalone = self._runner.spec_algorithm.is_standalone()
        capture = touchpoints.capture_null() if standalone else touchpoints.capture_full()
        self._fb = touchpoints.forward_batch(
            forward_mode=touchpoints.target_verify_mode(),
            batch_size=bs,
            input_ids=self._tokens.view(-1),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens,
            seq_lens_cpu=batch.seq_lens_cpu,
            out_cache_loc=slots.reshape(-1).to(torch.int64),
            seq_lens_sum=int(batch.seq_lens_cpu.sum()) if batch.seq_lens_cpu is not None else int(seq_lens.sum()),
            positions=(seq_lens[:, None] + offsets[None, :]).reshape(-1),
            spec_algorithm=self._runner.spec_algorithm,
            spec_info=touchpoints.eagle_verify_input(topk=1, draft_token_num=n, spec_steps=n - 1,
                                                     capture_hidden_mode=capture),
            capture_hidden_mode=capture,
            sampling_info=batch.sampling_info,
            return_logprob=False,
        )
