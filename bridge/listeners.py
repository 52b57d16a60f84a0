"""The listener policy every server of the bridge follows (gRPC, the monitor, `facebridge serve`): bind 127.0.0.1
unless the user asks for a wider address, and a wider address needs a strong credential, compared in constant time.

Beyond loopback a token must carry at least MIN_TOKEN_BITS (128) bits of entropy, estimated from its length and the
kinds of characters it uses (a one-character or dictionary-short token is refused at start with the fix); `auto`
makes a random 256-bit one that the command prints once. Without TLS the listener says once that its traffic,
token included, crosses the network as plain text.
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import secrets
import string

from bridge.errors import FaceBridgeError

log = logging.getLogger(__name__)

MIN_TOKEN_BITS = 128  # beyond loopback: what a token must hold (an estimate from its length and alphabet)
AUTO_TOKEN = "auto"  # --...-token auto: a random token, printed once
_ALPHABETS = (string.ascii_lowercase, string.ascii_uppercase, string.digits, string.punctuation + " ")


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
    if not sep or not host or not port.isdigit():
        raise FaceBridgeError(f"{option} {address!r} is not HOST:PORT", f"use e.g. {option} {example}")
    if int(port) > 65535:
        raise FaceBridgeError(f"{option} {address!r}: port {port} is out of range",
                              f"give a port from 1 to 65535 (0: any free port), e.g. {option} {example}")
    return host.strip("[]"), int(port)


def token_bits(token: str) -> float:
    """An upper estimate of a token's entropy in bits: its length times log2 of the alphabet its kinds of
    characters span (lowercase, uppercase, digits, punctuation; any other character counts as a large alphabet);
    a token of fewer than 8 distinct characters counts only those (so "aaaa..." is weak however long)."""
    if not token:
        return 0.0
    pool = sum(len(a) for a in _ALPHABETS if any(c in a for c in token))
    if any(not any(c in a for a in _ALPHABETS) for c in token):
        pool += 1000
    distinct = len(set(token))
    return len(token) * math.log2(pool if distinct >= 8 else distinct)


def new_token() -> str:
    """A random 256-bit token of URL-safe characters (what `auto` gives)."""
    return secrets.token_urlsafe(32)


def listener_token(option: str, token: str | None, host: str) -> str | None:
    """The token a listener on `host` uses: `auto` becomes a new random one (the caller prints it once); beyond
    loopback one of fewer than MIN_TOKEN_BITS is refused in one line with the fix. Whether beyond loopback a token
    is required at all is the listener's own check."""
    if token == AUTO_TOKEN:
        return new_token()
    if token is not None and not is_loopback(host):
        bits = token_bits(token)
        if bits < MIN_TOKEN_BITS:
            raise FaceBridgeError(f"{option} is too weak to guard {host}: about {bits:.0f} bits of entropy, "
                                  f"{MIN_TOKEN_BITS} needed beyond 127.0.0.1",
                                  f"pass {option} auto (a random token is made and printed), or a random token of "
                                  "at least 22 letters and digits")
    return token


def warn_plain_text(what: str, address: str, tls_options: str) -> None:
    """Say once, at start, that a listener beyond loopback without TLS sends everything (its token too) as plain
    text."""
    log.warning("%s on %s is plain text: its token and its data cross the network unencrypted; add %s to encrypt "
                "it", what, address, tls_options)
