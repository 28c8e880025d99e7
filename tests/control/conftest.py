"""One FASER server (EAGLE, window 4, metrics on, a policy file) shared by the control-plane tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest

from control.faser.v1 import control_pb2 as pb
from control.faser.v1 import control_pb2_grpc as pb_grpc
from sglang_faser.server_process import ServerProcess

WINDOW = 4
SERVER_ARGS = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", str(WINDOW),
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", str(WINDOW + 1),
    "--max-total-tokens", "4096",
    "--enable-metrics",
    "--sleep-on-idle",
]  # fmt: skip


@pytest.fixture(scope="session")
def control_server(tiny_suite, tmp_path_factory):
    root = tmp_path_factory.mktemp("control")
    args = SERVER_ARGS + ["--faser-policy-file", str(root / "policy.json")]
    with ServerProcess(args, log_path=root / "server.log") as proc:
        wait_for_sync(proc.control_target)
        yield proc


def wait_for_sync(target: str, timeout: float = 60.0) -> None:
    """The control service answers SERVING once it is in sync with the engine."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=timeout)
    health = health_pb2_grpc.HealthStub(channel)
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING:
            return
        time.sleep(0.2)
    raise TimeoutError(f"control service at {target} never became SERVING")


@pytest.fixture(scope="session")
def stub(control_server):
    return pb_grpc.FaserControlStub(grpc.insecure_channel(control_server.control_target))


def faserctl(target: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "control.cli", "--target", target, *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def telemetry(target: str) -> dict:
    return json.loads(faserctl(target, "telemetry", "--json").stdout)


def restore_default_policy(stub) -> None:
    from control.convert import changes_to_wire
    from sglang_faser.spec.config import KNOBS

    stub.SetPolicy(pb.SetPolicyRequest(policy=changes_to_wire({k.name: k.default for k in KNOBS})))
