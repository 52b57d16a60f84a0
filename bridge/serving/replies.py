"""PassReplies: every stream's reply to one batched pass made at once: the pass described in one call, its Frames
serialised together (bridge/grpc/frame_wire.py: bytes, no message object per frame), a header first for a stream
whose layout changed.

Each batched service finishes its passes through `for_service(rows)` (on the batcher's second thread, while the
next pass runs on the device), with its own pass describer from `make_describer(rows)`: an object whose
`open(subject)` gives a stream's handle (with `close()`, called when the stream ends) and whose
`describe(handles, frames, faces, sizes) -> FaceFrames` describes one pass (injected by bridge/runtime/serve.py,
so serving/ never imports the stages). The stream coroutines only add their counters (frame_wire.frame_response
for a Frame's bytes) and send what is made here; frames posted with a sink (TrackMany's calls) are handed to it
together instead, one call a sink a pass, which makes its client's one message of them on this thread.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from bridge.frame import Frame
from bridge.grpc.convert import build_header, layout_keys
from bridge.grpc.frame_wire import encode_frames
from bridge.grpc.gen import facebridge_pb2 as pb


def _split_stages(served: list, faces, t0: float) -> tuple[tuple[str, ...], np.ndarray | None]:
    """Where a frame's wait and track went, where measured for every frame of the pass (ms, (n, k)): with JpegBatches'
    DecodeTimes, wait = to_decode (the serve loop's hand-off to the JPEG thread) + decode_queue (its previous batch)
    + decode_batch (this batch's decode; decode_batch_cpu: the JPEG thread's CPU time in it) + to_service (the
    batch's images handed on before it, and submit); with the service's pass timing, track = queue (the batcher's
    previous pass) + pass (this pass, taken to results on the host; gpu: its GPU time) + to_describe (waiting for
    the describing thread); in a front-end process, to_engine (the slot's number to the engine's reader) and
    engine_decode (read to queued for the pass: the engine's JPEG batches) come before the queue, and where the
    engine's JPEG batches decoded every frame engine_decode is split too: engine_decode_queue (its previous batch),
    engine_decode_batch (this batch's decode call), engine_hand_on (handed on and queued)."""
    cols, keys = [], []
    decode = [s.extra.get("decode_times") for s in served]
    if all(d is not None for d in decode):
        d = np.array([(x.posted, x.started, x.ended, x.cpu_ms / 1000.0) for x in decode], np.float64)
        received = np.array([s.received for s in served], np.float64)
        submitted = np.array([s.submitted for s in served], np.float64)
        cols += [d[:, 0] - received, d[:, 1] - d[:, 0], d[:, 2] - d[:, 1], d[:, 3], submitted - d[:, 2]]
        keys += ["to_decode", "decode_queue", "decode_batch", "decode_batch_cpu", "to_service"]
    timing = getattr(faces, "timing", None)
    if timing is not None:
        queued = submitted = np.array([s.submitted for s in served], np.float64)
        engine = [s.extra.get("engine_times") for s in served]
        if all(e is not None for e in engine):  # a front end's frame: its way through the engine process
            read, queued, started, ended = np.array(engine, np.float64).T
            cols += [read - submitted, queued - read]
            keys += ["to_engine", "engine_decode"]
            if np.isfinite(started).all():
                cols += [started - read, ended - started, queued - ended]
                keys += ["engine_decode_queue", "engine_decode_batch", "engine_hand_on"]
        cols += [timing[:, 0] - queued, timing[:, 1] - timing[:, 0], t0 - timing[:, 1]]
        keys += ["queue", "pass", "to_describe"]
    if not cols:
        return (), None
    out = np.column_stack(cols) * 1000.0
    if timing is not None and np.isfinite(timing[:, 2]).all():
        out, keys = np.column_stack([out, timing[:, 2]]), [*keys, "gpu"]  # already ms
    return tuple(keys), out


class PassReplies:
    def __init__(self, make_describer) -> None:
        self._make_describer = make_describer
        self._layout_lock = threading.Lock()
        self._next_layout_id = 1

    def next_layout_id(self) -> int:
        with self._layout_lock:
            self._next_layout_id += 1
            return self._next_layout_id - 1

    def for_service(self, rows: int):
        """The finish_pass of one batched service of `rows` slots: (slots, served, faces) -> each frame's
        responses. served: the streams' Served records, each with its stream's state in extra["state"]."""
        describer = self._make_describer(rows)
        return lambda slots, served, faces: self._finish(describer, served, faces)

    def _finish(self, describer, served: list, faces) -> list[list[pb.TrackResponse | bytes]]:
        """Each served frame's responses: a StreamHeader message when its layout changed, then its Frame's bytes."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        states = [s.extra["state"] for s in served]
        for state in states:
            if state.describer is None:  # the stream's first frame
                state.describer = describer.open(state.subject)
        wall = time.time()
        frames = [Frame(image=None, seq=int(im.seq), t_capture=im.capture_time or wall, t_capture_mono=im.source_time,
                        t_media=im.media_time or im.capture_time, fps=im.frame_rate or 30.0)
                  for im in (s.request for s in served)]
        sizes = np.array([(s.extra["hw"][1], s.extra["hw"][0]) for s in served])
        described = describer.describe([state.describer for state in states], frames, faces, sizes)
        now = time.perf_counter()
        cpu = (time.thread_time() - cpu0) * 1000.0 / len(served)  # this pass's describe CPU, per frame
        shared = described.latencies_ms  # the pass's, per frame; then each frame's own stages
        times = np.array([(s.extra["decode_ms"], s.received, s.submitted) for s in served], np.float64)
        n = len(served)
        stages = np.column_stack([np.broadcast_to(np.array(list(shared.values()), np.float64), (n, len(shared))),
                                  times[:, 0], (times[:, 2] - times[:, 1]) * 1000.0, (t0 - times[:, 2]) * 1000.0,
                                  np.full(n, (now - t0) * 1000.0), np.full(n, cpu), (now - times[:, 1]) * 1000.0])
        keys = (*shared, "decode", "wait", "track", "describe", "describe_cpu", "server")
        split_keys, split = _split_stages(served, faces, t0)
        if split_keys:
            keys, stages = (*keys, *split_keys), np.column_stack([stages, split])
        replies: list[list[pb.TrackResponse | bytes]] = [[] for _ in served]
        layout_ids = []
        for i, (state, key) in enumerate(zip(states, layout_keys(described))):
            if key != state.layout:
                state.layout = key
                state.header = build_header(described.frame(i), self.next_layout_id())
                replies[i].append(pb.TrackResponse(header=state.header))
            layout_ids.append(state.header.layout_id)
        for reply, frame in zip(replies, encode_frames(described, layout_ids, stages=(keys, stages))):
            reply.append(frame)
        _to_sinks(served, replies)
        return replies


def _to_sinks(served: list, replies: list) -> None:
    """The frames posted with a sink (TrackMany's calls: extra["sink"]) handed to it together, one call a sink a
    pass: it makes them into one message for its client; the others' replies go back through their futures."""
    sinks: dict = {}
    for s, reply in zip(served, replies):
        sink = s.extra.get("sink")
        if sink is not None:
            got = sinks.setdefault(sink, ([], []))
            got[0].append(s)
            got[1].append(reply)
    for sink, (its_served, its_replies) in sinks.items():
        try:
            sink.pass_done(its_served, its_replies)
        except Exception as e:  # noqa: BLE001 - one call's failure never costs the pass's other streams theirs
            sink.failed(its_served, e)
