"""TrackClient: one face stream to `facebridge serve`, images out and FaceFrames back on one long-lived Track call;
TrackManyClient: many face streams on one TrackMany call (a gateway, a load generator); ManyRequests: TrackMany
requests built as bytes, for a sender of many streams whose Python must stay cheap (`bench serve --wire many`).

Sending never waits for the server: requests go into the call's outgoing queue and gRPC flow control paces them;
a reader thread turns every response into a FaceFrame (with the server's drop counters for this stream) on the
`results` queue; an image the server refused is put there as a drop, and its reason is kept in `refused`. The
stream stays on the replica that accepted it for its whole life; `replica` says which.
"""
from __future__ import annotations

import queue
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import grpc
import numpy as np

from bridge.grpc.convert import parse_frame
from bridge.grpc.frame_wire import varint
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

JPEG_QUALITY = 80  # about 27 kB for the 480x360 sample: what a camera's encoder gives at this size
TRACK_MANY = "/facebridge.v1.FaceServeService/TrackMany"
_END = object()
# ImageFrame's times and frame rate (fields 6-9, doubles: tag, 8 bytes each) and a JPEG's encoding with its data tag
_TIMES = struct.Struct("<BdBdBdBd")
_JPEG_HEAD = b"\x08\x01\x12"


class ManyRequests:
    """Serialised TrackManyRequests from (stream id, JPEG, seq, capture, source and media time) items: the bytes that
    never change (each stream's id and deadline, the tags) made once, each item joined from its parts, one join a
    message: no message object an item, about 2 us of Python an item where building TrackManyItems costs 10-15.
    A stream's subject goes with its first item (`subjects`, by stream id; the server's default without)."""

    def __init__(self, deadline_ms: int = 0, frame_rate: float = 30.0, subjects: dict[int, str] | None = None) -> None:
        self.deadline = b"\x20" + varint(int(deadline_ms)) if deadline_ms else b""
        self.frame_rate = float(frame_rate)
        self.subjects = subjects or {}
        self._ids: dict[int, bytes] = {}
        self._started: set[int] = set()

    def request(self, items) -> bytes:
        """items: (stream_id, jpeg, seq, capture_time, source_time, media_time) each."""
        parts = []
        for stream_id, data, seq, capture, source, media in items:
            head = self._ids.get(stream_id)
            if head is None:
                head = self._ids[stream_id] = b"\x08" + varint(stream_id)
            if stream_id not in self._started:
                self._started.add(stream_id)
                name = self.subjects.get(stream_id, "").encode()
                if name:
                    head += b"\x12" + varint(len(name)) + name
            size = varint(len(data))
            tail = b"".join((b"\x28", varint(seq), _TIMES.pack(0x31, capture, 0x39, source, 0x41, media, 0x49,
                                                               self.frame_rate)))
            image_len = 3 + len(size) + len(data) + len(tail)
            item_len = len(head) + 1 + len(varint(image_len)) + image_len + len(self.deadline)
            parts += (b"\x0a", varint(item_len), head, b"\x1a", varint(image_len), _JPEG_HEAD, size, data, tail,
                      self.deadline)
        return b"".join(parts)

    def end(self, stream_ids) -> bytes:
        """A request that ends these face streams (the server serves what it holds, then ends each)."""
        parts = []
        for stream_id in stream_ids:
            item = b"\x08" + varint(stream_id) + b"\x28\x01"
            parts += (b"\x0a", varint(len(item)), item)
            self._started.discard(stream_id)
        return b"".join(parts)


@dataclass
class StreamReport:
    """The server's counters for this stream, as of its latest response."""

    replica: str = ""
    slot: int = 0
    received: int = 0
    stale_dropped: int = 0
    late_dropped: int = 0
    bad_frames: int = 0


def encode_jpeg(image_bgr: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    ok, data = cv2.imencode(".jpg", image_bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image_bgr.shape} image as JPEG")
    return data.tobytes()


def open_channel(address: str, tls_ca: str | None = None) -> grpc.Channel:
    # a channel of its own connection: gRPC would otherwise share one TCP connection between the channels of a
    # process, and a load balancer in front of the replicas (HAProxy) pins a connection, not a stream
    options = [("grpc.max_send_message_length", 8 * 1024 * 1024), ("grpc.keepalive_time_ms", 10_000),
               ("grpc.use_local_subchannel_pool", 1)]
    if tls_ca:

        return grpc.secure_channel(address, grpc.ssl_channel_credentials(Path(tls_ca).read_bytes()), options)
    return grpc.insecure_channel(address, options)


class TrackClient:
    def __init__(self, address: str, subject: str = "FaceBridge", token: str | None = None,
                 tls_ca: str | None = None, deadline_ms: int = 0, channel: grpc.Channel | None = None) -> None:
        self.subject = subject
        self.deadline_ms = int(deadline_ms)
        self._own_channel = channel is None
        self.channel = channel or open_channel(address, tls_ca)
        self._outgoing: queue.Queue = queue.Queue()
        # (FaceFrame, frames dropped so far, replica) in order; (None, dropped, replica) for a drop report; None
        # once the stream has ended
        self.results: queue.Queue = queue.Queue()
        self.report = StreamReport()
        self.error: grpc.RpcError | None = None  # how the call ended, when it ended badly
        self.refused: list[tuple[int, str]] = []  # (seq, reason) of every image the server refused
        self.sent = 0
        self._first = True
        metadata = [("authorization", f"Bearer {token}")] if token else None
        self._call = pb_grpc.FaceServeServiceStub(self.channel).Track(self._requests(), metadata=metadata)
        self._reader = threading.Thread(target=self._read, name="track-client", daemon=True)
        self._reader.start()

    def _requests(self):
        while (request := self._outgoing.get()) is not _END:
            yield request

    def send_encoded(self, data: bytes, encoding: int = pb.ImageFrame.JPEG, width: int = 0, height: int = 0,
                     seq: int = 0, capture_time: float | None = None, source_time: float | None = None,
                     media_time: float = 0.0, frame_rate: float = 30.0) -> None:
        image = pb.ImageFrame(encoding=encoding, data=data, width=width, height=height, seq=seq,
                              capture_time=time.time() if capture_time is None else capture_time,
                              source_time=time.perf_counter() if source_time is None else source_time,
                              media_time=media_time, frame_rate=frame_rate)
        request = pb.TrackRequest(image=image, deadline_ms=self.deadline_ms)
        if self._first:
            request.subject, self._first = self.subject, False
        self._outgoing.put(request)
        self.sent += 1

    def send_frame(self, frame, encoding: str = "jpeg", quality: int = JPEG_QUALITY) -> None:
        """A bridge.frame.Frame (BGR), as JPEG or (loopback servers only) raw."""
        h, w = frame.image.shape[:2]
        if encoding == "raw":
            data, kind = np.ascontiguousarray(frame.image).tobytes(), pb.ImageFrame.RAW_BGR
        else:
            data, kind = encode_jpeg(frame.image, quality), pb.ImageFrame.JPEG
        self.send_encoded(data, kind, w, h, seq=frame.seq, capture_time=frame.t_capture,
                          source_time=frame.t_capture_mono, media_time=frame.t_media, frame_rate=frame.fps)

    def _read(self) -> None:
        header = None
        try:
            for response in self._call:
                r = self.report
                r.replica, r.slot, r.received = response.replica, response.stream_slot, response.received
                r.stale_dropped, r.late_dropped = response.stale_dropped, response.late_dropped
                r.bad_frames = response.bad_frames
                part = response.WhichOneof("part")
                if part == "header":
                    header = response.header
                elif part == "frame" and header is not None:
                    face = parse_frame(header, response.frame)
                    face.latencies_ms["client_rtt"] = (time.perf_counter() - face.t_capture_mono) * 1000.0
                    self.results.put((face, response.frame.dropped_frames, response.replica))
                elif part == "refused":
                    self.refused.append((response.refused.seq, response.refused.reason))
                    self.results.put((None, response.stale_dropped + response.late_dropped, response.replica))
                elif part is None:
                    self.results.put((None, response.stale_dropped + response.late_dropped, response.replica))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.error = e
        finally:
            self.results.put(None)

    def finish(self, timeout: float = 10.0) -> None:
        """No more images: the server serves what it holds, then the stream ends (results ends with None)."""
        self._outgoing.put(_END)
        self._reader.join(timeout)

    def close(self) -> None:
        """End the stream now (the server frees its slot), and the channel if this client opened it."""
        self._outgoing.put(_END)
        self._call.cancel()
        self._reader.join(5.0)
        if self._own_channel:
            self.channel.close()


class TrackManyClient:
    """Many face streams to `facebridge serve` on one TrackMany call: `send` puts the images of any of them in one
    request; a reader thread turns each reply into a FaceFrame on that stream's `results[stream_id]` queue (as
    TrackClient's `results`: (FaceFrame, dropped, replica), (None, dropped, replica) for a drop or refusal, None
    once the stream ended; `ended[stream_id]` says why when the server ended it)."""

    def __init__(self, address: str, token: str | None = None, tls_ca: str | None = None,
                 channel: grpc.Channel | None = None) -> None:
        self._own_channel = channel is None
        self.channel = channel or open_channel(address, tls_ca)
        self._outgoing: queue.Queue = queue.Queue()
        self.results: dict[int, queue.Queue] = {}
        self.reports: dict[int, StreamReport] = {}
        self.refused: dict[int, list[tuple[int, str]]] = {}
        self.ended: dict[int, str] = {}
        self.error: grpc.RpcError | None = None
        self._started: set[int] = set()
        self._lock = threading.Lock()
        metadata = [("authorization", f"Bearer {token}")] if token else None
        self._call = pb_grpc.FaceServeServiceStub(self.channel).TrackMany(self._requests(), metadata=metadata)
        self._reader = threading.Thread(target=self._read, name="track-many-client", daemon=True)
        self._reader.start()

    def stream(self, stream_id: int) -> queue.Queue:
        """The results queue of one face stream (made on first use)."""
        with self._lock:
            if stream_id not in self.results:
                self.results[stream_id] = queue.Queue()
                self.reports[stream_id] = StreamReport()
                self.refused[stream_id] = []
            return self.results[stream_id]

    def _requests(self):
        while (request := self._outgoing.get()) is not _END:
            yield request

    def item(self, stream_id: int, data: bytes, subject: str = "", seq: int = 0, capture_time: float | None = None,
             source_time: float | None = None, media_time: float = 0.0, frame_rate: float = 30.0,
             deadline_ms: int = 0, encoding: int = pb.ImageFrame.JPEG, width: int = 0, height: int = 0):
        """One face stream's image as a TrackManyItem (its subject sent with the stream's first image)."""
        self.stream(stream_id)
        image = pb.ImageFrame(encoding=encoding, data=data, width=width, height=height, seq=seq,
                              capture_time=time.time() if capture_time is None else capture_time,
                              source_time=time.perf_counter() if source_time is None else source_time,
                              media_time=media_time, frame_rate=frame_rate)
        first = stream_id not in self._started
        self._started.add(stream_id)
        return pb.TrackManyItem(stream_id=stream_id, subject=subject if first else "", image=image,
                                deadline_ms=deadline_ms)

    def send(self, items) -> None:
        """Items (from `item`, or TrackManyItems of your own) in one request."""
        self._outgoing.put(pb.TrackManyRequest(items=list(items)))

    def end(self, stream_ids) -> None:
        """The client is done with these face streams: the server serves what it holds, then ends each."""
        self._outgoing.put(pb.TrackManyRequest(items=[pb.TrackManyItem(stream_id=i, end=True) for i in stream_ids]))

    def _read(self) -> None:
        headers: dict[int, pb.StreamHeader] = {}
        try:
            for response in self._call:
                for reply in response.replies:
                    self._reply(reply, headers)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.error = e
        finally:
            for q in list(self.results.values()):
                q.put(None)

    def _reply(self, reply, headers: dict) -> None:
        sid = reply.stream_id
        results = self.stream(sid)
        if reply.HasField("response"):
            response, r = reply.response, self.reports[sid]
            r.replica, r.slot, r.received = response.replica, response.stream_slot, response.received
            r.stale_dropped, r.late_dropped, r.bad_frames = (response.stale_dropped, response.late_dropped,
                                                             response.bad_frames)
            part = response.WhichOneof("part")
            if part == "header":
                headers[sid] = response.header
            elif part == "frame" and sid in headers:
                face = parse_frame(headers[sid], response.frame)
                face.latencies_ms["client_rtt"] = (time.perf_counter() - face.t_capture_mono) * 1000.0
                results.put((face, response.frame.dropped_frames, response.replica))
            elif part == "refused":
                self.refused[sid].append((response.refused.seq, response.refused.reason))
                results.put((None, response.stale_dropped + response.late_dropped, response.replica))
            elif part is None:
                results.put((None, response.stale_dropped + response.late_dropped, response.replica))
        if reply.ended:
            self.ended[sid] = reply.ended
            headers.pop(sid, None)
            self._started.discard(sid)
            results.put(None)

    def close(self) -> None:
        """End the call now (the server frees every stream's slot), and the channel if this client opened it."""
        self._outgoing.put(_END)
        self._call.cancel()
        self._reader.join(5.0)
        if self._own_channel:
            self.channel.close()
