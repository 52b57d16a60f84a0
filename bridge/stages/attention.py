"""468 face landmarks, both eyes' contours and irises from one model: MediaPipe's attention mesh.

face_landmark_with_attention.tflite (what MediaPipe FaceMesh runs with refine_landmarks) takes the same 192x192 crop
as face_landmark and returns the mesh plus lip, eye and iris points from heads that crop its own feature map, where
the two-model path runs the iris model on two more image crops (docs/PERFORMANCE.md, "Face pipeline on one CPU
core"). The result keeps
the two-model path's conventions: `LandmarkResult.points` is the (468, 3) mesh in image pixels with the lips
refined as MediaPipe does (x, y from the lips head, z the mesh's), and `LandmarkResult.eyes` an `IrisResult` like
the iris model's ([subject's left, right], 71 contour points whose first 16 are the lids, 5 iris points centre
first; z: the mesh's at each contour point, the irises the lid points' mean, MediaPipe's z refinement), so the
describe step refines the lids from it exactly as from the iris model. LiteRT only (bridge/engines).
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from bridge.engines import create_session
from bridge.mesh import EYE_REFINEMENT, LIP_REFINEMENT
from bridge.models import model_path
from bridge.stages.geometry import Roi
from bridge.stages.landmarks import LANDMARK_SIZE, PIXEL_SCALE, IrisResult, LandmarkResult, to_tensor

MODEL = "face_landmark_with_attention"
_LIPS = np.array(LIP_REFINEMENT)
_EYES = np.array(EYE_REFINEMENT)  # (2, 71): [subject's left, right]
_LIDS = np.ascontiguousarray(_EYES[:, :16])  # each eye's lid points: its irises' z is their mean
# the model's outputs in that order: its "right" eye is the image's right = the subject's left
_EYE_OUTPUTS = (("output_right_eye", "output_right_iris"), ("output_left_eye", "output_left_iris"))
_XY_OUTPUTS = ("output_lips", *(name for pair in _EYE_OUTPUTS for name in pair))


class AttentionLandmarker:
    """`run(image, roi)` -> LandmarkResult with `eyes` set: one invoke (two LiteRT parts) for mesh, lips, eyes,
    irises."""

    def __init__(self, backend: str = "auto", threads: int = 1, cpu_precision: str = "f32") -> None:
        del cpu_precision  # XNNPACK f32 only
        self.session = create_session(model_path(MODEL), backend=backend, threads=threads)
        self.input_name = self.session.inputs[0].name

    def run(self, image: np.ndarray, roi: Roi) -> LandmarkResult:
        patch, back = roi.crop_rgba(image, LANDMARK_SIZE)
        session = self.session  # a live swap may replace it between frames
        if hasattr(session, "run_rgb"):  # the crop scaled straight into LiteRT's input, as to_tensor scales it
            out = session.run_rgb(cv2.cvtColor(patch, cv2.COLOR_RGBA2RGB), PIXEL_SCALE)
        else:
            out = session.run({self.input_name: to_tensor([patch])})
        raw = out["output_mesh_identity"].reshape(468, 3)
        a, t = back[:, :2].T.astype(np.float32), back[:, 2].astype(np.float32)
        # every x, y back to the image in one product: the mesh, the lips, per eye 71 contour then 5 iris points
        xy = np.concatenate([raw[:, :2]] + [out[name].reshape(-1, 2) for name in _XY_OUTPUTS]) @ a + t
        points = np.empty((468, 3), np.float32)
        points[:, :2] = xy[:468]
        points[:, 2] = raw[:, 2] * np.float32(roi.size / LANDMARK_SIZE)
        points[_LIPS, :2] = xy[468:548]
        pts = np.empty((2, 76, 3), np.float32)  # per eye: 71 contour points, then 5 iris points
        pts[:, :, :2] = xy[548:].reshape(2, 76, 2)
        z = points[:, 2]
        pts[:, :71, 2] = z[_EYES]
        pts[:, 71:, 2] = np.add.reduce(z[_LIDS], axis=1, keepdims=True) / _LIDS.shape[1]  # .mean's own sum, by 16
        logit = float(out["conv_faceflag"].reshape(()))
        return LandmarkResult(points=points, presence=1.0 / (1.0 + math.exp(-logit)), roi=roi,
                              eyes=IrisResult(iris=pts[:, 71:], contour=pts[:, :71]))
