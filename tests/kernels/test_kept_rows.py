"""Kept K/V rows (``kernels/cpu/kept_rows.py``): decode steps through batch changes and cache writes, heard and
unheard, read what a fresh gather reads, and a stable batch gathers only its new rows."""

from __future__ import annotations

import math

import pytest
import torch

from sglang_faser.kernels.cpu import kept_rows
from sglang_faser.kernels.cpu.attention import decode_attention_cpu, extend_attention_cpu

H, D, SLOTS, WIDTH = 2, 8, 512, 64


@pytest.fixture
def kept(monkeypatch):
    """Rows kept at every size, each read checked against a fresh gather; a clean slate per test."""
    monkeypatch.setattr(kept_rows, "MIN_CELLS", 0)
    monkeypatch.setattr(kept_rows, "_CHECK", False)
    monkeypatch.setattr(kept_rows, "_kept", {})
    monkeypatch.setattr(kept_rows, "counts", {"served": 0, "gathered": 0})
    return kept_rows


class Cache:
    """A paged KV cache with a request table; requests get fresh slots a token at a time."""

    def __init__(self, seed: int):
        self.gen = torch.Generator().manual_seed(seed)
        self.k = torch.randn(SLOTS, H, D, generator=self.gen)
        self.v = torch.randn(SLOTS, H, D, generator=self.gen)
        self.table = torch.zeros(8, WIDTH, dtype=torch.int32)
        self.lens: dict[int, int] = {}
        self.free = list(range(1, SLOTS))

    def admit(self, pool: int, length: int) -> None:
        slots = [self.free.pop(0) for _ in range(length)]
        self.table[pool, :length] = torch.tensor(slots, dtype=torch.int32)
        self.lens[pool] = length

    def decode(self, pools: list[int]) -> torch.Tensor:
        """One decode step of ``pools``: a new slot each, its K/V written by the op; returns the output."""
        loc = []
        for pool in pools:
            slot = self.free.pop(0)
            self.table[pool, self.lens[pool]] = slot
            self.lens[pool] += 1
            loc.append(slot)
        q = torch.randn(len(pools), H, D, generator=self.gen)
        out = torch.empty(len(pools), H, D)
        decode_attention_cpu(q, self.k, self.v, 1.0, 1.0, out, torch.randn(len(pools), H, D, generator=self.gen),
                             torch.randn(len(pools), H, D, generator=self.gen), torch.tensor(loc), None, self.table,
                             torch.tensor(pools), torch.tensor([self.lens[p] for p in pools]), 1 / math.sqrt(D), 0.0,
                             False, 0, None, None)
        assert torch.allclose(out, self.reference(q, pools), atol=1e-5), "decode read other rows than the cache's"
        return out

    def reference(self, q: torch.Tensor, pools: list[int]) -> torch.Tensor:
        out = torch.empty_like(q)
        for b, pool in enumerate(pools):
            slots = self.table[pool, : self.lens[pool]].long()
            scores = torch.einsum("hd,lhd->hl", q[b], self.k[slots]) / math.sqrt(D)
            out[b] = torch.einsum("hl,lhd->hd", scores.softmax(-1), self.v[slots])
        return out


def test_a_stable_batch_gathers_only_each_steps_new_rows(kept):
    cache = Cache(0)
    for pool in range(4):
        cache.admit(pool, 10 + pool)
    cache.decode([0, 1, 2, 3])
    before = dict(kept.counts)
    cache.decode([0, 1, 2, 3])
    assert kept.counts["gathered"] - before["gathered"] == 4  # one new row a request; 50 cells served
    assert kept.counts["served"] - before["served"] == 4 * 15


def test_requests_leaving_and_joining_keep_their_rows(kept):
    cache = Cache(1)
    for pool in range(5):
        cache.admit(pool, 8 + 2 * pool)
    cache.decode([0, 1, 2, 3, 4])
    cache.admit(6, 5)
    before = kept.counts["gathered"]
    cache.decode([0, 2, 4, 6])  # 1 and 3 left from the middle, 6 joined at the end
    assert kept.counts["gathered"] - before == 3 + 6  # the three stayers' new rows, the newcomer's whole row
    cache.decode([4, 6, 0])  # another order: read right, gathered again
    cache.decode([4, 6, 0])


def test_a_heard_write_replaces_the_rows_it_names_and_an_unheard_write_drops_the_layer(kept):
    cache = Cache(2)
    for pool in range(3):
        cache.admit(pool, 12)
    cache.decode([0, 1, 2])
    slots = cache.table[1, 3:6].long()
    with kept.writing(cache.k, cache.v, slots):  # as the hooked set_kv_buffer writes
        cache.k[slots] = torch.randn(3, H, D, generator=cache.gen)
        cache.v[slots] = torch.randn(3, H, D, generator=cache.gen)
    before = kept.counts["gathered"]
    cache.decode([0, 1, 2])
    assert kept.counts["gathered"] - before == 3 + 3
    cache.k[cache.table[2, 0].long()] += 1.0  # nobody told
    cache.decode([0, 1, 2])


def test_an_extend_after_set_kv_buffer_reads_its_new_rows(kept):
    cache = Cache(3)
    for pool in range(2):
        cache.admit(pool, 20)
    cache.decode([0, 1])
    new = []
    for pool in (0, 1):  # a verify of 3 rows a request over slots the table already named once
        start = cache.lens[pool]
        cache.table[pool, start : start + 3] = cache.table[pool, start - 3 : start]
        new.append(cache.table[pool, start : start + 3].long())
    loc = torch.cat(new)
    with kept.writing(cache.k, cache.v, loc):
        cache.k[loc] = torch.randn(6, H, D, generator=cache.gen)
        cache.v[loc] = torch.randn(6, H, D, generator=cache.gen)
    q = torch.randn(6, H, D, generator=cache.gen)
    out = torch.empty(6, H, D)
    lens = [cache.lens[0] + 3, cache.lens[1] + 3]
    extend_attention_cpu(q, None, None, out, cache.k, cache.v, 1.0, 1.0, cache.table, torch.tensor([0, 1]),
                         torch.tensor(lens), torch.tensor([3, 3]), torch.tensor([0, 3]), 3, 1 / math.sqrt(D), 0.0,
                         False, 0, None, None, None, True)
    for b, pool in enumerate((0, 1)):
        slots = cache.table[pool, : lens[b]].long()
        for j in range(3):
            visible = slots[: lens[b] - 3 + j + 1]
            scores = torch.einsum("hd,lhd->hl", q[3 * b + j], cache.k[visible]) / math.sqrt(D)
            want = torch.einsum("hl,lhd->hd", scores.softmax(-1), cache.v[visible])
            assert torch.allclose(out[3 * b + j], want, atol=1e-5)
