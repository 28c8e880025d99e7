"""The FASER worker inside SGLang's real engine: per-request lengths, lossless greedy output."""

from __future__ import annotations

import json

import pytest
from prompts import PROMPTS as ALL_PROMPTS

from sglang_faser.spec.config import FaserConfig

pytestmark = pytest.mark.engine

PROMPTS = ALL_PROMPTS
MAX_NEW = 24
GREEDY = {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True}


def _spec(suite, algorithm):
    draft = suite.eagle if algorithm == "EAGLE" else suite.standalone
    return dict(
        model_path=str(suite.target),
        speculative_algorithm=algorithm,
        speculative_draft_model_path=str(draft),
        speculative_eagle_topk=1,
        speculative_num_steps=3,
        speculative_num_draft_tokens=4,
    )


@pytest.mark.parametrize("algorithm", ["EAGLE", "STANDALONE"])
def test_faser_greedy_output_equals_hf_for_a_mixed_batch(algorithm, tiny_suite, tokenizer, engine_pool, hf_greedy):
    engine = engine_pool.get(f"faser-{algorithm}", faser=FaserConfig(), **_spec(tiny_suite, algorithm))
    input_ids = [tokenizer(p).input_ids for p in PROMPTS]
    outs = engine.generate(input_ids=input_ids, sampling_params=GREEDY)
    for ids, out in zip(input_ids, outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.target, ids, MAX_NEW)
        meta = out["meta_info"]
        assert meta["spec_verify_ct"] > 0
        assert "spec_cap_lens_histogram" in meta, meta  # FASER's per-request lengths reach SGLang's metrics


def test_the_step_trace_has_each_decode_step_with_its_plan_and_measured_times(tiny_suite, tokenizer, engine_pool):
    engine = engine_pool.get("faser-EAGLE", faser=FaserConfig(), **_spec(tiny_suite, "EAGLE"))
    path = engine_pool.trace_path("faser-EAGLE")
    before = path.read_text().splitlines() if path.exists() else []
    out = engine.generate(input_ids=tokenizer(PROMPTS[0]).input_ids, sampling_params=GREEDY)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [line for line in lines[len(before):] if "profile" not in line]
    assert steps, "no decode step traced"
    # the server's first line is its start-up profile (CPU: eager verify passes), a replay's prior
    assert "profile" in lines[0] and all(len(sample) == 4 for sample in lines[0]["profile"])
    for step in steps:
        assert isinstance(step["sampled"], bool) and isinstance(step["ragged"], bool)
        assert step["probe"] == ""  # one request: neither a cost nor a joint probe runs at batch 1
        assert step["batch"] == len(step["lengths"]) == 1
        assert step["rids"] == [out["meta_info"]["id"]]  # which request each length was for
        assert step["depth"] == max(step["lengths"])  # depth tiers: the step runs its deepest length
        assert step["step_ms"] > 0 and step["verify_ms"] > 0 and step["expected_ms"] > 0
        assert len(step["depth_factor"]) == 4 and len(step["draft_coef"]) == 5
        assert 0 <= step["accepted"][0] <= step["lengths"][0]
    # the decode steps commit the MAX_NEW - 1 tokens after the prefill's (the last one may commit more, which
    # SGLang drops): each line is one step, with its acceptance
    committed = sum(step["accepted"][0] + 1 for step in steps)
    assert MAX_NEW - 1 <= committed <= MAX_NEW - 1 + steps[-1]["lengths"][0]
    # the trace report reads it: every live step in one (bucket, depth) cell, batch bucket 1
    from benchmarks import trace_report

    summary = trace_report.report(steps)
    live = [step for step in steps if not step["calibration"]]
    assert 0 < summary["steps"] == len(live) == sum(cell["steps"] for cell in summary["cells"])
    assert {cell["bucket"] for cell in summary["cells"]} <= {1}


def test_fixed_mode_caps_every_request_at_its_length(tiny_suite, tokenizer, engine_pool, hf_greedy):
    config = FaserConfig(mode="fixed", fixed_len=1)
    engine = engine_pool.get("faser-fixed-1", faser=config, **_spec(tiny_suite, "EAGLE"))
    input_ids = [tokenizer(p).input_ids for p in PROMPTS[:3]]
    outs = engine.generate(input_ids=input_ids, sampling_params=GREEDY)
    for ids, out in zip(input_ids, outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.target, ids, MAX_NEW)
        histogram = out["meta_info"]["spec_cap_lens_histogram"]
        assert sum(histogram[2:]) == 0 and histogram[1] > 0, histogram


def _cycle_engine(suite, engine_pool):
    return engine_pool.get(
        "faser-cycles",
        faser=FaserConfig(),
        model_path=str(suite.cycle_target),
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path=str(suite.cycle_draft),
        speculative_eagle_topk=1,
        speculative_num_steps=3,
        speculative_num_draft_tokens=4,
    )


def test_sure_and_hopeless_requests_get_different_lengths_in_one_batch(tiny_suite, engine_pool, hf_greedy):
    """Cycle pair: the draft is always right on cycle A and always wrong on cycle B (models/tiny.py)."""
    engine = _cycle_engine(tiny_suite, engine_pool)
    sure, hopeless = [0, 10], [0, 300]
    outs = engine.generate(input_ids=[sure, hopeless], sampling_params={**GREEDY, "max_new_tokens": 48})
    assert engine.get_server_info()["internal_states"][0]["faser"]["verify_path"] == "ragged"
    for ids, out in zip([sure, hopeless], outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.cycle_target, ids, 48)

    def mean_length(out):
        histogram = out["meta_info"]["spec_cap_lens_histogram"]
        return sum(k * n for k, n in enumerate(histogram)) / sum(histogram)

    sure_meta, hopeless_meta = outs[0]["meta_info"], outs[1]["meta_info"]
    proposed = sum(k * n for k, n in enumerate(sure_meta["spec_cap_lens_histogram"]))
    assert sure_meta["spec_num_correct_drafts"] >= 0.8 * proposed > 0  # what FASER proposed there was accepted
    assert hopeless_meta["spec_num_correct_drafts"] == 0
    assert mean_length(outs[0]) > mean_length(outs[1])
    assert outs[1]["meta_info"]["spec_cap_lens_histogram"][0] > 0  # the hopeless request was given length 0


def test_the_uniform_verify_path_is_lossless_for_parked_and_drafting_requests(tiny_suite, tokenizer, engine_pool,
                                                                               hf_greedy, monkeypatch):
    """SGLang's single verify pass with chains cut per request, the path a GPU serves on (triton attention), forced
    on CPU: requests capped at 0, 1 and 3 drafts in one batch (sub-batch drafts and draft-extends beside parked
    rows), then the cycle pair's sure and hopeless requests (whole-batch parks and catch-ups) keep HF's greedy
    output."""
    monkeypatch.setenv("SGLANG_FASER_VERIFY_LAYOUT", "uniform")  # read by the engine's scheduler at its start
    engine = engine_pool.get("faser-uniform", faser=FaserConfig(), **_spec(tiny_suite, "EAGLE"))
    caps = [0, 1, 3, None]
    input_ids = [tokenizer(p).input_ids for p in PROMPTS[:4]]
    params = [{**GREEDY, **({} if cap is None else {"custom_params": {"faser": {"max_len": cap}}})} for cap in caps]
    outs = engine.generate(input_ids=input_ids, sampling_params=params)
    faser = engine.get_server_info()["internal_states"][0]["faser"]
    assert faser["verify_path"] == "uniform"
    for ids, out, cap in zip(input_ids, outs, caps):
        assert out["output_ids"] == hf_greedy(tiny_suite.target, ids, MAX_NEW)
        histogram = out["meta_info"]["spec_cap_lens_histogram"]
        if cap is not None:
            assert sum(histogram[cap + 1:]) == 0, (cap, histogram)
    assert outs[0]["meta_info"]["spec_cap_lens_histogram"][0] > 0
    cycles = engine_pool.get("faser-uniform-cycles", faser=FaserConfig(), model_path=str(tiny_suite.cycle_target),
                             speculative_algorithm="STANDALONE",
                             speculative_draft_model_path=str(tiny_suite.cycle_draft), speculative_eagle_topk=1,
                             speculative_num_steps=3, speculative_num_draft_tokens=4)
    sure, hopeless = [0, 10], [0, 300]
    outs = cycles.generate(input_ids=[sure, hopeless], sampling_params={**GREEDY, "max_new_tokens": 48})
    assert cycles.get_server_info()["internal_states"][0]["faser"]["verify_path"] == "uniform"
    for ids, out in zip([sure, hopeless], outs):
        assert out["output_ids"] == hf_greedy(tiny_suite.cycle_target, ids, 48)


def test_requests_that_stop_on_a_token_keep_greedy_output_and_leave_no_statistics(tiny_suite, engine_pool,
                                                                                 hf_greedy):
    """Sure and hopeless requests that stop on a token mid-stream, beside one that runs on: their output is the
    target's greedy output up to the stop token, and once all are done the controller tracks no request (a finished
    request's statistics are dropped, not kept or made again by a later step's feedback; the controller's own test
    of that order is ``test_a_request_finished_with_a_step_in_flight_leaves_no_row_behind``)."""
    engine = _cycle_engine(tiny_suite, engine_pool)
    prompts = [[0, 10], [0, 300], [0, 20], [0, 310]]
    runs_on = [0, 30]
    stops, params = [], []
    for ids in prompts:
        reference = hf_greedy(tiny_suite.cycle_target, ids, 48)
        stop = reference[17]
        stops.append((reference, reference.index(stop)))
        params.append({"temperature": 0, "max_new_tokens": 48, "stop_token_ids": [stop]})
    outs = engine.generate(input_ids=prompts + [runs_on],
                           sampling_params=params + [{**GREEDY, "max_new_tokens": 64}])
    for (reference, at), out in zip(stops, outs):
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out["meta_info"]["finish_reason"]
        assert reference[:at] == out["output_ids"][:at] and len(out["output_ids"]) <= at + 1
    assert outs[-1]["output_ids"] == hf_greedy(tiny_suite.cycle_target, runs_on, 64)
    assert engine.get_server_info()["internal_states"][0]["faser"]["model"]["tracked_requests"] == 0
