"""EngineLink: a front-end process's end of its SlotRing and control socket (the engine's end: multistream/engine.py),
and RemoteService, what the front end's StreamTable holds in place of a batched service of one frame size.

A stream's image whose turn it is goes to the engine undecoded: its bytes are copied into a ring slot of the stream's
own (the one copy; taken on its first image, given back when its stream's slot is reset), the slot's request row
says its size and encoding, and its number goes to the engine. The link's thread reads the engine's messages: for
each pass a list of slots whose result rows are ready, which it describes here, as the in-process service's
finishing thread does (`finish_pass`: PassReplies, the pass described whole and its replies made), resolving each
frame's future with them; an image the engine refused resolves as the BadImage it is (counted and answered like one
refused on arrival), a failed pass as its error. The model versions the FaceFrames announce arrive the same way.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future

import numpy as np

from bridge.multistream import rings
from bridge.multistream.decode import BadImage
from bridge.multistream.engine import CPU, FRAMES, IDLE, MAX_MESSAGE, RESULTS, VERSIONS, read_slots, slots_message
from bridge.multistream.service import StreamFaces
from bridge.sockets import shut_down

log = logging.getLogger(__name__)

CPU_FRESH_S, CPU_WAIT_S = 1.0, 0.25  # the engine's CPU asked for at most once a second; its answer waited for
CLOSE_WAIT_S = 5.0  # close() waits this long for the reader to finish the message in hand


class EngineLink:
    def __init__(self, sock, ring, on_lost=lambda: None) -> None:
        """sock: this front end's control socket; ring: its SlotRing (attached); on_lost(): the engine is gone."""
        self.sock, self.ring, self._on_lost = sock, ring, on_lost
        self.versions: dict[str, str] = {}
        self._engine_cpu: dict = {}  # the engine's pid and CPU seconds by thread group, as it last sent them
        self._engine_cpu_at = -CPU_FRESH_S
        self._engine_cpu_came = threading.Event()
        self.ready = threading.Event()  # the engine's first message (the model versions) arrived
        self._lock = threading.Lock()
        self._free = list(range(ring.slots - 1, -1, -1))
        self._slot_of: dict[tuple, int] = {}  # (service, its slot) -> ring slot
        # ring slot -> (service, its slot, future (None: posted), tag, failed (posted: told of a failure))
        self._waiting: list[tuple | None] = [None] * ring.slots
        self._generation = np.zeros(ring.slots, np.int64)
        self._closing = False
        self._thread = threading.Thread(target=self._read, name="engine-link", daemon=True)
        self._thread.start()

    # ---- frames out (the serve loop) -------------------------------------------------------------------------
    def submit(self, service, slot: int, image, tag) -> Future:
        """Send `image` (a facebridge.v1.ImageFrame, measured on arrival as the service's size) of the stream in
        `slot` of `service` to the engine; the future gives what `service.finish_pass` makes of its result."""
        future: Future = Future()
        ring_slot = self._write(service, slot, image, (service, slot, future, tag, None))
        self.sock.send(slots_message(FRAMES, [ring_slot]))
        return future

    def post_many(self, service, slots: list[int], images: list, tags: list, failed) -> None:
        """submit of many images at once with no future (TrackMany's groups): one message to the engine; each
        pass's results reach the tags through `service.finish_pass` alone, a failure through failed(tags, error)
        (an image too large for a slot: at once, that image only)."""
        ring_slots = []
        for slot, image, tag in zip(slots, images, tags):
            try:
                ring_slots.append(self._write(service, slot, image, (service, slot, None, tag, failed)))
            except (BadImage, ValueError) as e:
                failed([tag], e)
        if ring_slots:
            self.sock.send(slots_message(FRAMES, ring_slots))

    def _write(self, service, slot: int, image, entry: tuple) -> int:
        """The image into the ring slot of the stream in `slot` of `service` (taken on its first image): its
        ring slot."""
        data, ring = image.data, self.ring
        if len(data) > ring.slot_bytes:
            raise BadImage(f"the image of {len(data)} bytes is larger than this server's frame slots "
                           f"({ring.slot_bytes} bytes); send a smaller JPEG, or start the server with a larger "
                           "--frame-slot-kib")
        key = (service, slot)
        with self._lock:
            ring_slot = self._slot_of.get(key)
            if ring_slot is None:
                if not self._free:  # one slot a stream: cannot happen while the table keeps its limit
                    raise ValueError("this front end has no frame slot free; try again later")
                ring_slot = self._slot_of[key] = self._free.pop()
            self._waiting[ring_slot] = entry
        ring.images[ring_slot, :len(data)] = np.frombuffer(data, np.uint8)
        h, w = service.frame_hw
        ring.requests[ring_slot] = (len(data), h, w, image.encoding, self._generation[ring_slot])
        return ring_slot

    def send_idle(self, frame_hw: tuple[int, int]) -> None:
        try:
            self.sock.send(slots_message(IDLE, [], *frame_hw))
        except OSError:
            pass  # the engine is gone: the link's reader ends this front end

    def free(self, service, slot: int) -> None:
        """The stream in `slot` of `service` ended and its image is back: its ring slot goes to the next stream,
        which the engine then tracks from detection (a new generation)."""
        with self._lock:
            ring_slot = self._slot_of.pop((service, slot), None)
            if ring_slot is not None:
                self._generation[ring_slot] += 1
                self._waiting[ring_slot] = None
                self._free.append(ring_slot)

    def engine_cpu(self) -> dict:
        """The engine's pid and CPU seconds by thread group: asked for (at most once in CPU_FRESH_S; a status call
        waits for the answer, up to CPU_WAIT_S), else as last sent."""
        now = time.monotonic()
        if now - self._engine_cpu_at >= CPU_FRESH_S:
            self._engine_cpu_at = now
            self._engine_cpu_came.clear()
            try:
                self.sock.send(CPU)
            except OSError:
                return self._engine_cpu
            self._engine_cpu_came.wait(CPU_WAIT_S)
        return self._engine_cpu

    # ---- results in (the link's thread) ----------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                message = self.sock.recv(MAX_MESSAGE)
            except OSError:
                message = b""
            if not message or self._closing:
                break
            try:
                self._handle(message)
            except Exception:  # noqa: BLE001 - one message's frames, never the link (their deadline answers them)
                if self._closing:  # the ring let go under a message in hand: the front end is stopping
                    break
                log.exception("a message from the engine process could not be handled; its frames are lost")
        if self._closing:
            return
        self._fail_waiting("the engine process ended")
        self._on_lost()

    def _handle(self, message: bytes) -> None:
        kind = message[:4]
        if kind == RESULTS:
            values = read_slots(message)  # passes, their frames, then the slots (engine.passes_of)
            self._results(int(values[0]), int(values[1]), values[2:].tolist())
        elif kind == VERSIONS:
            self.versions = json.loads(message[4:])  # a new dict: frames handed on keep theirs
            self.ready.set()
        elif kind == CPU:
            self._engine_cpu = json.loads(message[4:])
            self._engine_cpu_came.set()

    def _results(self, passes: int, pass_frames: int, slots: list[int]) -> None:
        ring = self.ring
        with self._lock:
            entries = [self._waiting[s] for s in slots]
            for s in slots:
                self._waiting[s] = None
        status = ring.info[slots, rings.STATUS].astype(int)
        groups: dict = {}
        for i, (slot, entry, code) in enumerate(zip(slots, entries, status)):
            if entry is None:
                continue
            if code == rings.OK:
                groups.setdefault(entry[0], []).append(i)
            else:
                error = BadImage(ring.error(slot)) if code == rings.REFUSED else RuntimeError(ring.error(slot))
                _fail([entry], error)
        for service, picked in groups.items():
            ring_slots = [slots[i] for i in picked]
            rows = ring.results[ring_slots]  # copies: the slots are free for the streams' next images after this
            info = ring.info[ring_slots]
            done = [entries[i] for i in picked]
            tags = [entry[3] for entry in done]
            engine_times = info[:, [rings.DECODE_MS, rings.READ, rings.QUEUED, rings.DECODE_START,
                                    rings.DECODE_END]].tolist()
            for tag, (decode_ms, *times) in zip(tags, engine_times):
                tag.extra["decode_ms"] = decode_ms
                tag.extra["engine_times"] = times  # read, queued, its decode call's start and end
            timing = info[:, [rings.PASS_START, rings.PASS_END, rings.GPU_MS]]
            service.passes += passes
            service.frames += pass_frames
            service_slots = [entry[1] for entry in done]
            try:
                made = service.finish_pass(service_slots, tags, StreamFaces.of(service_slots, rows, timing))
            except Exception as e:  # noqa: BLE001 - the pass's frames fail, never the link
                _fail(done, e)
                continue
            for entry, result in zip(done, made):
                if entry[2] is not None:
                    entry[2].set_result(result)

    def _fail_waiting(self, why: str) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, [None] * self.ring.slots
        _fail([entry for entry in waiting if entry is not None], RuntimeError(why))

    def close(self) -> None:
        """Stop reading, then let go of the socket: the message in hand is finished first (up to CLOSE_WAIT_S), so
        the ring can be closed after this (closed under the reader, a stop under load ended in a TypeError)."""
        self._closing = True
        shut_down(self.sock)  # wakes the reader's recv
        if threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_WAIT_S)
        try:
            self.sock.close()
        except OSError:
            pass


def _fail(entries: list[tuple], error: Exception) -> None:
    """Frames that will get no result: each future failed, each group posted together told once."""
    posted: dict = {}
    for _service, _slot, future, tag, failed in entries:
        if future is not None:
            if not future.done():
                future.set_exception(error)
        elif failed is not None:
            posted.setdefault(failed, []).append(tag)
    for failed, tags in posted.items():
        try:
            failed(tags, error)
        except Exception as e:  # noqa: BLE001 - never the link
            log.warning("telling of frames that failed failed: %s", e)


class RemoteService:
    """One frame size's batched service as a front end's StreamTable sees it: its frames go to the engine process
    through `link`; `finish_pass(slots, tags, faces)` describes each pass that comes back (PassReplies)."""

    graphs = False

    def __init__(self, link: EngineLink, frame_hw: tuple[int, int], num_streams: int, finish_pass) -> None:
        self.link, self.frame_hw, self.num_streams, self.finish_pass = link, tuple(frame_hw), num_streams, finish_pass
        self.passes = 0  # passes this front end's frames were in
        self.frames = 0  # the sizes of those passes, summed (frames / passes: the engine's batch as seen here)

    def submit(self, stream: int, frame, tag=None) -> Future:
        return self.link.submit(self, int(stream), frame, tag)

    def post_many(self, streams: list[int], frames: list, tags: list, failed) -> None:
        self.link.post_many(self, [int(s) for s in streams], frames, tags, failed)

    def reset_stream(self, stream: int) -> None:
        self.link.free(self, int(stream))

    def idle(self) -> None:
        """This front end's last stream of this size ended: the engine may release the size's service when no
        other front end has a stream of it (another stream of the size here later makes it anew)."""
        self.link.send_idle(self.frame_hw)

    def close(self) -> None:
        """Nothing here to free (the engine keeps its service of this size)."""
