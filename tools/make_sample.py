"""Build the bundled sample clip (bridge/data/sample.mp4) from scikit-image's public-domain astronaut photograph.

The photo (NASA, Eileen Collins; public domain, shipped in scikit-image as skimage/data/astronaut.png) is turned into
a short "2.5-D" performance: FaceBridge's own landmark model finds the 468 face points with their depth, the face is
rotated in 3D about a pivot inside the head (so the nose really moves against the cheeks when the head turns), and
the photo is warped piecewise-affinely onto the moved mesh, nearer triangles drawn over farther ones. The face also
blinks and opens its mouth: the points move by FaceBridge's own ARKit expression basis (bridge/expression). The
background stays put. Motion and expression (`motion(t)`, `expression(t)`) are smooth and known, so tests compare
the tracked head pose, blinks and jaw with them.
Deterministic: the same inputs give the same frames.

    python tools/make_sample.py            # writes bridge/data/sample.mp4 and prints its sha256
"""
from __future__ import annotations

import argparse
import hashlib
import math
from pathlib import Path

import cv2
import numpy as np
from scipy.spatial import Delaunay

OUT = Path(__file__).resolve().parents[1] / "bridge" / "data" / "sample.mp4"
WIDTH, HEIGHT, FPS, SECONDS = 480, 360, 30, 10
CROP_ORIGIN = (0, 0)  # the frame's top-left corner in photo pixels (a 480x360 window on the face)


BLINKS_S = (1.3, 3.9, 5.2, 7.6, 9.1)  # blink centres; a blink closes and opens in about 0.3 s
JAW_S = ((2.2, 0.6), (6.3, 0.9), (8.3, 0.5))  # (centre, seconds) of mouth openings, like a few words


def expression(t: float) -> dict:
    """ARKit weights at time t: blinks and a few mouth openings (everything else as in the photo)."""
    blink = max(max(0.0, 1.0 - abs(t - c) / 0.15) for c in BLINKS_S)
    jaw = max(0.55 * math.sin(math.pi * min(1.0, max(0.0, (t - c + d / 2) / d))) for c, d in JAW_S)
    return {"eyeBlinkLeft": min(1.0, 1.3 * blink), "eyeBlinkRight": min(1.0, 1.3 * blink), "jawOpen": jaw}


def motion(t: float) -> dict:
    """Head motion at time t (seconds), FaceFrame conventions (degrees; +yaw = the subject's own left, +pitch =
    up, +roll = toward the left shoulder): sums of incommensurate sines, like an idle performer."""
    return {
        "yaw": 17 * math.sin(2 * math.pi * 0.13 * t) + 4 * math.sin(2 * math.pi * 0.41 * t + 1.0),
        "pitch": 9 * math.sin(2 * math.pi * 0.21 * t + 0.5) + 2 * math.sin(2 * math.pi * 0.67 * t),
        "roll": 7 * math.sin(2 * math.pi * 0.17 * t + 2.0),
        "dx": 12 * math.sin(2 * math.pi * 0.09 * t + 0.3),
        "dy": 6 * math.sin(2 * math.pi * 0.11 * t + 1.7),
    }


def rotation(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """Rotation in image axes (x right, y down, z away from the camera) for FaceFrame angles in degrees."""
    a, b, c = np.radians([yaw, pitch, roll])
    ry = np.array([[math.cos(a), 0, -math.sin(a)], [0, 1, 0], [math.sin(a), 0, math.cos(a)]])  # nose -> +x
    rx = np.array([[1, 0, 0], [0, math.cos(b), math.sin(b)], [0, -math.sin(b), math.cos(b)]])  # nose -> up
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])  # +x -> down
    return rz @ rx @ ry


class HeadRig:
    """The photo's face as a depth mesh, plus fixed background points, triangulated together."""

    def __init__(self, photo: np.ndarray) -> None:
        from bridge.stages.detection import FaceDetector
        from bridge.stages.landmarks import FaceLandmarker, roi_from_detection, roi_from_landmarks

        det = FaceDetector().detect(photo)[0]
        lm = FaceLandmarker()
        points = lm.run(photo, roi_from_detection(det)).points
        points = lm.run(photo, roi_from_landmarks(points)).points  # refine once from its own ROI
        face = points.astype(np.float64)
        width = np.ptp(face[:, 0])
        centre = face[:, :2].mean(0)
        # hair and the head's outline: the face hull pushed out, moving with the head a little behind the face
        hull = face[cv2.convexHull(face[:, :2].astype(np.float32), returnPoints=False).reshape(-1)][:, :2]
        ring = centre + (hull - centre) * 1.45
        ring_z = np.full((len(ring), 1), face[:, 2].max() + 0.15 * width)
        self.moving = np.vstack([face, np.hstack([ring, ring_z])])
        # background: a fixed frame of points around the head, and the photo's border
        outer = centre + (hull - centre) * 2.3
        xs, ys = np.linspace(0, photo.shape[1] - 1, 9), np.linspace(0, photo.shape[0] - 1, 9)
        border = np.array([(x, y) for x in xs for y in ys if x in (xs[0], xs[-1]) or y in (ys[0], ys[-1])])
        self.fixed = np.vstack([outer, border])
        self.source_xy = np.vstack([self.moving[:, :2], self.fixed]).astype(np.float32)
        self.triangles = Delaunay(self.source_xy).simplices
        self.pivot = np.array([centre[0], centre[1] + 0.15 * width, face[:, 2].mean() + 0.75 * width])
        # ARKit expression deltas at the 468 points (FaceBridge's ICT-FaceKit basis), model cm -> image px:
        # model axes are x = subject's left, y up, z out of the face; image axes x right, y down, z away
        from bridge.expression.model import load_model
        from bridge.frame import ARKIT_INDEX

        model = load_model()
        px_per_cm = width / np.ptp(model.neutral[:468, 0])
        self.expression_deltas = {name: model.expression_basis[i, :468] * np.array([1, -1, -1]) * px_per_cm
                                  for name, i in ARKIT_INDEX.items()}

    def pose(self, m: dict, weights: dict | None = None) -> np.ndarray:
        """Destination (x, y, z) of every vertex for motion `m` and ARKit expression `weights`."""
        moving = self.moving.copy()
        for name, w in (weights or {}).items():
            moving[:468] += w * self.expression_deltas[name]
        moved = (moving - self.pivot) @ rotation(m["yaw"], m["pitch"], m["roll"]).T + self.pivot
        moved[:, :2] += (m["dx"], m["dy"])
        fixed = np.hstack([self.fixed, np.full((len(self.fixed), 1), 1e6)])  # farthest: drawn first
        return np.vstack([moved, fixed])


def render(photo: np.ndarray, rig: HeadRig, dest: np.ndarray, origin=CROP_ORIGIN) -> np.ndarray:
    """Piecewise-affine warp: rasterise triangle ids far-to-near, then sample the photo backward per pixel."""
    dst_xy = dest[:, :2] - np.array(origin, np.float64)
    tri_depth = dest[rig.triangles, 2].mean(1)
    ids = np.full((HEIGHT, WIDTH), -1, np.int32)
    for t in np.argsort(-tri_depth):
        cv2.fillConvexPoly(ids, np.round(dst_xy[rig.triangles[t]] * 16).astype(np.int32), int(t),
                           lineType=cv2.LINE_8, shift=4)
    inverse = np.zeros((len(rig.triangles), 2, 3), np.float32)
    for t, tri in enumerate(rig.triangles):
        inverse[t] = cv2.getAffineTransform(dst_xy[tri].astype(np.float32), rig.source_xy[tri])
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    a = inverse[np.maximum(ids, 0)]
    map_x = a[..., 0, 0] * xs + a[..., 0, 1] * ys + a[..., 0, 2]
    map_y = a[..., 1, 0] * xs + a[..., 1, 1] * ys + a[..., 1, 2]
    uncovered = ids < 0
    map_x[uncovered] = xs[uncovered] + origin[0]
    map_y[uncovered] = ys[uncovered] + origin[1]
    return cv2.remap(photo, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT101)


def render_frames(photo_bgr: np.ndarray):
    rig = HeadRig(photo_bgr)
    for i in range(FPS * SECONDS):
        yield render(photo_bgr, rig, rig.pose(motion(i / FPS), expression(i / FPS)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from skimage import data  # tools-only dependency

    photo = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    tmp = args.out.with_suffix(".tmp.mp4")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (WIDTH, HEIGHT))
    if not writer.isOpened():
        raise SystemExit("OpenCV cannot write mp4v video here; install opencv-python-headless from PyPI")
    n = 0
    for frame in render_frames(photo):
        writer.write(frame)
        n += 1
        print(f"\rrendering {n}/{FPS * SECONDS}", end="", flush=True)
    writer.release()
    tmp.replace(args.out)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"\nwrote {args.out}: {n} frames {WIDTH}x{HEIGHT} @ {FPS} fps, {args.out.stat().st_size} bytes, "
          f"sha256 {digest}")


if __name__ == "__main__":
    main()
