"""MediaPipe FaceMesh refine_landmarks' own 478 points on the bundled sample: the reference the attention-mesh tests
compare with (tests/data/mediapipe_refine_sample.npz). Run with MediaPipe's venv (`make mediapipe-venv`):

    .venv-mediapipe/bin/python tools/mediapipe_refine_points.py FRAMES.npy OUT.npz [--every 10]

FRAMES.npy: (300, H, W, 3) uint8 BGR, SampleSource's frames (bridge.sources.files.SampleSource(realtime=False,
loop=False)), saved from the FaceBridge venv. Tracking mode over all frames; every Nth frame's x, y pixels kept.
"""
from __future__ import annotations

import argparse

import cv2
import mediapipe as mp
import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("frames")
    p.add_argument("out")
    p.add_argument("--every", type=int, default=10)
    args = p.parse_args()
    frames = np.load(args.frames)
    points = []
    with mp.solutions.face_mesh.FaceMesh(static_image_mode=False, max_num_faces=1, refine_landmarks=True) as mesh:
        for frame in frames:
            found = mesh.process(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)).multi_face_landmarks
            h, w = frame.shape[:2]
            points.append(np.array([[q.x * w, q.y * h] for q in found[0].landmark]) if found else
                          np.full((478, 2), np.nan))
    seq = np.arange(0, len(frames), args.every)
    np.savez_compressed(args.out, seq=seq, points=np.array(points, np.float32)[seq],
                        mediapipe=mp.__version__)


if __name__ == "__main__":
    main()
