"""Tree ops of the CPU sgl_kernel stand-in: golden trees worked by hand, plus independent loop references.

Candidate numbering (EAGLE, topk=2, 2 draft steps): step 0 yields candidates 0 and 1 (children of the root);
step 1 expands each into topk children, candidates 2, 3 (parent: candidate 0) and 4, 5 (parent: candidate 1).
``parent_list = [-1, 0, 1]``: candidate c hangs under ``parent_list[c // topk]`` (entry 0 = the root).
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from sglang_faser.kernels.cpu.spec_tree import (
    FULL_MASK,
    QLEN_ONLY,
    QLEN_ONLY_BITPACKING,
    build_tree_kernel_efficient_cpu,
    reconstruct_indices_from_tree_mask,
    verify_tree_greedy_cpu,
)

TOPK, DEPTH, N = 2, 2, 4


def _build(parent_list, selected_index, seq_lens, topk, depth, n, mode):
    """Call the op the way eagle_utils.build_tree_kernel_efficient does (True mask, -1 links)."""
    bs = seq_lens.numel()
    if mode == QLEN_ONLY:
        mask = torch.full((bs * n * n,), True)
    else:
        mask = torch.full((int(seq_lens.sum()) * n + bs * n * n,), True)
    positions = torch.empty(bs * n, dtype=torch.int64)
    index = torch.full((bs, n), -1, dtype=torch.int64)
    next_token = torch.full((bs, n), -1, dtype=torch.int64)
    next_sibling = torch.full((bs, n), -1, dtype=torch.int64)
    build_tree_kernel_efficient_cpu(
        parent_list,
        selected_index,
        seq_lens,
        mask,
        positions,
        index,
        next_token,
        next_sibling,
        topk,
        depth,
        n,
        mode,
    )
    return mask, positions, index, next_token, next_sibling


# Request 0 selects candidates [0, 1, 4]: nodes 1, 2 under the root, node 3 (candidate 4) under node 2.
# Request 1 selects candidates [0, 2, 3]: node 1 under the root, nodes 2 and 3 under node 1.
GOLDEN_PARENT_LIST = torch.tensor([[-1, 0, 1], [-1, 0, 1]])
GOLDEN_SELECTED = torch.tensor([[0, 1, 4], [0, 2, 3]])
GOLDEN_SEQ_LENS = torch.tensor([10, 5])
GOLDEN_TREE_MASKS = [
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]],
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]],
]


def test_build_tree_golden_topk2_depth2_qlen_only():
    mask, positions, index, next_token, next_sibling = _build(
        GOLDEN_PARENT_LIST, GOLDEN_SELECTED, GOLDEN_SEQ_LENS, TOPK, DEPTH, N, QLEN_ONLY
    )
    assert index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert next_token.tolist() == [[1, -1, 3, -1], [1, 2, -1, -1]]
    assert next_sibling.tolist() == [[-1, 2, -1, -1], [-1, -1, 3, -1]]
    assert positions.tolist() == [10, 11, 11, 12, 5, 6, 7, 7]
    assert mask.view(2, N, N).int().tolist() == GOLDEN_TREE_MASKS


def test_build_tree_golden_full_mask_keeps_prefix_columns():
    seq_lens = torch.tensor([2, 3])
    mask, positions, *_ = _build(GOLDEN_PARENT_LIST, GOLDEN_SELECTED, seq_lens, TOPK, DEPTH, N, FULL_MASK)
    assert mask.numel() == (2 + 3) * N + 2 * N * N
    first = mask[: N * (2 + N)].view(N, 2 + N)
    second = mask[N * (2 + N) :].view(N, 3 + N)
    assert first[:, :2].all() and second[:, :3].all()
    assert first[:, 2:].int().tolist() == GOLDEN_TREE_MASKS[0]
    assert second[:, 3:].int().tolist() == GOLDEN_TREE_MASKS[1]
    assert positions.tolist() == [2, 3, 3, 4, 3, 4, 5, 5]


def test_build_tree_rejects_bitpacking():
    with pytest.raises(NotImplementedError):
        _build(GOLDEN_PARENT_LIST, GOLDEN_SELECTED, GOLDEN_SEQ_LENS, TOPK, DEPTH, N, QLEN_ONLY_BITPACKING)


def _random_eagle_draft(rng: random.Random, topk: int, steps: int, n: int):
    """A valid EAGLE draft for one request: parent_list and an ancestor-closed sorted selected_index."""
    parent_list = list(range(-1, topk))  # step 0: the root's children are candidates 0..topk-1
    step_start = [0, topk]  # first candidate index of each step
    for s in range(2, steps):
        prev = range(step_start[s - 1], step_start[s - 1] + (topk if s - 1 == 0 else topk * topk))
        parent_list += rng.sample(list(prev), topk)
        step_start.append(step_start[-1] + (topk if s - 1 == 0 else topk * topk))
    num_candidates = topk + topk * topk * (steps - 1)

    def parent_candidate(c):
        return None if c // topk == 0 else parent_list[c // topk]

    chosen: set[int] = set()
    while len(chosen) < n - 1:
        ready = [
            c
            for c in range(num_candidates)
            if c not in chosen and (parent_candidate(c) is None or parent_candidate(c) in chosen)
        ]
        chosen.add(rng.choice(ready))
    return parent_list, sorted(chosen)


def _ref_tree(parent_list, selected, topk):
    """Node parents from the candidate bookkeeping, written independently of the op."""
    node_of = {c: i + 1 for i, c in enumerate(selected)}
    parents = [-1]
    for c in selected:
        parents.append(0 if c // topk == 0 else node_of[parent_list[c // topk]])
    return parents


def _ref_links_from_parents(parents):
    n = len(parents)
    children = {p: sorted(i for i in range(1, n) if parents[i] == p) for p in range(n)}
    next_token = [children[i][0] if children[i] else -1 for i in range(n)]
    next_sibling = [-1] * n
    for kids in children.values():
        for a, b in itertools.pairwise(kids):
            next_sibling[a] = b
    ancestors = []
    for i in range(n):
        chain, cur = {i}, i
        while parents[cur] != -1:
            cur = parents[cur]
            chain.add(cur)
        ancestors.append(chain)
    return next_token, next_sibling, ancestors


@pytest.mark.parametrize("topk,steps,n", [(2, 2, 4), (2, 3, 6), (3, 3, 8), (1, 4, 5)])
def test_build_tree_matches_loop_reference(topk, steps, n):
    rng = random.Random(topk * 100 + steps * 10 + n)
    drafts = [_random_eagle_draft(rng, topk, steps, n) for _ in range(3)]
    parent_list = torch.tensor([d[0] for d in drafts])
    selected = torch.tensor([d[1] for d in drafts])
    seq_lens = torch.tensor([7, 1, 12])
    for mode in (QLEN_ONLY, FULL_MASK):
        mask, positions, index, next_token, next_sibling = _build(
            parent_list, selected, seq_lens, topk, steps, n, mode
        )
        offset = 0
        for b, (plist, sel) in enumerate(drafts):
            parents = _ref_tree(plist, sel, topk)
            ref_next, ref_sib, ancestors = _ref_links_from_parents(parents)
            assert index[b].tolist() == [b * n + i for i in range(n)]
            assert next_token[b].tolist() == ref_next
            assert next_sibling[b].tolist() == ref_sib
            seq = int(seq_lens[b])
            assert positions[b * n : (b + 1) * n].tolist() == [seq + len(a) - 1 for a in ancestors]
            width = n if mode == QLEN_ONLY else seq + n
            block = mask[offset : offset + n * width].view(n, width)
            offset += n * width
            tree_cols = block[:, width - n :]
            assert tree_cols.tolist() == [[j in ancestors[i] for j in range(n)] for i in range(n)]
            assert block[:, : width - n].all()


def _verify(candidates, index, next_token, next_sibling, target_predict, num_steps):
    bs, n = candidates.shape
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, num_steps), -1, dtype=torch.int32)
    accept_num = torch.zeros(bs, dtype=torch.int32)
    # Keyword names exactly as verify_tree_greedy_func (spec_tree.py:510) spells them.
    verify_tree_greedy_cpu(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_num,
        candidates=candidates,
        retrive_index=index,
        retrive_next_token=next_token,
        retrive_next_sibling=next_sibling,
        target_predict=target_predict,
    )
    return predicts, accept_index, accept_num


def test_verify_tree_greedy_chain():
    candidates = torch.tensor([[99, 5, 6, 7]])
    index = torch.tensor([[0, 1, 2, 3]])
    next_token = torch.tensor([[1, 2, 3, -1]])
    next_sibling = torch.full((1, 4), -1)
    target = torch.tensor([5, 6, 9, 4])  # accepts 5 and 6, then the target says 9 where the draft has 7
    predicts, accept_index, accept_num = _verify(candidates, index, next_token, next_sibling, target, 4)
    assert accept_index.tolist() == [[0, 1, 2, -1]]
    assert accept_num.tolist() == [2]
    assert predicts.tolist() == [5, 6, 9, 0]


def test_verify_tree_greedy_all_accepted_and_none_accepted():
    candidates = torch.tensor([[99, 5, 6, 7], [99, 1, 2, 3]])
    index = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    next_token = torch.tensor([[1, 2, 3, -1], [1, 2, 3, -1]])
    next_sibling = torch.full((2, 4), -1)
    target = torch.tensor([5, 6, 7, 8, 4, 4, 4, 4])
    predicts, accept_index, accept_num = _verify(candidates, index, next_token, next_sibling, target, 4)
    assert accept_index.tolist() == [[0, 1, 2, 3], [4, -1, -1, -1]]
    assert accept_num.tolist() == [3, 0]
    assert predicts.tolist() == [5, 6, 7, 8, 4, 0, 0, 0]


def test_verify_tree_greedy_sibling_match_on_golden_trees():
    _, _, index, next_token, next_sibling = _build(
        GOLDEN_PARENT_LIST, GOLDEN_SELECTED, GOLDEN_SEQ_LENS, TOPK, DEPTH, N, QLEN_ONLY
    )
    candidates = torch.tensor([[99, 10, 11, 12], [99, 20, 21, 22]])
    # Request 0: the root's target 11 misses node 1 (10) and matches its sibling node 2, then node 3 (12).
    # Request 1: node 1 (20) matches; its target 22 misses node 2 (21) and matches sibling node 3.
    target = torch.tensor([11, 0, 12, 42, 20, 22, 0, 43])
    predicts, accept_index, accept_num = _verify(
        candidates, index, next_token, next_sibling, target, DEPTH + 1
    )
    assert accept_index.tolist() == [[0, 2, 3], [4, 5, 7]]
    assert accept_num.tolist() == [2, 2]
    assert predicts.tolist() == [11, 0, 12, 42, 20, 22, 0, 43]


def _ref_verify(parents, candidates, target, b, n, num_steps):
    """Greedy walk over explicit child lists: at each accepted node, the first child equal to its target."""
    path = [0]
    while len(path) < num_steps:
        want = target[b * n + path[-1]]
        kids = [i for i in range(1, n) if parents[i] == path[-1] and candidates[i] == want]
        if not kids:
            break
        path.append(kids[0])
    return path


def test_verify_tree_greedy_matches_loop_reference():
    rng = random.Random(7)
    topk, steps, n = 2, 3, 6
    drafts = [_random_eagle_draft(rng, topk, steps, n) for _ in range(6)]
    parent_list = torch.tensor([d[0] for d in drafts])
    selected = torch.tensor([d[1] for d in drafts])
    _, _, index, next_token, next_sibling = _build(
        parent_list, selected, torch.full((6,), 3), topk, steps, n, QLEN_ONLY
    )
    gen = torch.Generator().manual_seed(11)
    candidates = torch.randint(0, 3, (6, n), generator=gen)  # a tiny vocabulary makes matches frequent
    target = torch.randint(0, 3, (6 * n,), generator=gen)
    predicts, accept_index, accept_num = _verify(
        candidates, index, next_token, next_sibling, target, steps + 1
    )
    for b, (plist, sel) in enumerate(drafts):
        parents = _ref_tree(plist, sel, topk)
        path = _ref_verify(parents, candidates[b].tolist(), target.tolist(), b, n, steps + 1)
        assert accept_index[b].tolist() == [b * n + i for i in path] + [-1] * (steps + 1 - len(path))
        assert int(accept_num[b]) == len(path) - 1
        expected = {b * n + p: int(target[b * n + p]) for p in path}
        for i in range(n):
            assert int(predicts[b * n + i]) == expected.get(b * n + i, 0)


def test_reconstruct_indices_hand_case():
    # node 0 root; 1 and 2 under the root; 3 under node 1. Rows: ancestors including self.
    tree = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    mask = torch.tensor(tree * 2, dtype=torch.bool).flatten()
    positions = torch.zeros(8, dtype=torch.int64)
    index = torch.zeros(2, 4, dtype=torch.int64)
    next_token = torch.zeros(2, 4, dtype=torch.int64)
    next_sibling = torch.zeros(2, 4, dtype=torch.int64)
    reconstruct_indices_from_tree_mask(
        mask, torch.tensor([3, 8]), positions, index, next_token, next_sibling, 2, 4
    )
    assert positions.tolist() == [3, 4, 4, 5, 8, 9, 9, 10]
    assert index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert next_token.tolist() == [[1, 3, -1, -1]] * 2
    assert next_sibling.tolist() == [[-1, 2, -1, -1]] * 2


def test_reconstruct_indices_matches_loop_reference_and_build_tree():
    rng = random.Random(3)
    topk, steps, n = 3, 3, 7
    drafts = [_random_eagle_draft(rng, topk, steps, n) for _ in range(4)]
    parent_list = torch.tensor([d[0] for d in drafts])
    selected = torch.tensor([d[1] for d in drafts])
    seq_lens = torch.tensor([4, 9, 1, 6])
    mask, positions, index, next_token, next_sibling = _build(
        parent_list, selected, seq_lens, topk, steps, n, QLEN_ONLY
    )
    out_positions = torch.full((4 * n,), -5, dtype=torch.int64)
    out_index, out_next, out_sib = (torch.full((4, n), -5, dtype=torch.int64) for _ in range(3))
    reconstruct_indices_from_tree_mask(mask, seq_lens, out_positions, out_index, out_next, out_sib, 4, n)
    # The NGRAM op must recover exactly what the EAGLE builder produced for the same tree.
    assert torch.equal(out_positions, positions)
    assert torch.equal(out_index, index)
    assert torch.equal(out_next, next_token)
    assert torch.equal(out_sib, next_sibling)
    # And a direct loop over the documented formulas.
    m = mask.view(4, n, n).tolist()
    for b in range(4):
        anc = [[bool(m[b][i][j]) and j < i for j in range(n)] for i in range(n)]
        parent = [max([j for j in range(i) if anc[i][j]], default=-1) for i in range(n)]
        for t in range(n):
            assert int(out_positions[b * n + t]) == sum(anc[t]) + int(seq_lens[b])
            kids = [k for k in range(t + 1, n) if anc[k][t]]
            assert int(out_next[b, t]) == (kids[0] if kids else -1)
            sibs = [k for k in range(t + 1, n) if parent[k] == parent[t]]
            assert int(out_sib[b, t]) == (sibs[0] if sibs and parent[t] >= 0 else -1)
