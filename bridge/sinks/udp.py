"""UDP output sockets for the streaming sinks: HOST:PORT parsing and a connected, non-blocking socket.

The socket is `connect()`ed so that the kernel reports an ICMP "port unreachable" from a receiver that went
away as ConnectionRefusedError on a later send (an unconnected socket never hears about it). It is
non-blocking so a full send buffer costs one dropped frame, never a stalled pipeline.
"""
from __future__ import annotations

import socket

from bridge.errors import SinkError


def parse_host_port(text: str, default_port: int, what: str) -> tuple[str, int]:
    """'host:port', 'host', ':port', '[v6addr]:port' -> (host, port). `what` names the option in errors."""
    text = (text or "").strip()
    if not text:
        raise SinkError(f"{what}: empty address", f"give HOST:PORT, for example 127.0.0.1:{default_port}")
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
