"""The control plane against a real engine on CPU: faserctl changes the policy while requests stream."""

from __future__ import annotations

import json
import threading

import pytest
import requests
from conftest import WINDOW, faserctl, restore_default_policy, telemetry

pytestmark = pytest.mark.engine

PROMPTS = ["Beautiful is better than ugly", "the lazy dog", "Errors should never pass silently", "code"]
MAX_NEW = 48


def _generate(url, text, stream=False, max_new=MAX_NEW):
    body = {"text": text, "stream": stream,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}}
    response = requests.post(url + "/generate", json=body, timeout=300, stream=stream)
    response.raise_for_status()
    if not stream:
        return response.json()
    last = None
    for line in response.iter_lines():
        if line.startswith(b"data:") and line != b"data: [DONE]":
            last = json.loads(line[5:])
    return last


def _reference(target, tokenizer, hf_greedy, text, max_new=MAX_NEW):
    return hf_greedy(target, tokenizer(text).input_ids, max_new)


def _delta_histogram(before, after):
    old = before["total"]["length_histogram"]
    new = after["total"]["length_histogram"]
    old = old + [0] * (len(new) - len(old))
    return [b - a for a, b in zip(old, new)]


def test_set_max_len_while_requests_stream(control_server, stub, embedded_target, embedded_tokenizer, hf_greedy):
    target, url = control_server.control_target, control_server.url
    restore_default_policy(stub)
    faserctl(target, "set-policy", "--min-len", "3")  # long drafts before the change, so the cap shows
    results, errors = {}, []

    def stream(text):
        try:
            results[text] = _generate(url, text, stream=True, max_new=96)
        except Exception as exc:  # noqa: BLE001 - the test reports any failure below
            errors.append(repr(exc))

    threads = [threading.Thread(target=stream, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    while telemetry(target)["total"]["steps"] < 5:
        pass
    reply = json.loads(faserctl(target, "set-policy", "--min-len", "0", "--max-len", "2").stdout)
    assert reply["policy"]["max_len"] == 2
    after_ack = telemetry(target)
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for text in PROMPTS:  # nothing in flight was dropped or restarted, and output stays the target's own
        assert results[text]["output_ids"] == _reference(embedded_target, embedded_tokenizer, hf_greedy, text, 96)
    fresh = [_generate(url, text) for text in PROMPTS]
    for text, out in zip(PROMPTS, fresh):
        assert out["output_ids"] == _reference(embedded_target, embedded_tokenizer, hf_greedy, text)
    delta = _delta_histogram(after_ack, telemetry(target))
    assert sum(delta) > 0 and sum(delta[3:]) == 0, delta  # no request got more than 2 draft tokens
    assert telemetry(target)["policy_version"] == reply["version"]


def test_mode_off_proposes_nothing(control_server, stub, embedded_target, embedded_tokenizer, hf_greedy):
    target, url = control_server.control_target, control_server.url
    faserctl(target, "set-policy", "--mode", "off")
    before = telemetry(target)
    outs = [_generate(url, text) for text in PROMPTS[:2]]
    after = telemetry(target)
    for text, out in zip(PROMPTS, outs):
        assert out["output_ids"] == _reference(embedded_target, embedded_tokenizer, hf_greedy, text)
    assert after["total"]["steps"] > before["total"]["steps"]
    assert after["total"]["tokens"]["proposed"] == before["total"]["tokens"]["proposed"]
    restore_default_policy(stub)


def test_telemetry_json_shares_add_up(control_server):
    _generate(control_server.url, "now is better than never", max_new=16)
    snapshot = telemetry(control_server.control_target)
    for span in ("window", "total"):
        shares = snapshot[span]["shares"]
        total = sum(shares[p] for p in ("draft", "verify", "draft_extend", "prefill", "schedule")) - shares["overlap"]
        assert total + shares["idle"] == pytest.approx(1.0, abs=0.02), shares
        assert shares["verify"] > 0
    assert snapshot["total"]["shares"]["schedule"] > 0  # host work between decode steps is not idle time
    assert snapshot["verify_path"] == "ragged" and snapshot["draft_path"] in ("cut", "full-depth", "none")
    assert len(snapshot["total"]["acceptance_by_position"]) <= WINDOW
    model = snapshot["model"]  # the policy's beliefs, fitted on this machine
    assert len(model["verify_coef"]) == 4 and len(model["draft_coef"]) == 5
    assert all(c >= 0 for c in model["verify_coef"] + model["draft_coef"]) and sum(model["verify_coef"]) > 0
    assert len(model["accept_by_position"]) == WINDOW and all(0 <= a <= 1 for a in model["accept_by_position"])


def test_table_watch_and_status(control_server):
    target = control_server.control_target
    table = faserctl(target, "telemetry").stdout
    assert "share verify" in table and "tokens proposed" in table and "verify cost ms" in table
    watched = faserctl(target, "telemetry", "--json", "--watch", "--interval", "0.2", "--count", "3").stdout
    assert len([json.loads(line) for line in watched.splitlines()]) == 3
    status = json.loads(faserctl(target, "status", "--output", "json").stdout)
    assert status["health"] == "SERVING" and status["in_sync_with_engine"] is True


def test_counters_reach_prometheus(control_server):
    _generate(control_server.url, "the lazy dog", max_new=8)
    text = requests.get(control_server.url + "/metrics", timeout=30).text
    assert 'faser_tokens_total{kind="proposed"' in text
    assert 'faser_phase_share{phase="verify"' in text
    assert "faser_policy_version" in text


def test_bad_values_are_refused_with_the_field_and_bounds(control_server):
    target = control_server.control_target
    before = json.loads(faserctl(target, "get-policy", "--output", "json").stdout)
    for args, field in ((["--max-len", "100"], "max_len"), (["--frontier-size", "-1"], "frontier_size"),
                        (["--min-len", "5", "--max-len", "3"], "max_len"), (["--request-rate", "0"], "request_rate")):
        proc = faserctl(target, "set-policy", *args, check=False)
        assert proc.returncode == 1
        assert proc.stderr.startswith("faserctl: INVALID_ARGUMENT: " + field), proc.stderr
        assert "]" in proc.stderr  # the bounds are named
        assert len(proc.stderr.strip().splitlines()) == 1
    assert json.loads(faserctl(target, "get-policy", "--output", "json").stdout) == before  # the running policy is untouched
    bad_mode = faserctl(target, "set-policy", "--mode", "turbo", check=False)
    assert bad_mode.returncode == 2 and "invalid choice" in bad_mode.stderr
    unreachable = faserctl("127.0.0.1:1", "--timeout", "2", "get-policy", check=False)
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("faserctl: UNAVAILABLE")
