"""A benchmark run stops at the first server that would run other code than its first server did."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.serve.same_code import CodeChanged, SameCode
from sglang_faser.server_process import code_fingerprint


def test_the_fingerprint_follows_the_sources_a_server_would_import(tmp_path):
    package = tmp_path / "sglang_faser" / "spec"
    package.mkdir(parents=True)
    (package / "policy.py").write_text("DEPTH = 1\n")
    first = code_fingerprint(tmp_path)
    (tmp_path / "notes.md").write_text("not code")
    assert code_fingerprint(tmp_path) == first
    (package / "policy.py").write_text("DEPTH = 2\n")
    assert code_fingerprint(tmp_path) != first


def test_a_server_running_other_code_than_the_runs_first_stops_the_run():
    def server(code):
        return SimpleNamespace(code=code)

    same = SameCode()
    same.check(server("aaa"))
    same.check(server("bbb"), "base")  # the other version of an A/B run has its own
    same.check(server("aaa"))
    with pytest.raises(CodeChanged, match="aaa -> ccc"):
        same.check(server("ccc"))
    assert same.code == {"new": "aaa", "base": "bbb"}
    assert not isinstance(CodeChanged("x"), RuntimeError)  # serve_bench skips a config on RuntimeError only
