"""The listener policy every server of the bridge follows (gRPC, the monitor): bind 127.0.0.1 unless the user asks
for a wider address, and a wider address needs a credential, which is compared in constant time."""
from __future__ import annotations

import hmac
import ipaddress

from bridge.errors import FaceBridgeError


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (brackets allowed)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_matches(presented: str | None, token: str) -> bool:
    """Whether `presented` is exactly "Bearer <token>", compared in constant time (no timing hint on the token)."""
    expected = f"Bearer {token}".encode()
    return isinstance(presented, str) and hmac.compare_digest(presented.encode(), expected)


def token_matches(presented: str | None, token: str) -> bool:
    """Whether a bare `presented` token (a query parameter, a cookie) equals `token`, in constant time."""
    return isinstance(presented, str) and hmac.compare_digest(presented.encode(), token.encode())


def split_address(address: str, option: str, example: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) -> (host, port); port 0 asks for any free port."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise FaceBridgeError(f"{option} {address!r} is not HOST:PORT", f"use e.g. {option} {example}")
    return host.strip("[]"), int(port)
