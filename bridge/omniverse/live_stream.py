"""Live FaceBridge stream -> USD stage, without Kit: a background gRPC subscription and an applier that writes
each subject's newest frame into a UsdSkel face rig (bridge/omniverse/usd_face.py). The Kit extension
(kit_extension.py) only wires these to Kit's stage and update loop, so everything here runs under usd-core.

USD stages are not thread-safe: the subscription thread only collects messages; `drain()` + `apply()` run on the
thread that owns the stage (Kit's main thread).
"""
from __future__ import annotations

import logging
import threading

import grpc

from bridge import ports
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


class StreamSubscription:
    """Subscribes to a bridge on its own thread, reconnecting with backoff; keeps headers in order and only the
    newest frame per subject, so a slow consumer never builds a backlog."""

    def __init__(self, address: str = ports.GRPC, *, token: str = "", subjects=(),
                 root_cert_pem: bytes | None = None, backoff_initial_s: float = 0.5, backoff_max_s: float = 8.0):
        self.address = address
        self._metadata = [("authorization", f"Bearer {token}")] if token else None
        self._request = pb.SubscribeRequest(subjects=list(subjects))
        self._root_cert = root_cert_pem
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._lock = threading.Lock()
        self._headers: list[pb.SubscribeResponse] = []
        self._frames: dict[str, pb.SubscribeResponse] = {}
        self._stop = threading.Event()
        self._stream = None
        self._thread: threading.Thread | None = None
        self.status = "not started"
        self.frames_received = 0
        self.reconnects = 0

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="facebridge-subscription", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.status = "stopped"

    def drain(self) -> list[pb.SubscribeResponse]:
        """Headers received since the last call, then the newest frame of each subject."""
        with self._lock:
            out = self._headers + list(self._frames.values())
            self._headers, self._frames = [], {}
        return out

    def _channel(self) -> grpc.Channel:
        if self._root_cert:
            return grpc.secure_channel(self.address, grpc.ssl_channel_credentials(self._root_cert))
        return grpc.insecure_channel(self.address)

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            self.status = f"connecting to {self.address}"
            channel = self._channel()
            try:
                stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(self._request, metadata=self._metadata)
                with self._lock:
                    self._stream = stream
                if self._stop.is_set():
                    stream.cancel()
                for response in stream:
                    if response.WhichOneof("part") == "header":
                        self.status = f"streaming from {self.address}"
                        delay = self._backoff[0]
                        with self._lock:
                            self._headers.append(response)
                    elif response.WhichOneof("part") == "frame":
                        self.frames_received += 1
                        with self._lock:
                            self._frames[response.frame.subject] = response
            except grpc.RpcError as e:
                if not self._stop.is_set():
                    self.status = f"reconnecting in {delay:.1f} s ({e.code().name}: {e.details()})"
            finally:
                with self._lock:
                    self._stream = None
                channel.close()
            if self._stop.wait(delay):
                break
            self.reconnects += 1
            delay = min(delay * 2, self._backoff[1])


class StageApplier:
    """Writes stream messages into a stage: one FaceRig per subject under `root` (default time, i.e. live)."""

    def __init__(self, stage, root: str = "/FaceBridge"):
        # optional extra: usd (pxr)
        from pxr import UsdGeom

        self.stage = stage
        self.root = root
        UsdGeom.Xform.Define(stage, root)
        self._rigs: dict[str, tuple[int, object]] = {}  # subject -> (layout_id, FaceRig)
        self.applied = 0
        self.ignored = 0

    def apply(self, response: pb.SubscribeResponse) -> None:
        part = response.WhichOneof("part")
        if part == "header":
            self._on_header(response.header)
        elif part == "frame":
            self._on_frame(response.frame)

    def rig(self, subject: str):
        entry = self._rigs.get(subject)
        return entry[1] if entry else None

    def _on_header(self, header: pb.StreamHeader) -> None:
        from bridge.omniverse.usd_face import FaceRig, prim_name  # optional extra: usd (pxr); the client runs without

        known = self._rigs.get(header.subject)
        if known and known[1].blend_shapes == list(header.curve_names):
            self._rigs[header.subject] = (header.layout_id, known[1])  # same names: keep the prims
            return
        path = f"{self.root}/{prim_name(header.subject)}"
        if known:
            self.stage.RemovePrim(path)
        rig = FaceRig(self.stage, path, list(header.curve_names), list(header.emotion_names))
        rig.root.GetPrim().SetCustomDataByKey("facebridge:subject", header.subject)
        self._rigs[header.subject] = (header.layout_id, rig)

    def _on_frame(self, frame: pb.Frame) -> None:
        # optional extra: usd (pxr)
        from pxr import Usd

        entry = self._rigs.get(frame.subject)
        if entry is None or entry[0] != frame.layout_id or len(frame.curves) != len(entry[1].blend_shapes):
            self.ignored += 1  # its header has not been applied (yet); the next frame will do
            return
        head = frame.head
        entry[1].write(Usd.TimeCode.Default(), list(frame.curves), (head.yaw_deg, head.pitch_deg, head.roll_deg),
                       (frame.eye_left.yaw_deg, frame.eye_left.pitch_deg),
                       (frame.eye_right.yaw_deg, frame.eye_right.pitch_deg), confidence=frame.confidence,
                       face_found=frame.face_found, emotions=list(frame.emotions) or None,
                       capture_time=frame.capture_time,
                       head_translation_cm=(head.translation_cm.x, head.translation_cm.y, head.translation_cm.z))
        self.applied += 1
