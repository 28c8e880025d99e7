"""The generated cycle pairs: the deep pair computes the same maps as the 2-layer one, at a different cost."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from sglang_faser.models.tiny import CYCLE_SPLIT, DEEP_CYCLE_LAYERS, VOCAB_SIZE, cycle_successor


def _greedy_map(path, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return model(tokens).logits.argmax(-1)[0], model.config.num_hidden_layers


def test_the_deep_pair_walks_the_cycles_as_the_two_layer_pair_does(tiny_suite):
    tokens = torch.arange(3, VOCAB_SIZE).unsqueeze(0)  # every ordinary token, one sequence (context-free maps)
    target, target_layers = _greedy_map(tiny_suite.cycle_target, tokens)
    deep, deep_layers = _greedy_map(tiny_suite.deep_cycle_target, tokens)
    draft, _ = _greedy_map(tiny_suite.cycle_draft, tokens)
    small, small_layers = _greedy_map(tiny_suite.small_cycle_draft, tokens)
    assert (target_layers, deep_layers, small_layers) == (2, DEEP_CYCLE_LAYERS, 1)
    assert target.tolist() == [cycle_successor(int(x)) for x in tokens[0]]
    assert deep.tolist() == target.tolist() and small.tolist() == draft.tolist()
    sure = tokens[0] < CYCLE_SPLIT
    assert (small[sure] == deep[sure]).all() and (small[~sure] != deep[~sure]).all()
