"""MediaPipe's side of `facebridge bench pipeline --against-mediapipe`: a worker run by MediaPipe's own Python.

mediapipe 0.10.21 needs numpy<2 and protobuf<5, so it lives in a venv of its own (`make mediapipe-venv` makes
.venv-mediapipe) and this file imports nothing of FaceBridge. The bench starts it as a subprocess on the same
core and drives it over stdin/stdout, one JSON line each way, so the two sides take turns and never run at once:

  -> {"frames": "/tmp/x.npy", "refine": true}         load the frames (N, H, W, 3) uint8 BGR; open FaceMesh
  <- {"ready": true, "mediapipe": "0.10.21"}
  -> {"run": [start, count], "period_s": 0.0}         track frames start .. start+count-1 (wrapping around),
                                                      one a period_s tick when it is not 0 (idle between)
  <- {"ms": [...], "cpu_ms": [...], "found": [...]}   FaceMesh.process() wall and CPU time (all of its threads)
                                                      per frame, face found or not
  -> {"quit": true}

Timed is `FaceMesh.process(rgb)` alone (legacy solution API, tracking mode, one face): the BGR->RGB conversion
before it is not counted, which favours MediaPipe by a few microseconds a frame.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def main() -> int:
    # MediaPipe's own venv: its cv2 and mediapipe, imported once the worker runs
    import cv2
    import mediapipe as mp

    mesh = frames = None
    for line in sys.stdin:
        msg = json.loads(line)
        if "frames" in msg:
            frames = [cv2.cvtColor(f, cv2.COLOR_BGR2RGB) for f in np.load(msg["frames"])]
            mesh = mp.solutions.face_mesh.FaceMesh(static_image_mode=False, max_num_faces=1,
                                                   refine_landmarks=bool(msg.get("refine", True)),
                                                   min_detection_confidence=0.5, min_tracking_confidence=0.5)
            reply = {"ready": True, "mediapipe": mp.__version__}
        elif "run" in msg:
            start, count = msg["run"]
            period = float(msg.get("period_s", 0.0))
            ms, cpu_ms, found = [], [], []
            due = time.perf_counter()
            for i in range(start, start + count):
                if period:  # the same clock as side_by_side.paced
                    due = max(due + period, time.perf_counter())
                    time.sleep(max(0.0, due - time.perf_counter()))
                rgb = frames[i % len(frames)]
                c0, t0 = time.process_time(), time.perf_counter()
                result = mesh.process(rgb)
                ms.append((time.perf_counter() - t0) * 1000.0)
                cpu_ms.append((time.process_time() - c0) * 1000.0)
                found.append(bool(result.multi_face_landmarks))
            reply = {"ms": ms, "cpu_ms": cpu_ms, "found": found}
        else:
            break
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    if mesh is not None:
        mesh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
