"""Ragged, frontier-chunked verification with early pruning inside SGLang's real engine (CPU: passes in turn).

Lengths are forced up (min_len / fixed mode) so that every step really splits into several frontiers. The greedy
parity tests run the shipped small pair (attention on, real acceptance): some drafts pass and some fail, so later
frontiers run as ragged passes at a row offset over the KV earlier passes wrote, other requests are pruned, and
any error in the pass layout, the KV positions or the pruning rule shows up as a token that differs from HF's
greedy output.
"""

from __future__ import annotations

import pytest
from prompts import PROMPTS

from sglang_faser.spec.config import FaserConfig

pytestmark = pytest.mark.engine

MAX_NEW = 24
GREEDY = {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True}
WINDOW = dict(speculative_eagle_topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4)


def _pair(suite, algorithm):
    draft = suite.eagle if algorithm == "EAGLE" else suite.standalone
    return dict(model_path=str(suite.target), speculative_algorithm=algorithm,
                speculative_draft_model_path=str(draft), **WINDOW)


@pytest.fixture(scope="module")
def trained():
    """The shipped small pair as a suite (target, eagle, standalone) with its tokenizer."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from sglang_faser.models.small_pair import small_pair

    pair = small_pair()
    assert pair is not None, "sglang_faser/models/small_pair is part of the repository"
    return SimpleNamespace(target=pair.target, eagle=pair.eagle, standalone=pair.draft,
                           tokenizer=AutoTokenizer.from_pretrained(pair.target))


@pytest.mark.parametrize(
    "algorithm, frontier, overlap",
    [("EAGLE", 1, True), ("STANDALONE", 2, False), ("EAGLE", 3, False), ("STANDALONE", 1, True)],
    ids=["eagle-f1-overlap", "standalone-f2-serial", "eagle-fmax-serial", "standalone-f1-overlap"],
)
def test_frontier_greedy_output_equals_hf(algorithm, frontier, overlap, trained, engine_pool, hf_greedy):
    config = FaserConfig(min_len=2, frontier_size=frontier, overlap=overlap)  # lengths 2..3: ragged and chunked
    engine = engine_pool.get(f"frontier-pair-{algorithm}-{frontier}-{overlap}", faser=config,
                             **_pair(trained, algorithm))
    before = _faser_report(engine)["counters"]
    input_ids = [trained.tokenizer(p).input_ids for p in PROMPTS]
    outs = engine.generate(input_ids=input_ids, sampling_params=GREEDY)
    for ids, out in zip(input_ids, outs):
        assert out["output_ids"] == hf_greedy(trained.target, ids, MAX_NEW)
        histogram = out["meta_info"]["spec_cap_lens_histogram"]
        assert sum(histogram[:2]) == 0 and sum(histogram[2:]) > 0, histogram  # every step drafted 2 or 3
    report = _faser_report(engine)
    after = {k: v - before[k] for k, v in report["counters"].items() if isinstance(v, int)}
    assert report["verify_path"] == "ragged"
    # the target computed sum(k_i + 1) rows, less what early pruning skipped: counted pass by pass
    assert after["verified"] + after["pruned"] == after["proposed"] + after["requests"] > 0, after
    if frontier < 3:
        assert after["offset_passes"] > 0, after  # later frontiers ran as passes starting past row 0


def test_held_at_the_window_faser_drafts_what_stock_sglang_drafts(trained, engine_pool):
    """FASER's own path (depth tiers, the draft-extend's LM head run on each request's last accepted row only:
    ``touchpoints._SelectedRowsExtend``) held at stock SGLang's length proposes stock SGLang's drafts: in one batch
    every request has as many drafts accepted in as many steps. A wrong row of the extend's output (the next draft
    token, EAGLE's feature) costs acceptance here. Every request drafts the step's whole depth, so every step runs
    SGLang's own draft loop and single verify pass, never the draft cut's hook (``draft_path`` stays "none":
    ``FaserEngine._whole_window``); the draft cut and the ragged verifier run in the frontier tests below."""
    input_ids = [trained.tokenizer(p).input_ids for p in PROMPTS]
    expected = engine_pool.get("stock-pair-EAGLE", **_pair(trained, "EAGLE")).generate(
        input_ids=input_ids, sampling_params=GREEDY)
    engine = engine_pool.get("fixed3-pair-EAGLE", faser=FaserConfig(mode="fixed", fixed_len=3),
                             **_pair(trained, "EAGLE"))
    outs = engine.generate(input_ids=input_ids, sampling_params=GREEDY)
    assert _faser_report(engine)["draft_path"] == "none"
    assert sum(out["meta_info"]["spec_num_correct_drafts"] for out in outs) > len(outs)
    for want, out in zip(expected, outs):
        assert out["output_ids"] == want["output_ids"]
        for key in ("spec_num_correct_drafts", "spec_verify_ct"):
            assert out["meta_info"][key] == want["meta_info"][key], (key, out["meta_info"], want["meta_info"])


def _cycle_engine(suite, engine_pool):
    return engine_pool.get(
        "frontier-cycles-fixed3-f1",
        faser=FaserConfig(mode="fixed", fixed_len=3, frontier_size=1),
        model_path=str(suite.cycle_target),
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path=str(suite.cycle_draft),
        **WINDOW,
    )


def test_a_rejected_request_is_pruned_while_its_neighbour_goes_on(tiny_suite, engine_pool, hf_greedy):
    """Cycle pair: drafts on cycle A always pass, on cycle B the first draft always fails (models/tiny.py)."""
    engine = _cycle_engine(tiny_suite, engine_pool)
    before = _faser_counters(engine)
    sure, hopeless = [0, 10], [0, 300]
    outs = engine.generate(input_ids=[sure, hopeless], sampling_params={**GREEDY, "max_new_tokens": 40})
    for ids, out in zip([sure, hopeless], outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.cycle_target, ids, 40)
    sure_meta, hopeless_meta = outs[0]["meta_info"], outs[1]["meta_info"]
    assert hopeless_meta["spec_num_correct_drafts"] == 0
    assert sure_meta["spec_accept_length"] > 3.0  # all three drafts pass, frontier after frontier
    after = _faser_counters(engine)
    steps = hopeless_meta["spec_verify_ct"]
    pruned = after["pruned"] - before["pruned"]
    # the hopeless request is verified in frontier 0 only (root + draft 1): its rows 2 and 3 are pruned every step
    assert pruned >= 2 * (steps - 1), (pruned, steps)
    assert after["verified"] - before["verified"] < 2 * 4 * steps  # fewer rows than one-shot B x (d + 1)
    # the pruned request is drafted no further: the draft forwards really skipped its rows, and say so
    assert after["draft_skipped"] > before["draft_skipped"]
    assert _faser_report(engine)["draft_path"] == "cut"


def _faser_report(engine) -> dict:
    return engine.get_server_info()["internal_states"][0]["faser"]


def _faser_counters(engine) -> dict:
    return _faser_report(engine)["counters"]


def test_sampled_output_keeps_the_target_distribution_with_frontiers(tiny_suite, engine_pool):
    """temperature > 0: every emitted token is a draw from the target's own next-token distribution.

    The cycle target is context-free, so p(next | prev) is known exactly from HF for every token. At temperature
    25 the target's successor token has probability ~0.5: drafts on cycle A are accepted about half the time and
    the rest comes from residual sampling. Greedy verification (SGLang's CPU default) would emit the successor
    every time, about 20 standard deviations off. Sampled requests are never pruned early (their rejection is a
    coin flip SGLang makes after all rows are in), so every chunk of their chain is verified.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from sglang_faser.models.tiny import CYCLE_SPLIT, cycle_successor

    temperature = 25.0
    model = AutoModelForCausalLM.from_pretrained(tiny_suite.cycle_target, dtype=torch.float32)
    with torch.no_grad():
        probs = torch.softmax(model(torch.arange(512)[:, None]).logits[:, -1].double() / temperature, -1)

    engine = _cycle_engine(tiny_suite, engine_pool)  # fixed length 3 in frontiers of 1: speculation always runs
    prompts = [[0, 3 + 7 * i] for i in range(16)]
    params = {"temperature": temperature, "max_new_tokens": 40, "ignore_eos": True}
    outs = engine.generate(input_ids=prompts, sampling_params=params)

    successes = expected = variance = in_a = expected_a = variance_a = 0.0
    for prompt, out in zip(prompts, outs):
        tokens = prompt[-1:] + out["output_ids"]
        for prev, token in zip(tokens, tokens[1:]):
            p_succ = float(probs[prev, cycle_successor(prev)])
            p_a = float(probs[prev, 3:CYCLE_SPLIT].sum())
            successes += token == cycle_successor(prev)
            expected, variance = expected + p_succ, variance + p_succ * (1 - p_succ)
            in_a += 3 <= token < CYCLE_SPLIT
            expected_a, variance_a = expected_a + p_a, variance_a + p_a * (1 - p_a)
    assert abs(successes - expected) / variance**0.5 < 4.5, (successes, expected)
    assert abs(in_a - expected_a) / variance_a**0.5 < 4.5, (in_a, expected_a)
    assert sum(out["meta_info"]["spec_num_correct_drafts"] for out in outs) > 0  # drafts were accepted too


def _chi_square_of_sampled_output(tiny_suite, tokenizer, engine, bins: int = 8) -> tuple[float, list, list]:
    """Chi-square over the whole next-token distribution of ``engine``'s sampled output on the tiny target.

    For every emitted token, HF gives the target's exact distribution p given the real prefix. The vocabulary is
    cut into ``bins`` groups by p (sorted, about equal mass each); under the null hypothesis the emitted token
    falls into group b with probability mass_b, so the counts per group follow a multinomial whose expectation
    is the summed masses: a test of the whole distribution, not of a mean (attention on: a KV error changes it).
    """
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    temperature, max_new = 1.0, 32
    prompts = [tokenizer(p).input_ids for p in PROMPTS] * 3
    params = {"temperature": temperature, "max_new_tokens": max_new, "ignore_eos": True}
    outs = engine.generate(input_ids=prompts, sampling_params=params)

    model = AutoModelForCausalLM.from_pretrained(tiny_suite.target, dtype=torch.float32).eval()
    observed, expected = np.zeros(bins), np.zeros(bins)
    for prompt, out in zip(prompts, outs):
        ids = prompt + out["output_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(prompt) - 1 : len(ids) - 1].double()
        probs = torch.softmax(logits / temperature, dim=-1).numpy()
        for p, token in zip(probs, out["output_ids"]):
            order = np.argsort(-p)
            group = np.minimum((np.cumsum(p[order]) - p[order] / 2) * bins, bins - 1).astype(int)
            groups = np.empty_like(group)
            groups[order] = group
            expected += np.bincount(groups, weights=p, minlength=bins)
            observed[groups[token]] += 1
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    return chi2, observed.tolist(), expected.round(1).tolist(), outs


def test_sampled_output_keeps_the_full_next_token_distribution_with_ragged_passes(tiny_suite, tokenizer,
                                                                                    engine_pool):
    """Lengths vary per request (adaptive, 2 or 3) and frontiers of 1 make passes start past row 0. (At min 1 on
    this tiny pair, whose drafts all fail, only the start-up sweep ever went deeper, and a batch of 18 now ends it:
    ``SWEEP_MAX_BATCH``.)"""
    config = FaserConfig(min_len=2, frontier_size=1)
    engine = engine_pool.get("frontier-sampled-EAGLE-f1", faser=config, **_pair(tiny_suite, "EAGLE"))
    before = _faser_counters(engine)
    chi2, observed, expected, outs = _chi_square_of_sampled_output(tiny_suite, tokenizer, engine)
    after = _faser_counters(engine)
    assert chi2 < 26.0, (chi2, observed, expected)  # 7 dof: p < 0.0005 by chance
    assert sum(out["meta_info"]["spec_num_correct_drafts"] for out in outs) > 0  # drafts were accepted too
    assert after["offset_passes"] > before["offset_passes"]


def test_sampled_output_keeps_the_full_next_token_distribution_when_nobody_drafts(tiny_suite, tokenizer,
                                                                                   engine_pool):
    """Every step without drafts runs as the target's plain decode with SGLang's sampler."""
    engine = engine_pool.get("sampled-EAGLE-off", faser=FaserConfig(mode="off"), **_pair(tiny_suite, "EAGLE"))
    before = _faser_counters(engine)
    chi2, observed, expected, _ = _chi_square_of_sampled_output(tiny_suite, tokenizer, engine)
    after = _faser_counters(engine)
    assert chi2 < 26.0, (chi2, observed, expected)  # 7 dof: p < 0.0005 by chance
    assert after["plain_decodes"] > before["plain_decodes"] and after["proposed"] == before["proposed"]


def test_sampled_output_keeps_the_full_next_token_distribution_on_the_uniform_verify_path(tiny_suite, tokenizer,
                                                                                           engine_pool, monkeypatch):
    """SGLang's single verify pass with chains cut per request (the path a GPU serves on), forced on CPU."""
    monkeypatch.setenv("SGLANG_FASER_VERIFY_LAYOUT", "uniform")  # read by the engine's scheduler at its start
    engine = engine_pool.get("sampled-EAGLE-uniform", faser=FaserConfig(min_len=1), **_pair(tiny_suite, "EAGLE"))
    chi2, observed, expected, outs = _chi_square_of_sampled_output(tiny_suite, tokenizer, engine)
    assert engine.get_server_info()["internal_states"][0]["faser"]["verify_path"] == "uniform"
    assert chi2 < 26.0, (chi2, observed, expected)  # 7 dof: p < 0.0005 by chance
    assert sum(out["meta_info"]["spec_num_correct_drafts"] for out in outs) > 0  # drafts were accepted too
