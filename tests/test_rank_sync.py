"""Rank 0's draft lengths reach every rank: two real processes over gloo on loopback."""

from __future__ import annotations

import json
import socket

import numpy as np
import torch.distributed as dist
import torch.multiprocessing as mp

from sglang_faser.engine.rank_sync import broadcast_lengths


def _rank(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    group = dist.group.WORLD
    try:
        mine = np.array([3, 0, 2]) if rank == 0 else np.array([9, 9, 9])  # rank 1's own view is ignored
        result = {"lengths": broadcast_lengths(mine if rank == 0 else None, 3, group, src=0).tolist()}
        result["garbage_ignored"] = broadcast_lengths(mine, 3, group, src=0).tolist()
        try:  # rank 1 thinks the batch has 4 requests: it must not run with rank 0's 3 lengths
            broadcast_lengths(mine if rank == 0 else None, 3 if rank == 0 else 4, group, src=0)
            result["mismatch"] = None
        except ValueError as exc:
            result["mismatch"] = str(exc)
        with open(f"{out}/rank{rank}.json", "w") as handle:
            json.dump(result, handle)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_every_rank_ends_with_the_source_ranks_lengths(tmp_path):
    mp.spawn(_rank, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["lengths"] for r in ranks] == [[3, 0, 2], [3, 0, 2]]
    assert [r["garbage_ignored"] for r in ranks] == [[3, 0, 2], [3, 0, 2]]
    assert ranks[0]["mismatch"] is None and "batch of 4, the source rank decided for 3" in ranks[1]["mismatch"]


def test_without_a_group_the_lengths_are_returned_as_given():
    lengths = np.array([1, 2])
    assert broadcast_lengths(lengths, 2, None, src=0) is lengths
