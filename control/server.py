"""Run the control service beside the engine (``sglang_faser.launch_server`` starts one) or on its own, for one
engine or a fleet.

    python -m control.server --engine-url http://127.0.0.1:30000 [--engine-url URL ...] [--router-url URL]
        [--host 127.0.0.1] [--port 50051] [--policy-file PATH] [--tls-cert PEM --tls-key PEM] [--token-file PATH]
        [--insecure]

With ``--router-url`` (an ``sglang-router``), the fleet follows the router's workers (``control/fleet.py``).

Besides FaserControl it serves the standard gRPC health service (SERVING once the engine answered and the policy
is in sync, NOT_SERVING before) and server reflection. On start it brings policy and engine together in the
background: a policy resumed from ``--policy-file`` is pushed to the engine as soon as the engine is ready;
otherwise the engine's current policy is adopted. An engine without a FASER worker (no speculation, or
``--faser-mode stock``, for which the launcher starts no control service) is never in sync: the service says so
in its log and stays NOT_SERVING.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from control.auth import TokenInterceptor, check_bind, read_token, server_credentials
from control.engine_client import EngineUnavailable, NoFaserWorker
from control.fleet import Fleet, FleetError
from control.faser.v1 import control_pb2 as pb
from control.faser.v1 import control_pb2_grpc as pb_grpc
from control.policy_store import PolicyStore
from control.service import FaserControlService

logger = logging.getLogger("faser.control")
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 50051
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["FaserControl"].full_name


@dataclass
class ControlSettings:
    engine_urls: list[str]
    router_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    policy_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    token_file: str | None = None
    insecure: bool = False
    engine_api_key: str | None = None

    def validate(self) -> None:
        """Raise ValueError naming the problem (the launcher turns it into a one-line exit)."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--faser-control-tls-cert and --faser-control-tls-key must be given together")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--faser-control-port must be in [0, 65535], got {self.port}")
        check_bind(self.host, tls=bool(self.tls_cert), token=bool(self.token_file), insecure=self.insecure)

    @property
    def engines(self) -> str:
        return ", ".join(self.engine_urls + ([f"router {self.router_url}"] if self.router_url else []))


class ControlServer:
    def __init__(self, settings: ControlSettings):
        settings.validate()
        self.settings = settings
        self.store = PolicyStore(Fleet(settings.engine_urls, settings.router_url, api_key=settings.engine_api_key),
                                 settings.policy_file)
        interceptors = [TokenInterceptor(read_token(settings.token_file))] if settings.token_file else []
        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=8), interceptors=interceptors)
        pb_grpc.add_FaserControlServicer_to_server(FaserControlService(self.store), self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.grpc)
        address = f"{settings.host}:{settings.port}"
        if settings.tls_cert:
            self.port = self.grpc.add_secure_port(address, server_credentials(settings.tls_cert, settings.tls_key))
        else:
            self.port = self.grpc.add_insecure_port(address)
        self._stop = threading.Event()
        self._set_health(False)

    def _set_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def start(self) -> ControlServer:
        """Serve now and return. The engine is usually still loading (the launcher starts this service before
        SGLang's server), so syncing with it runs in a background thread."""
        self.grpc.start()
        logger.info("FASER control service on %s:%d (engines %s)", self.settings.host, self.port,
                    self.settings.engines)
        threading.Thread(target=self._sync_when_ready, name="faser-control-sync", daemon=True).start()
        return self

    def _sync_when_ready(self) -> None:
        """Poll every second until a replica answers and the sync succeeds, then report SERVING; from then on,
        every second, bring replicas that missed a change (down, or joined since) to the current version. Each
        reason to keep waiting is logged when it first appears, not every second."""
        reason = None
        while not self._stop.is_set():
            try:
                if not self.store.synced:
                    if self.store.engine.ready():
                        self.store.sync()
                        self._set_health(True)
                else:
                    self.store.reconcile()
            except (EngineUnavailable, NoFaserWorker) as exc:
                if str(exc) != reason:
                    reason = str(exc)
                    logger.warning("FASER control: not in sync with the fleet yet: %s", reason)
            except Exception:  # keep trying: the service must stay up whatever the engines do meanwhile
                logger.exception("FASER control: syncing with the fleet failed; retrying")
            self._stop.wait(1.0)

    def stop(self, grace: float = 1.0) -> None:
        self._stop.set()
        self.grpc.stop(grace).wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m control.server", description=__doc__.splitlines()[0])
    parser.add_argument("--engine-url", action="append", default=[],
                        help="an sglang-faser HTTP server, e.g. http://127.0.0.1:30000 (repeat for several)")
    parser.add_argument("--router-url", help="an SGLang router (sglang-router): follow its worker list")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--policy-file")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--token-file")
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--engine-api-key", help="the engine's --api-key, if it has one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(name)s: %(message)s")
    settings = ControlSettings(args.engine_url, args.router_url, args.host, args.port, args.policy_file,
                               args.tls_cert, args.tls_key, args.token_file, args.insecure, args.engine_api_key)
    try:
        server = ControlServer(settings).start()
    except (FleetError, ValueError, OSError, RuntimeError) as exc:
        print(f"control.server: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(3600):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
