"""Who may talk to the control service: loopback by default; TLS and a bearer token for anything else.

``check_bind`` refuses a non-loopback address unless TLS and a token are configured, or the operator says
``--faser-control-insecure`` explicitly. ``TokenInterceptor`` answers every FaserControl call without the right
``authorization: Bearer <token>`` metadata with UNAUTHENTICATED (the health service stays open, so that load
balancers and orchestrators can probe it).
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

import grpc

OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tls: bool, token: bool, insecure: bool) -> None:
    """Raise ValueError with the reason when binding ``host`` would expose the control plane unprotected."""
    if is_loopback(host) or insecure or (tls and token):
        return
    missing = " and ".join(name for name, ok in (("TLS (--faser-control-tls-cert/--faser-control-tls-key)", tls),
                                                  ("a token (--faser-control-token-file)", token)) if not ok)
    raise ValueError(f"refusing to bind the control service to non-loopback address {host!r} without {missing}; "
                     "pass --faser-control-insecure to do it anyway")


def read_token(path: str | Path) -> str:
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token


def server_credentials(cert: str | Path, key: str | Path) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(Path(key).read_bytes(), Path(cert).read_bytes())])


class TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (authorization metadata)")

        self._deny = deny

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(OPEN_SERVICES):
            return continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        given = str(metadata.get("authorization", "")).encode()
        if hmac.compare_digest(given, self._expected):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is not None and handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                lambda request, context: self._deny(request, context) or iter(()),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._deny,
            request_deserializer=handler.request_deserializer if handler else None,
            response_serializer=handler.response_serializer if handler else None,
        )
