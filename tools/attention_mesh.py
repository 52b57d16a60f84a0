"""Measure MediaPipe's attention mesh (face_landmark_with_attention.tflite) as FaceBridge runs it on stock LiteRT.

The model ships in bridge/models (manifest entry `face_landmark_with_attention`) and runs through
bridge/engines/litert_mediapipe_ops.py (the graph cut at MediaPipe's custom ops, those done in numba) in the
pipeline's attention landmark path (bridge/stages/attention.py, `--landmarks attention`, the default on a CPU).

    python tools/attention_mesh.py --time
        CPU time per face, interleaved on one core: the attention mesh against face_landmark + iris_landmark
        (both eyes, one invoke), each as its LiteRT session
    python tools/attention_mesh.py --check LANDMARKS.npy
        points on the sample clip against MediaPipe's own output for the same frames: LANDMARKS.npy holds
        (300, 478, >=2) pixels from FaceMesh(refine_landmarks=True) in tracking mode over SampleSource's 300 frames
        (tools/mediapipe_refine_points.py --every 1 in .venv-mediapipe); each frame is cropped from MediaPipe's
        previous-frame points
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _session():
    from bridge.engines import create_session
    from bridge.models import model_path

    return create_session(model_path("face_landmark_with_attention"), backend="litert")


def _time() -> None:
    from bridge.engines import create_session
    from bridge.models import model_path

    rng = np.random.default_rng(0)
    face = rng.uniform(0, 1, (1, 3, 192, 192)).astype(np.float32)
    eyes = rng.uniform(0, 1, (2, 3, 64, 64)).astype(np.float32)
    mesh = _session()
    landmark = create_session(model_path("face_landmark"), backend="litert")
    iris = create_session(model_path("iris_landmark"), backend="litert", batch=2)

    def both() -> None:
        landmark.run({landmark.inputs[0].name: face})
        iris.run({iris.inputs[0].name: eyes})

    sides = {"attention mesh (2 LiteRT parts + numpy ops)": lambda: mesh.run({"input_1": face}),
             "face_landmark + iris_landmark (2 eyes, one invoke)": both}
    times: dict[str, list] = {k: [] for k in sides}
    for f in sides.values():
        for _ in range(5):
            f()
    for _ in range(30):  # taking turns
        for k, f in sides.items():
            for _ in range(5):
                c = time.process_time()
                f()
                times[k].append((time.process_time() - c) * 1000.0)
    load = os.getloadavg()[0]
    for k, v in times.items():
        print(f"{k}: {np.median(v):.3f} ms CPU median ({len(v)} calls, load {load:.1f})")


def _check(landmarks_path: str) -> None:
    from bridge.mesh import EYE_REFINEMENT, LIP_REFINEMENT
    from bridge.sources.files import SampleSource
    from bridge.stages.attention import AttentionLandmarker
    from bridge.stages.landmarks import roi_from_landmarks

    theirs = np.load(landmarks_path)
    with SampleSource(realtime=False, loop=False) as src:
        frames = [src.read().image for _ in range(len(theirs))]
    landmarker = AttentionLandmarker(backend="litert")
    refined = np.unique(np.concatenate([LIP_REFINEMENT, *EYE_REFINEMENT]))
    plain = np.setdiff1d(np.arange(468), refined)
    err = {"mesh (points lips/eyes do not refine)": [], "irises (10 points)": []}
    for k in range(1, len(frames)):
        found = landmarker.run(frames[k], roi_from_landmarks(theirs[k - 1, :468]))
        err["mesh (points lips/eyes do not refine)"].append(
            np.linalg.norm(found.points[plain, :2] - theirs[k, plain, :2], axis=1))
        irises = found.eyes.iris[::-1, :, :2].reshape(10, 2)  # MediaPipe: image-left eye's iris first
        err["irises (10 points)"].append(np.linalg.norm(irises - theirs[k, 468:, :2], axis=1))
    for k, v in err.items():
        v = np.concatenate(v)
        print(f"{k}: px from MediaPipe's median {np.median(v):.3f}, p95 {np.percentile(v, 95):.3f}, max {v.max():.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time", action="store_true", help="CPU time per face against FaceBridge's two models")
    p.add_argument("--check", metavar="LANDMARKS.npy", help="MediaPipe's points on the sample to compare with")
    p.add_argument("--core", type=int, default=1, help="the core to run on (default 1)")
    args = p.parse_args()
    os.sched_setaffinity(0, {args.core})
    if args.time:
        _time()
    if args.check:
        _check(args.check)


if __name__ == "__main__":
    main()
