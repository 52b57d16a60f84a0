"""A front end's EngineLink over a real socket pair and shared-memory ring: a stop that comes while the link's reader
describes a pass lets it finish before the ring is let go (a stop under load once ended in a TypeError, the ring
closed under the reader), and the engine's end closing still tells the front end."""
from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import numpy as np

from bridge.multistream import rings
from bridge.multistream.engine import RESULTS, VERSIONS, passes_of, slots_message
from bridge.multistream.rings import SlotRing
from bridge.serving.engine_link import EngineLink


class SlowService:
    """What the link needs of a RemoteService; its describe step waits for `release` (a first describe building its
    kernels, or a busy machine)."""

    def __init__(self, release: threading.Event | None = None) -> None:
        self.frame_hw, self.passes, self.frames, self.release = (48, 64), 0, 0, release
        self.entered, self.described = threading.Event(), []

    def finish_pass(self, slots, tags, faces):
        self.entered.set()
        if self.release is not None:
            assert self.release.wait(10)
        self.described.append(list(slots))
        return [f"frame of slot {s}" for s in slots]


def _link(ring, on_lost=lambda: None):
    front, engine = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = EngineLink(front, ring, on_lost=on_lost)
    engine.send(VERSIONS + b"{}")
    assert link.ready.wait(5)
    return link, engine


def _image():
    return SimpleNamespace(data=b"\xff\xd8 not decoded here", encoding=1)


def _tag():
    return SimpleNamespace(extra={})


def test_a_stop_while_a_pass_is_described_waits_for_it_before_the_ring_goes(monkeypatch):
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    ring = SlotRing.create(4, 1024)
    link, engine = _link(ring)
    release = threading.Event()
    first, second = SlowService(release), SlowService()
    futures = [link.submit(first, 0, _image(), _tag()), link.submit(second, 0, _image(), _tag())]
    ring.info[[0, 1], rings.STATUS] = rings.OK
    engine.send(slots_message(RESULTS, [0, 1], 1, 2))  # one message (a pass of 2): ring slots 0 and 1, one a service
    assert first.entered.wait(5)

    def stop():  # the front end's stop: its link, then its ring
        link.close()
        ring.close()

    stopping = threading.Thread(target=stop)
    stopping.start()
    time.sleep(0.3)
    assert stopping.is_alive(), "the link closed while its reader was still describing a pass"
    release.set()
    stopping.join(10)
    assert not stopping.is_alive()
    assert errors == [] and first.described == [[0]] and second.described == [[0]]
    assert [f.result(1) for f in futures] == ["frame of slot 0", "frame of slot 0"]
    engine.close()


def test_the_engine_closing_its_end_fails_the_waiting_frames_and_tells_the_front_end():
    ring = SlotRing.create(4, 1024)
    lost = threading.Event()
    link, engine = _link(ring, on_lost=lost.set)
    waiting = link.submit(SlowService(), 1, _image(), _tag())
    engine.close()
    assert lost.wait(5)
    error = waiting.exception(5)
    assert isinstance(error, RuntimeError) and "engine process ended" in str(error)
    link.close()
    ring.close()


def test_a_finish_call_of_several_passes_counts_each_pass_with_its_own_size():
    """The engine's finishing thread, behind, takes several passes in one call (DeadlineBatcher's merge): a front end
    counts the passes its frames were in and their sizes, so its mean batch never exceeds --pass-batch (it counted
    one pass of the call's whole size: 3.04 frames a pass with --pass-batch 3, a loaded CI run)."""
    starts = np.array([5.0, 5.0, 5.0, 7.0, 7.0])  # a pass of 3 started at 5, one of 2 at 7, finished together
    assert passes_of(starts, [0, 3]) == (2, 5) and passes_of(starts, [4]) == (1, 2)
    assert passes_of(starts, [1, 2]) == (1, 3)
    ring = SlotRing.create(4, 1024)
    link, engine = _link(ring)
    service = SlowService()
    futures = [link.submit(service, 0, _image(), _tag()), link.submit(service, 1, _image(), _tag())]
    ring.info[[0, 1], rings.STATUS] = rings.OK
    engine.send(slots_message(RESULTS, [0, 1], *passes_of(starts, [0, 3])))
    assert [f.result(5) for f in futures] == ["frame of slot 0", "frame of slot 1"]
    assert (service.passes, service.frames) == (2, 5) and service.frames / service.passes <= 3
    link.close()
    engine.close()
    ring.close()
