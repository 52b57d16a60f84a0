"""Rotated square regions of interest and the affine crops the landmark models see."""
from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np


@dataclass
class Roi:
    """A square region in image pixels: centre, side length and rotation (radians, image y down)."""

    cx: float
    cy: float
    size: float
    angle: float = 0.0

    def crop_matrix(self, out_size: int) -> np.ndarray:
        """2x3 affine mapping image pixels to crop pixels (out_size x out_size)."""
        c, s = math.cos(self.angle), math.sin(self.angle)
        scale = out_size / self.size
        # crop = scale * R(-angle) @ (p - centre) + out_size / 2
        m = np.array([[c, s], [-s, c]]) * scale
        t = np.array([out_size / 2, out_size / 2]) - m @ np.array([self.cx, self.cy])
        return np.hstack([m, t[:, None]]).astype(np.float32)

    def crop(self, image: np.ndarray, out_size: int) -> tuple[np.ndarray, np.ndarray]:
        """The crop (out_size x out_size x 3) and the 2x3 matrix mapping crop pixels back to the image."""
        m = self.crop_matrix(out_size)
        patch = cv2.warpAffine(image, m, (out_size, out_size), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
        return patch, cv2.invertAffineTransform(m)


def apply_affine(points: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Map (N, >=2) points' x, y through a 2x3 affine; other columns are kept."""
    out = np.array(points, dtype=np.float32, copy=True)
    out[:, :2] = points[:, :2] @ m[:, :2].T + m[:, 2]
    return out


def angle_between(p_from: np.ndarray, p_to: np.ndarray) -> float:
    """Rotation (radians) that makes the line p_from -> p_to horizontal, left to right."""
    return math.atan2(float(p_to[1] - p_from[1]), float(p_to[0] - p_from[0]))
