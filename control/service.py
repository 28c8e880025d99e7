"""The FaserControl servicer: GetPolicy, SetPolicy, GetTelemetry, WatchTelemetry (proto/faser/v1/control.proto)."""

from __future__ import annotations

import logging
import time

import grpc

from control.convert import changes_from_wire, policy_to_wire, replicas_to_wire, telemetry_to_wire
from control.engine_client import EngineUnavailable, NoFaserWorker
from control.faser.v1 import control_pb2 as pb
from control.faser.v1 import control_pb2_grpc as pb_grpc
from control.policy_store import PolicyStore
from sglang_faser.spec.config import ConfigError

logger = logging.getLogger("faser.control")

MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0


class FaserControlService(pb_grpc.FaserControlServicer):
    def __init__(self, store: PolicyStore):
        self.store = store

    def GetPolicy(self, request, context):
        config, version = self.store.get()
        return self._reply(config, version)

    def _reply(self, config, version: int) -> pb.PolicyReply:
        return pb.PolicyReply(policy=policy_to_wire(config), version=version, applied=self.store.applied(),
                              replicas=replicas_to_wire(self.store.engine.rows()))

    def SetPolicy(self, request, context):
        try:
            changes = changes_from_wire(request.policy)
            if not changes:
                raise ConfigError("policy", "no field given; nothing to change")
            config, version = self.store.update(changes, who=_who(context))
        except ConfigError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except EngineUnavailable as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"policy not changed: {exc}")
        except NoFaserWorker as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"policy not changed: {exc}")
        return self._reply(config, version)

    def GetTelemetry(self, request, context):
        return self._telemetry(context)

    def WatchTelemetry(self, request, context):
        interval = request.interval_seconds or 1.0
        if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"interval_seconds: must be in [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}], got {interval}")
        sent = 0
        while context.is_active() and (request.count == 0 or sent < request.count):
            yield self._telemetry(context)
            sent += 1
            if request.count and sent >= request.count:
                break
            time.sleep(interval)

    def _telemetry(self, context) -> pb.Telemetry:
        try:
            return telemetry_to_wire(self.store.engine.report(), time.time())
        except EngineUnavailable as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except NoFaserWorker as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))


def _who(context) -> str:
    metadata = dict(context.invocation_metadata() or ())
    user = metadata.get("x-faser-user")
    return f"{user}@{context.peer()}" if user else context.peer()
