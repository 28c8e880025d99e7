"""The A/B harness's pure parts: which code a base server imports, its flags, and the ratios it reports."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import ab_servers  # noqa: E402


def test_a_base_server_imports_the_base_tree_even_when_started_from_this_checkout(tmp_path):
    package = tmp_path / "sglang_faser"
    package.mkdir()
    (package / "__init__.py").write_text("")
    probe = "import sglang_faser, os; print(os.path.dirname(sglang_faser.__file__))"
    env = {**__import__("os").environ, **ab_servers.base_env(tmp_path)}
    here = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert Path(here.stdout.strip()) == package
    this = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert Path(this.stdout.strip()) == ROOT / "sglang_faser"


def test_flags_follow_the_workload_and_the_configuration():
    doomed = ab_servers.flags_for("batch1-doomed", "faser-k0")
    assert "STANDALONE" in doomed and "--speculative-draft-model-path" in doomed and "--sleep-on-idle" in doomed
    assert doomed[doomed.index("--faser-mode") + 1] == "off"
    plain = ab_servers.flags_for("batch1-sure", "no-spec")
    assert plain[:2] == ["--model-path", doomed[doomed.index("--model-path") + 1]]
    deep = ab_servers.flags_for("deep1-doomed", "faser")
    assert Path(deep[deep.index("--model-path") + 1]).name == "tiny-llama-cycles-deep"
    assert Path(deep[deep.index("--speculative-draft-model-path") + 1]).name == "tiny-llama-cycles-draft-1l"
    mixed = ab_servers.flags_for("mixed-c4", "faser")
    assert "EAGLE" in mixed and mixed[mixed.index("--speculative-num-steps") + 1] == "7"
    assert "--sleep-on-idle" in mixed  # every server is up at once: idle ones must not poll
    busy = ab_servers.flags_for("deep-c16", "faser")
    assert busy[busy.index("--max-running-requests") + 1] == "16"
    assert [ab_servers.one_at_a_time(w) for w in ("deep1-sure", "mixed-c1", "deep-c16", "mixed-r16")] == [
        True, True, False, False]


def test_report_gives_medians_and_their_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr(ab_servers, "RESULTS", tmp_path)
    args = argparse.Namespace(configs=["faser"], workload="mixed-c4", repeats=3, requests=8, max_new_tokens=16,
                              tag="t")
    runs = {("no-spec", "new"): [100.0, 90.0, 110.0], ("faser", "new"): [99.0, 88.0, 200.0],
            ("faser", "base"): [90.0, 80.0, 70.0]}
    ab_servers.report(args, "abc123", runs)
    text = (tmp_path / "ab_t.md").read_text()
    assert "| faser | 99.0 | 80.0 | 1.100x | 0.990x | 0.889x |" in text  # medians of each repeat's ratios
    record = json.loads((tmp_path / "ab_t.json").read_text())
    assert record["meta"]["base"] == "abc123" and record["repeats_tok_per_s"]["faser base"] == [90.0, 80.0, 70.0]
    assert pytest.approx(record["repeats_tok_per_s"]["no-spec new"][2]) == 110.0
    args.tag = "alone"
    ab_servers.report(args, None, {key: runs[key] for key in [("no-spec", "new"), ("faser", "new")]})
    assert "| faser | 99.0 | 0.990x |" in (tmp_path / "ab_alone.md").read_text()


def test_one_request_at_a_time_runs_each_request_on_every_server_in_a_rotating_order():
    calls = []

    def job(tokens):
        def run(url):
            calls.append((tokens, url))
            return tokens, {"a": 1.0, "b": 2.0, "c": 4.0}[url]
        return run

    keys = ["A", "B", "C"]
    rates = ab_servers.interleaved_repeat([job(10), job(20), job(30), job(40)], keys, {"A": "a", "B": "b", "C": "c"})
    assert [url for _, url in calls] == list("abc" "bca" "cab" "abc")
    assert [tokens for tokens, _ in calls] == [10] * 3 + [20] * 3 + [30] * 3 + [40] * 3
    assert rates == {"A": 100 / 4.0, "B": 100 / 8.0, "C": 100 / 16.0}
    assert ab_servers.one_at_a_time("mixed-c1") and ab_servers.one_at_a_time("deep1-doomed")
    assert not ab_servers.one_at_a_time("mixed-c4") and not ab_servers.one_at_a_time("mixed-r16")


def test_oracle_report_compares_per_kind_plans_with_uniform_ones_and_stock(tmp_path, monkeypatch):
    from benchmarks import oracle_lengths

    monkeypatch.setattr(oracle_lengths, "RESULTS", tmp_path)
    args = argparse.Namespace(workload="mixed-c32", plans=["1/1", "2/1"], baselines=["no-spec", "fixed-1", "faser"],
                              repeats=2, requests=8, max_new_tokens=16, tag="t")
    rates = {"no-spec": [100.0, 100.0], "fixed-1": [110.0, 90.0], "faser": [99.0, 120.0],
             "1/1": [100.0, 100.0], "2/1": [130.0, 80.0]}
    oracle_lengths.report(args, rates)
    text = (tmp_path / "oracle_lengths_t.md").read_text()
    assert "| 2/1 | 105.0 | 1.050x | 1.050x |" in text  # no-spec is the best stock run (median 100 vs 100)
    assert "best per-kind plan 2/1 against the best uniform plan 1/1: 1.050x" in text
    assert json.loads((tmp_path / "oracle_lengths_t.json").read_text())["repeats_tok_per_s"]["faser"] == [99.0, 120.0]
    assert oracle_lengths.mixed_workload("mixed-g64") == "mixed-g64"
    with pytest.raises(argparse.ArgumentTypeError, match="mixed-c<in flight>"):
        oracle_lengths.mixed_workload("mixed-c0")


def test_workload_names_give_their_arrivals_and_requests_in_flight():
    closed, most = ab_servers.workload_requests("mixed-c16", 6, 8)
    assert most == 16 and [r.at for r in closed] == [0.0] * 6 and {r.kind for r in closed} == {"repeat", "noise"}
    poisson, none = ab_servers.workload_requests("mixed-r64", 6, 8)
    gamma, _ = ab_servers.workload_requests("mixed-g64", 6, 8)
    assert none is None and poisson[-1].at > 0 and gamma[-1].at > 0
    assert [r.at for r in gamma] != [r.at for r in poisson] and all(r.max_new_tokens == 8 for r in gamma)
    spread, _ = ab_servers.workload_requests("mixed-c16", 40, 64, output_spread=0.5)
    assert len({r.max_new_tokens for r in spread}) > 5 and all(32 <= r.max_new_tokens <= 96 for r in spread)
