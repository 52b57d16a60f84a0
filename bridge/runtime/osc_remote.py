"""OSC remote control, as the Live Link Face app offers it (`facebridge run --osc-remote [HOST:]PORT`): Unreal's
tools (Switchboard, Live Link Hub) and any OSC controller (TouchOSC, a Stream Deck, Chataigne) start and stop
FaceBridge takes with the commands they already send to the phone app.

Commands understood (UDP, OSC 1.0 messages or bundles; python-osc decodes them; replies are OSC messages too):

    /OSCSetSendTarget s host, i port   where replies go (the app's own command; /OSCAddSendTarget, Switchboard's
                                        name for it, does the same); answered /OSCSetSendTargetConfirm
    /Slate s name                      the next take's slate; /Take i number: the next take's number
    /RecordStart [s slate, i take]     starts a take in `<takes dir>/<slate>_<take>` (a new directory; `-2`,
                                        `-3` added when that name is taken); answered /RecordStartConfirm s timecode
    /RecordStop                        ends it; answered /RecordStopConfirm s timecode, s the take's CSV, s ""
                                        (no reference video); the take number then goes up by one, as in the app
    /BatteryQuery                      answered /Battery f 1.0 (a computer on mains)
    /ThermalsQuery                     answered /Thermals i 0 (nominal)

Other addresses are ignored. Replies go to the send target, else to the sender. A command with missing or
wrong-typed arguments is ignored with one log line; nothing a packet holds stops the listener (bundles' time tags
are not waited for). The listener binds 127.0.0.1; beyond loopback it needs an allow list of controller addresses
(`--osc-allow`), because OSC has no credential of its own: a packet from another address is dropped unread, and a
send target must be the sender or on the list, so the listener never sends to a third machine. The command names
and reply forms follow Epic's Live Link Face documentation and Switchboard's use of them; the app itself is closed.
"""
from __future__ import annotations

import ipaddress
import logging
import re
import threading
import time
from pathlib import Path

from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import BlockingOSCUDPServer
from pythonosc.udp_client import SimpleUDPClient

from bridge import ports
from bridge.errors import FaceBridgeError
from bridge.formats.livelinkface import csv_timecode
from bridge.frame import FaceFrame

log = logging.getLogger(__name__)

DEFAULT_PORT = ports.port_of(ports.OSC_REMOTE)
MAX_SLATE = 64


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def slate_name(slate) -> str:
    """A slate as a safe piece of a directory name (letters, digits, . _ -; at most 64 characters)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", str(slate)).strip("._-")[:MAX_SLATE]
    return text or "take"


def timecode_now(fps: float) -> str:
    """'HH:MM:SS:FF.mmm' of this instant at `fps`, as takes and the Live Link Face CSV write it."""
    return csv_timecode(FaceFrame(seq=0, t_capture=time.time(), t_capture_mono=0.0, frame_rate=fps).timecode())


class _AllowListServer(BlockingOSCUDPServer):
    allowed: frozenset[str] = frozenset()

    def verify_request(self, request, client_address) -> bool:
        host = client_address[0]
        return is_loopback(host) or host in self.allowed


class OscRemote:
    """The listener (one thread); `recording` is the session's RecordSwitch, `fps` the source's rate."""

    def __init__(self, host: str, port: int, recording, fps=lambda: 30.0, allow: tuple[str, ...] = ()) -> None:
        if not is_loopback(host) and not allow:
            raise FaceBridgeError(f"--osc-remote {host}:{port} listens beyond this machine, with no allow list",
                                  "add --osc-allow with the controllers' addresses (OSC has no password), or listen "
                                  "on 127.0.0.1")
        for address in allow:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise FaceBridgeError(f"--osc-allow {address!r} is not an IP address",
                                      "give the controllers' IP addresses, comma-separated") from None
        self.recording, self.fps = recording, fps
        self.slate, self.take = "take", 1
        self.target: tuple[str, int] | None = None
        self.ignored = 0
        dispatcher = Dispatcher(strict_timing=False)  # a bundle's time tag is never waited for
        for address, handler in (("/OSCSetSendTarget", self._set_target), ("/OSCAddSendTarget", self._set_target),
                                 ("/Slate", self._set_slate), ("/Take", self._set_take),
                                 ("/RecordStart", self._record_start), ("/RecordStop", self._record_stop),
                                 ("/BatteryQuery", self._battery), ("/ThermalsQuery", self._thermals)):
            dispatcher.map(address, self._guarded(handler), needs_reply_address=True)
        try:
            self._server = _AllowListServer((host, port), dispatcher)
        except OSError as e:
            raise FaceBridgeError(f"cannot listen for OSC remote control on {host}:{port} ({e.strerror or e})",
                                  "choose another port with --osc-remote, or close the program holding it") from None
        self._server.allowed = frozenset(allow)
        self.address = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="osc-remote", daemon=True)
        self._thread.start()

    def _guarded(self, handler):
        def call(client, address, *args):
            try:
                handler(client, *args)
            except (TypeError, ValueError) as e:  # missing or wrong-typed arguments: this command only
                self.ignored += 1
                log.warning("OSC remote: %s %s ignored (%s)", address, list(args)[:4], e)
            except Exception as e:  # noqa: BLE001 - one command never stops the listener
                self.ignored += 1
                log.warning("OSC remote: %s failed (%s: %s)", address, type(e).__name__, e)
        return call

    def _reply(self, client, address: str, args) -> None:
        host, port = self.target or client
        SimpleUDPClient(host, port).send_message(address, args)

    def _set_target(self, client, host, port) -> None:
        if not isinstance(host, str) or isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError("needs a host (string) and a port (int)")
        if host != client[0] and not is_loopback(host) and host not in self._server.allowed:
            raise ValueError(f"send target {host} is neither the sender nor on the allow list")
        self.target = (host, port)
        self._reply(client, "/OSCSetSendTargetConfirm", [])

    def _set_slate(self, client, slate) -> None:
        self.slate = slate_name(slate)

    def _set_take(self, client, take) -> None:
        self.take = _take_number(take)

    def _record_start(self, client, *args) -> None:
        if args:
            slate, take = args if len(args) == 2 else (args[0], self.take)
            self.slate, self.take = slate_name(slate), _take_number(take)
        base = Path(self.recording.takes_dir) / f"{self.slate}_{self.take}"
        path, n = base, 1
        while path.exists():
            n += 1
            path = base.with_name(f"{base.name}-{n}")
        ok, message = self.recording.start(path)
        log.warning("OSC remote: %s", message)
        if ok:
            self._reply(client, "/RecordStartConfirm", [timecode_now(self.fps())])

    def _record_stop(self, client, *args) -> None:
        directory = self.recording.recording
        ok, message = self.recording.stop()
        log.warning("OSC remote: %s", message)
        if ok:
            self.take += 1
            csv = str(Path(directory) / "frames.csv") if directory else ""
            self._reply(client, "/RecordStopConfirm", [timecode_now(self.fps()), csv, ""])

    def _battery(self, client, *args) -> None:
        self._reply(client, "/Battery", [1.0])

    def _thermals(self, client, *args) -> None:
        self._reply(client, "/Thermals", [0])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2)


def _take_number(take) -> int:
    number = int(take)  # an int, a float or digits in a string (controllers differ)
    if not 0 <= number < 1_000_000:
        raise ValueError(f"take {take} is out of range")
    return number
