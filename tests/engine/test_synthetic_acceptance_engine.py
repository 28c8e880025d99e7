"""The benchmark-only synthetic acceptance inside a real server: it decides acceptance, and only when asked."""

from __future__ import annotations

import pytest
import requests

from sglang_faser.engine.synthetic_acceptance import ENV_VAR, SyntheticAcceptance
from sglang_faser.server_process import ServerProcess

pytestmark = pytest.mark.engine

CHAIN_3 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
           "--speculative-num-draft-tokens", "4", "--max-total-tokens", "4096", "--faser-control", "off"]


def _accept_lengths(url: str, rids: list[str], max_new_tokens: int = 25) -> list[float]:
    lengths = []
    for i, rid in enumerate(rids):
        body = {"text": f"Now is better than never {i}", "rid": rid,
                "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
        meta = requests.post(url + "/generate", json=body, timeout=300).json()["meta_info"]
        assert meta["completion_tokens"] == max_new_tokens
        lengths.append(meta["spec_accept_length"])
    return lengths


def _serve(flags, log, monkeypatch, spec: str):
    monkeypatch.setenv(ENV_VAR, SyntheticAcceptance.parse(spec).to_env())
    return ServerProcess(flags, log_path=log)


def test_rate_one_accepts_every_draft_of_stock_fixed_length_3(tiny_suite, tmp_path, monkeypatch):
    # synthetic rate 1.0: every draft accepted whatever the embedded EAGLE head proposed
    with _serve(CHAIN_3 + ["--faser-mode", "stock"], tmp_path / "s.log", monkeypatch, "1.0:1.0") as server:
        lengths = _accept_lengths(server.url, [f"one-{i}" for i in range(3)])
    assert min(lengths) >= 3.5, lengths  # 3 drafts + 1 bonus per step, but for a truncated last step
    assert "SYNTHETIC ACCEPTANCE ON" in (tmp_path / "s.log").read_text()


def test_each_request_gets_its_own_rate_and_faser_follows_it(tiny_suite, tmp_path, monkeypatch):
    setting = SyntheticAcceptance.parse("0.0:1.0")
    rids = sorted((f"rid-{i}" for i in range(200)), key=setting.rate)
    sure, hopeless = rids[-1], rids[0]  # rates near 1 and near 0
    assert setting.rate(sure) > 0.95 and setting.rate(hopeless) < 0.05
    with _serve(CHAIN_3, tmp_path / "s.log", monkeypatch, "0.0:1.0") as server:
        high, low = _accept_lengths(server.url, [sure, hopeless], max_new_tokens=40)
        counters = next(s["faser"]["counters"] for s in requests.get(server.url + "/server_info", timeout=30)
                        .json()["internal_states"] if "faser" in s)
    # how deep FASER drafts for the sure request is the cost model's call on this machine's measured step costs (CI
    # once saw depth 1 throughout: 2.0 tokens a step, its start-up sweep's parked step included); that it drafts for
    # it and parks the hopeless one is not
    assert high > 1.6 and low < 1.3, (high, low)
    assert counters["accepted"] > 0
