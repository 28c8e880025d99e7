"""The CPU attention microbenchmark runs against another version of the kernels and writes what it measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import cpu_attention  # noqa: E402


def test_it_compares_this_checkout_with_another_version_and_writes_both(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_attention, "RESULTS", tmp_path)
    base = ROOT / "sglang_faser" / "kernels" / "cpu" / "attention.py"  # a file: no git history needed
    monkeypatch.setattr(sys, "argv", ["cpu_attention.py", "--base", str(base), "--batch", "3", "--layers", "2",
                                      "--repeats", "2", "--calls", "1", "--tag", "t"])
    cpu_attention.main()  # asserts the two modules' outputs agree
    result = json.loads((tmp_path / "cpu_attention_t.json").read_text())
    assert set(result["ms_per_pass"]) == {"decode", "verify"}
    assert all(row["new"] > 0 and row["base"] > 0 for row in result["ms_per_pass"].values())
    assert "| verify |" in (tmp_path / "cpu_attention_t.md").read_text()
