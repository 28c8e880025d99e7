"""SGLang's real engine on CPU gives the target's own greedy output, with and without speculation.

The reference is HF transformers' ``generate(do_sample=False)`` on the same checkpoint, computed at test time
(token ids are never hard-coded across torch versions).
"""

from __future__ import annotations

import pytest
from prompts import PROMPTS as ALL_PROMPTS

pytestmark = pytest.mark.engine

PROMPTS = ALL_PROMPTS[:4]
MAX_NEW = 24
SPEC3 = dict(speculative_num_steps=3, speculative_num_draft_tokens=4)


def _configs(suite):
    return {
        "no-spec": dict(model_path=str(suite.target)),
        "eagle-topk1": dict(
            model_path=str(suite.target),
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=str(suite.eagle),
            speculative_eagle_topk=1,
            **SPEC3,
        ),
        "eagle-topk2-tree": dict(
            model_path=str(suite.target),
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=str(suite.eagle),
            speculative_eagle_topk=2,
            speculative_num_steps=3,
            speculative_num_draft_tokens=5,
        ),
        "standalone": dict(
            model_path=str(suite.target),
            speculative_algorithm="STANDALONE",
            speculative_draft_model_path=str(suite.standalone),
            speculative_eagle_topk=1,
            **SPEC3,
        ),
    }


@pytest.mark.parametrize("name", ["no-spec", "eagle-topk1", "eagle-topk2-tree", "standalone"])
def test_greedy_output_equals_hf(name, tiny_suite, tokenizer, engine_pool, hf_greedy):
    engine = engine_pool.get(name, **_configs(tiny_suite)[name])
    input_ids = [tokenizer(p).input_ids for p in PROMPTS]
    outs = engine.generate(
        input_ids=input_ids,
        sampling_params={"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True},
    )
    for ids, out in zip(input_ids, outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.target, ids, MAX_NEW)
        if name != "no-spec":
            assert out["meta_info"]["spec_verify_ct"] > 0


def test_context_free_pair_is_always_accepted(tiny_suite, tokenizer, engine_pool, hf_greedy):
    """Target = draft = the model with attention switched off: every draft is the target's own argmax."""
    engine = engine_pool.get(
        "context-free",
        model_path=str(tiny_suite.context_free),
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path=str(tiny_suite.context_free),
        speculative_eagle_topk=1,
        **SPEC3,
    )
    input_ids = [tokenizer(p).input_ids for p in PROMPTS]
    outs = engine.generate(
        input_ids=input_ids,
        sampling_params={"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True},
    )
    for ids, out in zip(input_ids, outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.context_free, ids, MAX_NEW)
        meta = out["meta_info"]
        assert meta["spec_accept_rate"] == pytest.approx(1.0)
        # the last step may be cut by max_new_tokens, so the mean is slightly below steps + 1 = 4
        assert meta["spec_accept_length"] > 3.5
