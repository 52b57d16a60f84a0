"""UDP output sockets for the streaming sinks: HOST:PORT parsing and a connected, non-blocking socket.

The socket is `connect()`ed so that the kernel reports an ICMP "port unreachable" from a receiver that went
away as ConnectionRefusedError on a later send (an unconnected socket never hears about it). It is
non-blocking so a full send buffer costs one dropped frame, never a stalled pipeline.
"""
from __future__ import annotations

import logging
import os
import socket
import time

from bridge.errors import SinkError
from bridge.frame import FaceFrame
from bridge.sinks.base import Sink

log = logging.getLogger(__name__)


def parse_host_port(text: str, default_port: int, what: str) -> tuple[str, int]:
    """'host:port', 'host', ':port', '[v6addr]:port' -> (host, port). `what` names the option in errors."""
    text = (text or "").strip()
    if not text:
        raise SinkError(f"{what}: empty address", f"give HOST:PORT, for example 127.0.0.1:{default_port}")
    if "," in text:
        raise SinkError(f"{what}: {text!r} holds several addresses",
                        "give one HOST:PORT per option (repeat the option for several targets)")
    host, port_text = text, ""
    if text.startswith("["):  # [::1]:11111
        end = text.find("]")
        if end < 0:
            raise SinkError(f"{what}: unclosed '[' in address {text!r}",
                            f"write an IPv6 address as [::1]:{default_port}")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise SinkError(f"{what}: cannot parse address {text!r}", f"write it as [::1]:{default_port}")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") > 1:
        raise SinkError(f"{what}: cannot parse address {text!r}",
                        f"put an IPv6 address in brackets, for example [::1]:{default_port}")
    host = host or "127.0.0.1"
    if port_text == "":
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise SinkError(f"{what}: port {port_text!r} in {text!r} is not a number",
                        f"give HOST:PORT, for example 127.0.0.1:{default_port}") from None
    if not 1 <= port <= 65535:
        raise SinkError(f"{what}: port {port} is out of range", "use a port between 1 and 65535")
    return host, port


def open_udp_sender(address: str, default_port: int, what: str) -> tuple[socket.socket, tuple[str, int]]:
    """Resolve `address` and return (connected non-blocking UDP socket, (host, port))."""
    host, port = parse_host_port(address, default_port, what)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise SinkError(f"{what}: cannot resolve host {host!r} ({e.strerror})",
                        "check the name, or use an IP address such as 127.0.0.1") from None
    family, socktype, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.connect(sockaddr)
    except OSError as e:
        sock.close()
        raise SinkError(f"{what}: cannot send to {host}:{port} ({e.strerror or e})",
                        "check that the address is reachable from this machine") from None
    sock.setblocking(False)
    return sock, (host, port)


class UdpSink(Sink):
    """A sink that sends each frame as one or more datagrams on a connected UDP socket.

    Subclasses give `datagrams(frame)`; this class sends them, counts a receiver that went away or a full buffer
    as a failed frame (the stream goes on), and counts NaN/inf values that subclasses replaced before sending."""

    default_port = 0
    address_label = "address"
    receiver_hint = "start the receiver or check the port"

    def __init__(self, address: str) -> None:
        super().__init__()
        self._sock, self.address = open_udp_sender(address, self.default_port, self.address_label)
        self.destination = f"udp {self.address[0]}:{self.address[1]}"
        self.nonfinite = 0
        self._last_nonfinite_warning = 0.0

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        raise NotImplementedError

    def send(self, frame: FaceFrame) -> None:
        try:
            datagrams = self.datagrams(frame)
        except (SinkError, ValueError, TypeError, IndexError) as e:  # a malformed frame: skip it, keep going
            self._failed(f"frame {frame.seq} not sent", e)
            return
        try:
            for dgram in datagrams:
                self._sock.send(dgram)
            # a refusal that already came back (at once on loopback) belongs to this frame: read it now, so every
            # sink counts the frames a missing receiver lost alike, whatever datagrams a frame takes
            refused = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if refused:
                raise OSError(refused, os.strerror(refused))
        except ConnectionRefusedError as e:
            self._failed(f"nothing listens on {self.address[0]}:{self.address[1]} ({self.receiver_hint})", e)
            return
        except OSError as e:  # buffer full, network down: drop this frame only
            self._failed("UDP send failed", e)
            return
        self.sent += 1

    def _count_nonfinite(self, frame: FaceFrame, n: int) -> None:
        self.nonfinite += n
        now = time.monotonic()
        if now - self._last_nonfinite_warning > 1.0:
            self._last_nonfinite_warning = now
            log.warning("%s: frame %d had %d NaN/inf values, sent as 0 (%d so far)", self.name, frame.seq, n,
                        self.nonfinite)

    def close(self) -> None:
        self._sock.close()

    def label(self) -> str:
        return f"{self.name} {self.address[0]}:{self.address[1]}"

    def stats(self) -> dict:
        return {**super().stats(), "nonfinite_values": self.nonfinite}
