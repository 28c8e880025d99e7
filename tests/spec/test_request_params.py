"""Per-request controls in custom_params: parsing and the errors that become HTTP 400s."""

from __future__ import annotations

import pytest

from sglang_faser.spec.config import ConfigError
from sglang_faser.spec.request_params import RequestControls, parse, parse_or_none


def test_absent_or_unrelated_params_mean_no_control():
    assert parse(None) == RequestControls() and parse({"other": 1}) == RequestControls()


def test_valid_controls():
    assert parse({"faser": {"max_len": 0}}) == RequestControls(max_len=0)
    controls = parse({"faser": {"max_len": 3, "latency_class": "critical"}})
    assert controls.max_len == 3 and controls.floor == 1


@pytest.mark.parametrize(
    "entry, field",
    [
        ({"max_len": -1}, "custom_params.faser.max_len"),
        ({"max_len": 33}, "custom_params.faser.max_len"),
        ({"max_len": "2"}, "custom_params.faser.max_len"),
        ({"max_len": True}, "custom_params.faser.max_len"),
        ({"latency_class": "urgent"}, "custom_params.faser.latency_class"),
        ({"max_lenn": 1}, "custom_params.faser.max_lenn"),
        ([1, 2], "custom_params.faser"),
    ],
)
def test_bad_controls_name_the_field(entry, field):
    with pytest.raises(ConfigError) as error:
        parse({"faser": entry})
    assert error.value.field == field
    assert parse_or_none({"faser": entry}) == RequestControls()
