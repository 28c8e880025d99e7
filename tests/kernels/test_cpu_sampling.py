"""Speculative sampling on CPU keeps the target's distribution; renorm ops match their definitions."""

from __future__ import annotations

import torch

from sglang_faser.kernels.cpu.sampling import (
    top_k_renorm_prob,
    top_p_renorm_prob,
    tree_speculative_sampling_target_only_cpu,
)


def _chain(bs: int, n: int):
    index = torch.arange(bs * n, dtype=torch.int64).view(bs, n)
    next_token = torch.tensor([[i + 1 if i + 1 < n else -1 for i in range(n)]] * bs, dtype=torch.int64)
    sibling = torch.full((bs, n), -1, dtype=torch.int64)
    return index, next_token, sibling


def _run(candidates, next_token, sibling, target, coins, final):
    bs, n = candidates.shape
    index = torch.arange(bs * n, dtype=torch.int64).view(bs, n)
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, n), -1, dtype=torch.int32)
    accepted = torch.zeros(bs, dtype=torch.int32)
    tree_speculative_sampling_target_only_cpu(
        predicts, accept_index, accepted, candidates, index, next_token, sibling,
        coins, final, target, torch.zeros_like(target),
    )  # fmt: skip
    return predicts, accept_index, accepted


def test_hand_worked_chain_accepts_then_samples_the_residual():
    # node 0 proposes token 1 (p = 0.6): coin 0.5 accepts; node 1 proposes token 2 (p = 0.2): coin 0.9 rejects,
    # so the last token is drawn from node 1's probs with token 2 removed: [0.5, 0.3, 0] -> coin 0.7 * 0.8 = 0.56
    # lands on token 1.
    target = torch.tensor([[[0.1, 0.6, 0.3], [0.5, 0.3, 0.2], [1.0, 0.0, 0.0]]])
    candidates = torch.tensor([[0, 1, 2]])
    _, next_token, sibling = _chain(1, 3)
    predicts, accept_index, accepted = _run(
        candidates, next_token, sibling, target, torch.tensor([[0.5, 0.9, 0.0]]), torch.tensor([0.7])
    )
    assert accepted.tolist() == [1]
    assert accept_index.tolist() == [[0, 1, -1]]
    assert predicts[:2].tolist() == [1, 1]


def test_first_emitted_token_follows_the_target_distribution():
    torch.manual_seed(0)
    vocab, trials = 5, 20000
    p0 = torch.tensor([0.05, 0.4, 0.25, 0.2, 0.1])
    target = torch.stack([p0, torch.full((vocab,), 1 / vocab)]).expand(trials, 2, vocab).contiguous()
    candidates = torch.tensor([[0, 3]]).expand(trials, 2).contiguous()  # the draft always proposes token 3
    _, next_token, sibling = _chain(trials, 2)
    predicts, _, accepted = _run(
        candidates, next_token, sibling, target, torch.rand(trials, 2), torch.rand(trials)
    )
    first = predicts.view(trials, 2)[:, 0]  # accepted draft, or the sample drawn at the root
    observed = torch.bincount(first.long(), minlength=vocab).double()
    expected = p0.double() * trials
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 18.5  # chi-square, 4 degrees of freedom, p = 0.001
    assert abs(accepted.double().mean() - 0.2) < 0.01  # token 3 is accepted with its target probability


def test_sibling_drafts_share_one_coin():
    # root with two children proposing tokens 0 (p 0.3) and 1 (p 0.3): coin 0.5 rejects the first, accepts the second
    target = torch.tensor([[[0.3, 0.3, 0.4], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    candidates = torch.tensor([[2, 0, 1]])
    next_token = torch.tensor([[1, -1, -1]])
    sibling = torch.tensor([[-1, 2, -1]])
    predicts, accept_index, accepted = _run(
        candidates, next_token, sibling, target, torch.tensor([[0.5, 0.0, 0.0]]), torch.tensor([0.0])
    )
    assert accepted.tolist() == [1] and accept_index[0, 1] == 2 and predicts[0] == 1


def test_top_k_and_top_p_renorm():
    probs = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25]])
    k = top_k_renorm_prob(probs, torch.tensor([2, 4]))
    assert torch.allclose(k[0], torch.tensor([0.0, 4 / 7, 0.0, 3 / 7]))
    assert torch.allclose(k[1], probs[1])
    p = top_p_renorm_prob(probs, torch.tensor([0.6, 0.3]))
    assert torch.allclose(p[0], torch.tensor([0.0, 4 / 7, 0.0, 3 / 7]))
    assert (p[1] > 0).sum() == 2 and torch.isclose(p[1].sum(), torch.tensor(1.0))
