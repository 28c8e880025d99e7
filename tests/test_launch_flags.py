"""The launcher validates --faser-* flags before SGLang or any model is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sglang_faser.launch_flags import parse_faser_args
from sglang_faser.spec.config import FaserConfig, Mode


def test_faser_flags_are_split_from_sglang_flags():
    config, rest = parse_faser_args(
        ["--model-path", "m", "--faser-max-len", "5", "--faser-mode", "fixed", "--faser-overlap", "off", "--port", "1"]
    )
    assert config == FaserConfig(mode=Mode.FIXED, max_len=5, overlap=False)
    assert rest == ["--model-path", "m", "--port", "1"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--faser-max-len", "-1"], "--faser-max-len: must be in [0, 32], got -1"),
        (["--faser-max-len", "2", "--faser-min-len", "3"], "--faser-max-len: must be in [min_len=3, 32]"),
        (["--faser-frobnicate", "3"], "unrecognized FASER flag: --faser-frobnicate"),
        (["--faser-mode=turbo"], "invalid choice: 'turbo'"),
        (["--faser-overlap", "maybe"], "expected on or off"),
    ],
)
def test_bad_flags_exit_before_any_model_loads(argv, message, tmp_path):
    env = dict(os.environ, SGLANG_FASER_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_faser.launch_server", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("python -m sglang_faser.launch_server: error:")
    assert not (tmp_path / "cache").exists(), "the embedded model was built before the flags were checked"
