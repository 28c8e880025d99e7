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

from dataclasses import dataclass

import numpy as np
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

    def record(self, rids: list[str], skipped: list[int], tokens: torch.Tensor, features: torch.Tensor | None) -> None:
        """One step of the batch ``rids``: the requests at batch rows ``skipped`` left out the draft-extend, and
        ``tokens[j]`` (and ``features[j]``) are the row ``skipped[j]`` would have consumed. The others drafted (and
        were caught up before), so they hold no backlog."""
        step, self._step = self._step, self._step + 1
        if skipped:
            self._steps[step] = (tokens, features)
        rows = {}
        for j, i in enumerate(skipped):
            mine = self._rows.get(rids[i], [])
            mine.append((step, j))
            if len(mine) > self.limit:
                del mine[0]
            rows[rids[i]] = mine
        self._rows = rows  # requests absent from this step, or that drafted in it, hold nothing
        oldest = min((mine[0][0] for mine in rows.values()), default=step + 1)
        for s in [s for s in self._steps if s < oldest]:  # steps no request holds a row of any more
            del self._steps[s]

    def seed(self, rids: list[str], counts: list[int], tokens: torch.Tensor, features: torch.Tensor | None) -> None:
        """New requests whose prefill skipped the draft: request i's last ``counts[i]`` (at most ``limit``) prompt
        rows, the rows ending just before its length, are ``tokens`` (and ``features``) in request order."""
        step, self._step = self._step, self._step + 1
        self._steps[step] = (tokens, features)
        at = 0
        for rid, count in zip(rids, counts):
            self._rows[rid] = [(step, at + j) for j in range(count)]
            at += count

    def take(self, rids: list[str], members: list[int] | None = None) -> CatchUp | None:
        """The backlog of the requests at batch rows ``members`` (default: all of ``rids``), in batch order; they
        hold none afterwards."""
        if not self._rows:
            return None
        offsets, at = {}, 0
        for s in sorted(self._steps):
            offsets[s] = at
            at += len(self._steps[s][0])
        caught, counts, flat = [], [], []
        for i in range(len(rids)) if members is None else members:
            mine = self._rows.pop(rids[i], None)
            if mine:
                caught.append(i)
                counts.append(len(mine))
                flat.extend(offsets[s] + row for s, row in mine)
        catch_up = None
        if caught:
            steps = sorted(self._steps)
            tokens = torch.cat([self._steps[s][0] for s in steps])
            index = torch.tensor(flat, dtype=torch.long, device=tokens.device)
            features = None
            if self._steps[steps[0]][1] is not None:
                features = torch.cat([self._steps[s][1] for s in steps])[index]
            catch_up = CatchUp(caught, counts, tokens[index], features)
        if not self._rows:
            self._steps.clear()
        return catch_up

    def pending(self, rids: list[str]) -> np.ndarray:
        """[B] skipped rows each request of the batch would catch up if it drafted now."""
        return np.array([len(self._rows.get(rid, ())) for rid in rids], dtype=np.int64)

    def forget(self, rid: str) -> int:
        """Drop a request's backlog (finished, or its draft state moved on outside FASER's decode step); the
        number of rows dropped."""
        return len(self._rows.pop(rid, ()))
