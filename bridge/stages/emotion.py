"""Seven-class emotion (fer's mini-Xception) on the face aligned by its landmarks."""
from __future__ import annotations

import cv2
import numpy as np

from bridge.engines import create_session
from bridge.models import model_path
from bridge.stages.geometry import Roi, angle_between

INPUT_SIZE = 64


class EmotionClassifier:
    def __init__(self, backend: str = "onnxruntime", threads: int = 1, cpu_precision: str = "f32") -> None:
        self.session = create_session(model_path("emotion"), backend=backend, threads=threads,
                                      cpu_precision=cpu_precision)
        self.input_name = self.session.inputs[0].name

    @staticmethod
    def face_roi(points: np.ndarray) -> Roi:
        """Eye-levelled square over the landmarks, enlarged a little like fer's own crop."""
        x_lo, x_hi = cv2.minMaxLoc(points[:, 0].astype(np.float64))[:2]
        y_lo, y_hi = cv2.minMaxLoc(points[:, 1].astype(np.float64))[:2]
        return Roi(cx=(x_lo + x_hi) / 2, cy=(y_lo + y_hi) / 2, size=max(x_hi - x_lo, y_hi - y_lo) * 1.1,
                   angle=angle_between(points[33], points[263]))

    def preprocess(self, image: np.ndarray, points: np.ndarray) -> np.ndarray:
        patch, _ = self.face_roi(points).crop_rgba(image, INPUT_SIZE)
        gray = cv2.cvtColor(patch, cv2.COLOR_RGBA2GRAY).astype(np.float32)
        return ((gray / 255.0 - 0.5) * 2.0)[None, None]

    def run(self, image: np.ndarray, points: np.ndarray) -> np.ndarray:
        probs = next(iter(self.session.run({self.input_name: self.preprocess(image, points)}).values()))
        return probs.reshape(-1).astype(np.float32)
