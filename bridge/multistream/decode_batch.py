"""JpegBatches: the JPEG images waiting to be decoded taken together and decoded in one call
(ImageDecoder.start_jpegs: one batched nvJPEG decode on the GPU), each then made and handed on by a second thread.

With GPU runners each image's decode is mostly the Python side of torchvision's decode_jpeg (the GPU work is short),
and one call a frame on a pool of workers held the interpreter lock for 17% of a serve process's frames (H200, fifth
measurement). Here a DeadlineBatcher takes every image waiting whenever its thread is free (a lone image never waits
for company), so the calls a second fall with the load instead of rising with it; an image the batch refuses is
decoded alone, so a bad image costs only itself. Its thread only decodes: each decoded batch is handed on by the
batcher's finishing thread while the next one decodes (one thread doing both capped the engine process at about
10,000 frames a second on an H100, where torchvision alone decodes 35,000 of these images a second). On the CPU,
`facebridge serve` keeps its pool of OpenCV workers (they decode in parallel, without the lock); this path serves a
decoder that decodes on the GPU.
"""
from __future__ import annotations

import logging
import time
from typing import NamedTuple

from bridge.multistream.batcher import DeadlineBatcher
from bridge.multistream.decode import BadImage

log = logging.getLogger(__name__)


class DecodeTimes(NamedTuple):
    """When an image was posted, its batch's decode began and ended (time.perf_counter() s), the batch's decode
    time per image (ms), and the decoding thread's own CPU time over the whole batch (ms: against the batch's wall
    time it tells CPU work from waiting on the GPU)."""
    posted: float
    started: float
    ended: float
    ms: float
    cpu_ms: float


class JpegBatches:
    def __init__(self, decoder, max_batch: int = 256, name: str = "serve-jpeg") -> None:
        self._decoder = decoder
        self._batcher = DeadlineBatcher(self._decode_batch, max_batch=max_batch, name=name, finish=self._hand_on)
        self.batch_sizes = self._batcher.batch_sizes  # images per decode call (for benchmarks)

    def submit(self, data: bytes, hw: tuple[int, int], then, *args) -> None:
        """Decode `data` (a JPEG measured as (height, width) hw) with the others waiting, then call
        `then(decoded, times, *args)` on this batcher's thread: decoded is (frame, hw) or the BadImage it is;
        times its DecodeTimes (the wait for the thread, the batch's decode)."""
        self._batcher.post(None, (data, hw, then, args, time.perf_counter()))

    def submit_many(self, datas: list, hws: list, then_many, tags: list) -> None:
        """submit of many images at once, handed on together: `then_many(decoded, times, tags)` is called once for
        those of them decoded in the same batch (lists in their order; DecodeTimes the same for all), so the
        caller's work a frame is one list entry, not one call (the engine process: every image of a front end's
        message)."""
        posted = time.perf_counter()
        self._batcher.post_many([None] * len(datas), [(data, hw, then_many, (tag,), posted, True)
                                                      for data, hw, tag in zip(datas, hws, tags)])

    def _decode_batch(self, _streams, items: list) -> tuple:
        """The batcher's thread: the batch decoded, and when (handed on by `_hand_on`, on the finishing thread)."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            finish = self._decoder.start_jpegs([data for data, *_ in items], [hw for _, hw, *_ in items])
        except Exception as e:  # noqa: BLE001 - every image is still answered (refused), never left waiting
            finish = _refused(len(items), e)
        return finish, t0, time.perf_counter(), (time.thread_time() - cpu0) * 1000.0

    def _hand_on(self, _streams, items: list, batch: tuple) -> list:
        """The finishing thread: the batch's frames made (ImageDecoder.start_jpegs) and each handed on to whoever
        submitted it."""
        finish, t0, t1, cpu = batch
        try:
            decoded = finish()
        except Exception as e:  # noqa: BLE001 - as in _decode_batch
            decoded = _refused(len(items), e)()
        ms = (t1 - t0) * 1000.0 / len(items)
        together: dict = {}  # then_many -> (decoded, times, tags) of the images submitted with submit_many
        for (_, _, then, args, posted, *many), result in zip(items, decoded):
            times = DecodeTimes(posted, t0, t1, ms, cpu)
            if many:
                got = together.setdefault(then, ([], [], []))
                got[0].append(result)
                got[1].append(times)
                got[2].append(args[0])
                continue
            try:
                then(result, times, *args)
            except Exception as e:  # noqa: BLE001 - one image's hand-over never costs the others theirs
                log.warning("a decoded image could not be handed on: %s", e)
        for then_many, (results, times, tags) in together.items():
            try:
                then_many(results, times, tags)
            except Exception as e:  # noqa: BLE001 - never the decoding thread
                log.warning("%d decoded images could not be handed on: %s", len(results), e)
        return [None] * len(items)

    def close(self) -> None:
        self._batcher.close()


def _refused(count: int, error: Exception):
    log.warning("a batch of %d JPEGs could not be decoded: %s", count, error)
    refused = BadImage(f"the JPEG could not be decoded ({str(error).splitlines()[0][:120]})")
    return lambda: [refused] * count
