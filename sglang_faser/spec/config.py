"""``FaserConfig``: the operator-facing FASER policy, one field table, validated in one place.

``KNOBS`` is the single source of truth for every policy setting: name, type, bounds, default and help. The
``FaserConfig`` dataclass, the launcher's ``--faser-*`` flags (launch_flags.py), the policy file, the engine's
``/set_internal_state`` encoding (engine/control_bridge.py), the gRPC conversion (control/convert.py) and
``faserctl set-policy``'s flags (control/cli.py) are all derived from it, so a new knob is one line here (plus its
typed field in proto/faser/v1/control.proto, which tests/control checks). Every knob is settable live. The config
travels to SGLang's scheduler processes as JSON in ``SGLANG_FASER_CONFIG`` (children are spawned and inherit the
environment; sglang-0.5.23-map.md §8.1).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from enum import Enum

ENV_VAR = "SGLANG_FASER_CONFIG"
MAX_SPEC_LEN = 32  # far above any useful draft length; bounds what a typo or a hostile client can ask for


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
class Knob:
    """One policy setting. ``optional``: None is allowed and means "derived" (see ``help``)."""

    name: str
    kind: str  # "mode" | "int" | "float" | "bool"
    default: object
    low: float | None = None
    high: float | None = None
    help: str = ""
    optional: bool = False
    low_open: bool = False

    @property
    def bounds(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low}, {self.high}]"


KNOBS: tuple[Knob, ...] = (
    Knob("mode", "mode", Mode.ADAPTIVE, help="adaptive: per-request lengths from the goodput policy; fixed: "
         "fixed_len for every request; off: length 0 for every request"),
    Knob("max_len", "int", None, 0, MAX_SPEC_LEN, "largest draft length per request (default: the draft window, "
         "--speculative-num-steps)", optional=True),
    Knob("min_len", "int", 0, 0, MAX_SPEC_LEN, "smallest draft length per request"),
    Knob("fixed_len", "int", None, 0, MAX_SPEC_LEN, "the length in fixed mode (default: max_len)", optional=True),
    Knob("frontier_size", "int", 0, 0, MAX_SPEC_LEN, "draft positions per verification chunk; 0 = the whole step"),
    Knob("overlap", "bool", True, help="overlap frontier verification with drafting"),
    Knob("request_rate", "float", 0.2, 0.0, 1.0, "weight of a request's newest verify step in its acceptance "
         "counts (older steps decay by 1 - rate)", low_open=True),
    Knob("prior_weight", "float", 1.0, 0.1, 100.0, "pseudo-observations of the server-wide acceptance a request's "
         "estimate starts from (fading as its own observations accrue)"),
    Knob("explore", "float", 1.0, 0.0, 4.0, "optimism for draft positions a request has seldom tried (a UCB bonus "
         "in standard deviations; 0 = the posterior mean only)"),
    Knob("latency_weight", "float", 4.0, 1.0, 100.0, "how much a latency_class=critical request's tokens count "
         "in the goodput objective, relative to the others'"),
    Knob("uniform_margin", "float", 0.25, 0.0, 10.0, "how much more goodput per-request lengths must expect than "
         "the best single length for the batch before they replace it (a mixed plan pays costs the model does not "
         "price: catch-ups, sub-batch draft-extends); 0 = always the exact optimum"),
    Knob("draft_margin", "float", 0.1, 0.0, 10.0, "how much more goodput a plan that drafts must expect than no "
         "drafts at all before it runs, unless it pays on the posterior means alone (its expected tokens carry "
         "exploration's hopes, which drafted steps did not deliver); 0 = always the exact optimum"),
    Knob("lazy_prefill", "bool", True, help="while decode steps are parked (no request drafts), a new request's "
         "prefill skips the draft model; its prompt's last rows wait in the draft backlog until it drafts"),
)
KNOB = {k.name: k for k in KNOBS}


class _ConfigMethods:
    """Methods of ``FaserConfig`` (its fields come from ``KNOBS``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _parse_mode(self.mode))
        for knob in KNOBS[1:]:
            value = getattr(self, knob.name)
            if value is None and knob.optional:
                continue
            if knob.kind == "int":
                _check_int(knob.name, value, int(knob.low), int(knob.high))
            elif knob.kind == "float":
                _check_float(knob.name, value, knob.low, knob.high, low_open=knob.low_open)
            elif not isinstance(value, bool):
                raise ConfigError(knob.name, f"must be true or false, got {value!r}")
        if self.max_len is not None and self.max_len < self.min_len:
            raise ConfigError("max_len", f"must be in [min_len={self.min_len}, {MAX_SPEC_LEN}], got {self.max_len}")

    def replace(self, **changes) -> FaserConfig:
        """A validated copy with ``changes`` applied (the partial update of SetPolicy)."""
        unknown = set(changes) - set(KNOB)
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


FaserConfig = dataclasses.make_dataclass(
    "FaserConfig", [(k.name, object, dataclasses.field(default=k.default)) for k in KNOBS], bases=(_ConfigMethods,),
    frozen=True)
FaserConfig.__module__ = __name__
FaserConfig.__doc__ = "The FASER policy; one field per entry of ``KNOBS``."


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
