"""Hostile input, authentication and the control service's lifecycle, against the shared real engine."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys

import grpc
import pytest
import requests
from conftest import faserctl, restore_default_policy, wait_for_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from control.faser.v1 import control_pb2 as pb
from control.faser.v1 import control_pb2_grpc as pb_grpc
from sglang_faser.spec.config import KNOBS
from sglang_faser.server_process import free_port

pytestmark = pytest.mark.engine

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
SMALL = st.integers(min_value=-3, max_value=40)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.floats(min_value=-0.5, max_value=1.5)


@st.composite
def policies(draw) -> pb.Policy:
    policy = pb.Policy(mode=draw(st.sampled_from([0, 1, 2, 3]) | st.integers(min_value=-5, max_value=99)))
    for knob in KNOBS[1:]:
        if knob.kind in ("int", "float") and draw(st.booleans()):
            setattr(policy, knob.name, draw(SMALL | INT32) if knob.kind == "int" else draw(FLOATS))
    for name in ("overlap", "clear_max_len", "clear_fixed_len"):
        if draw(st.booleans()):
            setattr(policy, name, draw(st.booleans()))
    return policy


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(policy=policies())
def test_random_and_hostile_policies_are_answered_and_the_engine_keeps_serving(control_server, stub, policy):
    before = stub.GetPolicy(pb.GetPolicyRequest())
    try:
        reply = stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=30)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (exc.code(), exc.details())
        assert ":" in exc.details()  # "<field>: <reason with bounds>"
        assert stub.GetPolicy(pb.GetPolicyRequest()) == before  # the running policy is untouched
    else:
        assert reply.version == before.version + 1
    body = {"text": "the lazy dog", "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
    assert requests.post(control_server.url + "/generate", json=body, timeout=120).status_code == 200


def test_after_the_storm_outputs_are_still_the_targets(control_server, stub, embedded_target, embedded_tokenizer,
                                                       hf_greedy):
    restore_default_policy(stub)
    text = "Errors should never pass silently"
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}}
    out = requests.post(control_server.url + "/generate", json=body, timeout=120).json()
    assert out["output_ids"] == hf_greedy(embedded_target, embedded_tokenizer(text).input_ids, 24)


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class ControlProcess:
    """``python -m control.server`` against the shared engine, as an operator would run it on its own."""

    def __init__(self, engine_url, *args):
        self.port = free_port()
        self.target = f"localhost:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "control.server", "--engine-url", engine_url,
                                      "--port", str(self.port), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=os.environ.copy())

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def test_token_and_tls(control_server, tmp_path):
    cert, key = _self_signed(tmp_path)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("guess")
    service = ControlProcess(control_server.url, "--host", "127.0.0.1", "--tls-cert", str(cert), "--tls-key",
                             str(key), "--token-file", str(token))
    try:
        credentials = grpc.ssl_channel_credentials(cert.read_bytes())
        channel = grpc.secure_channel(service.target, credentials)
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.FaserControlStub(channel)
        for metadata in ((), (("authorization", "Bearer guess"),)):
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetPolicy(pb.GetPolicyRequest(), metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as refused_stream:
            next(iter(stub.WatchTelemetry(pb.WatchTelemetryRequest(interval_seconds=0.2, count=1), timeout=10)))
        assert refused_stream.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = stub.GetPolicy(pb.GetPolicyRequest(), metadata=(("authorization", "Bearer s3cret"),), timeout=10)
        assert ok.version >= 0
        tls = ["--tls-ca", str(cert)]
        denied = faserctl(service.target, *tls, "--token-file", str(wrong), "get-policy", check=False)
        assert denied.returncode == 1 and denied.stderr.startswith("faserctl: UNAUTHENTICATED")
        allowed = faserctl(service.target, *tls, "--token-file", str(token), "telemetry", "--json")
        assert json.loads(allowed.stdout)["ranks"] >= 1
    finally:
        service.kill()


def test_killing_the_control_service_leaves_the_engine_serving_and_a_restart_resumes(control_server, tmp_path):
    policy_file = tmp_path / "policy.json"
    service = ControlProcess(control_server.url, "--policy-file", str(policy_file))
    try:
        wait_for_sync(service.target)
        set_reply = json.loads(faserctl(service.target, "set-policy", "--max-len", "1", "--frontier-size", "1").stdout)
    finally:
        service.kill()
    body = {"text": "now is better than never", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
    assert requests.post(control_server.url + "/generate", json=body, timeout=120).status_code == 200
    assert json.loads(policy_file.read_text())["version"] == set_reply["version"]

    restarted = ControlProcess(control_server.url, "--policy-file", str(policy_file))
    try:
        wait_for_sync(restarted.target)
        resumed = json.loads(faserctl(restarted.target, "get-policy", "--output", "json").stdout)
        assert resumed["version"] == set_reply["version"]
        assert resumed["policy"]["max_len"] == 1 and resumed["policy"]["frontier_size"] == 1
        engine_view = json.loads(faserctl(restarted.target, "telemetry", "--json").stdout)
        assert engine_view["policy_version"] == set_reply["version"]
    finally:
        restarted.kill()
        faserctl(control_server.control_target, "set-policy", "--clear-max-len", "--frontier-size", "0")
