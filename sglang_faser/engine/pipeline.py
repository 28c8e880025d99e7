"""FASER's Pipeline Overlapper for one decode step: verify frontier f while the draft works on frontier f + 1.

SGLang drafts the whole chain in one call (``EagleDraftWorker.draft``: forward s turns draft token s + 1 into
s + 2) and verifies afterwards. With ``frontier_size`` F > 0, :class:`FrontierPipeline` is the draft schedule
(``engine/draft_cut.py``) for the step: as soon as the draft tokens of frontier f exist, it verifies frontier f
with the target (one ragged pass, ``engine/verify.py``) on a verify batch built exactly as SGLang will build it
(``touchpoints.early_verify_batch``; the verifier checks it against SGLang's own batch later), and a greedy
request rejected there is no longer drafted (``spec/frontier.py: drafted_at``):

* overlap on (the pipeline): verify f runs beside draft chunk f + 1, so its verdict stops drafting from chunk
  f + 2 on; on CPU the two run in turn (draft forward first), on a GPU they would run on separate streams;
* overlap off (serial): verify f runs before draft chunk f + 1, whose drafting already skips rejected requests.

The last frontier (its final draft token comes out of the draft loop's last selection, after its last forward)
and anything not yet verified are verified in SGLang's verify call. Output is exact either way: the schedule only
decides which rows are computed, never what is accepted.
"""

from __future__ import annotations

import numpy as np
import torch

from sglang_faser.engine import touchpoints as sgl
from sglang_faser.engine.draft_cut import DraftSchedule
from sglang_faser.engine.verify import RaggedVerifier
from sglang_faser.spec.frontier import drafted_at


class FrontierPipeline(DraftSchedule):
    def __init__(self, verifier: RaggedVerifier, lengths: np.ndarray, overlap: bool, worker, batch):
        super().__init__(lengths)
        self.verifier = verifier
        self.overlap = overlap
        self._worker = worker
        self._batch = batch
        self._fb = None
        self._tokens = None

    def members(self, step: int) -> np.ndarray:
        return drafted_at(step, self.lengths, self.verifier.bounds, self.verifier.live_after, self.overlap)

    def before(self, step: int, tokens) -> None:
        if self._fb is None:
            self._tokens = torch.zeros((len(self.lengths), self.verifier.n), dtype=torch.int64,
                                       device=tokens.device)
            self._fb = sgl.early_verify_batch(self._worker, self._batch, self.verifier.n, self._tokens)
        self._tokens[:, step + 1] = tokens.to(self._tokens.dtype)  # draft token step + 1
        if not self.overlap:
            self._verify_ready(known_rows=step + 2)

    def after(self, step: int) -> None:
        if self.overlap:
            self._verify_ready(known_rows=step + 2)

    def _verify_ready(self, known_rows: int) -> None:
        verifier = self.verifier
        while (verifier.frontiers_done < len(verifier.bounds)
               and verifier.frontier_end(verifier.frontiers_done) <= known_rows):
            with sgl.target_pass_context(self._worker, self._fb):
                verifier.run_frontier(self._fb, known_rows=known_rows)
