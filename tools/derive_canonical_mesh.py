"""Derive bridge/data/canonical_face_468.npy (the 468 vertex positions only, OpenCV axes) from MediaPipe's
canonical face mesh (Apache-2.0, mediapipe/modules/face_geometry/data/canonical_face_model.obj, in
../shared/data). Used as the 3D model for PnP head pose.

The OBJ is y-up, z toward the viewer (OpenGL); we store x right (the subject's left), y down, z away from the
camera (OpenCV), centimetres, so that a frontal face has the identity rotation.

    python tools/derive_canonical_mesh.py [--obj PATH]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OBJ = ROOT.parent / "shared" / "data" / "mediapipe_canonical_face_model.obj"
OUT = ROOT / "bridge" / "data" / "canonical_face_468.npy"


def read_obj_vertices(path: Path) -> np.ndarray:
    rows = [line.split()[1:4] for line in path.read_text().splitlines() if line.startswith("v ")]
    return np.asarray(rows, dtype=np.float64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--obj", type=Path, default=DEFAULT_OBJ)
    args = ap.parse_args()
    v = read_obj_vertices(args.obj)
    assert v.shape == (468, 3), v.shape
    v = v * np.array([1.0, -1.0, -1.0])
    # sanity: subject's left eye outer corner (263) at +x, right (33) at -x; the nose (1, 4) nearest the camera
    assert v[263, 0] > 0 > v[33, 0] and v[:, 2].argmin() in (1, 4), "unexpected canonical mesh orientation"
    np.save(OUT, v.astype(np.float32))
    print(f"wrote {OUT} ({v.shape[0]} vertices, span {np.ptp(v[:, 0]):.1f} cm wide)")


if __name__ == "__main__":
    main()
