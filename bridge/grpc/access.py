"""Who may talk to the gRPC server and what it accepts: loopback by default, a bearer token beyond it, and a
token only of the characters gRPC metadata can carry (printable ASCII), so a token no client can send is refused
at start, not silently locking every client out. Tokens are compared in constant time; health checks stay open.
A request that does not parse reaches its method as `Malformed` (refused there with one line), and gRPC's own
log records of bad requests lose their traceback. Both server kinds are covered: the thread-pool server (the gRPC
sink) and grpc.aio (`facebridge serve`): `BearerTokenInterceptor` / `AioBearerTokenInterceptor`, and
`add_health_and_reflection` picks the health servicer of the server's kind."""
from __future__ import annotations

import logging
import ssl
from pathlib import Path
from urllib.parse import unquote

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bridge.errors import FaceBridgeError, SinkError
from bridge.listeners import bearer_matches, is_loopback  # noqa: F401 (is_loopback: the gRPC policy's name)
from bridge.listeners import split_address as split_listener_address


def check_token(token: str | None) -> None:
    """Refuse a --grpc-token that is empty or that HTTP/2 metadata cannot carry."""
    if token is None:
        return
    if not token:
        raise SinkError("--grpc-token is empty", "give a token of letters, digits and punctuation, or leave it out")
    if not all(" " <= c <= "~" for c in token) or token != token.strip():
        raise SinkError("--grpc-token holds characters gRPC clients cannot send (only printable ASCII is allowed, "
                        "without spaces at either end)", "choose a token of ASCII letters, digits and punctuation")


TOKEN_REFUSAL = "missing or wrong bearer token; send metadata 'authorization: Bearer <token>'"


def _refusals(deny) -> dict:
    """`deny` as a handler of each streaming shape: a refusal must have the shape of the method it stands in for."""
    return {
        (False, False): grpc.unary_unary_rpc_method_handler(deny),
        (False, True): grpc.unary_stream_rpc_method_handler(deny),
        (True, False): grpc.stream_unary_rpc_method_handler(deny),
        (True, True): grpc.stream_stream_rpc_method_handler(deny),
    }


def _admitted(handler, details, token: str) -> bool:
    """Health checks pass (probes carry no secrets), as does a call with the right bearer token."""
    if handler is None or details.method.startswith("/grpc.health.v1.Health/"):
        return True
    return bearer_matches(next((v for k, v in details.invocation_metadata if k == "authorization"), ""), token)


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Requires `authorization: Bearer <token>` on every call except health checks."""

    def __init__(self, token: str) -> None:
        self._token = token

        def deny(request_or_iterator, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, TOKEN_REFUSAL)

        self._deny = _refusals(deny)

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if _admitted(handler, details, self._token):
            return handler
        return self._deny[(handler.request_streaming, handler.response_streaming)]


class AioBearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """BearerTokenInterceptor for a grpc.aio server: the same rule and the same refusal."""

    def __init__(self, token: str) -> None:
        self._token = token

        async def deny(request_or_iterator, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, TOKEN_REFUSAL)

        self._deny = _refusals(deny)

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if _admitted(handler, details, self._token):
            return handler
        return self._deny[(handler.request_streaming, handler.response_streaming)]


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:/path"): "" when none."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return ""

    host = unquote(rest).rpartition(":")[0]
    return host.strip("[]")


def split_address(address: str, option: str = "--grpc") -> tuple[str, int]:
    """HOST:PORT of a gRPC listener, read as every listener's address is (bridge/listeners.py)."""
    try:
        return split_listener_address(address, option, "127.0.0.1:50051")
    except FaceBridgeError as e:
        raise SinkError(e.problem, e.fix) from None


class Malformed:
    """A request whose bytes are not the message its method takes (the deserializer never raises)."""

    def __init__(self, message: str, error: Exception) -> None:
        self.message, self.error = message, error


def lenient(message_type):
    def parse(data: bytes):
        try:
            return message_type.FromString(data)
        except Exception as e:  # noqa: BLE001 - DecodeError and friends: refused by the method, one line
            return Malformed(message_type.DESCRIPTOR.name, e)
    return parse


class OneLineGrpcLog(logging.Filter):
    """gRPC's own log records of a bad request come with a traceback; keep one line of them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg, record.args = f"gRPC: {record.getMessage()} ({type(error).__name__}: {error})", ()
            record.exc_info = record.exc_text = None
        return True


def one_line_grpc_logs() -> None:
    """gRPC's own records of bad requests (grpc._common, grpc._server, and grpc.aio's) lose their traceback;
    idempotent."""
    for name in ("grpc._common", "grpc._server", "grpc._cython.cygrpc", "grpc.aio._server"):
        grpc_log = logging.getLogger(name)
        if not any(isinstance(f, OneLineGrpcLog) for f in grpc_log.filters):
            grpc_log.addFilter(OneLineGrpcLog())


def add_health_and_reflection(server, service_name: str):
    """The standard health service (its status set by the caller; on a grpc.aio server its methods are
    coroutines) and reflection for `service_name`."""
    servicer = health.aio.HealthServicer() if isinstance(server, grpc.aio.Server) else health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection((service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return servicer


def read_pem(path: str, option: str, kind: str) -> bytes:
    """A PEM file's bytes, or a one-line SinkError naming the option: unreadable (with the system's reason), or
    not PEM holding `kind` ("CERTIFICATE", "PRIVATE KEY")."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise SinkError(f"{option} {path}: cannot read it ({e.strerror})", f"check the {option} path") from None
    if b"-----BEGIN " not in data or kind.encode() + b"-----" not in data:
        raise SinkError(f"{option} {path} is not a PEM {kind.lower()} (no '-----BEGIN ... {kind}-----' line)",
                        "give the PEM file (convert DER with `openssl x509 -inform der` or `openssl pkey`)")
    return data


def check_pair(cert: str, key: str) -> None:
    """The certificate and key load together (the key is the certificate's), checked by Python's ssl."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as e:
        raise SinkError(f"--grpc-tls-cert {cert} and --grpc-tls-key {key} do not load together ({e.reason or e})",
                        "give the certificate and the private key it was made with") from None


def bind(server: grpc.Server, address: str, tls_cert: str | None = None, tls_key: str | None = None) -> int:
    """Bind `address` (with TLS when a certificate is given); the port taken, or a one-line SinkError."""
    busy = "the port is probably in use; pick another with --grpc HOST:PORT"
    try:
        if tls_cert:  # the files are checked first, so a bad certificate is never reported as a busy port
            key, cert = read_pem(tls_key, "--grpc-tls-key", "PRIVATE KEY"), read_pem(tls_cert, "--grpc-tls-cert",
                                                                                      "CERTIFICATE")
            check_pair(tls_cert, tls_key)
            creds = grpc.ssl_server_credentials([(key, cert)])
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as e:
        raise SinkError(f"cannot listen for gRPC on {address} ({e})", busy) from None
    if not port:
        raise SinkError(f"cannot listen for gRPC on {address}", busy)
    return port
