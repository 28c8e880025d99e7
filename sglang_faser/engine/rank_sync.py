"""One rank decides the draft lengths, every rank runs them.

With tensor parallelism every scheduler rank runs the same forward passes, so all must use the same
per-request lengths, and each rank's own controller could decide differently (timings, optimistic probes). Only the
source rank decides; :func:`broadcast_lengths` hands its lengths to the others over a CPU process group (gloo),
once per step. Pure ``torch.distributed``: no SGLang import.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist


def broadcast_lengths(lengths: np.ndarray | None, batch_size: int, group, src: int) -> np.ndarray:
    """The source rank's ``lengths`` on every rank of ``group``; ``src`` is the source's global rank.

    Other ranks pass ``None`` (anything they pass is ignored). ``group`` None or of one rank: ``lengths`` is
    returned as given. Every rank must pass the same ``batch_size``: the source's is sent ahead of its lengths,
    and a rank expecting more rows raises ValueError (gloo aborts one expecting fewer).
    """
    if group is None or dist.get_world_size(group) == 1:
        return lengths
    buffer = torch.empty(batch_size + 1, dtype=torch.int64)
    if dist.get_rank() == src:
        if lengths is None or len(lengths) != batch_size:
            raise ValueError(f"source rank: {0 if lengths is None else len(lengths)} lengths for a batch of "
                             f"{batch_size}")
        buffer[0] = batch_size
        buffer[1:] = torch.from_numpy(np.asarray(lengths, dtype=np.int64))
    dist.broadcast(buffer, src=src, group=group)
    if int(buffer[0]) != batch_size:
        raise ValueError(f"rank {dist.get_rank()}: batch of {batch_size}, the source rank decided for "
                         f"{int(buffer[0])}")
    return buffer[1:].numpy()
