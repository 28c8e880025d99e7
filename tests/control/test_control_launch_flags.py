"""The launcher's control-plane flags: unsafe or inconsistent ones stop it (exit 2, one line) before any model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sglang_faser.launch_flags import parse_launch_args
from sglang_faser.spec.config import FaserConfig, Mode

PREFIX = "python -m sglang_faser.launch_server: error:"


def _launch(argv: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, SGLANG_FASER_CACHE=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "sglang_faser.launch_server", *argv], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--faser-control-host", "0.0.0.0"], "non-loopback address '0.0.0.0' without TLS"),
        (["--faser-control-host", "10.1.2.3", "--faser-control-token-file", "{token}"],
         "without TLS (--faser-control-tls-cert/--faser-control-tls-key); pass --faser-control-insecure"),
        (["--faser-control-tls-cert", "{token}"], "--faser-control-tls-cert and --faser-control-tls-key"),
        (["--faser-control-token-file", "{missing}"], "--faser-control-token-file: no such file"),
        (["--faser-control-port", "70000"], "--faser-control-port must be in [0, 65535]"),
        (["--faser-control", "maybe"], "expected on or off"),
        (["--faser-policy-file", "{corrupt}"], "is not a FASER policy file"),
    ],
)
def test_unsafe_or_inconsistent_control_flags_exit_before_any_model_loads(argv, message, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    corrupt = tmp_path / "policy.json"
    corrupt.write_text("{not json")
    paths = {"token": str(token), "missing": str(tmp_path / "absent"), "corrupt": str(corrupt)}
    proc = _launch([arg.format(**paths) for arg in argv], tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(PREFIX) and message in last, proc.stderr
    assert not (tmp_path / "cache").exists(), "the embedded model was built before the flags were checked"


def test_control_flags_never_reach_sglang_and_defaults_are_loopback():
    config, control, rest = parse_launch_args(["--port", "30000", "--faser-control-port", "6000", "--faser-max-len",
                                               "3", "--faser-control-insecure", "--faser-control-host", "0.0.0.0"])
    assert rest == ["--port", "30000"]
    assert config == FaserConfig(max_len=3)
    assert (control.enabled, control.host, control.port, control.insecure) == (True, "0.0.0.0", 6000, True)
    _, default, _ = parse_launch_args([])
    assert (default.enabled, default.host, default.port) == (True, "127.0.0.1", 50051)


def test_control_off_skips_the_bind_check():
    _, control, rest = parse_launch_args(["--faser-control", "off", "--faser-control-host", "10.0.0.1"])
    assert not control.enabled and rest == []


def test_tls_and_token_allow_a_non_loopback_bind(tmp_path):
    for name in ("cert.pem", "key.pem", "token"):
        (tmp_path / name).write_text("x")
    _, control, _ = parse_launch_args(["--faser-control-host", "0.0.0.0",
                                       "--faser-control-tls-cert", str(tmp_path / "cert.pem"),
                                       "--faser-control-tls-key", str(tmp_path / "key.pem"),
                                       "--faser-control-token-file", str(tmp_path / "token")])
    assert control.tls_cert and control.tls_key and control.token_file and not control.insecure


def test_an_existing_policy_file_decides_the_starting_policy(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"version": 7, "policy": {"mode": "fixed", "max_len": 2, "fixed_len": 1}}))
    config, control, _ = parse_launch_args(["--faser-max-len", "5", "--faser-policy-file", str(path)])
    assert config == FaserConfig(mode=Mode.FIXED, max_len=2, fixed_len=1)  # the flags are only its defaults
    assert control.policy_file == str(path)
    fresh, _, _ = parse_launch_args(["--faser-max-len", "5", "--faser-policy-file", str(tmp_path / "new.json")])
    assert fresh == FaserConfig(max_len=5)  # no file yet: the flags decide


def test_a_policy_file_with_a_bad_value_names_the_field(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"version": 1, "policy": {"max_len": 99}}))
    proc = _launch(["--faser-policy-file", str(path)], tmp_path)
    assert proc.returncode == 2
    assert "--faser-policy-file: max_len: must be in [0, 32], got 99" in proc.stderr.strip().splitlines()[-1], proc.stderr
