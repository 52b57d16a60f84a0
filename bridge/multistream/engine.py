"""Engine: the one process per GPU of `facebridge serve --front-ends N`. It owns the batched runners (and so the
CUDA context), every stream's image decode and every batched pass; the front-end processes own the gRPC streams,
each stream's state and the describe step, and reach the engine only through their SlotRing (multistream/rings.py) and
a control socket each (a SOCK_SEQPACKET pair: one message is one datagram, only slot numbers travel).

Per frame: a front end writes the image into its stream's ring slot and names the slot (`F`). The engine's reader
thread for that front end hands the image, read in place from the slot, to the decoder: on a GPU to JpegBatches
(every JPEG waiting in one nvJPEG call), elsewhere to a pool of OpenCV workers; the decoded frame goes to the
MultiStreamFaceService of its size, whose DeadlineBatcher runs a pass whenever the device is free over every frame
waiting (a lone frame never waits for company; under load the frames that arrive during a pass form the next one,
up to every slot of every front end). The service's finishing thread writes each frame's packed result row into its
slot and names each front end's slots of the pass in one message (`R`, with the pass's size). An image that does not
decode, or a pass that fails, is written as that slot's status with one line, and named the same way.

A front end that dies (its socket closes) loses only its streams: its epoch moves on, so whatever of it is still in
the engine is dropped when it comes back, and every one of its slots starts from detection for the next stream;
`on_lost(index)` lets the supervisor start another front end in its place, on the same ring. The FaceFrames' model
versions (which change when a signed release swaps in between two passes) go to every front end as `V` messages.
"""
from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from bridge.multistream import rings
from bridge.multistream.decode import JPEG, BadImage
from bridge.multistream.decode_batch import JpegBatches
from bridge.multistream.decode_process import DecodeProcesses, FramePool
from bridge.multistream.rings import SlotRing
from bridge.sockets import shut_down
from bridge.thread_cpu import thread_cpu_seconds

log = logging.getLogger(__name__)

# control message kinds: frames in, results out, model versions, a front end listening, the engine's CPU by thread
# (asked by a front end with an empty one)
FRAMES, RESULTS, VERSIONS, LISTENING, CPU = b"F\0\0\0", b"R\0\0\0", b"V\0\0\0", b"L\0\0\0", b"T\0\0\0"
IDLE = b"I\0\0\0"  # a front end's last stream of a frame size ended (height, width)
MAX_MESSAGE = 1 << 20
SEND_TIMEOUT_S = 10.0  # a front end that takes no message for this long is cut off (it is hung)
CLOSE_WAIT_S = 5.0  # close() waits this long, all readers together, for each to finish the message in hand


def slots_message(kind: bytes, slots, *head: int) -> bytes:
    """A control message: its kind, then int32s (`head`, then the slots)."""
    return kind + np.asarray([*head, *slots], np.int32).tobytes()


def read_slots(message: bytes) -> np.ndarray:
    """The int32s of a control message after its kind."""
    return np.frombuffer(message, np.int32, offset=4)


def passes_of(starts: np.ndarray, picked: list[int]) -> tuple[int, int]:
    """(passes, their frames in all) of the rows `picked` of one finish call, each row's pass told by its start time
    (`starts`): the finishing thread may take several passes at once (DeadlineBatcher's merge), so a RESULTS
    message tells a front end how many passes its frames were in and how large they were, not one pass's size."""
    theirs = np.unique(starts[picked])
    return len(theirs), int(np.isin(starts, theirs).sum())


class Engine:
    def __init__(self, make_service, *, front_ends: int, slots_each: int, slot_bytes: int, decoder,
                 jpeg_batches: bool, decode_workers: int = 1, max_frame_sizes: int = 4, versions=lambda: {},
                 on_pass=None, on_lost=None, jpeg_batch: int | None = None, decode_processes: int = 0,
                 decoded_frame_bytes: int = 0, jpeg_library: str = "torchvision") -> None:
        """make_service(frame_hw, num_streams, finish_pass) -> a MultiStreamFaceService of that size over every
        front end's slots; decoder: an ImageDecoder on the runners' device; jpeg_batches: every JPEG waiting decoded
        in one call (nvJPEG on a GPU), else each on one of `decode_workers` threads; versions() -> the model
        versions the FaceFrames announce now; on_pass(faces): each pass's results (the releases' fallback);
        on_lost(index): a front end's socket closed; jpeg_batch: the most JPEGs a decode call takes (default every
        slot's); decode_processes: JPEGs of up to decoded_frame_bytes (H x W x 3) decoded in that many processes
        of their own (multistream/decode_process.py, with `jpeg_library`), a front end's always in the same one."""
        self.front_ends, self.slots_each, self.total = front_ends, slots_each, front_ends * slots_each
        self.rings = [SlotRing.create(slots_each, slot_bytes) for _ in range(front_ends)]
        self._make_service, self._decoder = make_service, decoder
        self._versions, self._on_pass, self.on_lost = versions, on_pass, on_lost
        self.max_frame_sizes = max_frame_sizes
        self._lock = threading.Lock()
        self._socks: list[socket.socket | None] = [None] * front_ends
        self._readers: list[threading.Thread] = []  # each attached socket's reader, joined by close()
        self._epochs = [0] * front_ends
        self._generations = np.full(self.total, -1, np.int64)  # per slot: the stream whose state it holds
        self._sizes: dict[tuple[int, int], _Size] = {}  # a batched service per frame size, and who uses it
        self._services_lock = threading.Lock()
        self.sizes_released = 0
        self._sent_versions = None
        self.listening: list[dict | None] = [None] * front_ends
        self.on_listening = lambda index, hello: None
        self.refused = self.failed = 0
        self._jpeg = JpegBatches(decoder, max(1, jpeg_batch or self.total), name="engine-jpeg") if jpeg_batches \
            else None
        # OpenCV's workers; with the JPEG batches, one for raw images (a copy each: they come from loopback only)
        self._pool = ThreadPoolExecutor(1 if jpeg_batches else max(1, decode_workers),
                                        thread_name_prefix="engine-decode")
        self.decoder_name = f"{decoder.name}, batched" if jpeg_batches else decoder.name
        self.frame_pool = self._processes = None
        self.decode_process_count = decode_processes
        if decode_processes:
            self.frame_pool = FramePool(self.total, decoded_frame_bytes, decoder.device)
            try:
                self._processes = DecodeProcesses(decode_processes, self.rings, slots_each, self.frame_pool,
                                                  jpeg_library, jpeg_batch or self.total, self._pool_decoded,
                                                  self._decode_failed)
            except BaseException:
                self.frame_pool.close()
                raise

    def wait_decode_processes(self) -> None:
        """Until the decode processes (if any) are ready, which start beside the engine's own start-up; then the
        ready line's decoder names them."""
        if self._processes is not None:
            self._processes.wait_ready()
            pids = ", ".join(f"pid {pid}" for pid in self._processes.pids())
            count = self._processes.count
            processes = "decode processes" if count > 1 else "decode process"
            self.decoder_name = f"{self._processes.names[0]}, in {count} {processes} ({pids})"

    # ---- front ends ------------------------------------------------------------------------------------------
    def attach(self, index: int, sock: socket.socket) -> None:
        """Front end `index`'s control socket (its first, or that of the one started in place of one that died)."""
        sock.settimeout(SEND_TIMEOUT_S)
        with self._lock:
            self._epochs[index] += 1
            epoch = self._epochs[index]
            self._generations[index * self.slots_each:(index + 1) * self.slots_each] = -1
            self._socks[index] = sock
            self.listening[index] = None
        self._send(index, VERSIONS + json.dumps(self._versions()).encode())
        reader = threading.Thread(target=self._read, args=(index, sock, epoch), name=f"engine-link-{index}",
                                  daemon=True)
        with self._lock:
            self._readers = [t for t in self._readers if t.is_alive()] + [reader]
        reader.start()

    def _read(self, index: int, sock: socket.socket, epoch: int) -> None:
        while True:
            try:
                message = sock.recv(MAX_MESSAGE)
            except TimeoutError:
                continue
            except OSError:
                message = b""
            if not message or self._epochs[index] != epoch:
                break
            kind = message[:4]
            if kind == FRAMES:
                self._take(index, epoch, read_slots(message))
            elif kind == LISTENING:
                self.listening[index] = hello = json.loads(message[4:])
                self.on_listening(index, hello)
            elif kind == CPU:
                self._send_cpu(index)
            elif kind == IDLE:
                self._stop_using(index, [tuple(read_slots(message)[:2].tolist())])
        self._lost(index, epoch)

    def _lost(self, index: int, epoch: int) -> None:
        with self._lock:
            if self._epochs[index] != epoch:
                return
            self._epochs[index] += 1  # what of it is still in a pass is dropped when it comes back
            self._generations[index * self.slots_each:(index + 1) * self.slots_each] = -1
            sock, self._socks[index] = self._socks[index], None
        self._stop_using(index)
        if sock is not None:
            sock.close()
        if self.on_lost is not None:
            self.on_lost(index)

    def _send(self, index: int, message: bytes) -> None:
        sock = self._socks[index]
        if sock is None:
            return
        try:
            sock.send(message)
        except TimeoutError:  # hung: cut it off (it sees the engine gone and ends; its reader here ends too)
            log.warning("front end %d took no message for %.0f s; cutting it off", index, SEND_TIMEOUT_S)
            shut_down(sock)
        except OSError:
            pass  # it died: its reader thread sees the socket closed

    # ---- frames in -------------------------------------------------------------------------------------------
    def _take(self, index: int, epoch: int, slots: np.ndarray) -> None:
        """The images a front end named in one message: read in place from their slots (each slot is its stream's
        until its result is back), JPEGs to the decoder's batches together, others each to a decode worker."""
        ring = self.rings[index]
        inside = (slots >= 0) & (slots < ring.slots)
        if not inside.all():
            log.warning("front end %d named slots %s of %d; ignored", index, slots[~inside].tolist()[:5], ring.slots)
            slots = slots[inside]
        if not len(slots):
            return
        ring.info[slots, rings.READ] = time.perf_counter()
        requests = ring.requests[slots]  # a copy: nbytes, height, width, encoding, generation
        nbytes = requests[:, rings.NBYTES]
        fits = (nbytes > 0) & (nbytes <= ring.slot_bytes)
        for slot, n, generation in zip(slots[~fits].tolist(), nbytes[~fits].tolist(),
                                       requests[~fits, rings.GENERATION].tolist()):
            self._refuse((index, epoch, slot, generation), f"the engine read {n} bytes for this image; send it again")
        slots, requests = slots[fits], requests[fits]
        jpegs, datas, hws, others = [], [], [], []
        processes, k = self._processes, index % self._processes.count if self._processes is not None else 0
        if processes is not None and processes.alive(k):  # JPEGs the pool's rows hold to decode process k
            heights, widths = requests[:, rings.HEIGHT], requests[:, rings.WIDTH]
            away = (requests[:, rings.ENCODING] == JPEG) & self.frame_pool.takes(heights, widths)
            if away.any():  # columns, not a loop a frame: this thread's time is the engine's interpreter lock's
                tags = list(zip(repeat(index), repeat(epoch), slots[away].tolist(),
                                requests[away, rings.GENERATION].tolist()))
                sizes = list(zip(heights[away].tolist(), widths[away].tolist()))
                nbytes_away = requests[away, rings.NBYTES].tolist()
                if not processes.submit(k, tags, (slots[away] + index * self.slots_each).tolist(), nbytes_away,
                                        sizes):  # it went down for good meanwhile: decoded here
                    for tag, hw, n in zip(tags, sizes, nbytes_away):
                        others.append((tag, JPEG, ring.images[tag[2], :n], hw))
                slots, requests = slots[~away], requests[~away]
        for slot, (n, height, width, encoding, generation) in zip(slots.tolist(), requests.tolist()):
            tag, data = (index, epoch, slot, generation), ring.images[slot, :n]
            if encoding == JPEG and self._jpeg is not None:
                jpegs.append(tag)
                datas.append(self._decoder.encoded(data))
                hws.append((height, width))
            else:
                others.append((tag, encoding, data, (height, width)))
        if jpegs:
            self._jpeg.submit_many(datas, hws, self._jpegs_decoded, jpegs)
        if others:  # each on a worker; the last one done posts them together (one pass, one describe call)
            group = _Decoded(len(others))
            for tag, encoding, data, hw in others:
                self._pool.submit(self._decode, group, tag, encoding, data, hw)

    def _decode(self, group: _Decoded, tag: tuple, encoding: int, data, hw: tuple[int, int]) -> None:
        t0 = time.perf_counter()
        try:
            decoded = self._decoder.decode_measured(encoding, data, hw)
        except BadImage as e:
            decoded = e
        except Exception as e:  # noqa: BLE001 - one broken image never takes a worker down
            decoded = BadImage(f"the image could not be decoded ({str(e).splitlines()[0][:120] if str(e) else e!r})")
        if group.add(tag, decoded, (time.perf_counter() - t0) * 1000.0):
            self._decoded(group.decoded, group.ms, group.tags, [_NO_CALL] * len(group.tags))

    def _jpegs_decoded(self, decoded: list, times: list, tags: list) -> None:
        """JPEGs decoded in one batch (JpegBatches' thread; times: their DecodeTimes)."""
        self._decoded(decoded, [t.ms for t in times], tags, [(t.started, t.ended) for t in times])

    def _decode_failed(self, tags: list, reason: str) -> None:
        """Frames a decode process held when it died: each answered as failed (its stream sends the next)."""
        for tag in tags:
            self._refuse(tag, reason, rings.FAILED)

    def _decoded(self, decoded: list, decode_ms: list[float], tags: list, calls: list[tuple[float, float]],
                 kept: bool = False) -> None:
        """Images of one message decoded; each that did not decode refused alone, the others posted together.
        kept: they are rows of the frame pool on the runners' device (service.post_many's kept)."""
        good = []
        for i, d in enumerate(decoded):
            if isinstance(d, BadImage):
                self._refuse(tags[i], str(d))
            else:
                good.append(i)
        if len(good) < len(decoded):
            tags, decoded = [tags[i] for i in good], [decoded[i] for i in good]
            decode_ms, calls = [decode_ms[i] for i in good], [calls[i] for i in good]
        if tags:
            self._submit(tags, decoded, decode_ms, calls, kept)

    def _pool_decoded(self, decoded: list, decode_ms: list[float], tags: list, calls: list) -> None:
        """A decode process's frames: rows of the frame pool (kept as they are where it is on the GPU)."""
        self._decoded(decoded, decode_ms, tags, calls, kept=self.frame_pool.tensor is not None)

    def _submit(self, tags: list, decoded: list, decode_ms: list, calls: list[tuple[float, float]],
                kept: bool = False) -> None:
        """Decoded frames ((frame, hw) each) to the services of their sizes, each size's in one post; calls: when
        each one's decode call began and ended (_NO_CALL: a decode worker's). In columns where it can (this
        thread's time is the engine's interpreter lock's)."""
        by_size: dict[tuple[int, int], list[int]] = {}
        for i, ((index, epoch, _slot, _generation), (_frame, hw)) in enumerate(zip(tags, decoded)):
            if self._epochs[index] == epoch:  # else its front end is gone
                by_size.setdefault(hw, []).append(i)
        now = time.perf_counter()
        for hw, picked in by_size.items():
            these = [tags[i] for i in picked] if len(picked) < len(tags) else tags
            try:
                service = self._service(hw, {tag[0] for tag in these}, len(these))
            except ValueError as e:
                for tag in these:
                    self._refuse(tag, str(e))
                continue
            columns = np.array(these, np.int64).reshape(-1, 4)  # front end, epoch, slot, generation
            fronts, slots, generations = columns[:, 0], columns[:, 2], columns[:, 3]
            rows = fronts * self.slots_each + slots
            for row in rows[self._generations[rows] != generations].tolist():  # a new stream: from detection
                service.reset_stream(row)
            self._generations[rows] = generations
            times = np.asarray([decode_ms[i] for i in picked], np.float64)
            spans = np.asarray([calls[i] for i in picked], np.float64).reshape(-1, 2)
            for index in np.unique(fronts).tolist():
                mine = fronts == index
                info = self.rings[index].info
                at = slots[mine]
                info[at, rings.DECODE_MS], info[at, rings.QUEUED] = times[mine], now
                info[at, rings.DECODE_START], info[at, rings.DECODE_END] = spans[mine, 0], spans[mine, 1]
            try:
                service.post_many(rows.tolist(), [decoded[i][0] for i in picked], these,
                                  lambda tags, error, hw=hw: self._failed(hw, tags, error), kept=kept)
            except (ValueError, RuntimeError) as e:  # RuntimeError: its service closed meanwhile (a stop)
                self._done(hw, len(these))
                for tag in these:
                    self._refuse(tag, str(e))

    def _service(self, hw: tuple[int, int], users: set[int] = frozenset(), frames: int = 0):
        """The batched service of frame size hw, made when none is (in the place of the least recently used size no
        front end has a stream of and no frame is out in, when `max_frame_sizes` are made: short streams of odd
        sizes never lock a later size out); `frames` of it from front ends `users` are about to be posted."""
        closed = None
        with self._services_lock:
            size = self._sizes.get(hw)
            if size is None:
                if len(self._sizes) >= self.max_frame_sizes:
                    closed = self._release_idle_size()
                if len(self._sizes) >= self.max_frame_sizes:
                    sizes = ", ".join(f"{w}x{h}" for h, w in self._sizes)
                    raise ValueError(f"this server already serves {self.max_frame_sizes} frame sizes ({sizes}), each "
                                     "with streams now; send one of them")
                finish = lambda rows, tags, faces, hw=hw: self._finish(hw, rows, tags, faces)  # noqa: E731
                size = self._sizes[hw] = _Size(self._make_service(hw, self.total, finish))
            size.users |= users
            size.out += frames
            size.used = time.monotonic()
        if closed is not None:
            closed.close()
        return size.service

    def _release_idle_size(self):
        """Take out the least recently used size no front end uses and no frame is out in (not one built at start);
        its service, to close once the lock is let go (call with the lock held)."""
        idle = [hw for hw, size in self._sizes.items() if not size.pinned and not size.users and size.out == 0]
        if not idle:
            return None
        hw = min(idle, key=lambda k: self._sizes[k].used)
        self.sizes_released += 1
        log.info("frame size %dx%d released: no stream uses it (%d released so far)", hw[1], hw[0],
                 self.sizes_released)
        return self._sizes.pop(hw).service

    def _stop_using(self, index: int, sizes: list[tuple[int, int]] | None = None) -> None:
        """Front end `index` has no stream of these frame sizes any more (None: of any size: it is gone)."""
        with self._services_lock:
            for hw in self._sizes if sizes is None else sizes:
                size = self._sizes.get(hw)
                if size is not None:
                    size.users.discard(index)

    def _done(self, hw: tuple[int, int], frames: int) -> None:
        """`frames` of size hw are back (served, or failed)."""
        with self._services_lock:
            size = self._sizes.get(hw)
            if size is not None:
                size.out -= frames

    def prepare(self, hw: tuple[int, int]) -> None:
        """Build the batched service of one frame size now (--prewarm); it is kept for the server's life."""
        self._service(tuple(hw))
        with self._services_lock:
            self._sizes[tuple(hw)].pinned = True

    # ---- results ---------------------------------------------------------------------------------------------
    def _finish(self, hw: tuple[int, int], _rows, tags: list, faces) -> list:
        """A pass's results (the service's finishing thread): each frame's row into its slot, one message a front
        end naming its slots."""
        self._done(hw, len(tags))
        if self._on_pass is not None:
            self._on_pass(faces)
        versions = self._versions()
        if versions is not self._sent_versions:  # a release swapped in: the front ends announce it from now on
            self._sent_versions = versions
            message = VERSIONS + json.dumps(versions).encode()
            for index in range(self.front_ends):
                self._send(index, message)
        by_front_end: dict[int, list[int]] = {}
        for i, (index, epoch, _slot, _generation) in enumerate(tags):
            if self._epochs[index] == epoch:
                by_front_end.setdefault(index, []).append(i)
        timing = faces.timing
        starts = timing[:, 0] if timing is not None else np.zeros(len(tags))
        for index, picked in by_front_end.items():
            ring = self.rings[index]
            slots = [tags[i][2] for i in picked]
            ring.results[slots] = faces.rows[picked]
            info = ring.info
            info[slots, rings.STATUS] = rings.OK
            if timing is not None:
                info[slots, rings.PASS_START] = timing[picked, 0]
                info[slots, rings.PASS_END] = timing[picked, 1]
                info[slots, rings.GPU_MS] = timing[picked, 2]
            self._send(index, slots_message(RESULTS, slots, *passes_of(starts, picked)))
        return [None] * len(tags)

    def _send_cpu(self, index: int) -> None:
        """The engine's CPU seconds by thread group (bridge/thread_cpu.py) to the front end that asked, whose
        GetServeStatus carries them beside its own: a client sees the whole server's CPU, not one front end's."""
        threads = thread_cpu_seconds()
        if self._processes is not None:  # their CPU is the engine's JPEG decode, done elsewhere
            threads["decode-processes"] = self._processes.cpu_seconds()
        self._send(index, CPU + json.dumps({"pid": os.getpid(), "threads": threads}).encode())

    def _refuse(self, tag: tuple, reason: str, status: int = rings.REFUSED) -> None:
        index, epoch, slot, _generation = tag
        if self._epochs[index] != epoch:
            return
        if status == rings.REFUSED:
            self.refused += 1
        else:
            self.failed += 1
        self.rings[index].set_error(slot, status, reason)
        self._send(index, slots_message(RESULTS, [slot], 0, 0))

    def _failed(self, hw: tuple[int, int], tags: list, error: Exception) -> None:
        """Frames whose pass (or its finishing) failed: theirs only, each answered with the error."""
        self._done(hw, len(tags))
        text = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        for tag in tags:
            self._refuse(tag, text, rings.FAILED)

    # ---- reports ---------------------------------------------------------------------------------------------
    def services(self) -> list:
        with self._services_lock:
            return [size.service for size in self._sizes.values()]

    def stats(self) -> dict:
        services = self.services()
        passes = sum(s.passes for s in services)
        frames = sum(s.frames for s in services)
        non_finite = sum(s.non_finite for s in services)
        return {"passes": passes, "frames": frames, "mean_batch": frames / passes if passes else 0.0,
                "sizes_released": self.sizes_released,
                "refused": self.refused, "failed": self.failed, "non_finite": non_finite,
                "front_ends": sum(s is not None for s in self._socks),
                "decode_processes": sum(map(self._processes.alive, range(self._processes.count)))
                if self._processes is not None else 0,
                "decode_process_restarts": self._processes.restarts if self._processes is not None else 0,
                "frame_sizes": [f"{w}x{h}" for h, w in (tuple(s.frame_hw) for s in services)]}

    def close(self) -> None:
        """Stop every front end's link, then what it fed: the readers finish the message in hand first (up to
        CLOSE_WAIT_S in all), so no ring is let go under one (a front end's own link once did: a TypeError)."""
        with self._lock:
            socks, self._socks = self._socks, [None] * self.front_ends
            self._epochs = [e + 1 for e in self._epochs]
            readers = self._readers
        for sock in socks:
            if sock is not None:
                shut_down(sock)
        deadline = time.monotonic() + CLOSE_WAIT_S
        for reader in readers:
            if reader is not threading.current_thread():
                reader.join(max(0.0, deadline - time.monotonic()))
        for sock in socks:
            if sock is not None:
                sock.close()
        if self._processes is not None:
            self._processes.close()
        if self._jpeg is not None:
            self._jpeg.close()
        self._pool.shutdown(wait=True)
        for service in self.services():
            service.close()
        if self.frame_pool is not None:
            self.frame_pool.close()
        for ring in self.rings:
            ring.close()


_NO_CALL = (math.nan, math.nan)  # an image decoded alone by a decode worker: no batch call to time


class _Decoded:
    """The images of one front end's message that go to the decode workers: each worker adds its own, and the one that
    adds the last hears so (`add` returns True) and posts them all."""

    def __init__(self, count: int) -> None:
        self._left, self._lock = count, threading.Lock()
        self.tags: list = []
        self.decoded: list = []  # (frame, hw), or the BadImage it is
        self.ms: list[float] = []

    def add(self, tag: tuple, decoded, ms: float) -> bool:
        with self._lock:
            self.tags.append(tag)
            self.decoded.append(decoded)
            self.ms.append(ms)
            self._left -= 1
            return self._left == 0


@dataclass
class _Size:
    """One frame size's batched service, and what says whether it may be released."""
    service: object
    users: set[int] = field(default_factory=set)  # front ends with a stream of this size (until they say idle)
    out: int = 0  # its frames posted and not yet back
    used: float = 0.0  # when frames were last posted to it (time.monotonic())
    pinned: bool = False  # built at start (--prewarm): kept
