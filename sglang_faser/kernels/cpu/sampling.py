"""Speculative *sampling* for the CPU engine: target-only tree verification and top-k / top-p renormalisation.

SGLang 0.5.23 verifies greedily on every CPU run (``_verify_uses_greedy``, eagle_utils.py:485), because the CPU
platform has no ``tree_speculative_sampling_target_only`` and no renorm kernels (``verify_sampling.py``,
``kernels/ops/sampling/renorm.py``). With temperature > 0 that commits the target's argmax instead of a sample, so
the output no longer follows the target's distribution. These ops fill the gap.

``tree_speculative_sampling_target_only_cpu`` follows SGLang's CUDA kernel (``TreeSpeculativeSamplingTargetOnly``,
``kernels/jit/csrc/speculative/sampling.cuh``): at each accepted node one coin ``u`` is drawn; the children are
tried in sibling order, accumulating the target's probability of each child token, and the first child with
``u <= accumulated / threshold_acc`` (or with probability >= ``threshold_single``) is accepted. That is the same as
sampling a token from the target and accepting it if it is one of the drafts. When no child is accepted (or the
chain ends), the next token is sampled from the target distribution with the rejected children's mass removed.
With the default thresholds (1.0) the emitted tokens follow the target's distribution exactly.
"""

from __future__ import annotations

import torch


def _sample_residual(target: torch.Tensor, rejected_mass: torch.Tensor, coin: float) -> int:
    """Inverse-CDF sample from relu(target - rejected_mass); falls back to the target if nothing is left."""
    residual = (target - rejected_mass).clamp_min(0.0)
    total = float(residual.sum())
    if total <= 0.0:
        residual, total = target, float(target.sum())
    cdf = torch.cumsum(residual, dim=0)
    index = int(torch.searchsorted(cdf, torch.tensor([coin * total], dtype=cdf.dtype), right=True))
    return min(index, target.numel() - 1)


def tree_speculative_sampling_target_only_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """Writes ``predicts``, ``accept_index``, ``accept_token_num`` (and rejected mass into ``draft_probs``).

    Shapes: ``candidates``/``retrive_*``/``uniform_samples`` ``[bs, n]``; ``target_probs``/``draft_probs``
    ``[bs, n, vocab]``; ``predicts`` flat ``[bs * n]`` indexed by the global ids in ``retrive_index``;
    ``accept_index`` ``[bs, spec_tokens]``.
    """
    del deterministic
    threshold_acc = max(float(threshold_acc), 1e-9)
    spec_tokens = accept_index.shape[1]
    cands = candidates.tolist()
    index = retrive_index.tolist()
    next_token = retrive_next_token.tolist()
    next_sibling = retrive_next_sibling.tolist()
    coins = uniform_samples.tolist()
    final_coins = uniform_samples_for_final_sampling.tolist()
    for b in range(candidates.shape[0]):
        last = index[b][0]
        accept_index[b, 0] = last
        node, accepted, coin = 0, 0, coins[b][0]
        for _ in range(1, spec_tokens):
            child = next_token[b][node]
            mass = 0.0
            while child != -1:
                token = cands[b][child]
                p = float(target_probs[b, node, token])
                mass += p
                if coin <= mass / threshold_acc or p >= threshold_single:
                    predicts[last] = token
                    accepted += 1
                    last = index[b][child]
                    accept_index[b, accepted] = last
                    node, coin = child, coins[b][child]
                    break
                draft_probs[b, node, token] = p  # rejected: removed from the residual below
                child = next_sibling[b][child]
            if child == -1:
                break
        accept_token_num[b] = accepted
        predicts[last] = _sample_residual(target_probs[b, node], draft_probs[b, node], final_coins[b])


def top_k_renorm_prob(probs: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    """Keep each row's ``top_ks[row]`` largest probabilities (ties at the k-th value kept), renormalised."""
    k = top_ks.to(torch.int64).clamp(1, probs.shape[-1]).view(-1, 1)
    sorted_probs = torch.sort(probs, dim=-1, descending=True).values
    kth = sorted_probs.gather(-1, k - 1)
    kept = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def top_p_renorm_prob(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of top tokens whose mass reaches ``top_ps[row]``, renormalised."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of strictly better tokens
    keep_sorted = before < top_ps.to(probs.dtype).view(-1, 1)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)
