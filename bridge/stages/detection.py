"""Face detection with BlazeFace (MediaPipe short-range or full-range), decoded with SSD anchors; the frame is
letterboxed (aspect kept, padded square), so a face keeps its shape and its size relative to the frame. Which
detector runs when: bridge/stages/search.py."""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from bridge.engines import create_session
from bridge.models import model_path

# SSD anchor layouts of the two MediaPipe detectors: (input size, [(stride, anchors per cell), ...]).
_LAYOUTS = {
    "face_detection_short_range": (128, [(8, 2), (16, 6)]),
    "face_detection_full_range": (192, [(4, 1)]),
}


@dataclass
class Detection:
    box: np.ndarray  # x0, y0, x1, y1 image pixels
    keypoints: np.ndarray  # (6, 2): subject's right eye, left eye, nose tip, mouth, right ear, left ear
    score: float


def make_anchors(input_size: int, layers: list[tuple[int, int]]) -> np.ndarray:
    """(N, 2) anchor centres in [0, 1], in the detector's output order."""
    centres = []
    for stride, per_cell in layers:
        cells = input_size // stride
        ys, xs = np.mgrid[0:cells, 0:cells]
        grid = np.stack([(xs + 0.5) / cells, (ys + 0.5) / cells], axis=-1).reshape(-1, 1, 2)
        centres.append(np.repeat(grid, per_cell, axis=1).reshape(-1, 2))
    return np.concatenate(centres).astype(np.float32)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x0 = np.maximum(box[0], boxes[:, 0])
    y0 = np.maximum(box[1], boxes[:, 1])
    x1 = np.minimum(box[2], boxes[:, 2])
    y1 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


class FaceDetector:
    def __init__(self, model: str = "face_detection_short_range", backend: str = "onnxruntime",
                 score_threshold: float = 0.5, iou_threshold: float = 0.3, threads: int = 1,
                 cpu_precision: str = "f32") -> None:
        self.size, layers = _LAYOUTS[model]
        self.anchors = make_anchors(self.size, layers)
        self.session = create_session(model_path(model), backend=backend, threads=threads,
                                      cpu_precision=cpu_precision)
        self.input_name = self.session.inputs[0].name
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold

    def _letterbox(self, image: np.ndarray) -> tuple[np.ndarray, float, float, float]:
        """Square, aspect-preserving resize with padding; returns tensor, scale and padding offsets."""
        h, w = image.shape[:2]
        scale = self.size / max(h, w)
        nw, nh = round(w * scale), round(h * scale)
        resized = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
        pad_x, pad_y = (self.size - nw) // 2, (self.size - nh) // 2
        canvas = np.zeros((self.size, self.size, 3), np.uint8)
        canvas[pad_y:pad_y + nh, pad_x:pad_x + nw] = resized
        rgb = cv2.cvtColor(canvas, cv2.COLOR_BGR2RGB)
        tensor = (rgb.astype(np.float32) / 127.5 - 1.0).transpose(2, 0, 1)[None]
        return tensor, scale, pad_x, pad_y

    def detect(self, image: np.ndarray, max_faces: int = 1) -> list[Detection]:
        tensor, scale, pad_x, pad_y = self._letterbox(image)
        outputs = list(self.session.run({self.input_name: tensor}).values())
        raw_boxes = next(o for o in outputs if o.shape[-1] == 16).reshape(-1, 16)
        raw_scores = next(o for o in outputs if o.shape[-1] == 1).reshape(-1)
        scores = 1.0 / (1.0 + np.exp(-np.clip(raw_scores, -80.0, 80.0)))
        keep = np.nonzero(scores >= self.score_threshold)[0]
        if keep.size == 0:
            return []
        decoded = raw_boxes[keep] / self.size
        anchors = self.anchors[keep]
        centre = decoded[:, 0:2] + anchors
        half = decoded[:, 2:4] / 2
        boxes = np.hstack([centre - half, centre + half])
        kps = decoded[:, 4:16].reshape(-1, 6, 2) + anchors[:, None, :]
        # from letterboxed [0, 1] to image pixels
        to_px = lambda p: (p * self.size - np.array([pad_x, pad_y])) / scale  # noqa: E731
        boxes = np.hstack([to_px(boxes[:, :2]), to_px(boxes[:, 2:])])
        kps = to_px(kps)
        return weighted_nms(boxes, kps, scores[keep], max_faces, self.iou_threshold)


def weighted_nms(boxes: np.ndarray, kps: np.ndarray, scores: np.ndarray, max_faces: int,
                 iou_threshold: float) -> list[Detection]:
    """MediaPipe-style blending NMS: detections overlapping the best one by iou_threshold or more are one face,
    averaged weighted by score; faces that overlap less (two people side by side) stay apart."""
    order = np.argsort(-scores)
    boxes, kps, scores = boxes[order], kps[order], scores[order]
    remaining = np.ones(len(scores), bool)
    faces = []
    while remaining.any() and len(faces) < max_faces:
        i = int(np.argmax(remaining))
        overlap = remaining & (_iou(boxes[i], boxes) >= iou_threshold)
        w = scores[overlap][:, None]
        faces.append(Detection(box=(boxes[overlap] * w).sum(0) / w.sum(),
                               keypoints=(kps[overlap] * w[:, :, None]).sum(0) / w.sum(),
                               score=float(scores[i])))
        remaining &= ~overlap
    return faces
