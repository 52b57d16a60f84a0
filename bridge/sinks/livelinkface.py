"""Live Link Face sink: sends the iPhone app's UDP packet (version 6, encoded by bridge/formats/livelinkface.py),
so Unreal's stock "Live Link Face" source receives FaceBridge like a phone; `listen` prints what arrives on a port.

`python -m bridge.sinks.livelinkface [[HOST:]PORT]` checks a stream without Unreal (stop Unreal first: only one
program can hold the port); a bad or busy port is one line, never a traceback.
"""
from __future__ import annotations

import argparse
import errno
import socket
import sys
import time

from bridge.errors import SinkError
from bridge.formats.livelinkface import (
    DEFAULT_PORT,
    check_subject,
    decode_llf_packet,
    device_id_for,
    encode_packet,
    frame_values,
    packet_header,
)
from bridge.frame import FaceFrame
from bridge.sinks.udp import UdpSink, parse_host_port


class LiveLinkFaceSink(UdpSink):
    """Streams FaceFrames to Unreal's Live Link Face source over UDP (default 127.0.0.1:11111)."""

    name = "livelinkface"
    default_port = DEFAULT_PORT
    address_label = "Live Link Face address"
    receiver_hint = "start Unreal's Live Link Face source or check the port"

    def __init__(self, address: str = f"127.0.0.1:{DEFAULT_PORT}", device_id: str | None = None,
                 subject: str | None = None, mirror: bool = False):
        super().__init__(address)
        self.subject_override = subject
        if subject is not None:
            check_subject(subject)
        if device_id is not None and not (device_id.isascii() and 1 <= len(device_id) <= 64):
            raise SinkError(f"Live Link Face: device id {device_id!r} is not 1-64 ASCII characters",
                            "leave it out to use a stable UUID for this machine")
        self.device_id = device_id
        self.mirror = mirror
        self._headers: dict[str, bytes] = {}  # subject -> version + device id + subject bytes

    def _header(self, subject: str) -> bytes:
        header = self._headers.get(subject)
        if header is None:
            header = packet_header(self.device_id or device_id_for(subject), subject)
            self._headers[subject] = header
        return header

    def packet(self, frame: FaceFrame) -> bytes:
        """The bytes `send` puts on the wire for this frame (raises SinkError for a bad subject name)."""
        header = self._header(self.subject_override or frame.subject)
        values, nonfinite = frame_values(frame, self.mirror)
        if nonfinite:
            self._count_nonfinite(frame, nonfinite)
        return encode_packet(header, values, frame.timecode())

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        return [self.packet(frame)]


def listen(port: int = DEFAULT_PORT, host: str = "127.0.0.1", seconds: float | None = None) -> int:
    """Print what arrives on a Live Link Face port, about once a second: a check that runs without Unreal.

    `python -m bridge.sinks.livelinkface [PORT]` (stop Unreal first: only one program can hold the port)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        fix = ("close Unreal (or the other program holding it), or listen on another port" if
               getattr(e, "errno", None) in (errno.EADDRINUSE, errno.EACCES) else "check the host and port")
        raise SinkError(f"cannot listen on {host}:{port} ({e.strerror or e})", fix) from None
    sock.settimeout(1.0)
    print(f"listening for Live Link Face packets on {host}:{port} (Ctrl-C stops)", flush=True)
    received = bad = 0
    last_print = 0.0
    end = None if seconds is None else time.monotonic() + seconds
    try:
        while end is None or time.monotonic() < end:
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            try:
                p = decode_llf_packet(data)
            except ValueError as e:
                bad += 1
                print(f"bad packet ({len(data)} bytes): {e}", flush=True)
                continue
            received += 1
            if time.monotonic() - last_print >= 1.0:
                last_print = time.monotonic()
                c = p["curves"]
                print(f"{received} packets  subject {p['subject']!r}  frame {p['frame_number']} @ "
                      f"{p['rate'][0]}/{p['rate'][1]}  JawOpen {c['JawOpen']:.2f}  EyeBlinkLeft "
                      f"{c['EyeBlinkLeft']:.2f}  HeadYaw {c['HeadYaw']:+.3f}  HeadPitch {c['HeadPitch']:+.3f}",
                      flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    print(f"{received} packets, {bad} malformed", flush=True)
    return 0 if received else 1


def main(argv: list[str] | None = None) -> int:
    """The command line of `python -m bridge.sinks.livelinkface`: 0 when packets arrived, 1 when none (or an
    error, said in one line), 2 for a usage error."""
    p = argparse.ArgumentParser(prog="python -m bridge.sinks.livelinkface",
                                description="Print the Live Link Face packets that arrive on a UDP port (stop "
                                            "Unreal first: only one program can hold the port).")
    p.add_argument("address", nargs="?", default=str(DEFAULT_PORT), metavar="[HOST:]PORT",
                   help=f"port to listen on, or HOST:PORT (default 127.0.0.1:{DEFAULT_PORT})")
    p.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    args = p.parse_args(argv)
    text = args.address if not args.address.isdigit() else f"127.0.0.1:{args.address}"
    try:
        if ":" not in text:
            raise SinkError(f"{args.address!r} is not a port number",
                            f"give a port such as {DEFAULT_PORT}, or HOST:PORT")
        host, port = parse_host_port(text, DEFAULT_PORT, "listen address")
        return listen(port, host=host, seconds=args.seconds)
    except SinkError as e:
        print(f"livelinkface: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
