"""shut_down: the one way every part ends a socket's traffic before closing it. Imports nothing of the house."""
from __future__ import annotations

import contextlib
import socket


def shut_down(sock: socket.socket) -> None:
    """Both directions shut: a thread blocked in recv or accept on it wakes, the peer sees the end at once (close
    alone does neither while another thread still uses it). A socket already shut, closed or never connected is
    left as it is."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
