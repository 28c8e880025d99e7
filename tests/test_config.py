"""FaserConfig holds the bounds every entry point (flags, gRPC, policy file) enforces."""

from __future__ import annotations

import pytest

from sglang_faser.spec.config import MAX_SPEC_LEN, ConfigError, FaserConfig, Mode


def test_defaults_are_adaptive_with_server_window():
    config = FaserConfig()
    assert config.mode is Mode.ADAPTIVE
    assert config.max_len is None and config.min_len == 0 and config.overlap is True


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"max_len": -1}, "max_len"),
        ({"max_len": MAX_SPEC_LEN + 1}, "max_len"),
        ({"min_len": 4, "max_len": 2}, "max_len"),
        ({"mode": "turbo"}, "mode"),
        ({"frontier_size": -3}, "frontier_size"),
        ({"fixed_len": 1.5}, "fixed_len"),
        ({"overlap": "yes"}, "overlap"),
        ({"max_len": True}, "max_len"),
        ({"no_such_knob": 1}, "no_such_knob"),
    ],
)
def test_invalid_values_name_the_field(changes, field):
    with pytest.raises(ConfigError) as info:
        FaserConfig().replace(**changes)
    assert info.value.field == field
    assert field in str(info.value)


def test_bounds_are_in_the_message():
    with pytest.raises(ConfigError, match=rf"\[0, {MAX_SPEC_LEN}\]"):
        FaserConfig(max_len=99)


def test_json_round_trip_and_partial_update():
    config = FaserConfig(mode="fixed", max_len=5, fixed_len=3, frontier_size=2, overlap=False)
    assert FaserConfig.from_json(config.to_json()) == config
    assert config.replace(max_len=7) == FaserConfig(
        mode=Mode.FIXED, max_len=7, fixed_len=3, frontier_size=2, overlap=False
    )


def test_from_env_reads_the_scheduler_variable():
    env = {"SGLANG_FASER_CONFIG": '{"mode": "off", "max_len": 2}'}
    assert FaserConfig.from_env(env) == FaserConfig(mode=Mode.OFF, max_len=2)
    assert FaserConfig.from_env({}) == FaserConfig()
    with pytest.raises(ConfigError, match="JSON"):
        FaserConfig.from_env({"SGLANG_FASER_CONFIG": "{oops"})
