"""Per-request speculation controls, carried in SGLang's ``custom_params`` as ``{"faser": {...}}``.

    {"faser": {"max_len": 0}}                    # no speculation for this request
    {"faser": {"max_len": 2}}                    # at most 2 draft tokens per step
    {"faser": {"latency_class": "critical"}}     # keep speculating under load (at least 1 draft per step)

``latency_class``: ``"critical"`` requests' tokens count ``latency_weight`` times in the goodput objective, and they
get a floor of one draft token per step (the goodput optimum under heavy
load gives many requests 0; a latency-critical request keeps the per-token latency gain of speculation, paying
for it with batch throughput); ``"default"`` leaves the choice to the policy. Values are checked in the HTTP
process (a bad one is a 400 naming the field, see engine/request_checks.py) and read again in the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_faser.spec.config import MAX_SPEC_LEN, ConfigError

KEY = "faser"
LATENCY_CLASSES = ("default", "critical")
FIELDS = ("max_len", "latency_class")


@dataclass(frozen=True)
class RequestControls:
    max_len: int | None = None
    latency_class: str = "default"

    @property
    def floor(self) -> int:
        return 1 if self.latency_class == "critical" else 0


NONE = RequestControls()


def parse(custom_params) -> RequestControls:
    """The request's controls; raises ConfigError naming ``custom_params.faser.<field>`` on a bad value."""
    if not isinstance(custom_params, dict) or KEY not in custom_params:
        return NONE
    entry = custom_params[KEY]
    if not isinstance(entry, dict):
        raise ConfigError(f"custom_params.{KEY}", f"must be an object with fields {', '.join(FIELDS)}")
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise ConfigError(f"custom_params.{KEY}.{unknown[0]}", f"unknown field (known: {', '.join(FIELDS)})")
    max_len = entry.get("max_len")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or not 0 <= max_len <= MAX_SPEC_LEN):
        raise ConfigError(f"custom_params.{KEY}.max_len", f"must be an integer in [0, {MAX_SPEC_LEN}], got {max_len!r}")
    latency_class = entry.get("latency_class", "default")
    if latency_class not in LATENCY_CLASSES:
        raise ConfigError(f"custom_params.{KEY}.latency_class",
                          f"must be one of {', '.join(LATENCY_CLASSES)}, got {latency_class!r}")
    return RequestControls(max_len, latency_class)


def parse_or_none(custom_params) -> RequestControls:
    """The scheduler's reading: values were checked at the door; anything odd means no per-request control."""
    try:
        return parse(custom_params)
    except ConfigError:
        return NONE
