"""The draft's backlog for requests that skipped the draft-extend: what they skipped, to catch up in one pass.

A request with k = 0 needs no draft token, so its draft model work can wait: in a step where every request has
k = 0 no draft model runs at all, and in a step where others draft it is left out of the draft-extend (a draft
pass over every drafting request's verify window). Its draft state then falls behind: its KV lacks the skipped
positions and its next-token guess is stale. ``DraftBacklog`` keeps, per skipped step, the rows the draft-extend
would have consumed for each such request (the token it verified and, for EAGLE, the target's feature at that
row); when the request drafts again, ``take`` hands back its skipped rows, in position order, for one batched
draft extend over all who resume (``touchpoints.catch_up_draft``), after which drafting proceeds as if nothing had
been skipped.

Each request's skipped rows are contiguous positions ending just before its current length: a request that skips
advances by exactly one token, and a request that drafts is caught up first. A request missing from a step
(finished, retracted) loses its backlog; a re-prefill rebuilds its draft state anyway. At most ``limit`` rows per
request are kept: older skipped positions keep stale draft KV, which costs acceptance, never correctness (the
target verifies every draft). So do the rows of a request that decodes in a mixed prefill-decode step
(``--enable-mixed-chunk``): SGLang's own step advances its draft state by one position past them, so they are
dropped (``FaserEngine.forward``) rather than caught up one position late.

A prefill may be deferred the same way (``seed``, ``--faser-lazy-prefill``): its request starts with the last
``limit`` rows of its prompt in the backlog instead of a draft prefill, and the earlier ones keep stale draft KV.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

CATCH_UP_LIMIT = 64


@dataclass
class CatchUp:
    members: list[int]  # batch rows of the requests that catch up
    counts: list[int]  # skipped rows per member
    tokens: torch.Tensor  # [sum(counts)] the tokens at the skipped positions, member by member
    features: torch.Tensor | None  # [sum(counts), H] the target's features there (EAGLE); None for STANDALONE


@dataclass
class _Step:
    """One step's skipped rows: ``tokens[j]`` (and ``features[j]``) belong to request ``rids[j]``."""

    number: int
    rids: list
    tokens: torch.Tensor
    features: torch.Tensor | None
    _rows: dict | None = field(default=None, repr=False)

    def row(self, rid) -> int:
        if self._rows is None:  # built when a catch-up first reads the step, not each step
            self._rows = {r: j for j, r in enumerate(self.rids)}
        return self._rows[rid]


class DraftBacklog:
    """A request's skipped rows are its seed (prompt rows from a deferred prefill) and one row of every step since
    its ``first``: it skipped every step from there (missing from one, or drafting, it holds nothing). So a step
    that skips the same requests as the last, a parked batch's usual step, only appends its rows, without touching
    any request's bookkeeping (which cost a CPU decode step tens of microseconds a step at 16 requests)."""

    def __init__(self, limit: int = CATCH_UP_LIMIT):
        self.limit = limit
        self._steps: deque[_Step] = deque()  # the recorded steps a request may still hold rows of, oldest first
        self._first: dict = {}  # rid -> the number of its first skipped step (seeded: the next step's)
        self._seeds: dict = {}  # rid -> (tokens, features) of its seeded prompt rows
        self._oldest = 0  # the smallest of ``_first``: earlier steps hold nobody's rows
        self._last: list | None = None  # the requests the last step skipped, in its order (None: changed since)
        self._step = 0

    def __len__(self) -> int:
        return len(self._first)

    def record(self, rids: list, skipped: list[int], tokens: torch.Tensor, features: torch.Tensor | None) -> None:
        """One step of the batch ``rids``: the requests at batch rows ``skipped`` left out the draft-extend, and
        ``tokens[j]`` (and ``features[j]``) are the row ``skipped[j]`` would have consumed. The others drafted (and
        were caught up before), so they hold no backlog."""
        step, self._step = self._step, self._step + 1
        names = rids if len(skipped) == len(rids) else [rids[i] for i in skipped]
        if names != self._last:  # requests joined, left or drafted: only this step's skipped ones hold rows
            first = self._first
            self._first = {rid: first.get(rid, step) for rid in names}
            if self._seeds:
                self._seeds = {rid: rows for rid, rows in self._seeds.items() if rid in self._first}
            self._oldest = min(self._first.values(), default=step + 1)
            self._last = list(names)
        if names:
            self._steps.append(_Step(step, names, tokens, features))
        oldest = max(self._oldest, step + 1 - self.limit)  # a request keeps its last ``limit`` rows at most
        while self._steps and self._steps[0].number < oldest:
            self._steps.popleft()

    def seed(self, rids: list, counts: list[int], tokens: torch.Tensor, features: torch.Tensor | None) -> None:
        """New requests whose prefill skipped the draft: request i's last ``counts[i]`` (at most ``limit``) prompt
        rows, the rows ending just before its length, are ``tokens`` (and ``features``) in request order."""
        at = 0
        for rid, count in zip(rids, counts):
            self._seeds[rid] = (tokens[at: at + count], None if features is None else features[at: at + count])
            self._first[rid] = self._step
            at += count
        self._oldest = min(self._oldest, self._step)
        self._last = None

    def _count(self, rid) -> int:
        first = self._first.get(rid)
        if first is None:
            return 0
        seed = self._seeds.get(rid)
        return min(self.limit, self._step - first + (0 if seed is None else len(seed[0])))

    def take(self, rids: list, members: list[int] | None = None) -> CatchUp | None:
        """The backlog of the requests at batch rows ``members`` (default: all of ``rids``), in batch order; they
        hold none afterwards."""
        if not self._first:
            return None
        caught, counts, flat = [], [], []
        steps = list(self._steps)
        parts, at = {}, 0  # each seed and step read: (where it begins in their concatenation, tokens, features)

        def offset(key, tokens, features) -> int:
            nonlocal at
            if key not in parts:
                parts[key] = (at, tokens, features)
                at += len(tokens)
            return parts[key][0]

        for i in range(len(rids)) if members is None else members:
            rid = rids[i]
            count = self._count(rid)
            if not count:
                continue
            first = self._first.pop(rid)
            seed = self._seeds.pop(rid, None)
            from_steps = min(count, self._step - first)
            if count > from_steps:  # the newest of its seeded prompt rows come first
                start = offset(("seed", rid), *seed) + len(seed[0])
                flat.extend(range(start - (count - from_steps), start))
            for entry in steps[len(steps) - from_steps:]:
                flat.append(offset(entry.number, entry.tokens, entry.features) + entry.row(rid))
            caught.append(i)
            counts.append(count)
        self._last = None
        if not self._first:
            self._steps.clear()
            self._seeds.clear()
        if not caught:
            return None
        held = list(parts.values())  # in insertion order, which is offset order
        tokens = torch.cat([t for _, t, _ in held])
        index = torch.tensor(flat, dtype=torch.long, device=tokens.device)
        features = None if held[0][2] is None else torch.cat([f for _, _, f in held])[index]
        return CatchUp(caught, counts, tokens[index], features)

    def pending(self, rids: list) -> np.ndarray:
        """[B] skipped rows each request of the batch would catch up if it drafted now."""
        return np.array([self._count(rid) for rid in rids], dtype=np.int64)

    def forget(self, rid) -> int:
        """Drop a request's backlog (finished, or its draft state moved on outside FASER's decode step); the
        number of rows dropped."""
        count = self._count(rid)
        self._first.pop(rid, None)
        self._seeds.pop(rid, None)
        self._last = None
        return count
