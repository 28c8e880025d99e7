"""What the goodput policy keeps between steps, by depth cap D = 0..K: the step's prices (``StepShape``, they change
only with the fit and the batch size) and the requests' bounds (``Bounds``, they change only when a request joins,
leaves or gets new limits); and each step's survival and expected tokens by length (``worth_and_gain``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from sglang_faser.spec.cost_model import StepCostModel


@dataclass(frozen=True)
class StepShape:
    """A step's prices by depth cap D = 0..K and length k, before the measured correction by depth: they change
    only with the fit and the batch size, so the policy keeps them between steps."""

    fixed: np.ndarray  # [D]: what every step of depth D pays (passes, scheduler host work, draft-extend's fixed part)
    v_att: float  # per key a verified row reads (cost_model.attended_keys): the batch's context prices each row
    per_req: np.ndarray  # [D, K + 1]: a request at length k under cap D (rows, draft rows, its draft-extend rows),
    # its rows' attention over the context apart
    step: float  # the marginal cost of a draft past the first, its row's attention apart
    rows: np.ndarray  # [D, 1]: each cap's offset into ``per_req`` flattened
    reachable: np.ndarray  # [D - 1, K + 1]: length k <= D (a plan of cap D may hold it)
    falls_at_par: bool = False  # ``falls_with_depth`` where the measured correction is the same at every depth
    free_rest: bool = True  # no length costs a request less than resting (k = 0): a cap's plans cost >= fixed

    @classmethod
    def of(cls, verify: np.ndarray, draft: np.ndarray, cost: StepCostModel, batch: int, width: int) -> "StepShape":
        v0, v_req, v_tok, v_att = verify
        d0, d_ext, d_req, d_step, d_row = draft
        ks = np.arange(width + 1)
        per_k = v_tok * ks + (d_row * np.maximum(ks - 1, 0) if cost.draft_cut else 0.0)
        joins = (d_req * (ks + 1.0))[:, None] * (ks > 0)[None, :]  # cap D's draft-extend rows, once k > 0
        fixed = (v0 * cost.verify_passes(ks) + (v_req + v_tok) * batch + d0 + d_step * ks + d_ext * (ks > 0)
                 + (0.0 if cost.draft_cut else d_row * batch * np.maximum(ks - 1, 0)))
        step = v_tok + (d_row if cost.draft_cut else 0.0)
        shape = cls(fixed, float(v_att), per_k[None, :] + joins, float(step), ks[:, None] * (width + 1),
                    ks[None, :] <= ks[:-1, None])
        return replace(shape, falls_at_par=shape.falls_with_depth(shape.fixed, shape.per_req),
                       free_rest=bool((shape.per_req >= 0).all() and shape.v_att >= 0))

    def falls_with_depth(self, fixed: np.ndarray, per_req: np.ndarray) -> bool:
        """Whether a plan may cost less at a deeper cap than at its own depth: the fixed part or some length's
        part gets cheaper with depth (a measured correction that falls with depth can make them)."""
        return bool((np.diff(fixed) < 0).any() or ((np.diff(per_req, axis=0) < 0) & self.reachable).any())


@dataclass(frozen=True)
class Bounds:
    """What the requests' bounds give every cap D = 0..K: they change only when a request joins, leaves or gets
    new limits, so the policy keeps them between steps."""

    high: np.ndarray  # [D, B]: each request's longest length under cap D
    floor: int  # the highest floor
    feasible: np.ndarray  # [D]: D within every request's floor and some request's cap
    first: np.ndarray  # [1, B]: each request's shortest drafting length
    may_rest: np.ndarray | None  # [D, B]: length 0 allowed (None: everywhere, no request has a floor)
    same: np.ndarray  # [D, B]: every single length, within each request's bounds
    same_depth: np.ndarray  # [D]: the depth each single length runs at
    same_index: np.ndarray  # [D, B]: where request i at its single length is in a [K + 1, B] array, flat
    cols: np.ndarray  # [1, B]: the requests' columns
    feasible_caps: np.ndarray  # the D where ``feasible``

    @classmethod
    def of(cls, caps: np.ndarray, min_lens: np.ndarray, width: int) -> "Bounds":
        ks, cols = np.arange(width + 1), np.arange(len(caps))[None, :]
        low = min_lens[None, :]
        high = np.minimum(caps[None, :], ks[:, None])
        floor = int(min_lens.max())
        same = np.clip(ks[:, None], low, caps[None, :])
        bounds = cls(high, floor, (ks >= floor) & (ks <= caps.max()), np.maximum(low, 1),
                     None if floor == 0 else (low == 0) | (high == 0), same, same.max(axis=1),
                     same * len(caps) + cols, cols, np.flatnonzero((ks >= floor) & (ks <= caps.max())))
        for array in (bounds.high, bounds.feasible, bounds.first, bounds.may_rest, bounds.same, bounds.same_depth,
                      bounds.same_index, bounds.cols, bounds.feasible_caps):
            if array is not None:  # shared by the steps that reuse them
                array.flags.writeable = False
        return bounds


def worth_and_gain(accept_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Survival m[k] = prod_{j<=k} a[j] for k < K, [K, B], and T(k) = 1 + sum_{t<k} m[t] for k = 0..K,
    [K + 1, B], position-major. Row by row and one product with a triangle of ones: NumPy's cumprod and cumsum
    along an axis of 8 took 12 us each at B = 256, where the policy's whole decision takes ~0.2 ms."""
    survival = np.empty(accept_probs.shape[::-1])
    np.maximum(np.minimum(accept_probs.T, 1.0, out=survival), 0.0, out=survival)  # (np.clip's wrapper: ~3 us)
    for k in range(1, len(survival)):
        np.multiply(survival[k - 1], survival[k], out=survival[k])
    gain = below_sums(len(survival)) @ survival
    gain += 1.0
    return survival, gain


@lru_cache(maxsize=None)
def below_sums(width: int) -> np.ndarray:
    """[K + 1, K]: row k sums positions t < k."""
    below = np.tril(np.ones((width + 1, width)), -1)
    below.flags.writeable = False
    return below
