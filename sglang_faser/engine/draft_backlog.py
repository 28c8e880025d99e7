"""The draft's backlog after steps without speculation: what it skipped, to catch up in one pass when drafting resumes.

A step where every request has k = 0 is close to a plain decode: the target verifies one row per request and
SGLang's draft-extend (a whole draft forward over the batch) is skipped, so such a step runs no draft model. The
draft's state then falls behind: its KV lacks the skipped positions and its next-token guess is stale.
``DraftBacklog`` keeps, per skipped step, the rows the draft-extend would have consumed (the token each request
verified and, for EAGLE, the target's feature at that row); when a step drafts again, ``take`` hands back each
request's skipped rows, in position order, for one batched draft extend over all of them
(``touchpoints.catch_up_draft``), after which drafting proceeds as if nothing had been skipped.

Each request's skipped rows are contiguous positions ending just before its current length: every whole-batch
k = 0 step advances each of its requests by exactly one token, and any step that drafts catches everyone up.
A request missing from a skipped step (finished, retracted) loses its backlog; a re-prefill rebuilds its draft
state anyway. At most ``limit`` rows per request are kept: older skipped positions keep stale draft KV, which
costs acceptance, never correctness (the target verifies every draft).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CATCH_UP_LIMIT = 64


@dataclass
class CatchUp:
    members: list[int]  # batch rows of the requests that catch up
    counts: list[int]  # skipped rows per member
    tokens: torch.Tensor  # [sum(counts)] the tokens at the skipped positions, member by member
    features: torch.Tensor | None  # [sum(counts), H] the target's features there (EAGLE); None for STANDALONE


class DraftBacklog:
    def __init__(self, limit: int = CATCH_UP_LIMIT):
        self.limit = limit
        self._steps: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self._rows: dict[str, list[tuple[int, int]]] = {}  # rid -> [(step, row)] in position order
        self._step = 0

    def __len__(self) -> int:
        return len(self._rows)

    def record(self, rids: list[str], tokens: torch.Tensor, features: torch.Tensor | None) -> None:
        """One skipped step: ``tokens[i]`` (and ``features[i]``) belong to request ``rids[i]``."""
        step, self._step = self._step, self._step + 1
        self._steps[step] = (tokens, features)
        self._steps.pop(step - self.limit, None)
        rows = {}
        for i, rid in enumerate(rids):
            mine = self._rows.get(rid, [])
            mine.append((step, i))
            rows[rid] = mine[-self.limit:]
        self._rows = rows  # requests absent from this step are gone

    def take(self, rids: list[str]) -> CatchUp | None:
        """The backlog of this batch's requests, in batch order; afterwards the backlog is empty."""
        if not self._rows:
            return None
        steps = sorted(self._steps)
        offsets, at = {}, 0
        for s in steps:
            offsets[s] = at
            at += len(self._steps[s][0])
        members, counts, flat = [], [], []
        for i, rid in enumerate(rids):
            mine = self._rows.get(rid)
            if mine:
                members.append(i)
                counts.append(len(mine))
                flat.extend(offsets[s] + row for s, row in mine)
        catch_up = None
        if members:
            tokens = torch.cat([self._steps[s][0] for s in steps])
            index = torch.tensor(flat, dtype=torch.long, device=tokens.device)
            features = None
            if self._steps[steps[0]][1] is not None:
                features = torch.cat([self._steps[s][1] for s in steps])[index]
            catch_up = CatchUp(members, counts, tokens[index], features)
        self._steps.clear()
        self._rows.clear()
        return catch_up

    def forget(self, rid: str) -> None:
        self._rows.pop(rid, None)
