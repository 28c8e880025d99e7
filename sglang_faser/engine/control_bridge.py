"""The scheduler's side of the control plane: policy in through ``/set_internal_state``, telemetry out through
``/server_info``.

SGLang broadcasts ``/set_internal_state`` to every scheduler rank, each of which applies it in its event loop
between two steps (``SchedulerInternalStateController.set_internal_state``, internal_state.py:146); so a policy
change reaches every rank at a step boundary and nothing in flight is dropped or restarted. That request only
carries numbers (``SetInternalStateReq.server_args: Dict[str, int | float]``), so the control service sends the
whole policy as ``faser_*`` keys (:func:`encode_policy`), ``faser_version`` last; each key is staged and the
version key applies the staged policy at once. ``/server_info`` gets a ``faser`` entry per rank with the worker's
policy, version, paths, counters and telemetry (``FaserWorkerMixin.faser_report``).
"""

from __future__ import annotations

import logging

from sglang_faser.engine import touchpoints
from sglang_faser.spec.config import KNOBS, ConfigError, FaserConfig, Mode

logger = logging.getLogger(__name__)

MODES = [Mode.ADAPTIVE, Mode.FIXED, Mode.OFF]  # wire code = index
NONE = -1  # wire code for "unset" (max_len: the window; fixed_len: max_len)
VERSION_KEY = "faser_version"


def encode_policy(config: FaserConfig, version: int) -> dict[str, int | float]:
    """The policy as ``/set_internal_state`` keys (one per ``KNOBS`` entry); ``faser_version`` comes last and
    commits the rest."""
    keys: dict[str, int | float] = {}
    for knob in KNOBS:
        value = getattr(config, knob.name)
        if knob.kind == "mode":
            value = MODES.index(value)
        elif value is None:
            value = NONE
        keys[f"faser_{knob.name}"] = float(value) if knob.kind == "float" else int(value)
    keys[VERSION_KEY] = version
    return keys


def decode_policy(values: dict[str, int | float]) -> FaserConfig:
    """Inverse of :func:`encode_policy` (raises ``ConfigError`` naming the bad field)."""
    fields = {}
    for knob in KNOBS:
        value = values[f"faser_{knob.name}"]
        if knob.kind == "mode":
            if not 0 <= int(value) < len(MODES):
                raise ConfigError("mode", f"wire code must be in [0, {len(MODES) - 1}], got {int(value)}")
            fields[knob.name] = MODES[int(value)]
        elif knob.optional and value == NONE:
            fields[knob.name] = None
        else:
            fields[knob.name] = {"int": int, "float": float, "bool": bool}[knob.kind](value)
    return FaserConfig(**fields)


def around_update_handlers(original, controller):
    """AROUND ``SchedulerInternalStateController._update_handlers``: add the ``faser_*`` keys."""
    handlers = original(controller)
    worker = touchpoints.faser_worker_of(controller)
    staged: dict[str, int | float] = {}
    keys = list(encode_policy(FaserConfig(), 0))

    def validate(key, value):
        if worker is None:
            raise touchpoints.update_rejected(f"{key}: this server runs no FASER worker")
        if not isinstance(value, (int, float)):
            raise touchpoints.update_rejected(f"{key}: must be a number")

    def apply(key, value):
        staged[key] = value
        if key == VERSION_KEY:
            missing = [k for k in keys if k not in staged]
            if missing:
                logger.error("FASER policy update without %s; ignored", ", ".join(missing))
                return None
            try:
                worker.faser_apply_policy(decode_policy(staged), int(value))
            except ConfigError as exc:  # the control service validates first; this is a second line
                logger.error("FASER policy update refused by the scheduler: %s", exc)
        return None  # a worker command, not a server argument override

    for key in keys:
        handlers[key] = touchpoints.update_handler(validate, apply)
    return handlers


def around_add_speculative(original, controller, state):
    """AROUND ``SchedulerInternalStateController._add_speculative``: report FASER's state."""
    original(controller, state)
    worker = touchpoints.faser_worker_of(controller)
    if worker is not None:
        state["faser"] = worker.faser_report()
