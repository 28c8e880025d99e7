"""Requests with k = 0 skip the draft-extend; the draft catches up in one pass when they draft again (real servers).

The policy is switched between ``fixed_len 0`` and ``fixed_len 3`` while one long greedy request streams, through
the same ``/set_internal_state`` path the control service uses: alone (steps where nobody drafts) and beside a
``latency_class: critical`` request, whose floor of one draft keeps drafting while the streamed request is at 0
(steps whose draft-extend leaves the streamed request out). Output must stay the target's own greedy output token
for token. On the context-free pair (draft = target, attention off) every draft the target verifies is accepted,
but only if the draft's state was caught up: SGLang's stub for a skipped draft-extend would make the first draft
after the switch a zero token, which the target rejects.

The streamed request asks for far more tokens than the test reads and is aborted once ``MAX_NEW`` have streamed, so
a server that outruns the client cannot finish it before the switches land (on a slow or busy client, a request of
exactly ``MAX_NEW`` tokens at fixed length 0 could end before the first switch and never draft).
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid

import pytest
import requests

from sglang_faser.engine.control_bridge import encode_policy
from sglang_faser.server_process import ServerProcess
from sglang_faser.spec.config import FaserConfig

pytestmark = pytest.mark.engine

MAX_NEW = 160
LONG = 1600  # what the streamed request asks for; it is aborted after MAX_NEW
SWITCHES = {10: 3, 50: 0, 90: 3, 120: 0}  # streamed tokens -> fixed length from then on
CHUNK = 64  # the switching servers' chunked-prefill size: longer prompts prefill in several steps
VERSIONS = itertools.count(2)  # policy versions, increasing across the tests that share a server


def _flags(target, draft, algorithm):
    return [
        "--model-path", str(target), "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--dtype", "float32",
        "--max-total-tokens", "4096", "--faser-mode", "fixed", "--faser-fixed-len", "0", "--faser-control", "off",
    ]  # fmt: skip


def _generate_with_switches(server: ServerProcess, input_ids: list[int], switches: dict = SWITCHES,
                            at_token: tuple[int, callable] | None = None) -> dict:
    """Stream one long request, switching the policy at ``switches``; aborted after ``MAX_NEW`` tokens;
    ``at_token`` (n, f): f() once n tokens have streamed."""
    rid = uuid.uuid4().hex
    body = {"rid": rid, "input_ids": input_ids, "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": LONG, "ignore_eos": True}}
    pending, last, aborted = dict(switches), None, False
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=300) as response:
        for line in response.iter_lines():
            if not line.startswith(b"data:") or line.endswith(b"[DONE]"):
                continue
            chunk = json.loads(line[5:])
            if "output_ids" not in chunk:
                continue
            last = chunk
            done = last["meta_info"]["completion_tokens"]
            if at_token is not None and done >= at_token[0]:
                at_token, call = None, at_token[1]
                call()
            for at in [a for a in pending if done >= a]:
                policy = encode_policy(FaserConfig(mode="fixed", fixed_len=pending.pop(at)), next(VERSIONS))
                answer = requests.post(server.url + "/set_internal_state", json={"server_args": policy}, timeout=30)
                assert answer.status_code == 200, answer.text
            if done >= MAX_NEW and not aborted:  # read on until the stream ends: the request is then gone
                aborted = requests.post(server.url + "/abort_request", json={"rid": rid}, timeout=30).ok
    assert aborted and not pending and last["meta_info"]["completion_tokens"] < LONG, last["meta_info"]
    return last


def _counters(server: ServerProcess) -> dict:
    info = requests.get(server.url + "/server_info", timeout=30).json()
    return info["internal_states"][0]["faser"]["counters"]


def _generate_beside(server: ServerProcess, input_ids: list[int], started: threading.Event, out: dict) -> None:
    """A critical request (at least one draft a step) that outlives the streamed one; ``started`` once it decodes."""
    body = {"input_ids": input_ids, "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 3 * MAX_NEW, "ignore_eos": True,
                                "custom_params": {"faser": {"latency_class": "critical"}}}}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith(b"data:") and not line.endswith(b"[DONE]"):
                out["last"] = json.loads(line[5:])
                started.set()
    started.set()


@pytest.fixture(scope="module", params=["context-free-standalone", "eagle"])
def switching_server(request, tiny_suite, tmp_path_factory):
    if request.param == "eagle":
        target, flags = tiny_suite.target, _flags(tiny_suite.target, tiny_suite.eagle, "EAGLE")
    else:
        target = tiny_suite.context_free
        flags = _flags(target, target, "STANDALONE")
    flags += ["--chunked-prefill-size", str(CHUNK)]  # a long prompt's prefill runs in chunks
    with ServerProcess(flags, log_path=tmp_path_factory.mktemp("catch-up") / "server.log") as server:
        yield request.param, target, server


@pytest.mark.parametrize("neighbour", [False, True], ids=["alone", "beside-a-drafting-request"])
def test_switching_into_and_out_of_speculation_keeps_greedy_output_and_catches_the_draft_up(
        neighbour, switching_server, tokenizer, hf_greedy):
    pair, target, server = switching_server
    input_ids = tokenizer("Beautiful is better than ugly").input_ids
    before = _counters(server)
    if neighbour:
        other_ids, started, other = tokenizer("Now is better than never").input_ids, threading.Event(), {}
        thread = threading.Thread(target=_generate_beside, args=(server, other_ids, started, other))
        thread.start()
        assert started.wait(120)
    out = _generate_with_switches(server, input_ids)
    if neighbour:
        thread.join(300)
        assert other["last"]["output_ids"] == hf_greedy(target, other_ids, 3 * MAX_NEW)
        assert other["last"]["meta_info"]["spec_cap_lens_histogram"][0] == 0  # it drafted at every step
    counters = {k: v - before[k] for k, v in _counters(server).items() if isinstance(v, int)}
    assert out["output_ids"] == hf_greedy(target, input_ids, len(out["output_ids"]))
    meta = out["meta_info"]
    assert meta["spec_verify_ct"] > 0
    proposed = sum(k * n for k, n in enumerate(meta["spec_cap_lens_histogram"]))
    assert proposed > 0
    if pair != "eagle":  # SGLang's spec_accept_rate counts 3 drafts for every step, also those with k = 0
        assert meta["spec_num_correct_drafts"] == proposed, meta
    skipped = "extend_skipped_requests" if neighbour else "skipped_extends"
    assert counters[skipped] > 0 and counters["catch_up_rows"] > 0, counters
    if not neighbour:  # a step where nobody drafts is the target's plain decode on CPU
        assert counters["plain_decodes"] == counters["skipped_extends"], counters


def test_a_mixed_prefill_decode_step_drops_the_parked_requests_backlog_and_keeps_greedy_output(
        tiny_suite, tokenizer, hf_greedy, tmp_path):
    """With ``--enable-mixed-chunk`` a new request's prefill runs beside the parked stream in one mixed step, with
    SGLang's own draft-extend: the stream's skipped rows are dropped there (a catch-up would write them one
    position late), the rows it skips afterwards are caught up when it drafts again, and both outputs stay the
    target's greedy ones."""
    target = tiny_suite.target
    flags = _flags(target, tiny_suite.eagle, "EAGLE") + ["--enable-mixed-chunk", "--chunked-prefill-size", "64"]
    input_ids = tokenizer("Beautiful is better than ugly").input_ids
    other_ids = tokenizer("Simple is better than complex. " * 6).input_ids
    other: dict = {}

    def send_other() -> None:
        body = {"input_ids": other_ids, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        other["thread"] = threading.Thread(target=lambda: other.update(
            out=requests.post(server.url + "/generate", json=body, timeout=300).json()))
        other["thread"].start()

    with ServerProcess(flags, log_path=tmp_path / "server.log") as server:
        out = _generate_with_switches(server, input_ids, {70: 3, 120: 0}, at_token=(15, send_other))
        other["thread"].join(300)
        counters = _counters(server)
    assert out["output_ids"] == hf_greedy(target, input_ids, len(out["output_ids"]))
    assert other["out"]["output_ids"] == hf_greedy(target, other_ids, 8)
    assert counters["backlog_dropped_rows"] > 0 and counters["catch_up_rows"] > 0, counters


def test_a_prefill_while_parked_skips_the_draft_and_its_prompt_is_caught_up_when_it_drafts(
        switching_server, tokenizer, hf_greedy):
    """While decode steps are parked a new request's prefill runs no draft model (``--faser-lazy-prefill``, on by
    default): its prompt's rows wait in the backlog, and when the policy turns drafting on its draft catches up
    over them with the rows it skipped since. Output stays the target's greedy output; on the always-accepted pair
    every draft after the switch is accepted, which a draft started from SGLang's zeroed stubs would not be."""
    pair, target, server = switching_server
    requests.post(server.url + "/set_internal_state", timeout=30, json={
        "server_args": encode_policy(FaserConfig(mode="fixed", fixed_len=0), next(VERSIONS))}).raise_for_status()
    warm = {"text": "Flat is better than nested", "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
    requests.post(server.url + "/generate", json=warm, timeout=300).raise_for_status()  # a parked decode step
    input_ids = tokenizer("Errors should never pass silently").input_ids
    before = _counters(server)
    out = _generate_with_switches(server, input_ids, {10: 3, 120: 0})
    counters = {k: v - before[k] for k, v in _counters(server).items() if isinstance(v, int)}
    assert out["output_ids"] == hf_greedy(target, input_ids, len(out["output_ids"]))
    # the prompt's rows past the radix cache's prefix hit, then the ten or so tokens streamed before the switch
    assert 0 < counters["lazy_prefill_rows"] < counters["catch_up_rows"], counters
    meta = out["meta_info"]
    proposed = sum(k * n for k, n in enumerate(meta["spec_cap_lens_histogram"]))
    assert proposed > 0
    if pair != "eagle":
        assert meta["spec_num_correct_drafts"] == proposed, meta


def test_a_prompt_prefilled_in_chunks_while_parked_runs_no_draft_and_keeps_greedy_output(
        switching_server, tokenizer, hf_greedy):
    """A prompt longer than SGLang's prefill chunk, prefilled while decode steps are parked: none of its chunks runs
    the draft model (a chunk that more of its prompt follows keeps no backlog rows; its last chunk's rows wait in
    the backlog), and when the policy turns drafting on the draft catches up and output stays the target's greedy
    output; on the always-accepted pair every draft after the switch is accepted."""
    pair, target, server = switching_server
    requests.post(server.url + "/set_internal_state", timeout=30, json={
        "server_args": encode_policy(FaserConfig(mode="fixed", fixed_len=0), next(VERSIONS))}).raise_for_status()
    warm = {"text": "Sparse is better than dense", "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
    requests.post(server.url + "/generate", json=warm, timeout=300).raise_for_status()  # a parked decode step
    input_ids = tokenizer(" ".join(f"Readability counts {n} times." for n in range(16))).input_ids
    chunks = -(-len(input_ids) // CHUNK)
    assert chunks >= 3, len(input_ids)
    before = _counters(server)
    out = _generate_with_switches(server, input_ids, {10: 3, 120: 0})
    counters = {k: v - before[k] for k, v in _counters(server).items() if isinstance(v, int)}
    assert out["output_ids"] == hf_greedy(target, input_ids, len(out["output_ids"]))
    assert counters["lazy_prefills"] == chunks, counters  # every chunk's prefill ran without the draft
    assert 0 < counters["lazy_prefill_rows"] <= min(CHUNK, len(input_ids) - (chunks - 1) * CHUNK), counters
    assert counters["catch_up_rows"] > counters["lazy_prefill_rows"], counters
    meta = out["meta_info"]
    proposed = sum(k * n for k, n in enumerate(meta["spec_cap_lens_histogram"]))
    assert proposed > 0
    if pair != "eagle":
        assert meta["spec_num_correct_drafts"] == proposed, meta
