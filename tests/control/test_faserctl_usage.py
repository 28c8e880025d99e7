"""faserctl's failures that need no server: bad usage exits 2, a dead target 1, each with one line on stderr."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _faserctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "control.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args, message",
    [
        (["set-policy", "--mode", "turbo"], "faserctl: argument --mode: invalid choice: 'turbo'"),
        (["set-policy", "--max-len", "eight"], "faserctl: argument --max-len: invalid int value: 'eight'"),
        (["set-policy"], "faserctl: set-policy needs at least one field to change"),
        (["frobnicate"], "faserctl: argument command: invalid choice: 'frobnicate'"),
        ([], "faserctl: the following arguments are required: command"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args, message):
    proc = _faserctl("--target", "127.0.0.1:1", *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stdout == ""


def test_unreadable_token_file_is_one_line_and_exit_2(tmp_path):
    proc = _faserctl("--target", "127.0.0.1:1", "--token-file", str(tmp_path / "absent"), "get-policy")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("faserctl: ") and "absent" in proc.stderr
