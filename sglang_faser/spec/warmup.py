"""The start-up warm-up's plan: which batches run, and the lengths each of their decode steps drafts.

On a GPU, SGLang's speculative Triton kernels outside the CUDA graphs take the draft depth and the batch's
power-of-two bucket as compile-time constants (``speculative_num_steps``, ``bs_upper``), so the first step at each
new (depth, bucket) pair compiles a kernel while the GPU waits: 60-430 ms a pair on an H200, about 0.7 s of a
2.3 s burst at 32 req/s (benchmarks/results/gpu/README.md, third lease). A fixed length meets each bucket once;
FASER, choosing among every depth, meets up to ``window`` times as many pairs. The warm-up runs them all before
the server takes traffic: a group of requests for each bucket edge (2, 3, 4, 5, 8, 9, ... up to the largest
batch), each group decoding through every depth, first with every request drafting, then, where the verify path is
ragged (the only one on which the policy parks some requests of a batch and drafts for others), with every other
request parked: the sub-batch and catch-up paths of such steps.

Warm-up requests are known by their rid (``RID_PREFIX``); the controller gives a batch made only of them the
sweep's lengths and keeps them out of the acceptance statistics and the counters. Their steps' measured costs,
each shape's second and later runs, are the cost model's profile prior (controller.py).
"""

from __future__ import annotations

import numpy as np

RID_PREFIX = "faser-warmup-"
DEFAULT_MAX_BATCH = 64  # when neither --max-running-requests nor --cuda-graph-max-bs-decode says
# the largest batch swept: without CUDA graphs FASER's launcher admits up to 4096 running requests (as no
# speculation does), and a sweep of every bucket up to there would take longer than the compiles it saves
MAX_BATCH = 256


def batch_sizes(max_batch: int) -> list[int]:
    """Both edges of every power-of-two bucket from 2 up to ``max_batch`` (at most ``MAX_BATCH``; batch 1 is the
    start-up sweep's, and the largest batch itself, where it is no edge): 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64 for
    64."""
    max_batch = min(max_batch, MAX_BATCH)
    sizes, bucket = [], 2
    while bucket <= max_batch:
        sizes += [bucket] + ([bucket + 1] if bucket + 1 <= max_batch else [])
        bucket *= 2
    if max_batch >= 2 and max_batch not in sizes:
        sizes.append(max_batch)
    return sorted(set(sizes))


def sweep_steps(max_len: int, mixed: bool = True) -> int:
    """Steps of one sweep: every depth 0..max_len with all drafting, then (``mixed``) 1..max_len with every other
    request parked."""
    return 2 * max_len + 1 if mixed else max_len + 1


def sweep_lengths(step: int, batch: int, max_len: int, mixed: bool = True) -> np.ndarray:
    """The draft lengths of the sweep's ``step``-th step (any count: the sweep repeats)."""
    phase = step % sweep_steps(max_len, mixed)
    lengths = np.full(batch, phase if phase <= max_len else phase - max_len, dtype=np.int64)
    if phase > max_len:
        lengths[1::2] = 0
    return lengths


def new_tokens(max_len: int) -> int:
    """Tokens each warm-up request generates: one sweep commits at most this many less one (a step commits at most
    its length plus one), so every request of a group is still running at the sweep's last step."""
    full = sum(k + 1 for k in range(max_len + 1))
    half = sum(k + 1 for k in range(1, max_len + 1))
    return full + half + 1


def is_warmup(rids) -> bool:
    return bool(rids) and all(str(rid).startswith(RID_PREFIX) for rid in rids)
