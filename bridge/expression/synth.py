"""Synthetic (landmarks, truth) samples from the morphable model, for training, tests and `bench expression`.

Every sample: a random identity, an expression from a hand-built prior of realistic combinations (archetypes
such as smiles, surprise, speech-like jaw and lip shapes, blinks and winks, conjugate gaze, plus sparse random
and asymmetric activations), a head pose (yaw +-45, pitch +-30, roll +-20 deg), a distance, an image size and a
focal length the estimators are not told, then landmark noise like the landmark model's, a random share of
MediaPipe's own mean-face offset (the real landmark model's bias away from ICT's neutral), and sometimes an
occluded patch of points or missing iris points.

For training, render() can also damp the lip-corner shapes in the landmarks while keeping the truth
(lip_corner_gain): the real face-landmark model moves the mouth corners less than ICT-FaceKit's smile does. On
real faces labelled by hand (bridge/bench/real_face_labels.json) even the reference fit, which has no learned
prior, read about half the labelled smile (0.2-0.45 for broad smiles labelled 0.8-0.9), while neutral faces read
0.00; a regressor trained on undamped landmarks therefore under-reads real smiles, gentle closed-mouth ones most.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bridge.expression.model import MorphableModel, batch_head_matrices, project
from bridge.frame import ARKIT_INDEX, ARKIT_NAMES

_I = ARKIT_INDEX
PAIRS = [(_I[n], _I[n.replace("Left", "Right")]) for n in ARKIT_NAMES if n.endswith("Left")]
EXCLUSIVE = [("jawLeft", "jawRight"), ("mouthLeft", "mouthRight"), ("eyeBlinkLeft", "eyeWideLeft"),
             ("eyeBlinkRight", "eyeWideRight"), ("mouthSmileLeft", "mouthFrownLeft"),
             ("mouthSmileRight", "mouthFrownRight"), ("browDownLeft", "browOuterUpLeft"),
             ("browDownRight", "browOuterUpRight"), ("mouthPucker", "mouthStretchLeft"),
             ("mouthFunnel", "mouthStretchRight")]
# Archetypes: name -> {shape: weight at full intensity}; "*" expands to Left and Right.
ARCHETYPES = {
    "smile": {"mouthSmile*": 0.8, "cheekSquint*": 0.4, "eyeSquint*": 0.3, "mouthDimple*": 0.2},
    "gentle_smile": {"mouthSmile*": 0.6, "mouthPress*": 0.1, "cheekSquint*": 0.1},
    "smile_teeth": {"mouthSmile*": 0.8, "mouthUpperUp*": 0.2, "mouthStretch*": 0.2, "jawOpen": 0.1,
                    "cheekSquint*": 0.2},
    "grin": {"mouthSmile*": 1.0, "cheekSquint*": 0.6, "eyeSquint*": 0.5, "jawOpen": 0.25, "mouthUpperUp*": 0.3,
             "mouthStretch*": 0.2},
    "smirk_left": {"mouthSmileLeft": 0.8, "cheekSquintLeft": 0.3, "mouthLeft": 0.2},
    "smirk_right": {"mouthSmileRight": 0.8, "cheekSquintRight": 0.3, "mouthRight": 0.2},
    "surprise": {"browInnerUp": 0.9, "browOuterUp*": 0.8, "eyeWide*": 0.7, "jawOpen": 0.4},
    "anger": {"browDown*": 0.8, "eyeSquint*": 0.4, "noseSneer*": 0.3, "mouthPress*": 0.3},
    "sad": {"browInnerUp": 0.7, "mouthFrown*": 0.6, "mouthShrugLower": 0.3},
    "disgust": {"noseSneer*": 0.8, "mouthUpperUp*": 0.5, "browDown*": 0.4, "cheekSquint*": 0.3},
    "kiss": {"mouthPucker": 0.9, "mouthFunnel": 0.3},
    "oh": {"mouthFunnel": 0.8, "jawOpen": 0.35},
    "aa": {"jawOpen": 0.7, "mouthLowerDown*": 0.3},
    "ee": {"mouthStretch*": 0.5, "jawOpen": 0.15, "mouthSmile*": 0.2},
    "mm": {"mouthPress*": 0.6, "mouthRollLower": 0.3, "mouthRollUpper": 0.3},
    "ff": {"mouthRollLower": 0.7, "mouthUpperUp*": 0.2},
    "puff": {"cheekPuff": 0.9, "mouthClose": 0.2},
    "yawn": {"jawOpen": 1.0, "mouthClose": 0.0, "eyeSquint*": 0.5, "browInnerUp": 0.3},
    "blink": {"eyeBlink*": 1.0},
    "wink_left": {"eyeBlinkLeft": 1.0, "cheekSquintLeft": 0.3, "mouthSmileLeft": 0.3},
    "wink_right": {"eyeBlinkRight": 1.0, "cheekSquintRight": 0.3, "mouthSmileRight": 0.3},
    "jaw_left": {"jawLeft": 0.6, "mouthLeft": 0.3},
    "jaw_right": {"jawRight": 0.6, "mouthRight": 0.3},
    "talk": {"jawOpen": 0.3, "mouthLowerDown*": 0.5, "mouthUpperUp*": 0.2},
    "jaw_forward": {"jawForward": 0.8, "jawOpen": 0.1},
    "shrug": {"mouthShrugLower": 0.7, "mouthShrugUpper": 0.4, "mouthPress*": 0.2},
}


def _expand(spec: dict[str, float]) -> np.ndarray:
    w = np.zeros(52)
    for name, v in spec.items():
        for n in ([name.replace("*", "Left"), name.replace("*", "Right")] if "*" in name else [name]):
            w[_I[n]] = v
    return w


ARCHETYPE_WEIGHTS = np.stack([_expand(s) for s in ARCHETYPES.values()])
# The shapes whose landmark motion the real landmark model damps (see the module docstring).
LIP_CORNER = np.array([_I[f"{n}{s}"] for n in ("mouthSmile", "mouthDimple", "cheekSquint") for s in ("Left", "Right")])
NON_GAZE = np.array([i for i, n in enumerate(ARKIT_NAMES) if "Look" not in n and n != "tongueOut"])


def sample_expressions(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 52) weights in [0, 1] from the expression prior (tongueOut always 0)."""
    w = np.zeros((n, 52))
    # sparse random activations, mostly symmetric
    active = rng.random((n, len(NON_GAZE))) < 0.07
    w[:, NON_GAZE] = active * rng.beta(1.2, 1.8, (n, len(NON_GAZE)))
    sym = rng.random((n, 1)) < 0.7
    for left, right in PAIRS:
        if "Look" in ARKIT_NAMES[left]:
            continue
        mixed = 0.5 * (w[:, left] + w[:, right]) * (1 + rng.normal(0, 0.1, n))
        w[:, left] = np.where(sym[:, 0], mixed, w[:, left])
        w[:, right] = np.where(sym[:, 0], mixed * (1 + rng.normal(0, 0.1, n)), w[:, right])
    # archetypes with a random intensity (about 60% of samples, sometimes two)
    for _ in range(2):
        pick = rng.integers(0, len(ARCHETYPE_WEIGHTS), n)
        on = rng.random(n) < 0.45
        intensity = rng.uniform(0.2, 1.15, n)
        w += (on * intensity)[:, None] * ARCHETYPE_WEIGHTS[pick] * rng.uniform(0.75, 1.25, (n, 52))
    # a tenth exactly neutral but for gaze
    w[rng.random(n) < 0.1] = 0.0
    for a, b in EXCLUSIVE:
        ia, ib = _I[a], _I[b]
        keep_a = w[:, ia] >= w[:, ib]
        w[:, ib] = np.where(keep_a, 0.0, w[:, ib])
        w[:, ia] = np.where(keep_a, w[:, ia], 0.0)
    # conjugate gaze with a little vergence: yaw > 0 looks toward the subject's left
    yaw = np.clip(rng.normal(0, 12, n), -30, 30)
    pitch = np.clip(rng.normal(0, 9, n), -25, 25)
    vergence = rng.normal(1.0, 1.5, n)  # each eye turns inward by this much (degrees)
    for side, sign in (("Left", 1.0), ("Right", -1.0)):
        outward = sign * yaw - vergence  # degrees this eye turns away from the nose
        w[:, _I[f"eyeLookOut{side}"]] = np.clip(outward, 0, None) / 30.0
        w[:, _I[f"eyeLookIn{side}"]] = np.clip(-outward, 0, None) / 30.0
        ep = pitch + rng.normal(0, 1.0, n)
        w[:, _I[f"eyeLookUp{side}"]] = np.clip(ep, 0, None) / 25.0
        w[:, _I[f"eyeLookDown{side}"]] = np.clip(-ep, 0, None) / 30.0
    w[:, _I["tongueOut"]] = 0.0
    return np.clip(w, 0.0, 1.0)


@dataclass
class SyntheticBatch:
    landmarks: np.ndarray  # (n, 468, 3) pixels, MediaPipe convention
    iris: np.ndarray  # (n, 2, 2) pixels: [subject's left, right] iris centres
    iris_present: np.ndarray  # (n,) bool
    image_size: np.ndarray  # (n, 2) width, height
    focal: np.ndarray  # (n,) the true focal length, px (estimators assume the image width)
    weights: np.ndarray  # (n, 52) truth
    identity: np.ndarray  # (n, 101) truth: 100 ICT coefficients + the MediaPipe-mean share
    head_rotation: np.ndarray  # (n, 3) yaw, pitch, roll degrees
    head_translation: np.ndarray  # (n, 3) cm


IMAGE_SIZES = np.array([(640, 480), (1280, 720), (1920, 1080), (512, 512), (960, 540)])


def sample_identities(rng: np.random.Generator, n: int, k: int = 100, mediapipe_share: bool = True) -> np.ndarray:
    """(n, k + 1): ICT coefficients ~ N(0, 1) clipped at 3 sigma, then a random share of MediaPipe's own mean
    face in place of ICT's neutral (the real landmark model's systematic offset; see model.py)."""
    ict = np.clip(rng.normal(0, 1, (n, k)), -3, 3)
    share = rng.uniform(0.0, 1.0, (n, 1)) if mediapipe_share else np.zeros((n, 1))
    return np.concatenate([ict, share], 1)


def sample_poses(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.stack([rng.uniform(-45, 45, n), rng.uniform(-30, 30, n), np.clip(rng.normal(0, 8, n), -20, 20)], 1)


def render(model: MorphableModel, rng: np.random.Generator, identity: np.ndarray, weights: np.ndarray,
           angles: np.ndarray, noise: float = 1.0, occlusion: float = 0.08, iris_missing: float = 0.2,
           camera: tuple | None = None, lip_corner_gain: tuple[float, float] | None = None) -> SyntheticBatch:
    """Project (identity (n, 101), weights, angles) through a random camera. camera = (image_size (n,2), focal (n,),
    translation (n,3)) fixes the camera (static-face jitter runs); noise scales the landmark noise;
    lip_corner_gain = (lo, hi) renders the LIP_CORNER shapes at a uniform random fraction of their true weight."""
    n = len(weights)
    shown = np.array(weights, dtype=np.float64)
    if lip_corner_gain is not None:
        shown[:, LIP_CORNER] *= rng.uniform(*lip_corner_gain, (n, 1))
    pts = model.shape(identity, shown)  # (n, 470, 3)
    if camera is None:
        size = IMAGE_SIZES[rng.integers(0, len(IMAGE_SIZES), n)].astype(np.float64)
        focal = size[:, 0] * rng.uniform(0.75, 1.4, n)
        distance = rng.uniform(35, 110, n)
        # keep the face inside the central 70% of the frame
        half = 0.35 * size / focal[:, None] * distance[:, None]
        xy = rng.uniform(-1, 1, (n, 2)) * half
        translation = np.concatenate([xy, distance[:, None]], 1)
    else:
        size, focal, translation = (np.asarray(c, dtype=np.float64) for c in camera)
    rot = batch_head_matrices(angles)
    cam = model.to_camera(pts, rot, translation)
    lm = project(cam, focal, size / 2.0)
    face_px = focal * 15.0 / translation[:, 2]  # about the face width in pixels
    sigma = noise * 0.005 * face_px
    lm[..., :2] += rng.normal(0, 1, lm[..., :2].shape) * sigma[:, None, None]
    lm[..., 2] += rng.normal(0, 2, lm[..., 2].shape) * sigma[:, None]
    if occlusion > 0:
        # an occluded patch: the landmark model guesses there, badly
        for i in np.flatnonzero(rng.random(n) < occlusion):
            centre = lm[i, rng.integers(0, 468), :2]
            d = np.linalg.norm(lm[i, :468, :2] - centre, axis=1)
            patch = np.argsort(d)[: rng.integers(15, 60)]
            lm[i, patch, :2] += rng.normal(0, 0.03 * face_px[i], (len(patch), 2)) + rng.normal(0, 0.02 * face_px[i], 2)
    iris = lm[:, 468:, :2].copy()
    iris_present = rng.random(n) >= iris_missing
    return SyntheticBatch(landmarks=lm[:, :468].astype(np.float32), iris=iris.astype(np.float32),
                          iris_present=iris_present, image_size=size.astype(np.int64), focal=focal,
                          weights=weights.astype(np.float32), identity=identity.astype(np.float32),
                          head_rotation=angles.astype(np.float32), head_translation=translation.astype(np.float32))


def synthetic_batch(model: MorphableModel, rng: np.random.Generator, n: int, **kw) -> SyntheticBatch:
    """n independent random samples."""
    identity = sample_identities(rng, n, model.num_ict_identity)
    return render(model, rng, identity, sample_expressions(rng, n), sample_poses(rng, n), **kw)
