"""Which BlazeFace detector looks for faces, and when (`--detector`, issue 37).

The short-range detector (128x128 input) is fast but sees a letterboxed frame at 128 pixels: a face a tenth of a
16:9 frame wide is 13 pixels to it, and it misses it (two performers on one webcam, a person a few metres back).
The full-range detector (192x192, trained for faces up to about 5 m) finds faces down to about 6% of a 16:9
frame's width, but misses a face that fills the frame, and costs two to three times as much. Short-range tiles
found as many faces as the full range but cost more (docs/FACE.md "Finding faces" has the figures), so the
full-range detector is the wide search:

- `short`, `full`: that detector alone.
- `auto` (default): the short-range detector first; the full-range one as well, merged, when the short range found
  fewer faces than wanted and a wide search is asked for: on every scan for several faces (`--faces N`, N > 1),
  and with one face once none has been found for FAR_AFTER frames (a lost face is found again by the fast
  detector while it is still near; one that stays away may be small). While a face is tracked no detector runs.
"""
from __future__ import annotations

import numpy as np

from bridge.errors import FaceBridgeError
from bridge.stages.detection import Detection, FaceDetector, weighted_nms

CHOICES = ("auto", "short", "full")
NEAR, FAR = "face_detection_short_range", "face_detection_full_range"
FAR_AFTER = 15  # frames without a face (half a second at 30 fps) before one face's search goes wide


def check_choice(choice: str) -> str:
    if choice not in CHOICES:
        raise FaceBridgeError(f"--detector {choice} is not a detector choice", f"choose one of: {', '.join(CHOICES)}")
    return choice


class FaceSearch:
    """The detectors of one run: `near` (short range) and `far` (full range), either None when not used."""

    def __init__(self, choice: str = "auto", **engine) -> None:
        self.choice = check_choice(choice)
        self.near = FaceDetector(NEAR, **engine) if choice in ("auto", "short") else None
        self.far = FaceDetector(FAR, **engine) if choice in ("auto", "full") else None

    def detectors(self) -> dict[str, FaceDetector]:
        """Registry name -> detector, for those in use."""
        return {name: d for name, d in ((NEAR, self.near), (FAR, self.far)) if d is not None}

    def find(self, image: np.ndarray, max_faces: int = 1, wide: bool = False) -> list[Detection]:
        """Up to max_faces faces, best first; `wide`: also ask the full-range detector when the short range alone
        found fewer (always asked without a short-range detector)."""
        found = self.near.detect(image, max_faces) if self.near is not None else []
        if self.far is None or len(found) >= max_faces or (self.near is not None and not wide):
            return found
        far = self.far.detect(image, max_faces)
        if not found:
            return far
        both = found + far
        return weighted_nms(np.array([d.box for d in both]), np.array([d.keypoints for d in both]),
                            np.array([d.score for d in both]), max_faces, self.far.iou_threshold)

    def label(self, faces: int = 1) -> str:
        """For the short start line: which detector runs, in a few words (`summary` says why, with -v)."""
        if self.choice != "auto":
            return f"detector {self.choice} range"
        return "detector short + full range" if faces > 1 else "detector short range, full when lost"

    def summary(self, faces: int = 1) -> str:
        """For the start line: which detector runs, and when."""
        if self.choice != "auto":
            return f"detector BlazeFace {self.choice} range (--detector {self.choice})"
        if faces > 1:
            return ("detector BlazeFace short + full range (several faces: faces down to about a tenth of a 16:9 "
                    "frame's width)")
        return (f"detector BlazeFace short range, full range too after {FAR_AFTER} frames without a face (small or "
                "distant faces)")
