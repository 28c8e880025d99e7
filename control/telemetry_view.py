"""How faserctl shows telemetry: a rich table for people, plain JSON for machines."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table

from control.convert import WIRE_TO_MODE
from control.faser.v1 import control_pb2 as pb

PHASES = ("draft", "verify", "draft_extend", "prefill", "schedule", "overlap", "idle")
TOKENS = ("proposed", "verified", "accepted", "pruned", "committed", "drafted", "draft_skipped")


def to_json_dict(message) -> dict:
    """Plain JSON types (protobuf's own JSON form writes 64-bit integers as strings and cannot write NaN)."""
    data = {}
    for field in message.DESCRIPTOR.fields:
        repeated = field.is_repeated
        if field.message_type is None and not repeated and field.has_presence and not message.HasField(field.name):
            continue  # an absent optional scalar (e.g. max_len: the whole window)
        value = getattr(message, field.name)
        if field.message_type is not None and not repeated:
            data[field.name] = to_json_dict(value)
        elif field.message_type is not None:
            data[field.name] = [to_json_dict(v) for v in value]
        elif repeated:
            data[field.name] = [None if isinstance(v, float) and math.isnan(v) else v for v in value]
        else:
            data[field.name] = value
    if isinstance(message, pb.Policy):
        data["mode"] = WIRE_TO_MODE[message.mode].value if message.mode in WIRE_TO_MODE else None
    return data


def policy_dict(policy: pb.Policy) -> dict:
    data = to_json_dict(policy)
    data.pop("clear_max_len", None)
    data.pop("clear_fixed_len", None)
    return data


def replica_table(replicas, telemetry: bool = False) -> Table:
    """A row per replica: URL, health, the version in force (per rank when they differ), what is wrong."""
    table = Table(title="replicas")
    for name in ("url", "health", "version", "ranks") + (("tokens/s", "steps", "batch", "verify share")
                                                           if telemetry else ()) + ("error",):
        table.add_column(name)
    for r in replicas:
        ranks = " ".join(str(v) for v in r.rank_versions) or "-"
        extra = ((f"{r.window.committed_tokens_per_s:.1f}", str(r.window.steps), f"{r.window.mean_batch_size:.2f}",
                  f"{r.window.shares.verify:.1%}") if telemetry else ())
        table.add_row(r.url, "reachable" if r.reachable else "UNREACHABLE", str(r.version) if r.reachable else "-",
                      ranks, *extra, r.error or "")
    return table


def render(telemetry: pb.Telemetry, per_replica: bool = False) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row("policy", f"v{telemetry.policy_version} {policy_dict(telemetry.policy)}")
    head.add_row("paths", f"verify={telemetry.verify_path} draft={telemetry.draft_path} ranks={telemetry.ranks}")
    table = Table(title=f"FASER telemetry (window {telemetry.window_seconds:g} s / since start)")
    table.add_column("")
    table.add_column("window", justify="right")
    table.add_column("total", justify="right")
    spans = (telemetry.window, telemetry.total)
    for phase in PHASES:
        table.add_row(f"share {phase}", *(f"{getattr(s.shares, phase):.1%}" for s in spans))
    for kind in TOKENS:
        table.add_row(f"tokens {kind}", *(str(getattr(s.tokens, kind)) for s in spans))
    table.add_row("steps", *(str(s.steps) for s in spans))
    table.add_row("mean batch size", *(f"{s.mean_batch_size:.2f}" for s in spans))
    table.add_row("committed tokens/s", *(f"{s.committed_tokens_per_s:.1f}" for s in spans))
    table.add_row("acceptance by position", *(_acceptance(s) for s in spans))
    table.add_row("length histogram", *(" ".join(f"{k}:{n}" for k, n in enumerate(s.length_histogram) if n)
                                        for s in spans))
    parts = [head, table, _model_grid(telemetry.model)]
    if per_replica:
        parts.append(replica_table(telemetry.replicas, telemetry=True))
    return Group(*parts)


def _model_grid(model: pb.PolicyModel) -> Table:
    """The policy's beliefs: why it picks the lengths it does."""
    grid = Table.grid(padding=(0, 2))
    verify = _coefs(model.verify_coef, ('', 'x req', 'x tok', 'x key read'))
    grid.add_row("verify cost ms", f"{verify}  (error {_pct(model.verify_mape)})")
    grid.add_row("draft cost ms", f"{_coefs(model.draft_coef, ('', 'if drafting', 'x req', 'x step', 'x row'))}  "
                                  f"(error {_pct(model.draft_mape)})")
    grid.add_row("acceptance estimate", " ".join(f"{a:.2f}" for a in model.accept_by_position) or "-")
    return grid


def _coefs(values, names) -> str:
    return " + ".join(f"{v:.3g}{' ' + n if n else ''}" for v, n in zip(values, names)) or "-"


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0%}"


def _acceptance(span: pb.Span) -> str:
    return " ".join("-" if math.isnan(a) else f"{a:.2f}" for a in span.acceptance_by_position)
