"""Decode processes: the engine's JPEG decode in processes of their own (`facebridge serve --front-ends N
--decode-processes K`).

Why (issue 43, H100, docs/PERFORMANCE.md): inside the engine process a batched nvJPEG call takes the interpreter lock
again and again, and waits a switch interval each time another of the engine's dozen Python threads holds it
(163 images a second beside one pure-Python thread, 18,300 alone); and one CUDA context decodes at most about
30,000 of the sample's images a second, which is what 1,000 streams at 30 fps ask (several contexts under MPS:
44,000-54,000). A decode process has one Python thread that does nothing else, and its own CUDA context: under MPS
its decodes run beside the passes instead of behind them (without MPS the contexts take turns on the GPU).

Per frame: the engine's reader of a front end names the slot (its front end, slot, size) to the decode process that
front end's frames go to (one control socket each: a SOCK_SEQPACKET pair, only numbers travel). The decode process
takes every slot named while it was busy, reads the JPEGs in place from the front ends' rings (shared memory, as the
engine does), decodes them in one call (ImageDecoder.start_jpegs: nvJPEG or nvImageCodec on a GPU, OpenCV on the
CPU) and writes each frame into its row of the FramePool, then names the rows back with each one's status. The
engine hands the rows' frames, views of the pool, to the passes. A row belongs to one ring slot, and a slot holds one
frame in the engine at a time (its next comes only after its result went back): a row is never rewritten while a
pass may still read it.

A decode process that dies costs only the frames it held (each answered as failed, to be sent again); another is
started in its place. One that keeps dying within seconds of its start is not started again, and its front ends'
frames are decoded in the engine process as without decode processes.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import shared_memory
from multiprocessing.reduction import ForkingPickler

import numpy as np

from bridge.errors import FaceBridgeError
from bridge.multistream.decode import BadImage, ImageDecoder, WrongSize
from bridge.multistream.rings import SlotRing, untrack
from bridge.sockets import shut_down
from bridge.thread_cpu import stat_cpu_seconds

log = logging.getLogger(__name__)

DECODE, DECODED, READY = b"D\0\0\0", b"d\0\0\0", b"r\0\0\0"
MAX_MESSAGE = 1 << 20
ITEM = 4  # a DECODE item: row, nbytes, height, width (the row says the front end and slot)
OK, NOT_DECODED, WRONG_SIZE = 0, 1, 2  # a row's status in a DECODED message
REASONS = {NOT_DECODED: "the JPEG could not be decoded; send camera frames encoded as baseline JPEG",
           WRONG_SIZE: "the JPEG decodes to another size than its header says; send whole, unaltered frames"}
START_TIMEOUT_S = 120.0  # the process imports torch and makes its CUDA context first
QUICK_END_S, MAX_QUICK_ENDS = 10.0, 3  # one that ends this soon after its start this many times in a row stays down
STOP_WAIT_S = 10.0
SEND_TIMEOUT_S = 10.0  # a decode process that takes no slot numbers for this long is hung: it is killed


class FramePool:
    """Decoded frames, one row per ring slot of every front end, `entry_bytes` each (the largest frame it takes, as
    H x W x 3 uint8): on a GPU one CUDA tensor of the engine's, which the decode processes open by CUDA IPC; on the
    CPU a shared-memory block. `frame(row, h, w)` views a row as an (h, w, 3) frame; `put(row, frame)` writes one."""

    def __init__(self, rows: int, entry_bytes: int, device: str = "cpu", *, _tensor=None, _block=None) -> None:
        self.rows, self.entry_bytes, self.device = rows, entry_bytes, str(device)
        self._block = _block
        self._owner = _tensor is None and _block is None
        self._views: dict[tuple[int, int], tuple] = {}  # (h, w) -> every row viewed as an (h, w, 3) frame
        if self.device.startswith("cuda"):
            import torch

            self.tensor = _tensor if _tensor is not None else torch.empty((rows, entry_bytes), dtype=torch.uint8,
                                                                          device=self.device)
            self.array = None
        else:
            if self._block is None:
                self._block = shared_memory.SharedMemory(create=True, size=max(1, rows * entry_bytes))
            self.tensor = None
            self.array = np.ndarray((rows, entry_bytes), np.uint8, buffer=self._block.buf)

    @property
    def nbytes(self) -> int:
        return self.rows * self.entry_bytes

    def spec(self) -> dict:
        """What a decode process opens the pool from (pickled with multiprocessing's ForkingPickler: a CUDA tensor
        goes as its IPC handle once torch.multiprocessing is imported)."""
        if self.tensor is not None:
            import torch.multiprocessing  # noqa: F401 - registers the CUDA IPC reductions

            return {"rows": self.rows, "entry_bytes": self.entry_bytes, "device": self.device, "tensor": self.tensor}
        return {"rows": self.rows, "entry_bytes": self.entry_bytes, "device": self.device, "name": self._block.name}

    @classmethod
    def open(cls, spec: dict) -> FramePool:
        if "tensor" in spec:
            return cls(spec["rows"], spec["entry_bytes"], spec["device"], _tensor=spec["tensor"])
        block = shared_memory.SharedMemory(name=spec["name"])
        untrack(block)  # the engine owns it
        return cls(spec["rows"], spec["entry_bytes"], spec["device"], _block=block)

    def takes(self, height: int, width: int) -> bool:
        return height * width * 3 <= self.entry_bytes

    def frame(self, row: int, height: int, width: int):
        n = height * width * 3
        if self.tensor is not None:
            return self.tensor[row, :n].view(height, width, 3)
        return self.array[row, :n].reshape(height, width, 3)

    def frames(self, height: int, width: int) -> tuple:
        """Every row viewed as an (h, w, 3) frame, made once a size: the engine takes a frame by indexing, no
        tensor operation (and no wait for the interpreter lock after one) a frame."""
        views = self._views.get((height, width))
        if views is None:
            n = height * width * 3
            if self.tensor is not None:
                views = self.tensor[:, :n].view(self.rows, height, width, 3).unbind(0)
            else:
                views = tuple(np.ndarray((self.rows, height, width, 3), np.uint8, self.array,
                                         strides=(self.entry_bytes, width * 3, 3, 1)))
            self._views[(height, width)] = views
        return views

    def put(self, row: int, frame) -> None:
        height, width = frame.shape[:2]
        target = self.frame(row, height, width)
        if self.tensor is not None:
            if isinstance(frame, np.ndarray):  # decoded on the CPU (no nvJPEG here): copied up
                import torch

                frame = torch.from_numpy(frame)
            target.copy_(frame, non_blocking=True)
        else:
            target[...] = frame

    def close(self) -> None:
        self.tensor = self.array = None
        self._views.clear()
        if self._block is not None:
            try:
                self._block.close()
            except BufferError:  # a frame view still alive somewhere: the process ends soon
                pass
            if self._owner:
                try:
                    self._block.unlink()
                except FileNotFoundError:
                    pass


# ---- the decode process ------------------------------------------------------------------------------------------
def _serve(sock: socket.socket, spec: dict) -> None:
    """The decode process's one thread: take every slot named while busy, decode them in one call, write the rows,
    name them back; until the engine's socket closes."""
    rings = [SlotRing.attach(name, spec["slots_each"], spec["slot_bytes"]) for name in spec["rings"]]
    pool = FramePool.open(spec["pool"])
    decoder = ImageDecoder(pool.device, allow_raw=False, library=spec["library"])
    each, max_batch = spec["slots_each"], spec["max_batch"]
    copies = None
    if pool.tensor is not None:
        import torch

        copies = torch.cuda.Stream(pool.device)
    sock.send(READY + json.dumps({"pid": os.getpid(), "decoder": decoder.name}).encode())
    waiting: list[np.ndarray] = []
    while True:
        if not waiting:
            sock.setblocking(True)
            message = sock.recv(MAX_MESSAGE)
            if not message:
                return
            waiting.append(_items(message))
        sock.setblocking(False)
        while sum(len(w) for w in waiting) < max_batch:  # everything named meanwhile goes in this call
            try:
                message = sock.recv(MAX_MESSAGE)
            except BlockingIOError:
                break
            if not message:
                return
            waiting.append(_items(message))
        items = np.concatenate(waiting)
        batch, rest = items[:max_batch], items[max_batch:]
        waiting = [rest] if len(rest) else []
        sock.setblocking(True)
        sock.send(DECODED + _decode_batch(batch, rings, each, pool, decoder, copies).tobytes())


def _items(message: bytes) -> np.ndarray:
    """A DECODE message's items, (n, ITEM) int64: row, nbytes, height, width."""
    return np.frombuffer(message, np.int64, offset=4).reshape(-1, ITEM)


def _decode_batch(items: np.ndarray, rings: list[SlotRing], each: int, pool: FramePool, decoder, copies
                  ) -> np.ndarray:
    """One call's images decoded into their rows: the reply, float64 [started, ended, cpu ms, then row and status
    of each image]."""
    t0, cpu0 = time.perf_counter(), time.thread_time()
    rows = items[:, 0]
    datas = [decoder.encoded(rings[row // each].images[row % each, :n]) for row, n in items[:, :2].tolist()]
    sizes = [tuple(hw) for hw in items[:, 2:4].tolist()]
    try:
        decoded = decoder.start_jpegs(datas, sizes)()
    except Exception as e:  # noqa: BLE001 - every image is still answered (refused), never left waiting
        log.warning("a batch of %d JPEGs could not be decoded: %s", len(datas), e)
        decoded = [BadImage(str(e))] * len(datas)
    status = np.zeros(len(items), np.float64)
    if copies is not None:
        import torch

        copies.wait_stream(torch.cuda.current_stream(pool.device))
        with torch.cuda.stream(copies):
            _put_all(pool, rows, decoded, status)
        copies.synchronize()  # the rows are written before the engine hears of them
    else:
        _put_all(pool, rows, decoded, status)
    t1 = time.perf_counter()
    return np.concatenate([[t0, t1, (time.thread_time() - cpu0) * 1000.0], rows.astype(np.float64), status])


def _put_all(pool: FramePool, rows: np.ndarray, decoded: list, status: np.ndarray) -> None:
    for i, (row, result) in enumerate(zip(rows.tolist(), decoded)):
        if isinstance(result, BadImage):
            status[i] = WRONG_SIZE if isinstance(result, WrongSize) else NOT_DECODED
        else:
            pool.put(row, result[0])


def main(argv: list[str] | None = None) -> int:
    """`python -m bridge.multistream.decode_process FD`: FD is its end of the control socket, whose first message is
    what to open (pickled: the rings' names and the pool, a CUDA tensor by its IPC handle)."""
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="decode process: %(message)s")
    # the engine stops it (its socket closes): Ctrl-C in a terminal, or `timeout` and service managers signalling
    # the whole process group, reach the engine, which stops it after the front ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    try:
        spec = pickle.loads(sock.recv(MAX_MESSAGE))  # our own engine's, over a socket pair only it holds
        if spec.get("cpu_threads"):
            import cv2

            cv2.setNumThreads(spec["cpu_threads"])
        _serve(sock, spec)
    except (ConnectionError, OSError):  # the engine went away: nothing is left to answer
        return 0
    return 0


# ---- the engine's side -------------------------------------------------------------------------------------------
class DecodeProcesses:
    """The engine's decode processes: started, fed, restarted when one dies. decoded(decoded, ms, tags, calls) gets
    each reply on the process's reader thread (as Engine._decoded takes them); failed(tags, reason) the frames of a
    process that died."""

    def __init__(self, count: int, rings: list[SlotRing], slots_each: int, pool: FramePool, library: str,
                 max_batch: int, decoded, failed) -> None:
        self.count, self.pool, self.slots_each = count, pool, slots_each
        self._decoded, self._failed = decoded, failed
        self._spec = {"rings": [r.name for r in rings], "slots_each": slots_each, "slot_bytes": rings[0].slot_bytes,
                      "pool": pool.spec(), "library": library, "max_batch": max(1, max_batch), "cpu_threads": 1}
        self._lock = threading.Lock()
        self._socks: list[socket.socket | None] = [None] * count
        self._procs: list[subprocess.Popen | None] = [None] * count
        self._held: list[dict] = [{} for _ in range(count)]  # row -> (tag, (height, width)), sent and not back
        self._quick_ends = [0] * count
        self._started = [0.0] * count
        self.restarts = 0
        self.names = [""] * count
        self.stopping = False
        for k in range(count):
            self._start(k)

    def _start(self, k: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.settimeout(SEND_TIMEOUT_S)
        ours.send(bytes(ForkingPickler.dumps(self._spec)))  # before anything else: what to open
        self._procs[k] = subprocess.Popen([sys.executable, "-m", "bridge.multistream.decode_process",
                                           str(theirs.fileno())], pass_fds=[theirs.fileno()])
        theirs.close()
        self._started[k] = time.monotonic()
        with self._lock:
            self._socks[k] = ours
        threading.Thread(target=self._read, args=(k, ours), name=f"engine-decoded-{k}", daemon=True).start()

    def wait_ready(self) -> None:
        """Until every decode process is ready (they start beside the engine's own start-up: torch and a CUDA
        context each); FaceBridgeError, every one stopped, when one ended first or they take too long."""
        end = time.monotonic() + START_TIMEOUT_S
        while not all(self.names) and time.monotonic() < end:
            if any(p is not None and p.poll() is not None for p in self._procs):
                break
            time.sleep(0.05)
        if not all(self.names):
            self.close()
            raise FaceBridgeError("a decode process did not start (its line above says why)",
                                  "serve without --decode-processes, or check the GPU with `facebridge doctor`")

    def alive(self, k: int) -> bool:
        """Whether decode process k takes frames: started and ready (while another starts in the place of one that
        died, the engine decodes its front ends' frames itself)."""
        return self._socks[k] is not None and bool(self.names[k])

    def submit(self, k: int, tags: list, rows: list[int], nbytes: list[int], hws: list[tuple[int, int]]) -> bool:
        """Send images to decode process k (rows of the pool: their slots); False when it is down for good (the
        caller decodes them itself)."""
        with self._lock:
            sock = self._socks[k]
            if sock is None or not self.names[k]:
                return False
            self._held[k].update(zip(rows, zip(tags, hws)))
        items = np.empty((len(rows), 4), np.int64)
        items[:, 0], items[:, 1], items[:, 2:] = rows, nbytes, hws
        try:
            sock.send(DECODE + items.tobytes())
        except TimeoutError:
            log.warning("decode process %d took no frame for %.0f s: it is hung; killing it", k, SEND_TIMEOUT_S)
            self._procs[k].kill()  # its reader sees the socket close, fails what it held and starts another
        except OSError:
            pass  # it died: its reader fails what it held (these too) and starts another
        return True

    def _read(self, k: int, sock: socket.socket) -> None:
        while True:
            try:
                message = sock.recv(MAX_MESSAGE)
            except TimeoutError:  # idle: the timeout is for sending
                continue
            except OSError:
                message = b""
            if not message:
                break
            kind = message[:4]
            if kind == READY:
                self.names[k] = json.loads(message[4:])["decoder"]
            elif kind == DECODED:
                self._take(k, np.frombuffer(message, np.float64, offset=4))
        self._lost(k, sock)

    def _take(self, k: int, reply: np.ndarray) -> None:
        t0, t1, _cpu_ms = reply[:3]
        n = (len(reply) - 3) // 2
        rows, status = reply[3:3 + n].astype(np.int64).tolist(), reply[3 + n:].astype(np.int64).tolist()
        with self._lock:
            pop = self._held[k].pop
            got = [(row, s, pop(row, None)) for row, s in zip(rows, status)]
        decoded, tags = [], []
        for row, s, what in got:
            if what is None:  # not this process's (cannot happen: one row, one process)
                continue
            tag, hw = what
            tags.append(tag)
            decoded.append((self.pool.frames(*hw)[row], hw) if s == OK else BadImage(REASONS[s]))
        if tags:
            ms = (t1 - t0) * 1000.0 / len(tags)
            self._decoded(decoded, [ms] * len(tags), tags, [(t0, t1)] * len(tags))

    def _lost(self, k: int, sock: socket.socket) -> None:
        with self._lock:
            if self._socks[k] is sock:
                self._socks[k] = None
            held, self._held[k] = self._held[k], {}
            self.names[k] = ""
        sock.close()
        proc = self._procs[k]
        rc = None
        if proc is not None:
            try:
                rc = proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait(10)
        if held:
            self._failed([tag for tag, _hw in held.values()],
                         "the server's decode process ended while it held this frame; send the next one")
        if self.stopping:
            return
        quick = time.monotonic() - self._started[k] < QUICK_END_S
        self._quick_ends[k] = self._quick_ends[k] + 1 if quick else 0
        if self._quick_ends[k] >= MAX_QUICK_ENDS:
            log.warning("decode process %d ended (exit %s) within %.0f s of its start %d times in a row: not starting "
                        "it again; its front ends' frames are decoded in the engine process", k, rc, QUICK_END_S,
                        MAX_QUICK_ENDS)
            return
        log.warning("decode process %d (pid %s) ended (exit %s) and %d frames with it (each answered as failed); "
                    "starting another", k, proc.pid if proc else "?", rc, len(held))
        self.restarts += 1
        threading.Timer(5.0 if quick else 0.5, self._restart, args=(k,)).start()

    def _restart(self, k: int) -> None:
        if self.stopping:
            return
        try:
            self._start(k)
        except OSError as e:
            log.warning("decode process %d could not be started again (%s); the engine decodes its frames", k, e)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None and p.poll() is None]

    def cpu_seconds(self) -> float:
        """The running decode processes' CPU seconds (user + system), for the engine's CPU by thread group."""
        total = 0.0
        for pid in self.pids():
            try:
                total += stat_cpu_seconds(f"/proc/{pid}/stat")
            except (OSError, IndexError, ValueError):  # it ended meanwhile
                pass
        return total

    def close(self) -> None:
        self.stopping = True
        with self._lock:
            socks, self._socks = self._socks, [None] * self.count
        for sock in socks:
            if sock is not None:
                shut_down(sock)
        end = time.monotonic() + STOP_WAIT_S
        for proc in self._procs:
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
