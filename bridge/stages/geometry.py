"""Rotated square regions of interest and the affine crops the landmark models see.

The models' crops are cut with one cv2.warpAffine each from the few source pixels they cover, converted to four
channels first (`Roi.crop_rgba`): OpenCV warps 4-channel images about twice as fast as 3-channel ones, and
converting only the covered box costs a fraction of converting the frame (docs/PERFORMANCE.md).
"""
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
        a, b = c * scale, s * scale
        half = out_size / 2
        return np.array([[a, b, half - (a * self.cx + b * self.cy)],
                         [-b, a, half - (-b * self.cx + a * self.cy)]], np.float32)

    def crop(self, image: np.ndarray, out_size: int) -> tuple[np.ndarray, np.ndarray]:
        """The crop (out_size x out_size x 3) and the 2x3 matrix mapping crop pixels back to the image."""
        m = self.crop_matrix(out_size)
        patch = cv2.warpAffine(image, m, (out_size, out_size), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
        return patch, cv2.invertAffineTransform(m)

    def crop_rgba(self, image: np.ndarray, out_size: int) -> tuple[np.ndarray, np.ndarray]:
        """`crop` of a BGR image as RGBA (out_size x out_size x 4; channels 0-2 RGB), and the back matrix. Only
        the box of source pixels the crop samples is converted and warped; what falls outside the image is 0, as
        with `crop`. Pixel values may differ from `crop`'s by one level where OpenCV rounds a sample position
        differently (its positions are float32, and the box moves their origin)."""
        m = self.crop_matrix(out_size)
        back = cv2.invertAffineTransform(m)
        h, w = image.shape[:2]
        last = out_size - 1.0
        # the crop's corner pixels in the image: the sampled positions lie inside their hull
        xs = (back[0, 2], back[0, 0] * last + back[0, 2], back[0, 1] * last + back[0, 2],
              back[0, 0] * last + back[0, 1] * last + back[0, 2])
        ys = (back[1, 2], back[1, 0] * last + back[1, 2], back[1, 1] * last + back[1, 2],
              back[1, 0] * last + back[1, 1] * last + back[1, 2])
        x0, x1 = max(math.floor(min(xs)) - 1, 0), min(math.floor(max(xs)) + 3, w)
        y0, y1 = max(math.floor(min(ys)) - 1, 0), min(math.floor(max(ys)) + 3, h)
        if x0 >= x1 or y0 >= y1:  # the crop lies outside the image
            return np.zeros((out_size, out_size, 4), np.uint8), back
        box = cv2.cvtColor(image[y0:y1, x0:x1], cv2.COLOR_BGR2RGBA)
        shifted = m.copy()
        shifted[:, 2] += m[:, 0] * x0 + m[:, 1] * y0  # image = box + (x0, y0)
        patch = cv2.warpAffine(box, shifted, (out_size, out_size), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0, 0))
        return patch, back


def apply_affine(points: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Map (N, >=2) points' x, y through a 2x3 affine; other columns are kept."""
    out = np.array(points, dtype=np.float32, copy=True)
    out[:, :2] = points[:, :2] @ m[:, :2].T + m[:, 2]
    return out


def angle_between(p_from: np.ndarray, p_to: np.ndarray) -> float:
    """Rotation (radians) that makes the line p_from -> p_to horizontal, left to right."""
    return math.atan2(float(p_to[1] - p_from[1]), float(p_to[0] - p_from[0]))
