"""LiveFeed: what the monitor page sees of the stream, built at the page's pace, never at the stream's.

The send thread only stores a reference to the newest FaceFrame (`on_frame`); the first pipeline step, wrapped
by `tap`, keeps a reference to a camera image only while some page asked for the preview, and then at most
PREVIEW_HZ times a second. Everything else (the JSON state, the JPEG) is made on the monitor's own thread when
a page is there to receive it: with nobody watching, the monitor costs the stream two stored references a frame
and one test in the tap.
"""
from __future__ import annotations

import collections
import math
import threading
import time

import cv2
import numpy as np

from bridge.frame import ARKIT_NAMES, EMOTION_NAMES, VISEME_NAMES, FaceFrame

PAGE_HZ = 10.0  # state updates a second to each page (each one costs a browser a repaint of the page)
PREVIEW_HZ = 5.0  # preview images a second at most: enough to check framing and landmarks, and each costs the
# browser a JPEG decode and a repaint
PREVIEW_WIDTH = 480  # px; larger frames are scaled down before JPEG encoding
PREVIEW_QUALITY = 70


def _r(values, digits: int = 3) -> list[float] | None:
    if values is None:
        return None
    return [round(float(v), digits) if math.isfinite(float(v)) else 0.0 for v in np.asarray(values).ravel()]


class LiveFeed:
    def __init__(self) -> None:
        self._frame: FaceFrame | None = None
        self._recent: collections.deque = collections.deque(maxlen=8)  # the last frames sent, to match an image
        self._images: collections.deque = collections.deque(maxlen=6)  # (seq, BGR image) while a preview is on
        self._preview_pages = 0
        self._next_image = 0.0
        self._lock = threading.Lock()

    # --- stream side (hot path) ---------------------------------------------------------------------------------
    def on_frame(self, frame: FaceFrame) -> None:
        """Called by the send thread with each frame sent."""
        self._frame = frame
        self._recent.append(frame)

    def tap(self, step):
        """The first pipeline step, keeping the camera images a preview needs (only while one is wanted)."""
        def run(item):
            if self._preview_pages:
                now = time.perf_counter()
                if now >= self._next_image:
                    self._next_image = now + 1.0 / PREVIEW_HZ
                    self._images.append((item.seq, item.image))
            return step(item)

        return run

    # --- page side (the monitor's thread) -------------------------------------------------------------------------
    def want_preview(self, on: bool) -> None:
        with self._lock:
            self._preview_pages = max(0, self._preview_pages + (1 if on else -1))
            if not self._preview_pages:
                self._images.clear()

    @staticmethod
    def hello(subject: str = "") -> dict:
        return {"type": "hello", "subject": subject, "blendshapes": list(ARKIT_NAMES),
                "emotions": list(EMOTION_NAMES), "visemes": list(VISEME_NAMES)}

    def face(self) -> dict | None:
        """The newest frame's face, for the bars, gauges and the drawn face."""
        f = self._frame
        if f is None:
            return None
        return {"seq": f.seq, "face_found": bool(f.face_found), "confidence": round(float(f.confidence), 3),
                "blendshapes": _r(f.blendshapes), "head_rotation": _r(f.head_rotation, 1),
                "head_translation": _r(f.head_translation, 1), "eye_left": _r(f.eye_left, 1),
                "eye_right": _r(f.eye_right, 1), "emotion": _r(f.emotion), "visemes": _r(f.visemes),
                "latencies_ms": {k: round(float(v), 2) for k, v in f.latencies_ms.items()}}

    def preview(self) -> tuple[dict, bytes] | None:
        """(landmarks and head pose in preview pixels, JPEG) of the newest sent frame whose image was kept."""
        frames, images = {f.seq: f for f in list(self._recent)}, list(self._images)
        matched = [(seq, image, frames[seq]) for seq, image in images if seq in frames]
        if not matched:
            return None
        seq, image, f = matched[-1]  # the newest image whose face was sent: landmarks drawn where they belong
        h, w = image.shape[:2]
        scale = min(1.0, PREVIEW_WIDTH / w) if w else 1.0
        small = cv2.resize(image, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA) \
            if scale < 1.0 else image
        ok, jpeg = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, PREVIEW_QUALITY])
        if not ok:
            return None
        meta = {"type": "preview", "seq": seq, "width": small.shape[1], "height": small.shape[0],
                "face_found": bool(f.face_found), "head_rotation": _r(f.head_rotation, 1), "landmarks": None}
        if f.face_found and f.landmarks is not None and np.isfinite(f.landmarks[:, :2]).all():
            meta["landmarks"] = np.round(f.landmarks[:, :2] * scale).astype(int).ravel().tolist()
        return meta, jpeg.tobytes()
