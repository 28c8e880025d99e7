"""Draft-tree ops of ``sgl_kernel`` for the CPU engine: EAGLE tree build, greedy verify, NGRAM tree decode.

The tree walks loop over requests in Python over plain lists, read from the tensors in one copy each and written
back in one write each (per-element tensor access would cost more than the walk at batch 32); the spec is
the Triton code in ``kernels/ops/speculative/spec_tree.py`` and ``reconstruct_tree.py`` of the SGLang 0.5.23
wheel.
"""

from __future__ import annotations

import torch

FULL_MASK = 0  # TreeMaskMode.FULL_MASK: each row spans seq_len prefix columns + n tree columns
QLEN_ONLY = 1  # TreeMaskMode.QLEN_ONLY: each row spans the n tree columns only (what CPU uses)
QLEN_ONLY_BITPACKING = 2


def _find_parent_node(selected: list[int], parents: list[int], topk: int, cand: int) -> int | None:
    """Tree node (1-based; 0 = root) holding the parent of flattened draft candidate ``cand``, None if absent.

    ``cand // topk`` indexes ``parent_list``; 0 means the root. Otherwise the parent is the node whose
    ``selected_index`` entry equals ``parent_list[cand // topk]`` (first match), as in the Triton kernel.
    """
    parent_tb = cand // topk
    if parent_tb == 0:
        return 0
    target = parents[parent_tb]
    for pos, sel in enumerate(selected):
        if sel == target:
            return pos + 1
    return None


def _link_children(
    selected: list[int], parents: list[int], topk: int, n: int, next_token: list[int], next_sibling: list[int]
) -> None:
    """Make each node its parent's first child, walking from the last node down: siblings end ascending."""
    for i in range(n - 1, 0, -1):
        parent = _find_parent_node(selected, parents, topk, selected[i - 1])
        if parent is None:
            continue  # the Triton kernel skips nodes whose parent is not in the tree
        old = next_token[parent]
        next_token[parent] = i
        if old != -1:
            next_sibling[i] = old


def _mask_row_and_depth(
    selected: list[int], parents: list[int], topk: int, depth: int, n: int, node: int
) -> tuple[list[bool], int]:
    """Visibility of the n tree columns for ``node`` (root, itself, ancestors) and its depth below the root.

    The walk up is capped at ``depth`` levels and stops at a missing parent, like the Triton kernel.
    """
    row = [True] + [False] * (n - 1)
    if node == 0:
        return row, 0
    cur = node - 1  # index into selected_index; tree node cur + 1
    level = 0
    for _ in range(depth):
        level += 1
        row[cur + 1] = True
        parent = _find_parent_node(selected, parents, topk, selected[cur])
        if parent is None or parent == 0:
            break
        cur = parent - 1
    return row, level


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build the EAGLE verify tree: attention mask, positions and the retrieve_* links, in place.

    Node 0 of request b is the root (bonus token); node i >= 1 is candidate ``selected_index[b, i - 1]``.
    The caller (``srt/speculative/eagle_utils.py:138``) pre-fills ``tree_mask`` with True and the
    ``retrieve_*`` buffers with -1; the links are read from them, so the op composes exactly like the kernel.
    Mirrors ``sgl_build_tree_kernel_efficient_triton`` in ``kernels/ops/speculative/spec_tree.py:53``.
    """
    mode = int(tree_mask_mode)
    if mode == QLEN_ONLY_BITPACKING:
        raise NotImplementedError(
            "build_tree_kernel_efficient_cpu: QLEN_ONLY_BITPACKING is not supported on CPU"
        )
    if mode not in (FULL_MASK, QLEN_ONLY):
        raise ValueError(f"build_tree_kernel_efficient_cpu: unknown tree_mask_mode {tree_mask_mode!r}")
    n = draft_token_num
    bs = verified_seq_len.numel()
    if bs == 0:
        return
    # one host copy of every input and one write per output: per-element tensor writes cost more than the walk
    seq_lens = [int(x) for x in verified_seq_len.reshape(-1).tolist()]
    selected_rows = selected_index[:bs].tolist()
    parent_rows = parent_list[:bs].tolist() if parent_list.dim() > 1 else [parent_list.tolist()] * bs
    next_tokens, next_siblings = retrieve_next_token[:bs].tolist(), retrieve_next_sibling[:bs].tolist()
    blocks, positions_rows = [], []
    for b in range(bs):
        selected, parents = selected_rows[b], parent_rows[b]
        _link_children(selected, parents, topk, n, next_tokens[b], next_siblings[b])
        rows, levels = zip(*(_mask_row_and_depth(selected, parents, topk, depth, n, x) for x in range(n)))
        blocks.append(rows)
        positions_rows.append([level + seq_lens[b] for level in levels])
    retrieve_next_token[:bs] = torch.tensor(next_tokens, dtype=retrieve_next_token.dtype)
    retrieve_next_sibling[:bs] = torch.tensor(next_siblings, dtype=retrieve_next_sibling.dtype)
    retrieve_index[:bs] = torch.arange(bs * n, dtype=retrieve_index.dtype).view(bs, n)
    positions.view(-1)[: bs * n] = torch.tensor(positions_rows, dtype=positions.dtype).view(-1)
    block = torch.tensor(blocks, dtype=torch.bool)  # [bs, n, n]
    flat_mask = tree_mask.view(-1)
    if mode == QLEN_ONLY:
        flat_mask[: n * n * bs] = block.view(-1)
        return
    mask_prefix = 0  # FULL_MASK: sum of earlier requests' seq_len, times n
    for b, seq_len in enumerate(seq_lens):
        base = n * n * b + mask_prefix
        flat_mask[base : base + n * (seq_len + n)].view(n, seq_len + n)[:, seq_len:] = block[b]
        mask_prefix += seq_len * n


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification: accept the longest root path whose drafts equal the target's argmax.

    Parameter names keep SGLang's ``retrive_*`` spelling because ``verify_tree_greedy_func``
    (``kernels/ops/speculative/spec_tree.py:510``) passes them as keywords. ``target_predict`` and
    ``predicts`` are indexed by the flat ids in ``retrive_index``. Per request: ``accept_index[b, 0]`` is the
    root, each later entry an accepted node; ``accept_token_num[b]`` excludes the root; ``predicts`` gets the
    matched token at every accepted parent and the target token (bonus or correction) at the last accepted
    node. Other entries are left as the caller initialised them. Mirrors ``verify_tree_greedy_kernel_triton``
    (``spec_tree.py:211``).
    """
    bs = candidates.shape[0]
    if bs == 0:
        return
    num_steps = accept_index.shape[1]
    # one host copy of every input and one write per output: per-element tensor access cost more than the walk
    target = target_predict.reshape(-1).tolist()
    cands, indices = candidates.tolist(), retrive_index.tolist()
    next_tokens, next_siblings = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    accept_rows = accept_index[:bs].tolist()
    slots, tokens, counts = [], [], []
    for b in range(bs):
        cand, index, next_token, next_sibling = cands[b], indices[b], next_tokens[b], next_siblings[b]
        last = int(index[0])
        accepted = [last]
        cur = 0
        for _ in range(1, num_steps):
            want = target[last]
            cur = next_token[cur]
            while cur != -1 and cand[cur] != want:
                cur = next_sibling[cur]
            if cur == -1:
                break
            slots.append(last)
            tokens.append(want)
            last = int(index[cur])
            accepted.append(last)
        accept_rows[b][: len(accepted)] = accepted
        counts.append(len(accepted) - 1)
        slots.append(last)
        tokens.append(target[last])
    predicts.view(-1)[torch.tensor(slots, dtype=torch.int64)] = torch.tensor(tokens, dtype=predicts.dtype)
    accept_index[:bs] = torch.tensor(accept_rows, dtype=accept_index.dtype)
    accept_token_num.view(-1)[:bs] = torch.tensor(counts, dtype=accept_token_num.dtype)


def reconstruct_indices_from_tree_mask(
    tree_mask: torch.Tensor,
    verified_seq_len: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
) -> None:
    """NGRAM verify metadata, derived in place from a ``[bs, n, n]`` ancestor mask (sgl_kernel.speculative).

    Follows the contract in the module docstring of ``kernels/ops/speculative/reconstruct_tree.py:14``, with
    ``anc[i, j] = tree_mask[b, i, j] and j < i``: positions = #ancestors + verified_seq_len; parent = last
    ancestor; next_token = first later node having this one as ancestor; next_sibling = first later node with
    the same parent (-1 for parentless nodes).
    """
    bs, n = batch_size, draft_token_num
    if bs == 0:
        return
    mask = tree_mask.reshape(-1)[: bs * n * n].view(bs, n, n).to(torch.bool)
    node = torch.arange(n, dtype=torch.int64)
    row, col = node[:, None], node[None, :]  # row i: the node described; col j: a candidate ancestor
    anc = mask & (col < row)

    seq = verified_seq_len.reshape(-1)[:bs].to(torch.int64)
    depth = anc.sum(dim=2)
    parent = torch.where(anc, col, -1).amax(dim=2)  # [bs, n]
    first_child = torch.where(anc, row, n).amin(dim=1)  # over rows k for column tid
    next_token = torch.where(first_child < n, first_child, -1)
    same_parent = (parent[:, :, None] == parent[:, None, :]) & (row > col)  # [bs, k, tid], k > tid
    first_sibling = torch.where(same_parent, row, n).amin(dim=1)
    next_sibling = torch.where((parent >= 0) & (first_sibling < n), first_sibling, -1)

    positions.view(-1)[: bs * n] = (depth + seq[:, None]).reshape(-1).to(positions.dtype)
    _write_rows(retrieve_index, (torch.arange(bs, dtype=torch.int64)[:, None] * n + node).reshape(-1), bs * n)
    _write_rows(retrieve_next_token, next_token.reshape(-1), bs * n)
    _write_rows(retrieve_next_sibling, next_sibling.reshape(-1), bs * n)


def _write_rows(out: torch.Tensor, values: torch.Tensor, count: int) -> None:
    """Write the first ``count`` elements of ``out`` in row-major order (``out`` is ``[bs, n]`` or flat)."""
    out.view(-1)[:count] = values.to(out.dtype)
