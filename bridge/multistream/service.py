"""Many face streams, one device, as a service: `submit(stream, frame)` returns a future of that frame's face.

The `DeadlineBatcher` gathers whatever frames have arrived from all streams whenever the device is free (a lone
stream never waits for company), and the `BatchedFaceTracker` runs them as one pass. A pass holds at most one frame
per stream (tracking state is per stream), so a stream that queued two frames gets the second in a following pass:
results always come back per stream in submission order. Frames may be uint8 HxWx3 RGB numpy arrays (decoded on
the host) or torch uint8 tensors already on the device (decoded by NVDEC: no host copy at all).

Host frames start their upload in `submit`, in the caller's thread, on an upload stream: the worker would
otherwise copy every frame of a pass one after another (at 1,000 streams, 30,000 copies a second in one thread),
and the uploads now overlap the pass that is running. A pass then gathers its frames with one device-side stack.

With `finish_pass`, the futures give what it makes of a whole pass at once instead (`facebridge serve`: the pass
described and its replies built, on the batcher's second thread while the next pass runs): it gets the streams,
the tags submitted with the frames and the pass's `StreamFaces` (every result as one array per field). Passes that
queued while it was busy come to it as one (DeadlineBatcher's merge), so a describing thread that falls behind
describes the passes waiting together and pays its fixed cost per call once.
"""
from __future__ import annotations

import logging
import math
import time
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from bridge.multistream.batcher import DeadlineBatcher
from bridge.multistream.tracker import RESULT_FIELDS, RESULT_WIDTH, BatchedFaceTracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamFace:
    """One frame's result for one stream, in the single-face pipeline's conventions (frame pixels, ARKit's eye
    order). Without a face (`tracked` False) the arrays hold the last face seen."""
    stream: int
    tracked: bool
    presence: float  # the landmark model's face-presence probability for this frame's crop
    landmarks: np.ndarray  # (468, 3): frame pixels x, y and relative depth; lids refined by the iris model
    irises: np.ndarray  # (2, 5, 3): frame pixels, [subject's left eye, right eye], centre first
    emotion: np.ndarray  # (7,) probabilities, bridge.frame.EMOTION_NAMES order
    blendshapes: np.ndarray  # (52,) ARKit weights, bridge.frame.ARKIT_NAMES order (zeros without the regressor)
    expression_head: np.ndarray  # (3,) the expression model's head rotation (yaw, pitch, roll deg), if it has one


def _field_columns() -> tuple:
    """Each result field's (name, shape, first column, end column) in a packed row (worked out once, not a pass)."""
    columns, start = [], 0
    for name, shape in RESULT_FIELDS:
        end = start + math.prod(shape)
        columns.append((name, shape, start, end))
        start = end
    return tuple(columns)


_FIELD_COLUMNS = _field_columns()


@dataclass(frozen=True)
class StreamFaces:
    """The results of n frames of one batch (StreamFace's fields, one row per frame), views of one array."""
    streams: np.ndarray  # (n,)
    tracked: np.ndarray  # (n,) bool
    presence: np.ndarray  # (n,)
    landmarks: np.ndarray  # (n, 468, 3)
    irises: np.ndarray  # (n, 2, 5, 3)
    emotion: np.ndarray  # (n, 7)
    blendshapes: np.ndarray  # (n, 52)
    expression_head: np.ndarray  # (n, 3)
    # (n, 3) for each frame its pass's start and end (time.perf_counter() s, on the batcher's thread: from the
    # batch taken to its results on the host) and the pass's GPU time (ms between CUDA events on its stream: with
    # other processes' work under MPS, the time the GPU took for it; NaN without a GPU); None when not measured
    timing: np.ndarray | None = None
    rows: np.ndarray | None = None  # (n, RESULT_WIDTH): the packed rows these fields view (what the engine ships)
    finite: np.ndarray | None = None  # (n,) bool: the row holds no NaN or infinity (the service's one check a pass)

    @classmethod
    def of(cls, streams, rows: np.ndarray, timing: np.ndarray | None = None,
           finite: np.ndarray | None = None) -> StreamFaces:
        n = len(rows)
        values = {name: rows[:, start:end].reshape(n, *shape) for name, shape, start, end in _FIELD_COLUMNS}
        values["tracked"] = values["tracked"] > 0.5
        return cls(streams=np.asarray(streams), timing=timing, rows=rows, finite=finite, **values)


class MultiStreamFaceService:
    def __init__(self, num_streams: int, frame_hw: tuple[int, int], runners: dict, device: str = "cuda",
                 max_batch: int | None = None, graph_buckets: list[int] | None = None, max_wait_s: float = 0.0,
                 pass_lock=None, finish_pass=None):
        """runners: `face_runners.make_runners(...)`. graph_buckets: capture the pass as CUDA graphs for these
        batch sizes (torch-cuda runners only). pass_lock: shared by services that share runners (one per frame
        size in `facebridge serve`), so their passes never overlap on the same models. finish_pass(streams, tags,
        faces: StreamFaces) -> one result per frame: what the futures give (see the module's docstring)."""
        # optional extra: torch (gpu), about 1.5 s to import
        import torch

        if int(num_streams) < 1:
            raise ValueError(f"a face service needs at least one stream (got num_streams={num_streams})")
        if len(frame_hw) != 2 or min(frame_hw) < 32:
            raise ValueError(f"frame_hw must be the streams' (height, width), at least 32x32 pixels to hold a face "
                             f"(got {tuple(frame_hw)})")
        if max_batch is not None and int(max_batch) < 1:
            raise ValueError(f"max_batch must be at least 1 frame per pass, or None for num_streams (got {max_batch})")

        self._torch = torch
        self.num_streams = num_streams
        self.frame_hw = tuple(frame_hw)
        self.device = device
        self.tracker = BatchedFaceTracker(num_streams, frame_hw, runners, device=device)
        self.graphs = False
        if graph_buckets:
            try:
                self.tracker.capture_cuda_graphs(graph_buckets)
                self.graphs = True
            except (RuntimeError, ValueError) as e:  # a service that runs slower beats one that does not start
                self.tracker.release_cuda_graphs()
                log.warning("CUDA-graph capture failed (%s); serving with eager passes (same results, more host "
                            "work per pass). Use the torch-cuda runners on an NVIDIA GPU to capture.",
                            str(e).splitlines()[0][:200])
        on_gpu = torch.device(device).type == "cuda"
        self._device = torch.device(device)
        if on_gpu and self._device.index is None:  # "cuda" means the current GPU; tensors there say "cuda:N"
            self._device = torch.device("cuda", torch.cuda.current_device())
        self._upload_stream = torch.cuda.Stream(device) if on_gpu else None
        self._compute_stream = torch.cuda.default_stream(device) if on_gpu else None  # the worker's passes
        self._max_batch = min(max_batch or num_streams, num_streams)
        self._staging = torch.empty((self._max_batch, *self.frame_hw, 3), dtype=torch.uint8, device=device)
        self._results_host = torch.empty((self._max_batch, RESULT_WIDTH), dtype=torch.float32)
        # a pass's stream indices go up from pinned memory without a sync: torch.tensor(list, device=...) copies
        # from pageable memory and waits for it, and a thread that waits gives up the interpreter lock, which
        # the describing thread may then hold for up to Python's switch interval while the GPU idles
        self._index_host = torch.empty(self._max_batch, dtype=torch.long)
        self._index = None  # on a GPU, where the indices go up to
        if device != "cpu":
            self._results_host = self._results_host.pin_memory()
            self._index_host = self._index_host.pin_memory()
            self._index = torch.empty(self._max_batch, dtype=torch.long, device=device)
        self.passes = 0
        self.frames = 0  # frames served, over all passes
        self.non_finite = 0  # frames whose results held NaN or infinity
        self._pass_lock = pass_lock
        self._finish_pass = finish_pass
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if on_gpu \
            else None  # the pass's GPU time (the worker's passes never overlap: one pair serves them all)
        self._batcher = DeadlineBatcher(self._run, max_batch=self._max_batch, max_wait_s=max_wait_s,
                                        name="face-service", finish=self._finish if finish_pass else None,
                                        merge=_merge_runs if finish_pass else None, on_fail=self._failed)

    # --- the caller's side ----------------------------------------------------------------------------------
    def submit(self, stream: int, frame, tag=None) -> Future:
        """Queue one frame of `stream`; the future gives its `StreamFace` (or, with finish_pass, what that made of
        it; `tag` goes with the frame to finish_pass). Bad input raises here, at once."""
        self._check(stream, frame)
        return self._batcher.submit(int(stream), (self._to_device(frame), tag, None))

    def post_many(self, streams: list[int], frames: list, tags: list, failed, kept: bool = False) -> None:
        """Queue frames of many streams at once (one lock, one wake: they go to the same pass), for a caller that
        takes each pass's results from finish_pass itself (no future a frame). If their pass fails,
        `failed(tags, error)` is called with those of these frames' tags that were in it (on a service thread).
        Bad input raises here, at once, before any is queued. kept: the frames are views of memory on this
        service's device that the caller leaves unchanged until their pass has read them (the engine's frame
        pool): queued as they are, checked as one, with no `to` or record_stream a frame (the engine's decode-reply
        threads spent 40% of their py-spy samples in those two at 1,000 streams, H100)."""
        if kept:
            self._check_kept(streams, frames)
            self._batcher.post_many(streams, [(frame, tag, failed) for frame, tag in zip(frames, tags)])
            return
        for stream, frame in zip(streams, frames):
            self._check(stream, frame)
        self._batcher.post_many([int(s) for s in streams],
                                [(self._to_device(frame), tag, failed) for frame, tag in zip(frames, tags)])

    def _check_kept(self, streams: list[int], frames: list) -> None:
        """post_many's kept frames: the streams in range, and every frame a view of one shape on this device."""
        if not streams:
            return
        if min(streams) < 0 or max(streams) >= self.num_streams:
            bad = next(s for s in streams if not 0 <= s < self.num_streams)
            raise ValueError(f"stream {bad} is out of range: this service has streams 0..{self.num_streams - 1}")
        first = frames[0]
        self._check(streams[0], first)
        if getattr(first, "device", None) != self._device:  # a numpy frame (host memory) has no device
            raise ValueError(f"kept frames must be tensors on {self._device} already; post them without kept")
        if any(frame.shape != first.shape for frame in frames):  # views of one pool's rows of this size
            raise ValueError(f"kept frames must all be {tuple(first.shape)}")

    def _check(self, stream: int, frame) -> None:
        if not 0 <= int(stream) < self.num_streams:
            raise ValueError(f"stream {stream} is out of range: this service has streams 0..{self.num_streams - 1}")
        shape, dtype = tuple(frame.shape), str(frame.dtype).replace("torch.", "")
        if shape != (*self.frame_hw, 3) or dtype != "uint8":
            raise ValueError(f"stream {stream}: a frame must be uint8 RGB of shape {(*self.frame_hw, 3)} (got "
                             f"{dtype} {shape}); resize or convert it before submitting")

    def _to_device(self, frame):
        """The frame as a tensor on the service's device; from host memory through pinned memory, asynchronously
        on the upload stream (torch keeps the pinned block until its copy is done)."""
        torch = self._torch
        if isinstance(frame, np.ndarray):
            frame = torch.from_numpy(np.ascontiguousarray(frame))
        if frame.device == self._device:  # no `to` (it gives up the interpreter lock: a wait for it again)
            if frame.is_cuda:  # made on another stream (nvJPEG's): its memory is not handed to the next decode
                frame.record_stream(self._compute_stream)  # before this service's pass has read it
            return frame
        if self._upload_stream is None:
            return frame.to(self._device)
        with torch.cuda.stream(self._upload_stream):
            on_device = frame.pin_memory().to(self._device, non_blocking=True) if frame.device.type == "cpu" \
                else frame.to(self._device, non_blocking=True)
        on_device.record_stream(self._compute_stream)  # its memory is not reused before the pass has read it
        return on_device

    def idle(self) -> None:
        """No stream of this size is left (the stream table says so): nothing to do here, the table that holds this
        service releases it itself (a front end's remote service tells its engine instead)."""

    def reset_stream(self, stream: int) -> None:
        """Forget a stream's face (its next frame starts with detection). Call only while the stream has no frame
        queued: the slot is being handed to a new stream."""
        self.tracker.tracked[int(stream)] = False

    def close(self) -> None:
        self._batcher.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the worker's side -----------------------------------------------------------------------------------
    def _run(self, streams: list[int], items: list):
        frames = [item[0] for item in items]
        timing = np.empty((len(frames), 3))
        timing[:, 0] = time.perf_counter()
        if self._pass_lock is None:
            rows = self._run_passes(streams, frames, timing[:, 2])
        else:
            with self._pass_lock:
                rows = self._run_passes(streams, frames, timing[:, 2])
        timing[:, 1] = time.perf_counter()
        finite = self._count_non_finite(streams, rows)
        if self._finish_pass is not None:
            return rows, timing, finite
        return [_unpack(stream, row) for stream, row in zip(streams, rows)]

    def _finish(self, streams: list[int], items: list, run: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list:
        rows, timing, finite = run
        return self._finish_pass(streams, [item[1] for item in items], StreamFaces.of(streams, rows, timing, finite))

    def _count_non_finite(self, streams: list[int], rows: np.ndarray) -> np.ndarray:
        """Each row's results finite or not (the releases' fallback reads this, StreamFaces.finite); counts the
        frames whose results hold NaN or infinity (a model's fault) and says which fields, at the first and every
        100th."""
        finite = np.isfinite(rows).all(axis=1)
        if finite.all():
            return finite
        bad = np.flatnonzero(~finite)
        before, self.non_finite = self.non_finite, self.non_finite + len(bad)
        if before == 0 or before // 100 != self.non_finite // 100:
            faces = StreamFaces.of(np.asarray(streams)[bad], rows[bad])
            fields = [name for name, _ in RESULT_FIELDS if not np.isfinite(np.asarray(getattr(faces, name),
                                                                                         np.float32)).all()]
            log.warning("%d frames of a pass of %d had non-finite results (%s; %d so far, tracked: %s)", len(bad),
                        len(rows), ", ".join(fields), self.non_finite, faces.tracked.tolist()[:8])
        return finite

    @staticmethod
    def _failed(items: list, error: Exception) -> None:
        """Posted frames whose pass failed: each group's `failed` told of its own (post_many)."""
        groups: dict = {}
        for _frame, tag, failed in items:
            groups.setdefault(failed, []).append(tag)
        for failed, tags in groups.items():
            if failed is not None:
                failed(tags, error)

    def _run_passes(self, streams: list[int], frames: list, gpu_ms: np.ndarray) -> np.ndarray:
        """The result rows of every frame, in their order: (n, RESULT_WIDTH); each frame's pass GPU time into
        gpu_ms (n,)."""
        results = np.empty((len(frames), RESULT_WIDTH), np.float32)
        remaining = list(range(len(frames)))
        while remaining:  # one frame per stream per pass; a stream's later frames wait for the next pass
            seen, now, later = set(), [], []
            for i in remaining:
                (later if streams[i] in seen else now).append(i)
                seen.add(streams[i])
            results[now], gpu_ms[now] = self._pass([streams[i] for i in now], [frames[i] for i in now])
            remaining = later
        return results

    def _pass(self, streams: list[int], frames: list) -> tuple[np.ndarray, float]:
        """(result rows, the pass's GPU time in ms: NaN without a GPU)."""
        torch = self._torch
        n = len(streams)
        batch = self.tracker.frame_buffer(n)  # a captured pass's own input buffer saves a copy
        batch = self._staging[:n] if batch is None else batch
        if self._upload_stream is not None:  # every frame of this pass was queued for upload before it was submitted
            torch.cuda.current_stream().wait_stream(self._upload_stream)
        if self._events is not None:
            self._events[0].record()
        torch.stack(frames, out=batch)  # `submit` made every frame a tensor on this device
        self._index_host.numpy()[:n] = streams  # free to rewrite: the last pass's copy back waited for its upload
        index = self._index_host[:n]
        if self._index is not None:
            index = self._index[:n].copy_(index, non_blocking=True)
        self.tracker.step(batch, index)
        out = self._results_host[:n]
        out.copy_(self.tracker.packed_results(index))  # one copy back per pass (waits for the pass)
        gpu_ms = float("nan")
        if self._events is not None:
            start, end = self._events
            end.record()
            end.synchronize()  # at once: the copy back has waited for the pass already
            gpu_ms = start.elapsed_time(end)
        self.passes += 1
        self.frames += n
        return out.numpy().copy(), gpu_ms


def _merge_runs(runs: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Several passes' (rows, timing, finite) as one, in their order (DeadlineBatcher's merge)."""
    return tuple(np.concatenate(parts) for parts in zip(*runs))


def _unpack(stream: int, row: np.ndarray) -> StreamFace:
    values = {name: row[start:end].reshape(shape) for name, shape, start, end in _FIELD_COLUMNS}
    values["tracked"] = bool(values["tracked"] > 0.5)
    values["presence"] = float(values["presence"])
    return StreamFace(stream=stream, **values)
