"""Steps without drafts skip the draft-extend; the draft catches up in one pass when drafting resumes (real servers).

The policy is switched between ``fixed_len 0`` and ``fixed_len 3`` while one long greedy request streams, through
the same ``/set_internal_state`` path the control service uses. Output must stay the target's own greedy output
token for token. On the context-free pair (draft = target, attention off) every draft the target verifies is
accepted, but only if the draft's state was caught up: SGLang's stub for a skipped draft-extend would make the
first draft after the switch a zero token, which the target rejects.
"""

from __future__ import annotations

import json

import pytest
import requests

from sglang_faser.engine.control_bridge import encode_policy
from sglang_faser.server_process import ServerProcess
from sglang_faser.spec.config import FaserConfig

pytestmark = pytest.mark.engine

MAX_NEW = 160
SWITCHES = {10: 3, 50: 0, 90: 3, 120: 0}  # streamed tokens -> fixed length from then on


def _flags(target, draft, algorithm):
    return [
        "--model-path", str(target), "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--dtype", "float32",
        "--max-total-tokens", "4096", "--faser-mode", "fixed", "--faser-fixed-len", "0", "--faser-control", "off",
    ]  # fmt: skip


def _generate_with_switches(server: ServerProcess, input_ids: list[int]) -> dict:
    body = {"input_ids": input_ids, "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True}}
    pending, version, last = dict(SWITCHES), 1, None
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=300) as response:
        for line in response.iter_lines():
            if not line.startswith(b"data:") or line.endswith(b"[DONE]"):
                continue
            last = json.loads(line[5:])
            done = last["meta_info"]["completion_tokens"]
            for at in [a for a in pending if done >= a]:
                version += 1
                policy = encode_policy(FaserConfig(mode="fixed", fixed_len=pending.pop(at)), version)
                answer = requests.post(server.url + "/set_internal_state", json={"server_args": policy}, timeout=30)
                assert answer.status_code == 200, answer.text
    return last


def _counters(server: ServerProcess) -> dict:
    info = requests.get(server.url + "/server_info", timeout=30).json()
    return info["internal_states"][0]["faser"]["counters"]


@pytest.mark.parametrize("pair", ["context-free-standalone", "eagle"])
def test_switching_into_and_out_of_speculation_keeps_greedy_output_and_catches_the_draft_up(
        pair, tiny_suite, tokenizer, hf_greedy, tmp_path):
    if pair == "eagle":
        target, flags = tiny_suite.target, _flags(tiny_suite.target, tiny_suite.eagle, "EAGLE")
    else:
        target = tiny_suite.context_free
        flags = _flags(target, target, "STANDALONE")
    input_ids = tokenizer("Beautiful is better than ugly").input_ids
    with ServerProcess(flags, log_path=tmp_path / "server.log") as server:
        out = _generate_with_switches(server, input_ids)
        counters = _counters(server)
    assert out["output_ids"] == hf_greedy(target, input_ids, MAX_NEW)
    meta = out["meta_info"]
    assert meta["spec_verify_ct"] > 0
    proposed = sum(k * n for k, n in enumerate(meta["spec_cap_lens_histogram"]))
    assert proposed > 0
    if pair != "eagle":  # SGLang's spec_accept_rate counts 3 drafts for every step, also those with k = 0
        assert meta["spec_num_correct_drafts"] == proposed, meta
    assert counters["skipped_extends"] > 0 and counters["catch_up_rows"] > 0, counters
