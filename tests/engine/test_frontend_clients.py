"""SGLang frontend programs, the openai client and per-request controls, with FASER on and off (real servers).

Both servers serve the same tiny target with the same EAGLE head; "off" is ``--faser-mode stock`` (SGLang's own
speculative decoding, no FASER worker), "on" is FASER with every request drafting at least one token
(``--faser-min-len 1``), so that the comparisons exercise speculation for real. Greedy output is the target's own
in both, so every text must match exactly.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from sglang_faser.server_process import ServerProcess

pytestmark = pytest.mark.engine
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

EAGLE = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--max-total-tokens", "8192",
    "--sleep-on-idle",
]  # fmt: skip


@pytest.fixture(scope="module")
def servers(tiny_suite, tmp_path_factory):
    logs = tmp_path_factory.mktemp("frontend")
    on = ServerProcess(EAGLE + ["--faser-min-len", "1"], log_path=logs / "on.log")
    off = ServerProcess(EAGLE + ["--faser-mode", "stock"], log_path=logs / "off.log")
    with on, off:
        yield {"on": on, "off": off}


def test_dsl_programs_give_the_same_text_with_faser_on_and_off(servers):
    import dsl_programs

    on, off = dsl_programs.run_all(servers["on"].url), dsl_programs.run_all(servers["off"].url)
    assert on == off
    assert on["select"] in ("yes", "no", "maybe")
    year = on["stop_and_regex"]["year"]
    assert len(year) == 4 and year[:2] in ("19", "20") and year.isdigit()  # regex-constrained decoding ran
    assert "." not in on["stop_and_regex"]["summary"] and "\n" not in on["stop_and_regex"]["summary"]
    assert len(on["run_batch"]) == 3 and on["stream"]


def test_openai_client_gets_equal_greedy_completions(servers):
    import openai_client

    on, off = openai_client.run_all(servers["on"].url), openai_client.run_all(servers["off"].url)
    assert on == off
    assert on["chat_n2"][0] == on["chat_n2"][1]  # greedy: both choices are the target's own continuation
    assert len(on["completion_logprobs"]) > 0 and on["chat_stream"] and on["completion_stream"]


def _generate(url, text, custom_params=None, max_new=32):
    params = {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}
    if custom_params is not None:
        params["custom_params"] = custom_params
    return requests.post(url + "/generate", json={"text": text, "sampling_params": params}, timeout=300)


def test_a_request_with_max_len_0_proposes_nothing_while_its_neighbours_speculate(servers):
    url = servers["on"].url
    asks = [None, {"faser": {"max_len": 0}}, None, {"faser": {"max_len": 1, "latency_class": "critical"}}]
    texts = ["the lazy dog", "Beautiful is better than ugly", "code", "now is better than never"]
    with ThreadPoolExecutor(len(asks)) as pool:
        replies = list(pool.map(lambda a: _generate(url, a[0], a[1]).json(), zip(texts, asks)))
    histograms = [r["meta_info"]["spec_cap_lens_histogram"] for r in replies]
    assert sum(histograms[1][1:]) == 0 and histograms[1][0] > 0, histograms[1]  # zero proposed tokens
    assert sum(histograms[0][1:]) > 0 and sum(histograms[2][1:]) > 0  # neighbours speculate
    assert sum(histograms[3][2:]) == 0 and histograms[3][1] > 0  # capped at 1, never 0 (critical)
    for text, reply in zip(texts, replies):  # and everyone's output is still the target's own
        assert reply["output_ids"] == _generate(servers["off"].url, text).json()["output_ids"]


def test_a_parked_request_asking_for_logprobs_runs_the_one_row_verify_and_drafts_again_afterwards(servers):
    """A request alone at length 0 that asks for logprobs: its steps draft nothing and are SGLang's one-row verify
    (the plain decode returns no logprobs), whose draft state FASER stubs from the state the step began with;
    its text and logprobs are the target's own, and a request drafting after it too."""
    body = {"text": "Beautiful is better than ugly", "return_logprob": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True,
                                "custom_params": {"faser": {"max_len": 0}}}}
    on = requests.post(servers["on"].url + "/generate", json=body, timeout=300).json()
    off = requests.post(servers["off"].url + "/generate", json=body, timeout=300).json()
    assert sum(on["meta_info"]["spec_cap_lens_histogram"][1:]) == 0, on["meta_info"]
    assert on["output_ids"] == off["output_ids"]
    logprobs = [entry[0] for entry in on["meta_info"]["output_token_logprobs"]]
    assert logprobs == pytest.approx([entry[0] for entry in off["meta_info"]["output_token_logprobs"]], abs=1e-3)
    after = _generate(servers["on"].url, "now is better than never").json()
    assert sum(after["meta_info"]["spec_cap_lens_histogram"][1:]) > 0
    assert after["output_ids"] == _generate(servers["off"].url, "now is better than never").json()["output_ids"]


@pytest.mark.parametrize(
    "custom_params, field",
    [({"faser": {"max_len": -1}}, "custom_params.faser.max_len"),
     ({"faser": {"max_len": "all"}}, "custom_params.faser.max_len"),
     ({"faser": {"latency_class": "asap"}}, "custom_params.faser.latency_class"),
     ({"faser": 3}, "custom_params.faser")],
)
def test_bad_custom_params_get_a_400_naming_the_field(servers, custom_params, field):
    url = servers["on"].url
    reply = _generate(url, "the lazy dog", custom_params)
    assert reply.status_code == 400, reply.text
    assert field in reply.text
    body = {"model": "default", "prompt": "the lazy dog", "max_tokens": 4, "custom_params": custom_params}
    openai_reply = requests.post(url + "/v1/completions", json=body, timeout=120)
    assert openai_reply.status_code == 400 and field in openai_reply.text
    assert _generate(url, "still serving", max_new=4).status_code == 200


@pytest.mark.parametrize("name", ["on", "off"])
def test_input_ids_outside_the_vocabulary_get_a_400_and_the_server_keeps_serving(servers, name):
    """SGLang itself sends such ids to the embedding, where the scheduler dies and every request in flight with it."""
    url = servers[name].url
    model_path = Path(requests.get(url + "/model_info", timeout=60).json()["model_path"])
    vocab = json.loads((model_path / "config.json").read_text())["vocab_size"]

    def generate(ids):
        body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
        return requests.post(url + "/generate", json=body, timeout=120)

    for ids, bad in (([1, 2, vocab], vocab), ([1, -3, 2], -3)):
        reply = generate(ids)
        assert reply.status_code == 400, reply.text
        assert f"input_ids: token id {bad} " in reply.text and f"[0, {vocab})" in reply.text
    assert generate([1, vocab - 1]).status_code == 200
    assert _generate(url, "still serving", max_new=4).status_code == 200


def test_a_shared_200_token_prefix_hits_the_radix_cache_as_without_faser(servers, tokenizer):
    words = ("Beautiful is better than ugly. Explicit is better than implicit. Simple is better than complex. "
             * 40)
    prefix = tokenizer(words).input_ids[:200]
    results = {}
    for name, server in servers.items():
        requests.post(server.url + "/flush_cache", timeout=60)
        outs = []
        for tail in ([11, 12, 13], [21, 22, 23, 24]):
            body = {"input_ids": prefix + tail,
                    "sampling_params": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}}
            outs.append(requests.post(server.url + "/generate", json=body, timeout=300).json())
        results[name] = outs
    # With EAGLE, SGLang's radix tree is keyed by token bigrams (mem_cache/radix_cache.py:60): N shared tokens are
    # N - 1 keys, and the last shared token is recomputed. So 199 of the 200 shared tokens come from the cache.
    for name, (first, second) in sorted(results.items()):
        assert first["meta_info"]["cached_tokens"] == 0
        assert second["meta_info"]["cached_tokens"] == len(prefix) - 1, (name, second["meta_info"])
    on, off = results["on"], results["off"]
    assert [o["meta_info"]["cached_tokens"] for o in on] == [o["meta_info"]["cached_tokens"] for o in off]
    assert [o["output_ids"] for o in on] == [o["output_ids"] for o in off]


def test_faser_admits_as_many_running_requests_as_no_speculation_where_stock_speculation_caps_them(servers):
    """No CUDA graph on CPU: FASER's launcher lifts SGLang's speculative cap of 48 (``with_running_cap``), stock
    SGLang's speculative server keeps it."""

    def running_cap(server) -> int:
        info = requests.get(server.url + "/server_info", timeout=30).json()
        return info["internal_states"][0]["effective_max_running_requests_per_dp"]

    assert running_cap(servers["off"]) == 48
    assert running_cap(servers["on"]) > 48
