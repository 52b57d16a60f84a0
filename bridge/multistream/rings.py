"""SlotRing: what one front-end process and the engine process exchange per frame, in shared memory: fixed-size
slots of encoded images in, each slot's pass results out. No frame is pickled and none is copied beyond one: the
front end writes an image's bytes into its stream's slot (the one copy), the engine decodes straight from that
slot (OpenCV, or nvJPEG reading host memory), and the pass's result rows are written into the same slot's result
row, which the front end reads when the engine names the slot on the control channel (a socket pair: only slot
numbers travel there, `engine.py`).

A ring belongs to one front end and has one slot per stream that front end may hold (`slots`): a stream has at most
one image in the engine at a time (latest wins keeps the next one in the front end), so a slot is never reused
before its result came back. Arrays, all views of one `multiprocessing.shared_memory` block:

- `images` (slots, slot_bytes) uint8: the image as it came (JPEG, or raw RGB/BGR from a loopback client);
- `requests` (slots, REQUEST_WIDTH) int64: nbytes, height, width, encoding, generation (bumped by the front end
  when the slot passes to a new stream: the engine then resets that slot's tracking state first);
- `results` (slots, RESULT_WIDTH) float32: the batched tracker's packed row (tracker.RESULT_FIELDS);
- `info` (slots, INFO_WIDTH) float64: status, the engine's decode time (ms), the pass's start and end
  (time.perf_counter(), CLOCK_MONOTONIC: the same clock in every process of the machine), its GPU time (ms), when
  the engine read the slot's number and when the decoded image joined its service's queue, and when its JPEG batch's
  decode call began and ended (perf_counter too; NaN for an image its decode workers took);
- `errors` (slots, ERROR_BYTES) uint8: for a refused image or a failed pass, one line naming it (UTF-8).

The engine creates (and at its exit unlinks) every ring; a front end attaches by name. A front end that dies
leaves its ring to the engine, which hands it to the front end started in its place.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from bridge.multistream.tracker import RESULT_WIDTH

REQUEST_WIDTH = 5  # nbytes, height, width, encoding, generation
NBYTES, HEIGHT, WIDTH, ENCODING, GENERATION = range(REQUEST_WIDTH)
INFO_WIDTH = 9  # status, decode_ms, pass start, pass end, gpu_ms, engine read, queued for its pass, decode call
STATUS, DECODE_MS, PASS_START, PASS_END, GPU_MS, READ, QUEUED, DECODE_START, DECODE_END = range(INFO_WIDTH)
OK, REFUSED, FAILED = 0, 1, 2  # status: results in `results`; the image refused (BadImage); its pass failed
ERROR_BYTES = 240
DEFAULT_SLOT_KIB = 512  # a 1280x720 JPEG at q80 is about 100 kB, a 1920x1080 one 200-300 kB
ALIGN = 64


@dataclass(frozen=True)
class RingShape:
    slots: int
    slot_bytes: int

    def parts(self) -> list[tuple[str, tuple, np.dtype]]:
        return [("images", (self.slots, self.slot_bytes), np.dtype(np.uint8)),
                ("requests", (self.slots, REQUEST_WIDTH), np.dtype(np.int64)),
                ("results", (self.slots, RESULT_WIDTH), np.dtype(np.float32)),
                ("info", (self.slots, INFO_WIDTH), np.dtype(np.float64)),
                ("errors", (self.slots, ERROR_BYTES), np.dtype(np.uint8))]

    @property
    def nbytes(self) -> int:
        return sum(_aligned(math.prod(shape) * dtype.itemsize) for _, shape, dtype in self.parts())


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class SlotRing:
    """One front end's slots (see the module docstring). `create` in the engine, `attach` in the front end."""

    def __init__(self, block: shared_memory.SharedMemory, shape: RingShape, owner: bool) -> None:
        self.block, self.shape, self.owner = block, shape, owner
        self.slots, self.slot_bytes = shape.slots, shape.slot_bytes
        offset = 0
        for name, dims, dtype in shape.parts():
            setattr(self, name, np.ndarray(dims, dtype, buffer=block.buf, offset=offset))
            offset += _aligned(math.prod(dims) * dtype.itemsize)

    @classmethod
    def create(cls, slots: int, slot_bytes: int) -> SlotRing:
        shape = RingShape(slots, slot_bytes)
        block = shared_memory.SharedMemory(create=True, size=shape.nbytes)
        ring = cls(block, shape, owner=True)
        ring.requests[:] = 0
        ring.info[:] = 0
        return ring

    @classmethod
    def attach(cls, name: str, slots: int, slot_bytes: int) -> SlotRing:
        block = shared_memory.SharedMemory(name=name)
        untrack(block)
        return cls(block, RingShape(slots, slot_bytes), owner=False)

    @property
    def name(self) -> str:
        return self.block.name

    def error(self, slot: int) -> str:
        raw = bytes(self.errors[slot])
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def set_error(self, slot: int, status: int, text: str) -> None:
        raw = text.encode("utf-8", "replace")[:ERROR_BYTES - 1]
        self.errors[slot, :len(raw)] = np.frombuffer(raw, np.uint8)
        self.errors[slot, len(raw)] = 0
        self.info[slot, STATUS] = status

    def close(self) -> None:
        """Let go of the block (the views first); the owner also removes it."""
        for name, _, _ in self.shape.parts():
            setattr(self, name, None)
        try:
            self.block.close()
        except BufferError:  # a view still alive somewhere (a frame being decoded): the process ends soon
            pass
        if self.owner:
            try:
                self.block.unlink()
            except FileNotFoundError:
                pass


def untrack(block: shared_memory.SharedMemory) -> None:
    """Python before 3.13 registers an attached block with this process's resource tracker, which would remove it
    when this process ends (the engine's ring, under the front end started after it): only the engine owns it."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister(getattr(block, "_name", "/" + block.name), "shared_memory")
    except Exception:  # noqa: BLE001 - 3.13+ or no tracker: nothing registered
        pass


def shm_room(nbytes: int) -> str | None:
    """Why `nbytes` of shared memory may not fit this machine's /dev/shm (None when they fit): a tmpfs that fills
    up kills the writer with SIGBUS instead of failing an allocation, so it is checked before anything is made."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if nbytes > free:
        return f"the rings need {nbytes / 2**20:.0f} MiB of shared memory and /dev/shm has {free / 2**20:.0f} MiB free"
    return None
