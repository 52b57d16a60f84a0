"""The regressor's input: 468 landmarks (+ iris centres) normalised for position and size ("landmarks-2d-v1").

Layout of the 944 features (documented in bridge/expression/regressor.json and docs/FACE.md):
  [0:936]    (x, y) of the 468 points, minus their mean, divided by their RMS radius s, point-major
  [936:940]  iris centres (subject's left, subject's right), same normalisation; the eye-contour centre when absent
  [940]      1 when iris centres were given, else 0
  [941:943]  (mean - principal point) / focal: where the face sits in the field of view (perspective cue)
  [943]      s / focal: apparent size (distance cue)
z is not used: the landmark model's depth is its least reliable output.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bridge.mesh import EYE_CONTOURS

NUM_FEATURES = 944
FEATURE_LAYOUT = "landmarks-2d-v1"


def mirror_map() -> tuple[np.ndarray, np.ndarray]:
    """(index, sign) with features[..., index] * sign = the features of the same face mirrored left-right: each
    point takes its mirror partner's place (MediaPipe's canonical mesh is exactly symmetric), x changes sign, the
    two iris centres swap. The regressor averages itself with its mirror image through this map, so it cannot
    read one side of a symmetric face larger than the other."""
    canonical = np.load(Path(__file__).resolve().parents[1] / "data" / "canonical_face_468.npy").astype(np.float64)
    mirrored = canonical * np.array([-1.0, 1.0, 1.0])
    partner = np.linalg.norm(canonical[:, None] - mirrored[None], axis=2).argmin(1)
    index = np.arange(NUM_FEATURES)
    sign = np.ones(NUM_FEATURES, np.float32)
    index[:936:2], index[1:936:2] = 2 * partner, 2 * partner + 1
    sign[:936:2] = -1.0
    index[936:940] = [938, 939, 936, 937]
    sign[[936, 938, 941]] = -1.0
    return index, sign


def camera_for(image_size: tuple[int, int], focal: float | None = None) -> tuple[float, tuple[float, float]]:
    """Focal length (px) and principal point; the focal defaults to the image width (intrinsics unknown)."""
    w, h = image_size
    return float(focal or w), (w / 2.0, h / 2.0)


def landmark_features(xy: np.ndarray, iris_xy: np.ndarray | None, image_size: tuple[int, int],
                      focal: float | None = None) -> np.ndarray:
    """xy: (..., 468, 2) pixels; iris_xy: (..., 2, 2) pixels or None -> (..., 944) float32."""
    xy = np.asarray(xy, dtype=np.float64)
    f, centre = camera_for(image_size, focal)
    if xy.ndim == 2:
        return _one_face(xy, iris_xy, f, centre)
    lead = xy.shape[:-2]
    present = np.full(lead, iris_xy is not None)
    iris = np.zeros(lead + (2, 2)) if iris_xy is None else np.asarray(iris_xy, dtype=np.float64)
    return features_batch(xy, iris, present, np.full(lead, f), np.broadcast_to(np.asarray(centre), lead + (2,)))


_CONTOUR_MEAN = np.zeros((2, 468))  # averages each eye's lid contour: the iris centre's stand-in
for _eye, _idx in enumerate(EYE_CONTOURS):
    _CONTOUR_MEAN[_eye, list(_idx)] = 1.0 / len(_idx)


def _one_face(xy: np.ndarray, iris_xy: np.ndarray | None, f: float, centre: tuple[float, float]) -> np.ndarray:
    """features_batch for one face, (468, 2) float64: the same values (to rounding), from a few whole-array
    operations (reductions along the 468 points of an (N, 2) array are slow in numpy; products are not)."""
    x, y = xy[:, 0], xy[:, 1]
    mx, my = float(x.sum()) / len(xy), float(y.sum()) / len(xy)
    out = np.empty(NUM_FEATURES, np.float64)
    centred = out[:936].reshape(468, 2)
    np.subtract(xy, (mx, my), out=centred)
    s = math.sqrt(float(np.dot(out[:936], out[:936])) / len(xy))
    eyes = _CONTOUR_MEAN @ xy if iris_xy is None else np.asarray(iris_xy, np.float64)
    out[936:940] = (eyes - (mx, my)).reshape(-1)
    out[:940] /= s
    out[940] = 0.0 if iris_xy is None else 1.0
    out[941], out[942], out[943] = (mx - centre[0]) / f, (my - centre[1]) / f, s / f
    return out.astype(np.float32)


def features_batch(xy: np.ndarray, iris: np.ndarray, iris_present: np.ndarray, focal: np.ndarray,
                   centre: np.ndarray) -> np.ndarray:
    """Vectorised form: xy (..., 468, 2), iris (..., 2, 2), iris_present (...,) bool, focal (...,), centre (..., 2)."""
    mean = xy.mean(axis=-2, keepdims=True)
    centred = xy - mean
    s = np.sqrt((centred ** 2).sum(-1).mean(-1))[..., None, None]
    contour = np.stack([xy[..., idx, :].mean(-2) for idx in map(list, EYE_CONTOURS)], -2)
    present = np.asarray(iris_present, bool)[..., None, None]
    eyes = np.where(present, iris, contour)
    lead = xy.shape[:-2]
    f = np.asarray(focal, dtype=np.float64)[..., None]
    parts = [
        (centred / s).reshape(*lead, -1),
        ((eyes - mean) / s).reshape(*lead, -1),
        present.reshape(*lead, 1).astype(np.float64),
        (mean[..., 0, :] - centre) / f,
        s[..., 0, :] / f,
    ]
    return np.concatenate(parts, axis=-1).astype(np.float32)
