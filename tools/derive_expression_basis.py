"""Derive bridge/expression/basis.npz: the ICT-FaceKit Light morphable model sampled at MediaPipe's 468 landmarks.

Sources (../shared/data, never shipped as-is):
  * ict_facekit_light.npz -- ICT-FaceKit Light (MIT, (c) 2020 USC Institute for Creative Technologies)
  * mediapipe_canonical_face_model.obj -- MediaPipe canonical 468-vertex face mesh (Apache-2.0, Google)

Steps
  1. Rigid: similarity transform (Umeyama) of the canonical mesh onto the ICT neutral, from the 68 Multi-PIE
     landmarks (ICT gives their vertex ids; MP_68 below gives the matching MediaPipe vertices).
  2. Non-rigid: a smoothed thin-plate-spline warp driven by the same 68 pairs (made left/right symmetric) carries
     all 468 points onto the ICT face.
  3. Attachment: each warped point is projected onto the ICT face surface (closest point; triangle + barycentric
     weights). Lip and eyelid points are only allowed onto the matching lip / lid (upper vs lower, told apart by
     how far ICT's jawOpen and eyeBlink move them), so a closed mouth or eye cannot glue a point to the wrong side.
  4. Sampling: neutral, the 100 identity modes and the 53 ICT expressions at the attachments; ICT's expressions
     are mapped to Apple's 52 names and order (browInnerUp_L + _R and cheekPuff_L + _R summed; tongueOut has no
     visual basis). cheekRaiser (FACS AU6), which some ICT-FaceKit releases carry, would duplicate ARKit's
     cheekSquintLeft/Right (Apple's AU6); it feeds nothing and is skipped. The copy used here has none: its 53
     shapes are ARKit's 51 visual ones with the two splits. Two extra points, 468 and 469, are the iris centres
     (subject's left, right), which move by eye rotation only (ICT's eyeLook shapes deform the lids; its eyeballs
     are rigged separately).
  5. Rotations: jaw rotation per unit jawOpen / jawLeft / jawRight / jawForward (Kabsch fit to the lower teeth),
     and our eye rotation per unit eyeLook* (ICT has none; see GAZE_DEG).

Axes of the result: ICT model space, centimetres, +x = the subject's left, +y up, +z out of the face.

    python tools/derive_expression_basis.py [--data DIR] [--out PATH]
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from scipy.interpolate import RBFInterpolator
from scipy.spatial.transform import Rotation

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bridge.frame import ARKIT_NAMES  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data"
DEFAULT_OUT = ROOT / "bridge" / "expression" / "basis.npz"

# MediaPipe vertex for each of the 68 Multi-PIE landmarks (jaw 0-16, brows 17-26, nose 27-35, eyes 36-47,
# outer lips 48-59, inner lips 60-67), subject's right first as in the 68-point convention.
MP_68 = np.array([
    162, 234, 93, 58, 172, 136, 149, 148, 152, 377, 378, 365, 397, 288, 323, 454, 389,
    70, 63, 105, 66, 107, 336, 296, 334, 293, 300,
    168, 197, 5, 4, 75, 97, 2, 326, 305,
    33, 160, 158, 133, 153, 144, 362, 385, 387, 263, 373, 380,
    61, 39, 37, 0, 267, 269, 291, 405, 314, 17, 84, 181,
    78, 82, 13, 312, 308, 317, 14, 87,
])
# Mirror partner of each of the 68 landmarks.
MIRROR_68 = np.array(
    list(range(16, -1, -1)) + list(range(26, 16, -1)) + [27, 28, 29, 30] + [35, 34, 33, 32, 31]
    + [45, 44, 43, 42, 47, 46, 39, 38, 37, 36, 41, 40]
    + [54, 53, 52, 51, 50, 49, 48, 59, 58, 57, 56, 55] + [64, 63, 62, 61, 60, 67, 66, 65])

# MediaPipe contours (FACEMESH_LIPS / _EYE), without the corners, which may sit on either side.
UPPER_LIP = [185, 40, 39, 37, 0, 267, 269, 270, 409, 191, 80, 81, 82, 13, 312, 311, 310, 415]
LOWER_LIP = [146, 91, 181, 84, 17, 314, 405, 321, 375, 95, 88, 178, 87, 14, 317, 402, 318, 324]
UPPER_LID = [246, 161, 160, 159, 158, 157, 173, 466, 388, 387, 386, 385, 384, 398]
LOWER_LID = [7, 163, 144, 145, 153, 154, 155, 249, 390, 373, 374, 380, 381, 382]

# Our eye rotation at weight 1 of each gaze shape, degrees (ICT rigs eyeballs apart from its blendshapes, and
# Apple publishes no angles; these are the usual ARKit-to-rig ranges, e.g. UE's Live Link Face remap).
GAZE_DEG = {"In": 30.0, "Out": 30.0, "Up": 25.0, "Down": 30.0}

# Landmark regions for per-region confidence: points that ICT's shapes of that region move noticeably.
REGION_SHAPES = {
    "eyes": [n for n in ARKIT_NAMES if n.startswith("eye") and "Look" not in n],
    "brows": [n for n in ARKIT_NAMES if n.startswith("brow")],
    "jaw": [n for n in ARKIT_NAMES if n.startswith("jaw")],
    "mouth": [n for n in ARKIT_NAMES if n.startswith("mouth")],
    "cheeks_nose": [n for n in ARKIT_NAMES if n.startswith(("cheek", "nose"))],
}


def read_obj_vertices(path: Path) -> np.ndarray:
    rows = [line.split()[1:4] for line in path.read_text().splitlines() if line.startswith("v ")]
    return np.asarray(rows, dtype=np.float64)


def umeyama(src: np.ndarray, dst: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Similarity (s, R, t) minimising |s R src + t - dst|^2."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    a, b = src - mu_s, dst - mu_d
    u, sig, vt = np.linalg.svd(b.T @ a / len(src))
    d = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    r = u @ d @ vt
    s = np.trace(np.diag(sig) @ d) / a.var(0).sum()
    return s, r, mu_d - s * r @ mu_s


def closest_point_on_triangles(p: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray):
    """Closest point to p on each triangle (a, b, c) (arrays of shape (k, 3)); returns points and barycentrics.
    Ericson, Real-Time Collision Detection, 5.1.5, vectorised."""
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = (ab * ap).sum(1), (ac * ap).sum(1)
    bp = p - b
    d3, d4 = (ab * bp).sum(1), (ac * bp).sum(1)
    cp = p - c
    d5, d6 = (ab * cp).sum(1), (ac * cp).sum(1)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    denom = va + vb + vc
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(denom != 0, vb / denom, 0.0)
        w = np.where(denom != 0, vc / denom, 0.0)
        bary = np.stack([1 - v - w, v, w], 1)
        # vertex and edge regions
        cases = [
            ((d1 <= 0) & (d2 <= 0), np.stack([np.ones_like(d1), 0 * d1, 0 * d1], 1)),
            ((d3 >= 0) & (d4 <= d3), np.stack([0 * d1, np.ones_like(d1), 0 * d1], 1)),
            ((d6 >= 0) & (d5 <= d6), np.stack([0 * d1, 0 * d1, np.ones_like(d1)], 1)),
        ]
        t_ab = d1 / (d1 - d3)
        cases.append(((vc <= 0) & (d1 >= 0) & (d3 <= 0), np.stack([1 - t_ab, t_ab, 0 * d1], 1)))
        t_ac = d2 / (d2 - d6)
        cases.append(((vb <= 0) & (d2 >= 0) & (d6 <= 0), np.stack([1 - t_ac, 0 * d1, t_ac], 1)))
        t_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        cases.append(((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0), np.stack([0 * d1, 1 - t_bc, t_bc], 1)))
    done = np.zeros(len(a), bool)
    for mask, value in cases:
        m = mask & ~done
        bary[m] = value[m]
        done |= m
    pts = bary[:, :1] * a + bary[:, 1:2] * b + bary[:, 2:] * c
    return pts, bary


def attach(points: np.ndarray, verts: np.ndarray, tris: np.ndarray, allowed: list[np.ndarray]):
    """Project each point onto the closest allowed triangle. allowed[i]: bool mask over tris for point i."""
    centroids = verts[tris].mean(1)
    tri_idx = np.zeros(len(points), np.int64)
    bary = np.zeros((len(points), 3))
    dist = np.zeros(len(points))
    for i, p in enumerate(points):
        cand = np.flatnonzero(allowed[i])
        tree_d = np.linalg.norm(centroids[cand] - p, axis=1)
        cand = cand[np.argsort(tree_d)[:64]]
        t = tris[cand]
        q, bc = closest_point_on_triangles(p[None], verts[t[:, 0]], verts[t[:, 1]], verts[t[:, 2]])
        d = np.linalg.norm(q - p, axis=1)
        j = int(d.argmin())
        tri_idx[i], bary[i], dist[i] = cand[j], bc[j], d[j]
    return tri_idx, bary, dist


def kabsch_rotvec(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    _, r, _ = umeyama(x0, x1)
    return Rotation.from_matrix(r).as_rotvec()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    ict = np.load(args.data / "ict_facekit_light.npz")
    neutral = ict["neutral"].astype(np.float64)
    tris = ict["triangles"]
    exp_names = [str(n) for n in ict["expression_names"]]
    exp = ict["expression_deltas"].astype(np.float64)
    ident = ict["identity_deltas"].astype(np.float64)
    regions = {str(n): tuple(r) for n, r in zip(ict["region_names"], ict["region_ranges"])}
    mp = read_obj_vertices(args.data / "mediapipe_canonical_face_model.obj")
    assert mp.shape == (468, 3)
    assert mp[263, 0] > 0 > mp[33, 0] and neutral[ict["landmarks_68"][45], 0] > 0, "both meshes: +x = subject's left"

    # 1. rigid (similarity) from the inner 51 landmarks; the jaw line is defined too loosely to anchor scale.
    lm_ict = neutral[ict["landmarks_68"]]
    lm_ict = 0.5 * (lm_ict + lm_ict[MIRROR_68] * [-1, 1, 1])  # exact left/right symmetry
    inner = np.arange(17, 68)
    s, r, t = umeyama(mp[MP_68[inner]], lm_ict[inner])
    mp_rigid = (s * (r @ mp.T)).T + t
    rigid_err = np.linalg.norm(mp_rigid[MP_68] - lm_ict, axis=1)
    print(f"rigid: scale {s:.3f}, 68-point error mean {rigid_err.mean():.2f} cm, max {rigid_err.max():.2f} cm")

    # 2. non-rigid: smoothed thin-plate spline through the 68 displacements
    warp = RBFInterpolator(mp_rigid[MP_68], lm_ict - mp_rigid[MP_68], kernel="thin_plate_spline", smoothing=1.0)
    mp_warped = mp_rigid + warp(mp_rigid)
    mp_warped[np.abs(mp[:, 0]) < 1e-6, 0] = 0.0  # midline stays on the midline

    # 3. attach to the face surface, lips and lids to the right side
    face_end = regions["face"][1]
    face_tris = tris[(tris < face_end).all(1)]
    jaw_move = np.linalg.norm(exp[exp_names.index("jawOpen")], axis=1)[face_tris].max(1)
    blink_move = np.maximum(np.linalg.norm(exp[exp_names.index("eyeBlink_L")], axis=1),
                            np.linalg.norm(exp[exp_names.index("eyeBlink_R")], axis=1))[face_tris].max(1)
    everywhere = np.ones(len(face_tris), bool)
    allowed = [everywhere] * 468
    for i in UPPER_LIP:
        allowed[i] = jaw_move < 0.35 * jaw_move.max()
    for i in LOWER_LIP:
        allowed[i] = jaw_move > 0.5 * jaw_move.max()
    for i in UPPER_LID:
        allowed[i] = blink_move > 0.5 * blink_move.max()
    for i in LOWER_LID:
        allowed[i] = blink_move < 0.35 * blink_move.max()
    tri_idx, bary, dist = attach(mp_warped, neutral, face_tris, allowed)
    print(f"attach: distance to ICT surface mean {dist.mean():.2f} cm, 95% {np.percentile(dist, 95):.2f}, "
          f"max {dist.max():.2f} (point {dist.argmax()})")
    corner = face_tris[tri_idx]  # (468, 3) ICT vertex ids

    def sample(field: np.ndarray) -> np.ndarray:  # field (..., V, 3) -> (..., 468, 3)
        return (field[..., corner, :] * bary[:, :, None]).sum(-2)

    # 4. sample and map to ARKit
    ict_to_arkit = np.zeros((52, len(exp_names)))
    for j, name in enumerate(exp_names):
        if name == "cheekRaiser":
            print("skipping cheekRaiser (ARKit's cheekSquintLeft/Right already carry AU6)")
            continue
        base = name.replace("_L", "Left").replace("_R", "Right")
        if name in ("browInnerUp_L", "browInnerUp_R"):
            base = "browInnerUp"
        if name in ("cheekPuff_L", "cheekPuff_R"):
            base = "cheekPuff"
        ict_to_arkit[ARKIT_NAMES.index(base), j] = 1.0
    assert (ict_to_arkit.sum(1) == np.array([0.0 if n == "tongueOut" else 1.0 for n in ARKIT_NAMES])
            + np.array([1.0 if n in ("browInnerUp", "cheekPuff") else 0.0 for n in ARKIT_NAMES])).all()
    lm_neutral = sample(neutral)
    lm_identity = sample(ident)
    lm_expression = np.einsum("aj,jpk->apk", ict_to_arkit, sample(exp))

    # iris centres (points 468, 469) and eye rotation pivots, with their identity deltas
    pivots, irises, pivot_id, iris_id = [], [], [], []
    for side in ("left", "right"):
        a, b = regions[f"eyeball_{side}"]
        ia, ib = regions[f"iris_{side}"]
        centre = neutral[a:b].mean(0)
        front = neutral[ia:ib][:, 2] > neutral[ia:ib][:, 2].max() - 0.05
        iris = neutral[ia:ib][front].mean(0)
        pivots.append(centre)
        irises.append(iris)
        pivot_id.append(ident[:, a:b].mean(1))
        iris_id.append(ident[:, ia:ib][:, front].mean(1))
    neutral_all = np.concatenate([lm_neutral, np.array(irises)])
    identity_all = np.concatenate([lm_identity, np.stack(iris_id, 1)], 1)
    expression_all = np.concatenate([lm_expression, np.zeros((52, 2, 3))], 1)

    # 5. rotations: jaw from the lower teeth; eyes by convention
    ta, tb = regions["teeth"]
    lower_teeth = np.arange(ta, tb)[np.linalg.norm(exp[exp_names.index("jawOpen"), ta:tb], axis=1) > 1.0]
    jaw_rotvec = np.zeros((52, 3))
    for name in ("jawOpen", "jawLeft", "jawRight", "jawForward"):
        d = exp[exp_names.index(name)]
        jaw_rotvec[ARKIT_NAMES.index(name)] = kabsch_rotvec(neutral[lower_teeth], neutral[lower_teeth] + d[lower_teeth])
    # eye rotation per unit weight as (yaw, pitch) degrees in model axes: +yaw = towards the subject's left
    eye_yaw_pitch = np.zeros((52, 2, 2))  # [shape, eye (left, right), (yaw, pitch)]
    for e, side in enumerate(("Left", "Right")):
        toward_left = 1.0 if side == "Left" else -1.0  # "Out" of the left eye is towards the subject's left
        eye_yaw_pitch[ARKIT_NAMES.index(f"eyeLookOut{side}"), e, 0] = toward_left * GAZE_DEG["Out"]
        eye_yaw_pitch[ARKIT_NAMES.index(f"eyeLookIn{side}"), e, 0] = -toward_left * GAZE_DEG["In"]
        eye_yaw_pitch[ARKIT_NAMES.index(f"eyeLookUp{side}"), e, 1] = GAZE_DEG["Up"]
        eye_yaw_pitch[ARKIT_NAMES.index(f"eyeLookDown{side}"), e, 1] = -GAZE_DEG["Down"]

    # region masks over the 468 points
    region_names = list(REGION_SHAPES)
    region_points = np.zeros((len(region_names), 468), bool)
    for k, names in enumerate(region_names):
        move = np.linalg.norm(lm_expression[[ARKIT_NAMES.index(n) for n in REGION_SHAPES[names]]], axis=2).max(0)
        region_points[k] = move > 0.25 * move.max()
    print("region points:", {n: int(m.sum()) for n, m in zip(region_names, region_points)})

    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        neutral=neutral_all.astype(np.float32),
        identity=identity_all.astype(np.float32),
        expression=expression_all.astype(np.float32),
        arkit_names=np.array(ARKIT_NAMES),
        ict_expression_names=np.array(exp_names),
        ict_to_arkit=ict_to_arkit.astype(np.float32),
        eye_pivot=np.array(pivots, np.float32),
        eye_pivot_identity=np.stack(pivot_id, 1).astype(np.float32),
        eye_yaw_pitch_deg=eye_yaw_pitch.astype(np.float32),
        jaw_rotvec=jaw_rotvec.astype(np.float32),
        attach_vertices=corner.astype(np.int32),
        attach_barycentric=bary.astype(np.float32),
        region_names=np.array(region_names),
        region_points=region_points,
        canonical_rigid=mp_rigid.astype(np.float32),
        source=np.array("ICT-FaceKit Light (MIT, (c) 2020 USC ICT) sampled at the MediaPipe canonical face mesh "
                        "(Apache-2.0, Google) by tools/derive_expression_basis.py"),
    )
    from bridge.fsutil import atomic_write_bytes

    atomic_write_bytes(args.out, buf.getvalue())
    print(f"wrote {args.out} ({len(buf.getvalue()) / 1e6:.2f} MB)")
    print("jaw rotation per unit (deg):",
          {n: np.round(np.degrees(jaw_rotvec[ARKIT_NAMES.index(n)]), 1).tolist()
           for n in ("jawOpen", "jawLeft", "jawRight", "jawForward")})


if __name__ == "__main__":
    main()
