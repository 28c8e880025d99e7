"""``faserctl``: the command-line client of the FASER control service.

    faserctl [--target HOST:PORT] [--token-file F] [--tls-ca PEM] COMMAND
      get-policy [--output table|json] the policy in force, its version, and a row per replica
      set-policy [--mode M] [--max-len N] [--min-len N] [--fixed-len N] [--frontier-size N] [--overlap on|off]
                 [--request-rate X] [--prior-weight X] [--explore X] [--latency-weight X]
                 [--clear-max-len] [--clear-fixed-len]   (one flag per knob of sglang_faser/spec/config.py)
      telemetry [--json] [--watch [--interval S] [--count N]] [--per-replica]
      status [--output table|json]    health of the service, the policy version, and a row per replica

Exit code 0 on success; otherwise one line on stderr saying why, and 1 (refused / failed) or 2 (bad usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import grpc

from control.convert import changes_to_wire
from sglang_faser.spec.config import KNOBS, Mode
from control.faser.v1 import control_pb2 as pb
from control.faser.v1 import control_pb2_grpc as pb_grpc
from control.telemetry_view import policy_dict, render, replica_table, to_json_dict

DEFAULT_TARGET = "127.0.0.1:50051"


class _OneLineParser(argparse.ArgumentParser):
    """Bad usage is one line too (``faserctl: argument --mode: invalid choice ...``, exit 2), not a usage dump."""

    def error(self, message: str):
        self.exit(2, f"faserctl: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="faserctl", description="Control a running sglang-faser server.")
    parser.add_argument("--target", default=os.environ.get("FASERCTL_TARGET", DEFAULT_TARGET),
                        help=f"control service host:port (default {DEFAULT_TARGET})")
    parser.add_argument("--token-file", help="bearer token for a service started with --faser-control-token-file")
    parser.add_argument("--tls-ca", help="CA / self-signed certificate (PEM) to reach a TLS service")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
    sub = parser.add_subparsers(dest="command", required=True)
    getp = sub.add_parser("get-policy", help="the policy in force, and a row per replica")
    getp.add_argument("--output", choices=["table", "json"], default="table", help="json: for machines")
    setp = sub.add_parser("set-policy", help="change some policy fields (the others stay)")
    for knob in KNOBS:  # one flag per policy knob (sglang_faser/spec/config.py)
        flag = "--" + knob.name.replace("_", "-")
        if knob.kind == "mode":
            setp.add_argument(flag, choices=[m.value for m in Mode], help=knob.help)
        elif knob.kind == "bool":
            setp.add_argument(flag, choices=["on", "off"], help=knob.help)
        else:
            setp.add_argument(flag, type=int if knob.kind == "int" else float, help=f"{knob.help}, in {knob.bounds}")
        if knob.optional:
            setp.add_argument(f"--clear-{knob.name.replace('_', '-')}", action="store_true",
                              help=f"back to the default of {knob.name}")
    tele = sub.add_parser("telemetry", help="phase shares, token counters, lengths")
    tele.add_argument("--json", action="store_true", help="machine-readable JSON (one object per snapshot)")
    tele.add_argument("--watch", action="store_true", help="keep printing snapshots")
    tele.add_argument("--interval", type=float, default=1.0)
    tele.add_argument("--count", type=int, default=0, help="with --watch: stop after N snapshots (0 = never)")
    tele.add_argument("--per-replica", action="store_true", help="also a row per replica (its own window)")
    stat = sub.add_parser("status", help="service health, the policy version, and a row per replica")
    stat.add_argument("--output", choices=["table", "json"], default="table", help="json: for machines")
    return parser


def _changes(args) -> dict:
    changes = {}
    for knob in KNOBS:
        value = getattr(args, knob.name)
        if value is not None:
            changes[knob.name] = value == "on" if knob.kind == "bool" else value
        if knob.optional and getattr(args, f"clear_{knob.name}"):
            changes[knob.name] = None
    return changes


def _channel(args) -> grpc.Channel:
    if args.tls_ca:
        with open(args.tls_ca, "rb") as handle:
            return grpc.secure_channel(args.target, grpc.ssl_channel_credentials(handle.read()))
    return grpc.insecure_channel(args.target)


def _metadata(args) -> list[tuple[str, str]]:
    metadata = [("x-faser-user", os.environ.get("USER", "unknown"))]
    if args.token_file:
        with open(args.token_file) as handle:
            metadata.append(("authorization", f"Bearer {handle.read().strip()}"))
    return metadata


def run(args) -> int:
    stub = pb_grpc.FaserControlStub(_channel(args))
    call = dict(metadata=_metadata(args), timeout=args.timeout)
    if args.command == "get-policy":
        reply = stub.GetPolicy(pb.GetPolicyRequest(), **call)
        data = {"version": reply.version, "applied": reply.applied, "policy": policy_dict(reply.policy),
                "replicas": _rows(reply.replicas)}
        _print(args.output, data, f"policy v{reply.version} {'applied' if reply.applied else 'NOT applied'} on "
               f"every reachable replica: {data['policy']}", reply.replicas)
    elif args.command == "set-policy":
        changes = _changes(args)
        if not changes:
            print("faserctl: set-policy needs at least one field to change (see --help)", file=sys.stderr)
            return 2
        reply = stub.SetPolicy(pb.SetPolicyRequest(policy=changes_to_wire(changes)), **call)
        print(json.dumps({"version": reply.version, "applied": reply.applied, "policy": policy_dict(reply.policy),
                          "replicas": _rows(reply.replicas)}))
    elif args.command == "telemetry":
        _telemetry(stub, args, call)
    elif args.command == "status":
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(stub_channel := _channel(args))
        status = health.Check(health_pb2.HealthCheckRequest(service=""), **call).status
        reply = stub.GetPolicy(pb.GetPolicyRequest(), **call)
        stub_channel.close()
        data = {"target": args.target, "health": health_pb2.HealthCheckResponse.ServingStatus.Name(status),
                "policy_version": reply.version, "in_sync_with_engine": reply.applied, "replicas": _rows(reply.replicas)}
        _print(args.output, data, f"control service {args.target}: {data['health']}, policy v{reply.version}, "
               f"{'applied on every reachable replica' if reply.applied else 'NOT applied everywhere yet'}",
               reply.replicas)
    return 0


def _rows(replicas) -> list[dict]:
    return [{"url": r.url, "reachable": r.reachable, "version": r.version if r.reachable else None,
             "rank_versions": list(r.rank_versions), "error": r.error} for r in replicas]


def _print(output: str, data: dict, headline: str, replicas) -> None:
    if output == "json":
        print(json.dumps(data))
        return
    from rich.console import Console

    console = Console()
    console.print(headline)
    console.print(replica_table(replicas))


def _telemetry(stub, args, call) -> None:
    if args.watch:
        if args.interval <= 0:
            raise ValueError("--interval must be > 0")
        request = pb.WatchTelemetryRequest(interval_seconds=args.interval, count=max(args.count, 0))
        snapshots = stub.WatchTelemetry(request, metadata=call["metadata"])
    else:
        snapshots = [stub.GetTelemetry(pb.GetTelemetryRequest(), **call)]
    if args.json:
        for snapshot in snapshots:
            print(json.dumps(to_json_dict(snapshot)), flush=True)
        return
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if not args.watch:
        console.print(render(snapshots[0], args.per_replica))
        return
    with Live(console=console, refresh_per_second=4) as live:
        for snapshot in snapshots:
            live.update(render(snapshot, args.per_replica))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except grpc.RpcError as exc:
        print(f"faserctl: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"faserctl: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
