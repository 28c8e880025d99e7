"""Per-request, per-position acceptance: a_i[t] = P(draft position t+1 accepted | all earlier accepted).

FASER's Adaptive Drafter decides from each request's own acceptance history (faser-algorithms.md §1.3, §2). Each
verify step tells us, for request i with proposed length k_i and n_i accepted drafts, that positions 1..n_i were
accepted and position n_i+1 (if n_i < k_i) was rejected; later positions were not observed.

The estimate is a Beta posterior per request and position, learnt both ways:

* **counts with decay**: every verify step of a request with drafts multiplies its success / failure counts by
  1 - ``request_rate`` and adds what was observed, so a request whose drafts start failing drops within a few
  steps;
* **parked requests fade with back-off**: a step where the request has length 0 observes nothing; its evidence
  fades there at ``request_rate`` / 2^b, where b counts its probes in a row whose first draft failed (capped at
  ``MAX_BACKOFF``; a probe with an accepted draft resets it). A request that failed once is probed again within
  a few steps; one whose probes keep failing waits twice as long each time, so hopeless requests cost O(log T)
  probes instead of one every few steps (at batch 1 a probe costs more than a plain step). Such steps are only
  counted per request, and their fading is applied in one go before the request's evidence is next read (a
  parked batch's step is a plain decode, and fading row by row cost a small batch's CPU step 1-2 %). A new
  request starts at the back-off finished requests ended with (a running mean over the last few, rounded down):
  where first drafts keep failing, a new request's first probe is one draft deep and later ones come seldom
  (the deep cycle pair's doomed requests at batch 1 each paid a full-depth probe and four one-draft probes of
  256 steps; one or two one-draft probes once a few had finished), and where they pass it starts at none;
* **prior from the server and the request's other positions, one request one vote**: the posterior mean is
  (s + w c) / (s + f + w), w = ``prior_weight`` / (1 + the request's observations there so far)
  pseudo-observations and c the request's own rate over all its positions, shrunk towards g, the server-wide
  rate by position, with ``prior_weight`` pseudo-observations (a request that passes every draft it tries likely
  passes deeper ones too, one that fails its first draft likely fails the later ones: the conditional rates of
  one request's positions go together). A new request starts from what the server sees and a long record
  speaks for itself (with w fixed, decayed counts of about 1 / ``request_rate`` observations held a request that
  never failed at 0.93 per position, and its deep drafts at half their worth). g is a running mean over finished
  requests of each one's own rate, not pooled tokens: pooled, the requests that draft most set it (a run of sure
  requests had every new request probe at full depth, a run of doomed ones at length 1 left g near 0 and no
  later request was ever tried). A finished request votes at each position it ever tried with its rate there
  over its whole life (lifetime counts, kept beside the decayed ones); one that never tried a position pulls g there
  back towards the initial ``prior``, so requests that were never tried cannot write speculation off for good. A
  request shorter than ``FULL_VOTE_STEPS`` decode steps votes with that share of a vote (too short to be tried,
  it says little about whether requests are worth trying);
* **optimism where evidence is thin**: decisions use the posterior mean, plus ``explore`` x sd, sd = sqrt(mean
  (1 - mean) / (s + f + w + 1)), at the first position the request has less than one (decayed) observation of: a
  UCB bonus for one position past what it has tried lately. A request held short therefore looks better one
  position deeper as its old evidence fades, and is probed there when the goodput policy says it may pay; no fixed
  exploration cadence is needed. The bonus grows with the log of the steps since the position was last observed
  (UCB's log t), so a request that a pessimistic server-wide estimate holds short is still tried deeper.
  Positions it tries every step get no bonus (one on every position compounds along the chain into far too long
  drafts: measured on the mixed workload, 6.6 of 7 draft tokens on average). A request never tried gets the
  bonus along its whole chain: where a draft forward costs about a plain step one draft seldom pays alone, only a
  deeper probe can (on the tiny CPU pair a sure request otherwise never drafted). It is estimated at, and hopes by
  the spread of, what finished requests were at each position among those that tried it (``untried_by_position``,
  pooled with one request's worth of the server-wide estimate and the prior): after a run of requests whose first
  draft failed, a new one is probed about every other request, not every one (the server-wide estimate alone,
  pulled back towards the prior by the requests never tried, had every new request at batch 1 probed at full
  depth once its optimism had grown, 5-7 plain steps' worth a request); the disagreement between that estimate and
  the tried requests widens the spread, so probes resume as requests held short accumulate, and a workload whose
  requests differ keeps its spread. A parked request with its own record does not get the bonus along its chain
  (with it, requests parked by load were later drafted deep, and the mixed workload lost up to 6 % at 16-64
  req/s). A request whose last probes failed at the first draft (in back-off) is probed one draft deep whatever
  its optimism says (``probe_limits``): one draft tells as much as five and costs a fifth. So is a new request
  that hope alone drafts (the controller's decision); while its drafts pass, it keeps a never-tried request's
  bonus along the rest of its chain (``probed_short``), so it is probed deeper at once.
  A step's decision takes the optimistic estimates of one request only, the one whose optimism adds most
  (``estimates`` gives means and optimistic estimates; controller.py ``_explore_few``): optimism on a whole batch
  at once compounded into deep steps drafted on hope.

All updates are vectorised over the batch: one call per verify step, no Python loop per request.
"""

from __future__ import annotations

import numpy as np

REQUEST_PRIOR_RATE = 0.1  # weight of a finished request in the server-wide prior: about the last 10 requests
FULL_VOTE_STEPS = 16  # decode steps after which a finished request votes in full (fewer: that share of a vote)
BACKOFF_PRIOR_RATE = 0.3  # weight of a finished request in the back-off a new one starts with: the last few
MAX_BACKOFF = 6  # a parked request's evidence fades at least at request_rate / 64 per step


class AcceptanceTracker:
    def __init__(self, max_len: int, prior: float = 0.6, request_rate: float = 0.2, prior_weight: float = 1.0,
                 explore: float = 1.0, initial_capacity: int = 256):
        if max_len < 1:
            raise ValueError("max_len must be >= 1")
        self.max_len = max_len
        self.request_rate = request_rate
        self.prior_weight = prior_weight
        self.explore = explore
        self.prior = prior
        self._by_request = np.full(max_len, prior)  # server-wide acceptance by position, over finished requests
        # finished requests' own rates by position, over those that tried it: decayed weight, sum, sum of squares
        self._tried = np.zeros((3, max_len))
        self._rows: dict[str, int] = {}
        # [decayed successes, decayed failures, observations ever, successes ever] x rows x positions: the decayed
        # counts are the request's posterior, the lifetime ones its vote when it finishes (``forget``)
        self._counts = np.zeros((4, initial_capacity, max_len))
        self._backoff = np.zeros(initial_capacity, dtype=np.int64)  # failed probes in a row, per row
        self._finished_backoff = 0.0  # running mean of finished requests' back-off: where a new one starts
        self._idle = np.zeros((initial_capacity, max_len))  # steps since each position was last observed
        self._unfaded = np.zeros(initial_capacity)  # steps without drafts not yet applied to each row (_settle)
        self._steps = np.zeros(initial_capacity)  # decode steps each row's request took part in
        self._short = np.zeros(initial_capacity, dtype=bool)  # first probe cut short, passed so far (probed_short)
        self._free: list[int] = list(range(initial_capacity - 1, -1, -1))
        self._positions = np.arange(max_len)
        self._last_lookup: tuple[list[str], np.ndarray] | None = None  # (rids, rows) of the last ``_lookup``

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def global_accept_by_position(self) -> np.ndarray:
        """What a new request starts from: the running mean of finished requests' own rates by position."""
        return self._by_request

    def untried_by_position(self) -> tuple[np.ndarray, np.ndarray]:
        """(centre, spread) [max_len] of what a request never tried may be at each position: the pooled mean and
        standard deviation of finished requests' own rates there, over those that tried it (recent ones weighing
        most), and of one request's worth of the server-wide estimate with the prior Beta's variance
        (``prior_weight`` observations). The spread holds their disagreement: after a run of requests held short,
        whose votes pull the server-wide estimate back towards the prior, the hope of a new one grows again."""
        weight, total, squares = self._tried
        centre = (self._by_request + total) / (1.0 + weight)
        prior_var = self.prior * (1.0 - self.prior) / (self.prior_weight + 1.0)
        # second moments about the centre: the server-wide pseudo-request's, then the tried requests' sum
        moments = prior_var + (self._by_request - centre) ** 2 + squares - 2.0 * centre * total + weight * centre ** 2
        return centre, np.sqrt(np.maximum(moments, 0.0) / (1.0 + weight))

    def _row_of(self, rid: str) -> int:
        row = self._rows.get(rid)
        if row is None:
            if not self._free:
                old = self._counts.shape[1]
                self._counts = np.concatenate([self._counts, np.zeros_like(self._counts)], axis=1)
                self._backoff = np.concatenate([self._backoff, np.zeros_like(self._backoff)])
                self._idle = np.concatenate([self._idle, np.zeros_like(self._idle)])
                self._unfaded = np.concatenate([self._unfaded, np.zeros_like(self._unfaded)])
                self._steps = np.concatenate([self._steps, np.zeros_like(self._steps)])
                self._short = np.concatenate([self._short, np.zeros_like(self._short)])
                self._free.extend(range(2 * old - 1, old - 1, -1))
            row = self._free.pop()
            self._counts[:, row] = 0.0
            self._backoff[row] = int(self._finished_backoff)
            self._idle[row] = 0.0
            self._unfaded[row] = 0.0
            self._steps[row] = 0.0
            self._short[row] = False
            self._rows[rid] = row
        return row

    def rows_for(self, rids: list[str]) -> np.ndarray:
        """The requests' rows, their evidence up to date (``_settle``)."""
        rows = self._lookup(rids)
        self._settle(rows)
        return rows

    def _lookup(self, rids: list[str]) -> np.ndarray:
        """The requests' rows (read-only: the same batch as the last lookup gets the same array, as most steps do)."""
        last = self._last_lookup
        if last is not None and last[0] == rids:
            return last[1]
        rows = np.fromiter((self._row_of(r) for r in rids), dtype=np.int64, count=len(rids))
        self._last_lookup = (list(rids), rows)
        return rows

    def _settle(self, rows: np.ndarray) -> None:
        """Apply the rows' steps without drafts since they were last read: n such steps fade the counts by
        (1 - request_rate / 2^b)^n and age every position by n, as n steps one by one would (b is fixed while
        nothing is drafted)."""
        steps = self._unfaded[rows]
        if not steps.any():
            return
        keep = (1.0 - self.request_rate / 2.0 ** self._backoff[rows]) ** steps
        self._counts[:2, rows] *= keep[None, :, None]
        self._idle[rows] += steps[:, None]
        self._steps[rows] += steps
        self._unfaded[rows] = 0.0

    def posterior(self, rids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(mean, standard deviation) [B, max_len] of each request's conditional acceptance by position."""
        return self._posterior(self._counts[:, self.rows_for(rids)])  # may grow the table: index it afterwards

    def _posterior(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) of the rows whose counts [4, B, max_len] these are (the decayed ones and observations ever)."""
        succ, fail, seen = counts[:3]
        # the prior at each position: the request's own rate over all its positions, shrunk towards the server's
        # rate there (a request that passes every draft it tries likely passes deeper ones too)
        own_s, own_f = succ.sum(axis=1, keepdims=True), fail.sum(axis=1, keepdims=True)
        centre = (self.prior_weight * self.global_accept_by_position[None, :] + own_s) / (
            self.prior_weight + own_s + own_f)
        weight = self.prior_weight / (1.0 + seen)  # the prior's say fades as the request's own record grows
        n = succ + fail + weight
        mean = (succ + weight * centre) / n
        return mean, np.sqrt(mean * (1.0 - mean) / (n + 1.0))

    def estimates(self, rids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """([B, max_len] posterior means, [B, max_len] the estimates for decisions): the means, plus explore x sd x
        sqrt(1 + ln(1 + idle)) at the first position the request has less than one (decayed) observation of (at
        every position of a request never tried), idle the steps since that position was last observed: optimism
        for one position past what it has tried lately, never for what it has just seen (a bonus on every position
        compounds along the chain into far too long drafts), growing like UCB's with the time it has gone untried,
        so a request that a pessimistic server-wide estimate holds at length 0 is still tried, after a number of
        steps that grows with how dear a probe is. A request never tried is estimated at what finished requests
        that tried each position were, and hopes by their spread (``untried_by_position``), not its posterior's."""
        rows = self.rows_for(rids)
        counts = self._counts[:, rows]
        mean, sd = self._posterior(counts)
        seldom = counts[0] + counts[1] < 1.0
        # the first such position: probe one deeper at a time; a request never tried at all is uncertain all
        # along its chain, and one draft seldom pays alone; it may be what finished requests were (their spread)
        untried = counts[2, :, :1] == 0
        first = self._positions == seldom.argmax(axis=1)[:, None]  # (NumPy's cumsum along 8 positions: ~12 us)
        probe = seldom & (first | untried | self._short[rows, None])
        if untried.any():  # most steps of a long-running batch have none
            centre, spread = self.untried_by_position()
            mean, sd = np.where(untried, centre[None, :], mean), np.where(untried, spread[None, :], sd)
        bonus = self.explore * sd * np.sqrt(1.0 + np.log1p(self._idle[rows]))
        return mean, np.minimum(mean + bonus * probe, 1.0)

    def probe_limits(self, rids: list[str]) -> np.ndarray:
        """[B] the longest length worth running for information: a request whose last probes failed at its first
        draft (in back-off) is probed one position deeper than its recent evidence, however far the optimism
        along its chain would draft it (a full-depth probe of a doomed request costs several plain steps at
        batch 1, one draft tells as much); others up to ``max_len``."""
        rows = self.rows_for(rids)
        seldom = self._counts[0, rows] + self._counts[1, rows] < 1.0
        first = np.where(seldom.any(axis=1), seldom.argmax(axis=1) + 1, self.max_len)
        return np.where(self._backoff[rows] > 0, first, self.max_len)

    def failed_probes(self, rids: list[str]) -> np.ndarray:
        """[B] each request's back-off (failed probes in a row): parked, its evidence fades at request_rate / 2^b a
        step."""
        return self._backoff[self._lookup(rids)]

    def first_evidence(self, rids: list[str]) -> np.ndarray:
        """[B] each request's decayed observations of its first draft position (0: never tried, or long faded)."""
        rows = self.rows_for(rids)
        return self._counts[0, rows, 0] + self._counts[1, rows, 0]

    def untried(self, rids: list[str]) -> np.ndarray:
        """[B] bool: requests that never drafted (no evidence of their own at any position)."""
        return self._never_drafted(self.rows_for(rids))

    def _never_drafted(self, rows: np.ndarray) -> np.ndarray:
        return self._counts[2, rows, 0] == 0

    def probed_short(self, rids: list[str], short: np.ndarray) -> None:
        """The requests at ``short`` run their first probe one draft deep, cut from the deeper one their hopes
        asked for: while their drafts pass they keep the hopes of a request never tried along the rest of their
        chain, so the next step probes deeper (where one draft costs about a plain step, one passed draft alone
        never justifies a second)."""
        self._short[self.rows_for(rids)] |= np.asarray(short, dtype=bool)

    def observe(self, rids: list[str], proposed: np.ndarray, accepted: np.ndarray) -> None:
        """Record one verify step: request i proposed ``proposed[i]`` drafts and ``accepted[i]`` were accepted."""
        proposed = np.minimum(np.asarray(proposed, dtype=np.int64), self.max_len)
        if not proposed.any():
            self.observe_parked(rids)
            return
        if len(rids) == 1:  # batch 1: scalars on the row's views (a third of the array code's time)
            self._observe_one(int(self.rows_for(rids)[0]), int(proposed[0]), int(accepted[0]))
            return
        rows = _as_slice(self.rows_for(rids))  # consecutive rows (most batches): views, updated in place
        accepted = np.minimum(np.asarray(accepted, dtype=np.int64), proposed)
        t, accepted_to = self._positions[None, :], accepted[:, None]
        success = t < accepted_to  # the accepted run, then the first rejection where one came
        failure = (t == accepted_to) & (accepted < proposed)[:, None]
        observed = success | failure
        drafted = proposed > 0
        backoff = self._backoff[rows]
        counts = self._counts[:, rows]
        if drafted.all():  # a drafting step: every request's counts decay alike
            counts[:2] *= 1.0 - self.request_rate
        else:
            counts[:2] *= (1.0 - np.where(drafted, self.request_rate, self.request_rate / 2.0 ** backoff))[:, None]
        counts[0] += success
        counts[1] += failure
        counts[2] += observed
        counts[3] += success
        if not isinstance(rows, slice):
            self._counts[:, rows] = counts
        self._backoff[rows] = np.where(drafted, np.where(accepted > 0, 0, np.minimum(backoff + 1, MAX_BACKOFF)),
                                       backoff)
        idle = self._idle[rows] + 1.0
        idle[observed] = 0.0
        self._idle[rows] = idle
        self._steps[rows] += 1.0
        self._short[rows] &= ~drafted | ((accepted == proposed) & (proposed <= 1))  # ends at a failure or deeper

    def _observe_one(self, row: int, proposed: int, accepted: int) -> None:
        """``observe`` of one request that drafted (``proposed`` > 0)."""
        accepted = min(accepted, proposed)
        seen = accepted + (accepted < proposed)  # the accepted run, then the first rejection where one came
        counts = self._counts[:, row]
        counts[:2] *= 1.0 - self.request_rate
        counts[0, :accepted] += 1.0
        counts[3, :accepted] += 1.0
        if accepted < proposed:
            counts[1, accepted] += 1.0
        counts[2, :seen] += 1.0
        self._backoff[row] = 0 if accepted > 0 else min(int(self._backoff[row]) + 1, MAX_BACKOFF)
        idle = self._idle[row]
        idle += 1.0
        idle[:seen] = 0.0
        self._steps[row] += 1.0
        if accepted < proposed or proposed > 1:
            self._short[row] = False

    def observe_parked(self, rids: list[str]) -> None:
        """A step without drafts (the common step of a parked batch): evidence only fades, when it is next read."""
        rows = self._lookup(rids)  # first: a new row may grow the table, and ``_unfaded`` with it
        self._unfaded[rows] += 1.0

    def forget(self, rid: str) -> None:
        """Free a finished request's row; its own acceptance joins the server-wide prior first, as one vote if it
        ran ``FULL_VOTE_STEPS`` decode steps or more and that share of one if fewer: a request too short to have
        been tried says little about whether requests are worth trying (a stream of them would otherwise erase
        what longer ones showed)."""
        row = self._rows.get(rid)
        if row is not None:
            self._last_lookup = None  # its row is free for another request
            self._settle(np.array([row]))
            del self._rows[rid]
            ever, passed = self._counts[2:, row]
            share = min(1.0, self._steps[row] / FULL_VOTE_STEPS)
            vote = REQUEST_PRIOR_RATE * share
            # a position it ever tried votes with its rate there over its whole life, however long ago (weighed
            # by the decayed counts, a request parked after its probes failed voted mostly for the initial prior,
            # and every new request was probed at full depth); not by the decayed counts' ratio either, which the
            # last observation after a parked spell outweighs: at start-up on CPU a request whose first drafts
            # passed 4 times in 6 voted 0.07 there, its last probe's failure against its faded record, and five
            # such votes put every new request of a burst at 0.24 where they passed 0.7, parked for the burst
            seen = np.minimum(ever, 1.0)
            rate = passed / np.maximum(ever, 1.0)
            target = seen * rate + (1.0 - seen) * self.prior
            self._by_request += vote * (target - self._by_request)
            self._finished_backoff += BACKOFF_PRIOR_RATE * share * (self._backoff[row] - self._finished_backoff)
            # every finished request ages what earlier ones showed, those that never tried a position too: after a
            # run of requests held short, a new one hopes from the server-wide estimate again
            self._tried = (1.0 - vote) * self._tried + (vote / REQUEST_PRIOR_RATE) * seen * np.stack(
                [np.ones_like(rate), rate, rate * rate])
            self._free.append(row)


def _as_slice(rows: np.ndarray) -> slice | np.ndarray:
    """``rows`` as a slice where they are consecutive (indexing by it gives views, no copies), else as they are."""
    first, n = int(rows[0]), len(rows)
    if int(rows[-1]) - first == n - 1 and (n < 3 or bool((rows[1:] - rows[:-1] == 1).all())):
        return slice(first, first + n)
    return rows


def expected_tokens(accept_probs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """E[tokens emitted] per request at the given lengths: 1 + sum_{t<k} prod_{j<=t} a[j] (§2)."""
    survival = np.cumprod(accept_probs, axis=1)
    cols = np.arange(accept_probs.shape[1])[None, :]
    return 1.0 + np.where(cols < np.asarray(lengths)[:, None], survival, 0.0).sum(axis=1)
