"""Build the bundled sample clip (bridge/data/sample.mp4) from scikit-image's public-domain astronaut photograph.

The photo (NASA, Eileen Collins; public domain, shipped in scikit-image as skimage/data/astronaut.png) is warped
frame by frame with smooth, natural-looking head motion: drift, nodding (vertical perspective), turning
(horizontal perspective), tilt and a little zoom, so the default `facebridge run` has something real to track on a
machine with no camera. Deterministic: same inputs give the same frames.

    python tools/make_sample.py            # writes bridge/data/sample.mp4 and prints its sha256
"""
from __future__ import annotations

import argparse
import hashlib
import math
from pathlib import Path

import cv2
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "bridge" / "data" / "sample.mp4"
WIDTH, HEIGHT, FPS, SECONDS = 480, 360, 30, 10
FACE_CENTER = (225.0, 128.0)  # astronaut.png face centre (x, y), from BlazeFace's box on the photo


def motion(t: float) -> dict:
    """Smooth head motion at time t (seconds): sums of incommensurate sines, like an idle performer."""
    return {
        "yaw": 16 * math.sin(2 * math.pi * 0.13 * t) + 4 * math.sin(2 * math.pi * 0.41 * t + 1.0),
        "pitch": 8 * math.sin(2 * math.pi * 0.21 * t + 0.5) + 2 * math.sin(2 * math.pi * 0.67 * t),
        "roll": 6 * math.sin(2 * math.pi * 0.17 * t + 2.0),
        "dx": 18 * math.sin(2 * math.pi * 0.09 * t + 0.3),
        "dy": 10 * math.sin(2 * math.pi * 0.11 * t + 1.7),
        "scale": 1.0 + 0.08 * math.sin(2 * math.pi * 0.07 * t + 0.9),
    }


def frame_transform(m: dict) -> np.ndarray:
    """3x3 homography: the photo as a plane through the face centre, rotated by yaw/pitch/roll about that
    centre and seen by a pinhole camera at the original distance (so the face keeps its size at rest)."""
    cx, cy = FACE_CENTER
    f = 700.0
    yaw, pitch, roll = (math.radians(m[k]) for k in ("yaw", "pitch", "roll"))
    ry = np.array([[math.cos(yaw), 0, math.sin(yaw)], [0, 1, 0], [-math.sin(yaw), 0, math.cos(yaw)]])
    rx = np.array([[1, 0, 0], [0, math.cos(pitch), -math.sin(pitch)], [0, math.sin(pitch), math.cos(pitch)]])
    rz = np.array([[math.cos(roll), -math.sin(roll), 0], [math.sin(roll), math.cos(roll), 0], [0, 0, 1]])
    rot = rz @ rx @ ry
    to_plane = np.array([[1, 0, -cx], [0, 1, -cy], [0, 0, 1.0]])  # pixel -> plane coords about the face
    plane_to_camera = np.column_stack([rot[:, 0], rot[:, 1], [0.0, 0.0, f]])
    k_dst = np.array([[f * m["scale"], 0, WIDTH / 2 + m["dx"]], [0, f * m["scale"], HEIGHT / 2 + m["dy"]],
                      [0, 0, 1.0]])
    return k_dst @ plane_to_camera @ to_plane


def render_frames(photo_bgr: np.ndarray):
    for i in range(FPS * SECONDS):
        h = frame_transform(motion(i / FPS))
        yield cv2.warpPerspective(photo_bgr, h, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_REFLECT101)


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
    writer.release()
    tmp.replace(args.out)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out}: {n} frames {WIDTH}x{HEIGHT} @ {FPS} fps, {args.out.stat().st_size} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()
