"""Draft only what each request will have verified: draft forward s runs for requests with k_i >= s + 2.

SGLang drafts a batch as one: ``EagleDraftWorker.draft_forward`` runs ``speculative_num_steps - 1`` forwards of
the draft model over every request (forward s turns draft token s + 1 into draft token s + 2). With depth tiers
the step count is d = max k_i, so a request with a shorter k_i would still be drafted to depth d. For one
``draft()`` the step wraps the draft runner's ``forward`` with :class:`DraftCut`, which runs forward s over the
requests the schedule names (``spec/frontier.py: drafted_at``) and leaves zeros for the rest: those tokens lie
past the request's cut, so verification never reads them.

Sub-batching a decode forward needs the attention backend's per-step tables sub-set too; that is done for the
intel_amx multi-step draft backend (``touchpoints.run_draft_subset``). Elsewhere every request is drafted to depth
d. The path is what ran: "cut" once a forward skipped a request through a sub-set table, "full-depth" when a
forward that could have skipped someone ran whole, or when no forward reached the hook at all although the step
needed some (CUDA-graph replay drafts inside the graph), and None when the step needed no draft forward or ran
no hook (every request drafted the whole depth: nothing to cut, nothing learnt about cutting).
"""

from __future__ import annotations

import numpy as np

from sglang_faser.engine import touchpoints as sgl
from sglang_faser.spec.frontier import drafted_at


class DraftSchedule:
    """Who is drafted at each forward, and what runs around it; the plain schedule cuts at k_i only.

    ``engine/pipeline.py`` extends it to verify finished frontiers between draft forwards."""

    def __init__(self, lengths: np.ndarray):
        self.lengths = np.asarray(lengths, dtype=np.int64)

    def members(self, step: int) -> np.ndarray:
        return drafted_at(step, self.lengths)

    def before(self, step: int, tokens) -> None:
        """``tokens``: the forward's input ids (draft token step + 1 of every request)."""

    def after(self, step: int) -> None:
        pass


class DraftCut:
    """``hooked``: its ``hook`` wraps the step's draft forwards; a step whose every request drafts the whole depth
    runs SGLang's draft loop without it (``FaserEngine._whole_window``), and its path says nothing."""

    def __init__(self, schedule: DraftSchedule, depth: int, hooked: bool = True):
        self.schedule = schedule
        self.hooked = hooked
        self.forwards_needed = max(depth - 1, 0)  # SGLang runs depth - 1 draft forwards
        self.step = 0
        self.rows = 0  # draft rows computed (one per request per forward)
        self.skipped = 0  # rows not computed: past the request's k_i, or after a rejection
        self.ran_whole = False  # a forward that could have skipped requests ran over all of them

    def rows_run(self, batch: int) -> int:
        """Draft rows the step computed: counted by the hook, or every request at every forward where no forward
        reached it (a CUDA-graph replay drafts inside the graph)."""
        return batch * self.forwards_needed if self.step == 0 else self.rows

    @property
    def path(self) -> str | None:
        if self.forwards_needed == 0 or not self.hooked:
            return None
        if self.step == 0 or self.ran_whole:
            return "full-depth"
        return "cut"

    def hook(self, forward, backends):
        def run(forward_batch, *args, **kwargs):
            step, self.step = self.step, self.step + 1
            bs, tokens = sgl.draft_forward_view(forward_batch)
            self.schedule.before(step, tokens)
            members = self.schedule.members(step)
            backend = backends[step] if step < len(backends) else None
            if len(members) == bs or backend is None or not sgl.draft_cut_supported(backend):
                self.ran_whole = self.ran_whole or len(members) < bs
                self.rows += bs
                out = forward(forward_batch, *args, **kwargs)
            else:
                if len(members) == 0:
                    members = np.array([0])  # keep one row so the output has its usual shapes and dtypes
                self.rows += len(members)
                self.skipped += bs - len(members)
                out = sgl.run_draft_subset(forward, backend, forward_batch, members, *args, **kwargs)
            self.schedule.after(step)
            return out

        return run
