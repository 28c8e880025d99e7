"""Per-request, per-position acceptance estimates: a_i[t] = P(draft position t+1 accepted | all earlier accepted).

FASER's Adaptive Drafter decides from each request's own acceptance history (faser-algorithms.md §1.3, §2). Each
verify step tells us, for request i with proposed length k_i and n_i accepted drafts, that positions 1..n_i were
accepted and position n_i+1 (if n_i < k_i) was rejected; later positions were not observed. Observed positions move
the request's estimate by an exponential moving average; unobserved ones relax slowly towards the server-wide
estimate, so a request parked at length 0 is re-probed once the server-wide picture says drafting pays. New requests
start from the server-wide estimate (itself an EMA over every observation), not from a constant.

All updates are vectorised over the batch: one call per verify step, no Python loop per request.
"""

from __future__ import annotations

import numpy as np


class AcceptanceTracker:
    def __init__(
        self,
        max_len: int,
        prior: float = 0.6,
        request_rate: float = 0.3,
        global_rate: float = 0.05,
        relax_rate: float = 0.02,
        initial_capacity: int = 256,
    ):
        if max_len < 1:
            raise ValueError("max_len must be >= 1")
        self.max_len = max_len
        self.request_rate = request_rate
        self.global_rate = global_rate
        self.relax_rate = relax_rate
        self.global_accept_by_position = np.full(max_len, prior, dtype=np.float64)
        self._rows: dict[str, int] = {}
        self._table = np.empty((initial_capacity, max_len), dtype=np.float64)
        self._free: list[int] = list(range(initial_capacity - 1, -1, -1))
        self._positions = np.arange(max_len)

    def __len__(self) -> int:
        return len(self._rows)

    def _row_of(self, rid: str) -> int:
        row = self._rows.get(rid)
        if row is None:
            if not self._free:
                old = self._table.shape[0]
                self._table = np.concatenate([self._table, np.empty_like(self._table)])
                self._free.extend(range(2 * old - 1, old - 1, -1))
            row = self._free.pop()
            self._table[row] = self.global_accept_by_position
            self._rows[rid] = row
        return row

    def rows_for(self, rids: list[str]) -> np.ndarray:
        return np.fromiter((self._row_of(r) for r in rids), dtype=np.int64, count=len(rids))

    def accept_probs(self, rids: list[str]) -> np.ndarray:
        """[B, max_len] conditional acceptance estimates for these requests (a copy)."""
        rows = self.rows_for(rids)  # may grow the table: index it afterwards
        return self._table[rows]

    def observe(self, rids: list[str], proposed: np.ndarray, accepted: np.ndarray) -> None:
        """Record one verify step: request i proposed ``proposed[i]`` drafts and ``accepted[i]`` were accepted."""
        proposed = np.minimum(np.asarray(proposed, dtype=np.int64), self.max_len)
        accepted = np.minimum(np.asarray(accepted, dtype=np.int64), proposed)
        rows = self.rows_for(rids)
        t = self._positions[None, :]
        observed = (t <= accepted[:, None]) & (t < proposed[:, None])  # accepted run plus the first rejection
        outcome = (t < accepted[:, None]).astype(np.float64)

        table = self._table[rows]
        table += np.where(observed, self.request_rate * (outcome - table), 0.0)
        table += np.where(observed, 0.0, self.relax_rate * (self.global_accept_by_position - table))
        self._table[rows] = table

        trials = observed.sum(axis=0)
        seen = trials > 0
        if seen.any():
            rate = (outcome * observed).sum(axis=0)[seen] / trials[seen]
            weight = 1.0 - (1.0 - self.global_rate) ** trials[seen]
            self.global_accept_by_position[seen] += weight * (rate - self.global_accept_by_position[seen])

    def forget(self, rid: str) -> None:
        """Free a finished request's row."""
        row = self._rows.pop(rid, None)
        if row is not None:
            self._free.append(row)


def expected_tokens(accept_probs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """E[tokens emitted] per request at the given lengths: 1 + sum_{t<k} prod_{j<=t} a[j] (§2)."""
    survival = np.cumprod(accept_probs, axis=1)
    cols = np.arange(accept_probs.shape[1])[None, :]
    return 1.0 + np.where(cols < np.asarray(lengths)[:, None], survival, 0.0).sum(axis=1)
