"""468 face landmarks (MediaPipe face mesh) and iris, with tracking so the detector runs only on loss.

The two-model path: face_landmark, then iris_landmark on both eyes; stages/attention.py has the one-model path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from bridge.engines import create_session
from bridge.mesh import EYE_CONTOURS, EYE_CORNERS
from bridge.models import model_path
from bridge.stages.detection import Detection
from bridge.stages.geometry import Roi, angle_between, apply_affine

LANDMARK_SIZE = 192
IRIS_SIZE = 64


@dataclass
class LandmarkResult:
    points: np.ndarray  # (468, 3) image pixels; z in the same scale as x
    presence: float  # face-presence probability for this crop
    roi: Roi
    eyes: IrisResult | None = None  # both eyes from the same model (stages/attention.py); None: run the iris model


@dataclass
class IrisResult:
    """Per eye, index 0 = subject's LEFT eye, 1 = subject's RIGHT eye (ARKit's naming)."""

    iris: np.ndarray  # (2, 5, 3) image px: centre first
    contour: np.ndarray  # (2, 71, 3) image px: eye contour and brow points

    def refine(self, points: np.ndarray) -> np.ndarray:
        """Face-mesh points with both eyes' lid contours (x, y) taken from the iris model."""
        refined = points.copy()
        refined[_CONTOUR_INDEX, :2] = self.contour[:, :_CONTOUR_LEN, :2].reshape(-1, 2)
        return refined


_CONTOUR_LEN = len(EYE_CONTOURS[0])
_CONTOUR_INDEX = np.array(EYE_CONTOURS).reshape(-1)  # both eyes' lid points, in the iris model's contour order
PIXEL_SCALE = np.float32(1.0 / 255.0)  # uint8 pixels to the models' [0, 1] input


def to_tensor(patches: list[np.ndarray]) -> np.ndarray:
    """RGBA crops (Roi.crop_rgba) -> (N, 3, S, S) float32 RGB in [0, 1], a view of NHWC memory (what LiteRT
    takes as is). Contiguous conversions only: a strided uint8-to-float cast costs ten times as much."""
    rgb = [cv2.cvtColor(p, cv2.COLOR_RGBA2RGB) for p in patches]
    x = (rgb[0][None] if len(rgb) == 1 else np.stack(rgb)).astype(np.float32)
    x *= PIXEL_SCALE
    return x.transpose(0, 3, 1, 2)


def roi_from_detection(det: Detection) -> Roi:
    """MediaPipe's detection-to-ROI: square of 1.5x the box, rotated so the eyes are level."""
    x0, y0, x1, y1 = det.box
    angle = angle_between(det.keypoints[0], det.keypoints[1])  # subject's right eye -> left eye
    return Roi(cx=(x0 + x1) / 2, cy=(y0 + y1) / 2, size=max(x1 - x0, y1 - y0) * 1.5, angle=angle)


def roi_from_landmarks(points: np.ndarray) -> Roi:
    """Next frame's ROI from this frame's landmarks: their extent in the eye-levelled frame, 1.5x."""
    angle = angle_between(points[33], points[263])
    c, s = math.cos(angle), math.sin(angle)
    x, y = points[:, 0].astype(np.float64), points[:, 1].astype(np.float64)  # contiguous: one pass each
    x_lo, x_hi = cv2.minMaxLoc(x)[:2]
    y_lo, y_hi = cv2.minMaxLoc(y)[:2]
    cx, cy = (x_lo + x_hi) / 2, (y_lo + y_hi) / 2
    x -= cx
    y -= cy
    u_lo, u_hi = cv2.minMaxLoc(x * c + y * s)[:2]  # the extent in the eye-levelled frame
    v_lo, v_hi = cv2.minMaxLoc(y * c - x * s)[:2]
    mu, mv = (u_lo + u_hi) / 2, (v_lo + v_hi) / 2
    return Roi(cx=cx + mu * c - mv * s, cy=cy + mu * s + mv * c, size=max(u_hi - u_lo, v_hi - v_lo) * 1.5,
               angle=angle)


class FaceLandmarker:
    def __init__(self, backend: str = "onnxruntime", threads: int = 1, cpu_precision: str = "f32") -> None:
        self.session = create_session(model_path("face_landmark"), backend=backend, threads=threads,
                                      cpu_precision=cpu_precision)
        self.input_name = self.session.inputs[0].name

    def run(self, image: np.ndarray, roi: Roi) -> LandmarkResult:
        patch, back = roi.crop_rgba(image, LANDMARK_SIZE)
        out = list(self.session.run({self.input_name: to_tensor([patch])}).values())
        raw = next(o for o in out if o.size == 1404).reshape(468, 3)
        logit = float(next(o for o in out if o.size == 1).reshape(()))
        points = apply_affine(raw, back)
        points[:, 2] = raw[:, 2] * (roi.size / LANDMARK_SIZE)
        return LandmarkResult(points=points, presence=1.0 / (1.0 + math.exp(-logit)), roi=roi)


class IrisLandmarker:
    """Both eyes in one batched call. The model knows one eye side, so the other eye's crop is mirrored."""

    def __init__(self, backend: str = "onnxruntime", threads: int = 1, cpu_precision: str = "f32") -> None:
        self.session = create_session(model_path("iris_landmark"), backend=backend, threads=threads,
                                      cpu_precision=cpu_precision, batch=2)  # both eyes in one call
        self.input_name = self.session.inputs[0].name

    @staticmethod
    def eye_roi(points: np.ndarray, corners: tuple[int, int]) -> Roi:
        ax, ay = float(points[corners[0], 0]), float(points[corners[0], 1])
        bx, by = float(points[corners[1], 0]), float(points[corners[1], 1])
        angle = math.atan2(by - ay, bx - ax) if ax <= bx else math.atan2(ay - by, ax - bx)
        return Roi(cx=(ax + bx) / 2, cy=(ay + by) / 2, size=math.hypot(bx - ax, by - ay) * 2.3, angle=angle)

    def run(self, image: np.ndarray, points: np.ndarray) -> IrisResult:
        rois = [self.eye_roi(points, corners) for corners in EYE_CORNERS]
        patches, backs = [], []
        for i, roi in enumerate(rois):
            patch, back = roi.crop_rgba(image, IRIS_SIZE)
            if i == 0:  # subject's left eye = image right: mirrored so it looks like the model's eye side
                patch = cv2.flip(patch, 1)
            patches.append(patch)
            backs.append(back)
        out = self.session.run({self.input_name: to_tensor(patches)})
        contour = next(v for v in out.values() if v.shape[-1] == 213).reshape(2, 71, 3)
        iris = next(v for v in out.values() if v.shape[-1] == 15).reshape(2, 5, 3)
        pts = np.concatenate([contour, iris], axis=1)  # (2, 76, 3) crop pixels, a copy
        pts[0, :, 0] = IRIS_SIZE - pts[0, :, 0]  # the mirrored eye back
        back = np.stack(backs)  # (2, 2, 3) crop -> image
        xy = pts[:, :, :2].copy()
        pts[:, :, :2] = xy @ back[:, :, :2].transpose(0, 2, 1) + back[:, None, :, 2]
        pts[:, :, 2] *= np.array([[roi.size / IRIS_SIZE] for roi in rois], np.float32)
        return IrisResult(iris=pts[:, 71:], contour=pts[:, :71])
