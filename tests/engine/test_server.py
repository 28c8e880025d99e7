"""The launcher serves the embedded default for real: native and OpenAI endpoints, and the README's demo."""

from __future__ import annotations

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
    log = tmp_path_factory.mktemp("server") / "server.log"
    with ServerProcess(EAGLE + ["--max-total-tokens", "4096", "--sleep-on-idle"], log_path=log) as proc:
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
