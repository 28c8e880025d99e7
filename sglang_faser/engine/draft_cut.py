"""Draft only what each request will have verified: step s of the draft runs for requests with k_i > s + 1.

SGLang drafts a batch as one: ``EagleDraftWorker.draft_forward`` runs ``speculative_num_steps - 1`` forwards of
the draft model over every request (forward s turns draft token s + 1 into draft token s + 2). With depth tiers
the step count is d = max k_i, so a request with a shorter k_i would still be drafted to depth d. For the
duration of ``draft()`` the FASER worker wraps the draft runner's ``forward`` with :class:`DraftCut`, which runs
forward s over the requests that still need a token (k_i >= s + 2) and leaves zeros for the rest: those tokens
lie past the request's cut (``retrieve_next_token[i, k_i] = -1``), so verification never reads them.

Sub-batching a decode forward needs the attention backend's per-step tables to be sub-set too. That is done for
the intel_amx multi-step draft backend (the CPU path: ``draft_decode_metadata`` = expanded req_to_token table,
seq_lens, row indices). Other backends plan per batch size in ways we do not reach into yet, so there the draft
runs every request to depth d (``DraftCut.supported`` is false and ``path`` says "full-depth").
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import numpy as np
import torch


@contextmanager
def patched(obj, name: str, value):
    """Shadow ``obj.name`` with an instance attribute for one call, then restore exactly what was there."""
    own = vars(obj)
    had, old = name in own, own.get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


class DraftSchedule:
    """Who is drafted at each forward, and what happens around it; the plain schedule cuts at k_i only.

    ``engine/pipeline.py`` extends it to run finished frontiers' verification between draft forwards and to
    stop drafting requests that verification already rejected.
    """

    def __init__(self, lengths: np.ndarray):
        self.lengths = np.asarray(lengths, dtype=np.int64)

    def members(self, step: int, bs: int) -> np.ndarray:
        """Forward ``step`` turns draft token step + 1 into step + 2: only requests with k_i >= step + 2 need it."""
        return np.flatnonzero(self.lengths[:bs] >= step + 2)

    def before(self, step: int, forward_batch) -> None:
        pass

    def after(self, step: int, forward_batch) -> None:
        pass


class DraftCut:
    def __init__(self, runner_forward, backends, schedule: DraftSchedule):
        self._forward = runner_forward
        self._backends = backends
        self.schedule = schedule
        self.step = 0
        self.rows = 0  # draft rows computed (one per request per forward)
        self.skipped = 0  # rows not computed: past the request's k_i, or after a rejection
        self.supported = True  # false once a step's backend has no table we know how to sub-set

    @property
    def path(self) -> str:
        return "cut" if self.supported else "full-depth"

    def forward(self, forward_batch, *args, **kwargs):
        step, self.step = self.step, self.step + 1
        self.schedule.before(step, forward_batch)
        out = self._run(step, forward_batch, *args, **kwargs)
        self.schedule.after(step, forward_batch)
        return out

    def _run(self, step, forward_batch, *args, **kwargs):
        bs = forward_batch.batch_size
        members = self.schedule.members(step, bs)
        backend = self._backends[step] if step < len(self._backends) else None
        saved = getattr(backend, "draft_decode_metadata", None)
        self.supported = self.supported and saved is not None
        if saved is None or len(members) == bs:
            self.rows += bs
            return self._forward(forward_batch, *args, **kwargs)
        if len(members) == 0:
            members = np.array([0])  # keep one row so the output has its usual shapes and dtypes
        table, seq_lens, rows = saved
        index = torch.as_tensor(members, dtype=torch.long, device=forward_batch.seq_lens.device)
        backend.draft_decode_metadata = (table, seq_lens[index], rows[index])
        try:
            out = self._forward(_sub_decode_batch(forward_batch, index), *args, **kwargs)
        finally:
            backend.draft_decode_metadata = saved
        self.rows += len(members)
        self.skipped += bs - len(members)
        return _scatter_output(out, index, bs)


def _sub_decode_batch(fb, index: torch.Tensor):
    sub = copy.copy(fb)
    sub.batch_size = len(index)
    sub.input_ids = fb.input_ids[index]
    sub.positions = fb.positions[index]
    sub.out_cache_loc = fb.out_cache_loc[index]
    sub.req_pool_indices = fb.req_pool_indices[index]
    sub.seq_lens = fb.seq_lens[index]
    if fb.seq_lens_cpu is not None:
        sub.seq_lens_cpu = fb.seq_lens_cpu[index.cpu()]
        sub.seq_lens_sum = int(sub.seq_lens_cpu.sum())
    else:
        sub.seq_lens_sum = int(sub.seq_lens.sum())
    if fb.req_pool_indices_cpu is not None:
        sub.req_pool_indices_cpu = fb.req_pool_indices_cpu[index.cpu()]
    if fb.num_token_non_padded is not None:
        sub.num_token_non_padded = torch.as_tensor(len(index), dtype=fb.num_token_non_padded.dtype,
                                                   device=fb.num_token_non_padded.device)
    spec = fb.spec_info
    if spec is not None and getattr(spec, "hidden_states", None) is not None:
        spec = copy.copy(spec)
        spec.hidden_states = spec.hidden_states[index]
        sub.spec_info = spec
    for name in ("rids", "lora_ids"):
        values = getattr(fb, name, None)
        if values is not None:
            setattr(sub, name, [values[i] for i in index.tolist()])
    return sub


def _scatter_output(out, index: torch.Tensor, bs: int):
    """The sub-batch's output at full batch size, zeros for the requests that were not drafted."""
    logits_output = copy.copy(out.logits_output)
    for name in ("next_token_logits", "hidden_states"):
        value = getattr(logits_output, name, None)
        if value is not None:
            full = value.new_zeros((bs, *value.shape[1:]))
            full[index] = value
            setattr(logits_output, name, full)
    result = copy.copy(out)
    result.logits_output = logits_output
    return result
