"""Conversions between the wire messages (control/faser/v1) and FASER's own types (FaserConfig, telemetry dicts)."""

from __future__ import annotations

import math

from control.faser.v1 import control_pb2 as pb
from sglang_faser.spec.config import KNOBS, ConfigError, FaserConfig, Mode

MODE_TO_WIRE = {Mode.ADAPTIVE: pb.MODE_ADAPTIVE, Mode.FIXED: pb.MODE_FIXED, Mode.OFF: pb.MODE_OFF}
WIRE_TO_MODE = {v: k for k, v in MODE_TO_WIRE.items()}
OPTIONAL_FIELDS = tuple(k.name for k in KNOBS if k.kind != "mode")  # proto3 ``optional``: set or not
CLEARABLE = tuple(k.name for k in KNOBS if k.optional)  # None is a value: ``clear_<name>`` asks for it


def policy_to_wire(config: FaserConfig) -> pb.Policy:
    policy = pb.Policy(mode=MODE_TO_WIRE[config.mode])
    for name in OPTIONAL_FIELDS:
        value = getattr(config, name)
        if value is not None:
            setattr(policy, name, value)
    return policy


def changes_from_wire(policy: pb.Policy) -> dict:
    """The partial update a SetPolicy request asks for, as FaserConfig.replace() keywords."""
    changes: dict = {}
    if policy.mode != pb.MODE_UNSPECIFIED:
        if policy.mode not in WIRE_TO_MODE:
            raise ConfigError("mode", f"must be one of adaptive, fixed, off, got wire value {policy.mode}")
        changes["mode"] = WIRE_TO_MODE[policy.mode]
    for name in OPTIONAL_FIELDS:
        if policy.HasField(name):
            changes[name] = getattr(policy, name)
    for name in CLEARABLE:
        if policy.HasField(f"clear_{name}") and getattr(policy, f"clear_{name}"):
            if name in changes:
                raise ConfigError(name, f"cannot be set and cleared in one request (clear_{name})")
            changes[name] = None
    return changes


def changes_to_wire(changes: dict) -> pb.Policy:
    """The client side of :func:`changes_from_wire` (used by faserctl)."""
    policy = pb.Policy()
    for name, value in changes.items():
        if name == "mode":
            policy.mode = MODE_TO_WIRE[Mode(value)]
        elif value is None and name in CLEARABLE:
            setattr(policy, f"clear_{name}", True)
        else:
            setattr(policy, name, value)
    return policy


def _span(data: dict) -> pb.Span:
    tokens = data["tokens"]
    return pb.Span(
        seconds=data["seconds"],
        shares=pb.PhaseShares(**{k: data["shares"].get(k, 0.0) for k in
                                 ("draft", "verify", "draft_extend", "prefill", "schedule", "overlap",
                                  "idle")}),
        tokens=pb.TokenCounts(**{k: int(tokens.get(k, 0)) for k in
                                 ("proposed", "verified", "accepted", "pruned", "committed", "drafted",
                                  "draft_skipped")}),
        steps=int(data["steps"]),
        mean_batch_size=data["mean_batch_size"],
        acceptance_by_position=[math.nan if a is None else a for a in data["acceptance_by_position"]],
        length_histogram=[int(n) for n in data["length_histogram"]],
        committed_tokens_per_s=data["committed_tokens_per_s"],
    )


def telemetry_to_wire(report: dict, timestamp: float) -> pb.Telemetry:
    """``report``: the aggregated engine report (control/engine_client.py)."""
    telemetry = report["telemetry"]
    return pb.Telemetry(
        timestamp=timestamp,
        policy_version=int(report["version"]),
        policy=policy_to_wire(FaserConfig().replace(**report["policy"])),
        window=_span(telemetry["window"]),
        total=_span(telemetry["total"]),
        window_seconds=telemetry["window_s"],
        verify_path=report.get("verify_path", ""),
        draft_path=report.get("draft_path", ""),
        ranks=int(report.get("ranks", 1)),
        model=_model(report.get("model")),
        replicas=replicas_to_wire(report.get("replicas", []), with_window=True),
    )


def replicas_to_wire(rows: list[dict], with_window: bool = False) -> list[pb.ReplicaStatus]:
    """``control/fleet.py`` ``Fleet.rows()`` as wire messages; each replica's window telemetry only for Telemetry
    (a PolicyReply describes the policy, and stays equal while nothing changes)."""
    return [pb.ReplicaStatus(url=row["url"], reachable=row["reachable"], version=row["version"] or 0,
                             rank_versions=row["rank_versions"], error=row["error"],
                             window=_span(row["window"]) if with_window and row.get("window") else None)
            for row in rows]


def _model(data: dict | None) -> pb.PolicyModel:
    if not data:  # an engine from before the model was reported
        return pb.PolicyModel(verify_mape=math.nan, draft_mape=math.nan)
    return pb.PolicyModel(
        verify_coef=data["verify_coef"],
        draft_coef=data["draft_coef"],
        verify_mape=math.nan if data["verify_mape"] is None else data["verify_mape"],
        draft_mape=math.nan if data["draft_mape"] is None else data["draft_mape"],
        accept_by_position=data["accept_by_position"],
    )
