"""One front-end process of `facebridge serve --front-ends N` (started by runtime/serve_engine.py, never by hand):
the gRPC streams of one port (Track and TrackMany, with the same checks, limits, tokens and TLS as the one-process
server: the same FaceServeServer), each stream's state and the describe step; images go undecoded to the engine
process through this front end's shared-memory ring (serving/engine_link.py).

`python -m bridge.runtime.serve_front_end FD`: FD is its end of the control socket, whose first message is what to
serve (the ServeConfig, its index, ring and port): the token never appears on a command line. It stops on SIGTERM
(the engine stopping it), or when the engine's end of the socket closes (the engine died): then with one line, and
its streams end with the connection.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading

from bridge import console
from bridge.multistream.engine import LISTENING
from bridge.multistream.rings import SlotRing
from bridge.runtime.serve import ServeConfig, _report, apply_switch_interval, build_front_end
from bridge.runtime.stopping import Stop, serve_until_stopped
from bridge.serving.engine_link import EngineLink

log = logging.getLogger(__name__)

CONFIG = b"C\0\0\0"  # the engine's first message: what to serve (JSON)
CLOSE_LIMIT_S = 15.0  # the engine gone: this front end ends within this, its streams closed or not


def _serve(spec: dict) -> int:
    sock, index = spec["sock"], spec["index"]
    fields = dict(spec["config"])
    fields["prewarm"] = ()  # the engine builds its services
    fields["frame_sizes"] = tuple(tuple(hw) for hw in fields["frame_sizes"])
    config = ServeConfig(**fields)
    apply_switch_interval(config)
    ring = SlotRing.attach(spec["ring"], spec["slots"], spec["slot_bytes"])
    stop, engine_lost = Stop(), threading.Event()

    def lost() -> None:
        engine_lost.set()
        stop.set()

    link = EngineLink(sock, ring, on_lost=lost)
    if not link.ready.wait(60):
        _report(f"front end {index}: the engine process did not answer; stopping")
        return 1
    server = build_front_end(config, link, spec["address"], spec["slots"], replica=None)
    engine = os.getppid()

    def check_parent() -> None:
        if os.getppid() != engine:  # handed to another parent: the engine died, whatever its socket says
            lost()

    try:
        sock.send(LISTENING + json.dumps({"address": server.address, "pid": os.getpid()}).encode())
        serve_until_stopped(stop=stop, every_s=1.0, each=check_parent)  # SIGTERM, the engine gone, or lost()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop at a time: the engine's, bounded by its limits
    finally:
        if engine_lost.is_set():  # the line first, and an end within CLOSE_LIMIT_S however the closing goes
            _report(f"front end {index} (pid {os.getpid()}, {server.address}): the engine process ended, so this "
                    "front end stops and its streams end; start `facebridge serve` again")
            deadline = threading.Timer(CLOSE_LIMIT_S, os._exit, args=(1,))
            deadline.daemon = True
            deadline.start()
        server.close()
        link.close()
        ring.close()
    return 1 if engine_lost.is_set() else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(argv[0]))
    message = sock.recv(1 << 20)
    if not message.startswith(CONFIG):
        print("facebridge serve: a front end is started by `facebridge serve --front-ends N`, not by hand",
              file=sys.stderr)
        return 2
    spec = json.loads(message[len(CONFIG):])
    spec["sock"] = sock
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the engine, which stops every front end
    log_path = console.setup("facebridge", bool(spec.get("verbose")))
    return console.run_command(f"facebridge serve (front end {spec['index']})", _serve, spec, log_path)


if __name__ == "__main__":
    sys.exit(main())
