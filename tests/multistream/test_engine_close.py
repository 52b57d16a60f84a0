"""The engine's close() waits for its front-end links' readers to finish the message in hand before it lets the rings
go (a front end's own link once closed its ring under its reader: a TypeError at a stop under load); a reader that
never finishes holds the stop back no longer than CLOSE_WAIT_S. Real socket pairs and shared-memory rings."""
from __future__ import annotations

import json
import socket
import threading
import time

from bridge.multistream import engine as engine_module
from bridge.multistream.decode import ImageDecoder
from bridge.multistream.engine import LISTENING, Engine


def _engine_with_a_busy_reader(release: threading.Event):
    engine = Engine(lambda frame_hw, n, finish: None, front_ends=1, slots_each=2, slot_bytes=1024,
                    decoder=ImageDecoder("cpu"), jpeg_batches=False)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    entered = threading.Event()

    def on_listening(index, hello):  # the reader busy with a message (as with a pass's frames)
        entered.set()
        release.wait(30)

    engine.on_listening = on_listening
    engine.attach(0, ours)
    theirs.send(LISTENING + json.dumps({"address": "127.0.0.1:1", "pid": 1}).encode())
    assert entered.wait(5)
    return engine, theirs


def _close_in_a_thread(engine):
    closing = threading.Thread(target=engine.close)
    closing.start()
    return closing


def test_close_waits_for_a_reader_busy_with_a_message_before_the_rings_go():
    release = threading.Event()
    engine, theirs = _engine_with_a_busy_reader(release)
    ring = engine.rings[0]
    closing = _close_in_a_thread(engine)
    time.sleep(0.3)
    assert closing.is_alive() and ring.info is not None, "the rings went while a reader was busy"
    release.set()
    closing.join(10)
    assert not closing.is_alive() and ring.info is None
    theirs.settimeout(5)
    while theirs.recv(1 << 16):  # the model versions sent at attach, then the link closed
        pass
    theirs.close()


def test_a_reader_that_never_finishes_holds_the_stop_back_only_so_long(monkeypatch):
    monkeypatch.setattr(engine_module, "CLOSE_WAIT_S", 0.5)
    release = threading.Event()
    engine, theirs = _engine_with_a_busy_reader(release)
    started = time.monotonic()
    closing = _close_in_a_thread(engine)
    closing.join(10)
    took = time.monotonic() - started
    release.set()
    assert not closing.is_alive() and 0.4 < took < 5.0
    theirs.close()
