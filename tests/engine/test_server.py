"""The launcher serves the embedded default for real: native and OpenAI endpoints, the start-up warm-up, and the
README's demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from sglang_faser.server_process import ServerProcess

pytestmark = pytest.mark.engine

EAGLE = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_suite, tmp_path_factory):
    """With the start-up warm-up (off by default on CPU) up to batch 4, and a step trace."""
    folder = tmp_path_factory.mktemp("server")
    args = EAGLE + ["--max-total-tokens", "4096", "--sleep-on-idle", "--faser-warmup", "on",
                    "--max-running-requests", "4"]
    env = {"SGLANG_FASER_STEP_TRACE": str(folder / "steps.jsonl"), "SGLANG_FASER_PHASE_TIMES": str(folder / "phases")}
    with ServerProcess(args, log_path=folder / "server.log", env=env) as proc:
        proc.trace_path = folder / "steps.jsonl"
        proc.phases_path = folder / "phases"
        yield proc


def test_generate_serves_the_embedded_model_greedily(server, embedded_target, embedded_tokenizer, hf_greedy):
    tokenizer = embedded_tokenizer
    prompt = "Beautiful is better than ugly"
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}}
    out = requests.post(server.url + "/generate", json=body, timeout=120).json()
    expected = hf_greedy(embedded_target, tokenizer(prompt).input_ids, 16)
    assert out["output_ids"] == expected
    assert out["text"] == tokenizer.decode(expected, skip_special_tokens=True)
    assert out["meta_info"]["spec_verify_ct"] > 0


def test_chat_completions_answer(server):
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Simple is better than"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    reply = requests.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200
    data = reply.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["role"] == "assistant"
    assert data["usage"]["completion_tokens"] > 0


def test_readme_demo_runs_end_to_end():
    """``make demo``: the real instruct model (installed on first use) answers, with FASER's statistics."""
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_faser.demo", "--max-new-tokens", "16"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("/v1/chat/completions  ") == 3
    assert "Paris" in proc.stdout  # a real answer to "What is the capital of France?"
    assert "/generate  " in proc.stdout and "accept_length=" in proc.stdout
    assert "FASER: mean length" in proc.stdout and "FASER since start:" in proc.stdout


def test_launcher_runs_the_faser_worker_with_depth_tiers(server):
    """FASER is on by default under the launcher, with depth tiers (draft and verify only to the chosen depth)."""
    requests.post(
        server.url + "/generate",
        json={"text": "the lazy dog", "sampling_params": {"temperature": 0, "max_new_tokens": 8}},
        timeout=120,
    )
    log = server.log_path.read_text()
    assert "FASER worker on EAGLEWorkerV2" in log
    assert "depth_tiers=on" in log and "FASER verify path: ragged" in log


def test_the_warmup_runs_every_depth_at_every_batch_bucket_before_serving_and_is_counted_apart(server):
    """Each warm-up batch (2, 3, 4 here) runs every depth with all drafting and with every other request parked
    (sub-batches, catch-ups); none of its steps is a FASER step in the counters, and its costs are the profile
    prior. The outputs served after it are the target's (``test_generate_serves_the_embedded_model_greedily``)."""
    log = server.log_path.read_text()
    assert "FASER warm-up: depths 0..3 at batches [2, 3, 4]" in log
    assert log.index("Warmup ended") < log.index("The server is fired up")
    warm = [line for line in map(json.loads, server.trace_path.read_text().splitlines()) if line.get("warmup")]
    every = {(0, False)} | {(depth, parked) for depth in (1, 2, 3) for parked in (False, True)}
    for batch in (2, 3, 4):
        ran = {(line["depth"], 0 in line["lengths"] and line["depth"] > 0) for line in warm if line["batch"] == batch}
        assert ran == every, batch
    faser = requests.get(server.url + "/server_info", timeout=30).json()["internal_states"][0]["faser"]
    assert faser["counters"]["warmup_steps"] == len(warm)
    assert faser["profile"] == "warm-up steps"  # its steps were the cost model's prior, not eager dummy passes


def test_phase_times_put_the_target_forward_inside_the_step_and_host_work_around_it(server):
    """``SGLANG_FASER_PHASE_TIMES``: the scheduler's iterations at batch 1, timed per phase (engine/phase_times.py)."""
    from sglang_faser.engine.phase_times import read

    body = {"input_ids": [1, 2, 3, 4], "sampling_params": {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}}
    requests.post(server.url + "/generate", json=body, timeout=120).raise_for_status()
    summaries = read(str(server.phases_path))
    assert len(summaries) == 1  # one scheduler process
    (by_batch,) = summaries.values()
    one = by_batch["1"]
    assert one["steps"] >= 1
    us = one["median_us"]
    assert 0 < us["forward"] < us["run"] and us["host"] > 0 and us["schedule"] > 0
