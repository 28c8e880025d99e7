"""``FaserConfig``: the operator-facing FASER policy, validated in one place.

The launcher's ``--faser-*`` flags, the gRPC control plane and the policy file all build this dataclass, so the
bounds below are the single source of truth for what an operator may set. It travels to SGLang's scheduler
processes as JSON in the ``SGLANG_FASER_CONFIG`` environment variable (children are spawned and inherit the
environment; see sglang-0.5.23-map.md §8.1).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from enum import Enum

ENV_VAR = "SGLANG_FASER_CONFIG"
MAX_SPEC_LEN = 32  # far above any useful draft length; bounds what a typo or a hostile client can ask for
MAX_EXPLORE_EVERY = 1_000_000


class Mode(str, Enum):
    """The policy's modes. The launcher's ``--faser-mode stock`` is not one: it installs no FASER worker at all."""

    ADAPTIVE = "adaptive"  # per-request lengths chosen by the goodput policy
    FIXED = "fixed"  # every request gets fixed_len (clipped to [min_len, max_len])
    OFF = "off"  # length 0 for every request: FASER's worker stays installed, reports and obeys the control plane

    def __str__(self) -> str:
        return self.value


class ConfigError(ValueError):
    """An invalid FASER setting. ``field`` names the offending field; the message gives its bounds."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class FaserConfig:
    mode: Mode = Mode.ADAPTIVE
    max_len: int | None = None  # None: SGLang's --speculative-num-steps (the reserved KV window)
    min_len: int = 0
    fixed_len: int | None = None  # None: max_len
    frontier_size: int = 0  # draft positions per verify chunk; 0 = the whole step in one chunk
    overlap: bool = True
    # tuning knobs of the goodput policy
    request_rate: float = 0.3  # EMA step of a request's own acceptance estimate per observation
    relax_rate: float = 0.02  # pull of unobserved positions towards the server-wide estimate
    explore_every: int = 16  # every n-th step runs at a random depth to keep the cost model honest; 0 = never

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _parse_mode(self.mode))
        _check_int("min_len", self.min_len, 0, MAX_SPEC_LEN)
        if self.max_len is not None:
            _check_int("max_len", self.max_len, 0, MAX_SPEC_LEN)
            if self.max_len < self.min_len:
                raise ConfigError(
                    "max_len", f"must be in [min_len={self.min_len}, {MAX_SPEC_LEN}], got {self.max_len}"
                )
        if self.fixed_len is not None:
            _check_int("fixed_len", self.fixed_len, 0, MAX_SPEC_LEN)
        _check_int("frontier_size", self.frontier_size, 0, MAX_SPEC_LEN)
        if not isinstance(self.overlap, bool):
            raise ConfigError("overlap", f"must be true or false, got {self.overlap!r}")
        _check_float("request_rate", self.request_rate, 0.0, 1.0, low_open=True)
        _check_float("relax_rate", self.relax_rate, 0.0, 1.0)
        _check_int("explore_every", self.explore_every, 0, MAX_EXPLORE_EVERY)

    def replace(self, **changes) -> FaserConfig:
        """A validated copy with ``changes`` applied (the partial update of SetPolicy)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(name, "unknown FASER setting")
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["mode"] = self.mode.value
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FaserConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError("config", f"not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError("config", "must be a JSON object")
        return cls().replace(**data)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> FaserConfig:
        text = (environ if environ is not None else os.environ).get(ENV_VAR)
        return cls.from_json(text) if text else cls()


def _parse_mode(value: Mode | str) -> Mode:
    try:
        return Mode(value)
    except ValueError:
        choices = ", ".join(m.value for m in Mode)
        raise ConfigError("mode", f"must be one of {choices}, got {value!r}") from None


def _check_int(field: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, f"must be an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ConfigError(field, f"must be in [{low}, {high}], got {value}")


def _check_float(field: str, value: object, low: float, high: float, low_open: bool = False) -> None:
    bounds = f"{'(' if low_open else '['}{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(field, f"must be a number in {bounds}, got {value!r}")
    if value < low or value > high or (low_open and value == low):
        raise ConfigError(field, f"must be in {bounds}, got {value}")
