"""ExpressionEstimator: 468 landmarks (+ iris) -> ARKit-52 weights, FLAME-style parameters, head pose and
per-region confidence, for one face per call.

method="regressor" (default): the shipped ONNX regressor (or a user model following the contract in
contract.py), about 0.1 ms per face. method="fit": the analysis-by-synthesis reference fit (fit.py), tens of ms.
Both keep a per-subject identity that converges over the first ~3 s, held within fit.IDENTITY_LIMIT standard
deviations of the prior (said once in the info log when a face's fit lies beyond it), and can be restored from a
calibration profile with set_identity(). The regressor's identity refresh runs inline (FacePipeline: every frame's
result is the same on every run), or, given a shared IdentityRefresher (`facebridge serve`, many streams), on that
bounded worker while the stream goes on with the identity it has. tongueOut has no visual basis: it stays 0 here and
comes from lip-sync.
"""
from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from bridge.engines import create_session
from bridge.errors import FaceBridgeError
from bridge.expression.contract import ModelContract, check_session, face_crop, load_contract
from bridge.expression.features import camera_for, landmark_features
from bridge.expression.fit import IDENTITY_FRAMES, IDENTITY_LIMIT, ExpressionFit, hold_identity, identity_prior
from bridge.expression.identity import identity_refresh, identity_refresh_steps
from bridge.expression.model import (
    FLIP,
    MODEL_ID,
    head_angles,
    head_matrix,
    load_model,
    rotvec_from_matrix,
)
from bridge.expression.result import EYE_LEFT, EYE_RIGHT, HEAD, region_confidence, result_math, unit_interval
from bridge.frame import MorphParams

log = logging.getLogger(__name__)
SHIPPED_DIR = Path(__file__).resolve().parent
REGIONS = ("eyes", "brows", "jaw", "mouth", "cheeks_nose")
# Regressor path: identity by least squares on each of the first IDENTITY_UPDATES frames, then every
# IDENTITY_EVERY frames, averaged (about 1 s to converge at 30 fps, then following slowly).
IDENTITY_UPDATES = 30
IDENTITY_EVERY = 30
MAX_LOST_POINTS = 0.25  # more non-finite landmarks than this share and the face is unusable


class ExpressionInputError(FaceBridgeError):
    """Landmarks, iris points or image size handed to the expression engine are unusable."""


@dataclass
class ExpressionResult:
    blendshapes: np.ndarray  # (52,) float32 in bridge.frame.ARKIT_NAMES order, each in [0, 1]
    morph: MorphParams
    head_rotation: np.ndarray  # (yaw, pitch, roll) deg, conventions of bridge.frame.FaceFrame
    head_translation: np.ndarray  # cm, camera space
    region_confidence: dict[str, float] = field(default_factory=dict)


class ExpressionEstimator:
    def __init__(self, method: str = "regressor", backend: str = "onnxruntime", model_dir: str | None = None,
                 cpu_precision: str = "f32", session: bool = True, refresher=None, spread_identity: bool = False):
        """session=False: no inference session of its own; the model's outputs come measured elsewhere (the
        batched tracker of `facebridge serve`) through `estimate_outputs`. refresher: a shared IdentityRefresher
        (bridge/expression/refresh.py) that folds this subject's identity refreshes in off the caller's thread.
        spread_identity: an inline refresh after the first IDENTITY_UPDATES runs in IDENTITY_STEPS parts on as many
        consecutive frames and folds in on the last (FacePipeline: no frame pays a whole refresh, about 1.2 ms, on
        top of its own work; the same estimate, folded in two frames later)."""
        if method not in ("regressor", "fit"):
            raise FaceBridgeError(f"unknown expression method '{method}'", "use 'regressor' or 'fit'")
        self.method = method
        self.model = load_model()
        self.contract: ModelContract | None = None
        self.session = None
        if method == "regressor":
            self.contract = load_contract(model_dir or SHIPPED_DIR)
            if session:
                self.session = create_session(self.contract.path, backend=backend, threads=1,
                                              cpu_precision=cpu_precision)
                check_session(self.contract, self.session)
        self._fit = ExpressionFit(self.model) if method == "fit" else None
        self.refresher = refresher if method == "regressor" else None
        self.spread_identity = bool(spread_identity)
        # frames between identity refreshes after the first second (`bench pipeline --without identity` sets it
        # out of reach, to see the pipeline's spread without them)
        self.identity_every = IDENTITY_EVERY
        self.identity_work = 0  # inline refreshes and spread steps run so far (benchmarks: which frames had one)
        self._identity_lock = threading.Lock()  # the refresher's fold against reset / set_identity
        self._generation = 0  # bumped by reset / set_identity: a refresh measured before them is dropped
        self._points_base: tuple | None = None  # (identity, its bytes, model.identity_points of it)
        self._math = result_math(self.model)
        self._prior = identity_prior(self.model)
        self._told_far = False  # said in the log that a face's identity fit lay far from the prior
        self.reset()

    @property
    def model_versions(self) -> dict[str, str]:
        if self.contract is None:
            return {"expression": f"fit:{MODEL_ID}"}
        sha = self.contract.manifest.get("sha256", "")[:12]
        return {"expression": f"{self.contract.model_id}:{sha}" if sha else self.contract.model_id}

    # -- per-subject identity ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the subject: identity back to the prior, no pose history."""
        identity = np.zeros(self.model.num_identity, np.float32)
        identity[-1] = 0.5  # the MediaPipe-mean share's prior mean (model.py)
        with self._identity_lock:
            self._generation += 1
            self.identity = identity
            self._frames = 0
            self._updates = 0
        self._last_fit: tuple | None = None  # (xy, residual u, v) of the last result: its reprojection = xy + residual
        self._pending = None  # a spread identity refresh under way (a generator: one step a frame)
        self._step_due = False  # observe asked for its next step: run_deferred, or the next frame's start, runs it
        self._waited = False  # its step waited on the last frame (observe's busy)
        if self._fit is not None:
            self._fit.reset()

    def set_identity(self, identity: np.ndarray) -> None:
        """Restore a subject's identity (from the calibration profile): ICT's 100 coefficients, optionally
        followed by the MediaPipe-mean share."""
        v = np.asarray(identity, dtype=np.float32).reshape(-1)
        n = self.model.num_identity
        if len(v) == n - 1:
            v = np.concatenate([v, [0.5]]).astype(np.float32)
        if len(v) != n or not np.isfinite(v).all():
            raise ExpressionInputError(f"identity has {len(v)} values (or non-finite ones); expected {n - 1} or {n}",
                                       "recalibrate with `facebridge calibrate` to store a fresh identity")
        v, _ = hold_identity(v, *self._prior)  # a profile stored before identities were held
        with self._identity_lock:
            self._generation += 1
            self.identity = v
            self._frames = IDENTITY_FRAMES
            self._updates = IDENTITY_UPDATES
            self._pending = None
        if self._fit is not None:
            self._fit.set_identity(v)

    # -- one face -----------------------------------------------------------------------------------
    def estimate(self, landmarks: np.ndarray, image_size: tuple[int, int], iris: np.ndarray | None = None,
                 image: np.ndarray | None = None, busy: bool = False) -> ExpressionResult:
        """landmarks: (468, 3) image px (MediaPipe convention); iris: (2, 5, 2) px, [subject's left, right],
        centre first; image: the frame (BGR), only needed by user models with a face-image input. busy: this
        frame already carries periodic work (the emotion model): a spread identity step waits a frame (`observe`)."""
        xy, iris_xy, size = self._check(landmarks, image_size, iris)
        focal, centre = camera_for(size)
        if self.method == "fit":
            return self._estimate_fit(xy, iris_xy, focal, centre)
        return self._estimate_model(xy, iris_xy, size, focal, centre, image, busy)

    def estimate_outputs(self, landmarks: np.ndarray, image_size: tuple[int, int], outputs: dict[str, np.ndarray],
                         iris: np.ndarray | None = None, busy: bool = False) -> ExpressionResult:
        """`estimate` for a model that already ran (batched elsewhere on the features of these landmarks and
        iris points): outputs are its values by output name, batch of one."""
        if self.method != "regressor":
            raise ExpressionInputError("the analysis-by-synthesis fit has no model outputs to take",
                                       "use the regressor (the default) for measured outputs")
        xy, iris_xy, size = self._check(landmarks, image_size, iris)
        focal, centre = camera_for(size)
        return self._finish_model(outputs, xy, focal, centre, busy)

    def _check(self, landmarks, image_size, iris):
        lm = landmarks if isinstance(landmarks, np.ndarray) else np.asarray(landmarks, dtype=np.float64)
        if lm.ndim != 2 or lm.shape[0] != 468 or lm.shape[1] not in (2, 3):
            raise ExpressionInputError(f"landmarks have shape {lm.shape}, expected (468, 3)",
                                       "pass the face_landmark model's 468 points in image pixels")
        try:
            w, h = (int(v) for v in image_size)
        except (TypeError, ValueError):
            raise ExpressionInputError(f"image_size {image_size!r} is not (width, height)",
                                       "pass the frame's (width, height) in pixels") from None
        if w <= 0 or h <= 0:
            raise ExpressionInputError(f"image_size {image_size!r} is not positive", "pass the frame's size")
        xy = lm[:, :2].astype(np.float64)  # a copy
        # one sum: finite values give a finite sum (or, past 1e308, an infinite one: then the mask finds none)
        bad = None if math.isfinite(float(xy.sum())) else ~np.isfinite(xy).all(1)
        if bad is not None and bad.any():
            # a few lost points: take them from the last frame's model reprojection
            if self._last_fit is None or bad.mean() > MAX_LOST_POINTS:
                raise ExpressionInputError(f"{int(bad.sum())} of 468 landmarks are not finite",
                                           "skip this frame; it has no usable face")
            last_xy, pu, pv = self._last_fit
            xy[bad] = (last_xy + np.stack([pu, pv], 1))[bad]
        iris_xy = None
        if iris is not None:
            ir = iris if isinstance(iris, np.ndarray) else np.asarray(iris, dtype=np.float64)
            if ir.shape[:2] != (2, 5) or ir.shape[-1] < 2:
                raise ExpressionInputError(f"iris points have shape {ir.shape}, expected (2, 5, 2)",
                                           "pass [subject's left eye, right eye] x 5 points, centre first")
            iris_xy = ir[:, 0, :2].astype(np.float64)
            if not math.isfinite(float(iris_xy.sum())):
                iris_xy = None
        return xy, iris_xy, (w, h)

    def _estimate_fit(self, xy, iris_xy, focal, centre) -> ExpressionResult:
        r = self._fit.fit(xy, iris_xy, focal, centre)
        self.identity = self._fit.identity.astype(np.float32)
        self._tell_far(self._fit.identity_worst)
        self._frames = self._fit.frames
        return self._result(r.weights, r.rotation, r.translation, xy, focal, centre, point_error=r.point_error)

    def _estimate_model(self, xy, iris_xy, size, focal, centre, image, busy: bool = False) -> ExpressionResult:
        c = self.contract
        if c.layout == "landmarks-2d-v1":
            x = landmark_features(xy, iris_xy, size)[None]
        else:
            if image is None:
                raise ExpressionInputError(f"the expression model {c.path.name} needs the camera image",
                                           "pass image= to ExpressionEstimator.estimate (the pipeline does)")
            x = face_crop(image, xy, c.image)
        return self._finish_model(self.session.run({c.input_name: x}), xy, focal, centre, busy)

    def _finish_model(self, out, xy, focal, centre, busy: bool = False) -> ExpressionResult:
        """The model's outputs to a result: weights, head rotation, identity update, morph parameters."""
        self.run_deferred()  # the step the frame before left, if nothing ran it after that frame
        c = self.contract
        weights = c.pick("blendshapes", out)
        weights = np.zeros(52, np.float32) if weights is None else unit_interval(weights)
        rot = self._rotation(c, out, xy, focal, centre, weights)
        own = c.model_id == MODEL_ID
        self.observe(weights, rot, xy, focal, centre, own, busy)
        result = self._result(weights, rot, None, xy, focal, centre, with_confidence=own or "blendshapes" in c.outputs)
        if not own:
            # a user model: its parameter block is streamed unchanged
            m = MorphParams(model_id=c.model_id)
            streamed = (("shape", "identity"), ("expression", "expression"), ("jaw_rotation", "jaw_rotation"),
                        ("head_rotation_axis_angle", "head_rotation"), ("eye_rotation_left", "eye_rotation_left"),
                        ("eye_rotation_right", "eye_rotation_right"))
            for role, attr in streamed:
                v = c.pick(role, out)
                if v is not None:
                    setattr(m, attr, v)
            if "head_rotation_axis_angle" not in c.outputs:
                m.head_rotation = rotvec_from_matrix(rot).astype(np.float32)
            m.head_translation = result.head_translation.copy()
            result.morph = m
        return result

    def observe(self, weights, rot, xy, focal, centre, own: bool = True, busy: bool = False) -> None:
        """One frame of this subject seen (weights, head rotation, landmarks): a spread refresh under way takes its
        next step; on the frames that refresh the identity (own model only), it is refreshed inline (spread over
        frames after the first second, when asked), or handed to the shared refresher. busy: a spread step waits
        for the next frame, at most one frame in a row (a frame with the emotion model and an identity step made
        the pipeline's p99: docs/PERFORMANCE.md, "Face pipeline on one CPU core")."""
        self._frames += 1
        wait = busy and not self._waited
        self._waited = wait and self._pending is not None
        if self._pending is not None and not wait:
            self._step_due = True
        if own and (self._updates < IDENTITY_UPDATES or self._frames % self.identity_every == 0):
            if self.refresher is not None:  # latest wins: while one waits, a newer frame replaces it
                self.refresher.offer(self, (self._generation, self.identity, weights, rot, xy, focal, centre))
            elif self.spread_identity and self._updates >= IDENTITY_UPDATES and self._pending is None:
                self._pending = self._identity_steps(self.identity, weights, rot, xy, focal, centre)
                self._waited = wait
                self._step_due = not wait
            else:
                self._update_identity(weights, rot, xy, focal, centre)

    def _update_identity(self, weights, rot, xy, focal, centre) -> None:
        """The per-subject identity: this frame's least-squares estimate folded into the running mean."""
        self.identity_work += 1
        try:
            estimate = self._identity_estimate(self.identity, weights, rot, xy, focal, centre)
        except np.linalg.LinAlgError:  # points no camera fits (all in one place): this frame tells nothing
            return
        self._fold_identity(estimate)

    def refresh_identity(self, observation) -> None:
        """The refresher's side (its own thread): one observation handed over by `observe`, estimated and folded
        in unless the subject was reset or restored since."""
        ExpressionEstimator.refresh_identities([self], [observation])

    @staticmethod
    def refresh_identities(engines: list, observations: list) -> None:
        """refresh_identity of many engines (each at most once), their observations' least-squares problems
        stacked and solved together (bridge/expression/identity.py: the same estimate each gets alone)."""
        groups: dict[int, list[int]] = {}
        for i, engine in enumerate(engines):  # every engine of a process shares one model (load_model)
            groups.setdefault(id(engine.model), []).append(i)
        estimates = [None] * len(engines)
        for members in groups.values():  # all estimated before any is folded in: a failure folds none
            _, identity, weights, rot, xy, focal, centre = zip(*(observations[i] for i in members))
            frames = identity_refresh(engines[members[0]].model, np.stack(identity), np.stack(weights),
                                      np.stack(rot), np.stack(xy), np.array(focal), np.array(centre))
            for i, frame in zip(members, frames):
                estimates[i] = frame
        for engine, observation, frame in zip(engines, observations, estimates):
            with engine._identity_lock:
                if observation[0] == engine._generation:
                    engine._fold_identity(frame)

    def _identity_estimate(self, identity, weights, rot, xy, focal, centre) -> np.ndarray:
        """One frame's least-squares identity, pose and expression held (identity.identity_refresh, one row)."""
        return identity_refresh(self.model, identity[None], weights[None], rot[None], xy[None], [focal],
                                [centre])[0]

    def _identity_steps(self, identity, weights, rot, xy, focal, centre):
        """_identity_estimate as IDENTITY_STEPS steps (identity.identity_refresh_steps)."""
        frames = yield from identity_refresh_steps(self.model, identity[None], weights[None], rot[None], xy[None],
                                                   [focal], [centre])
        return frames[0]

    def run_deferred(self) -> None:
        """The spread refresh's step that the last frame asked for: run after that frame was handed on (the
        pipeline's run_deferred, in the time before the next frame), else at the start of the next frame's model
        outputs, before anything reads the identity; the same step on the same values either way."""
        if self._step_due:
            self._step_due = False
            if self._pending is not None:
                self._step_identity()

    def _step_identity(self) -> None:
        """One step of the spread refresh under way; its last folds the estimate in."""
        self.identity_work += 1
        try:
            next(self._pending)
        except StopIteration as done:
            self._pending = None
            self._fold_identity(done.value)
        except np.linalg.LinAlgError:  # as in _update_identity: that frame's refresh is dropped
            self._pending = None

    def _fold_identity(self, frame: np.ndarray) -> None:
        """Fold one frame's estimate into the running identity, held within IDENTITY_LIMIT of the prior."""
        self._updates += 1
        identity = self.identity  # one read: the stream's thread only ever sees a whole identity
        running = (identity + (frame - identity) / min(self._updates, IDENTITY_UPDATES)).astype(np.float32)
        self.identity, worst = hold_identity(running, *self._prior)
        self._tell_far(worst)

    def _tell_far(self, worst: float) -> None:
        """Say once in the log (`facebridge -v`, the run's log file) that this face's identity fit lies beyond
        IDENTITY_LIMIT: who the person is, never a fault, so nothing for the console."""
        if worst > IDENTITY_LIMIT and not self._told_far:
            self._told_far = True
            log.info("expression: this face's identity fit lies %.1f standard deviations from the morphable "
                     "model's prior in one of its modes; the identity streamed is held within %g there",
                     worst, IDENTITY_LIMIT)

    def identity_points(self, identity: np.ndarray) -> np.ndarray:
        """model.identity_points of this subject's identity, kept until it changes (the model is shared by every
        stream)."""
        base = self._points_base  # one read: (identity, its bytes, its points)
        if base is None or (base[0] is not identity and base[1] != np.asarray(identity).tobytes()):
            base = self._points_base = (identity, np.asarray(identity).tobytes(), self.model.identity_points(identity))
        return base[2]

    def _rotation(self, c: ModelContract, out, xy, focal, centre, weights) -> np.ndarray:
        ypr = c.pick("head_rotation", out)
        if ypr is not None:
            return head_matrix(*ypr[:3].tolist())
        aa = c.pick("head_rotation_axis_angle", out)
        if aa is not None:
            return cv2.Rodrigues(np.asarray(aa[:3], np.float64).reshape(3, 1))[0]
        # the model gives no head pose: PnP of our model's shape
        shape = self.model.shape(self.identity, weights)[:468]
        cam_k = np.array([[focal, 0, centre[0]], [0, focal, centre[1]], [0, 0, 1.0]])
        _, rvec, _ = cv2.solvePnP(shape, xy, cam_k, None, flags=cv2.SOLVEPNP_SQPNP)
        return FLIP @ cv2.Rodrigues(rvec)[0]

    def _result(self, weights, rot, t, xy, focal, centre, point_error=None, with_confidence=True) -> ExpressionResult:
        weights = np.minimum(np.maximum(np.asarray(weights, np.float32), 0.0), 1.0)  # np.clip, a third the overhead
        identity = self.identity  # read once: a refresher may replace it meanwhile
        math_ = self._math
        block = np.asarray(weights, np.float64) @ math_.params
        points = self.model.points_from(self.identity_points(identity), weights)
        t, pu, pv, rms, rotations = math_.face(rot, points, xy, focal, centre, t, block[math_.eyes])
        self._last_fit = (xy, pu, pv)  # the reprojection, built only when a later frame needs it (_check)
        if point_error is not None:
            rms = np.sqrt(self.model.region_average @ point_error ** 2)
        confidence = {name: round(region_confidence(v), 4) if with_confidence else 0.0
                      for name, v in zip(self.model.region_names, rms.tolist())}
        confidence["tongue"] = 0.0  # no visual basis: lip-sync owns tongueOut
        f32 = np.float32
        translation = t.astype(f32)
        morph = MorphParams(model_id=MODEL_ID, identity=identity[:self.model.num_ict_identity].copy(),
                            expression=block[math_.expression].astype(f32), jaw_rotation=block[math_.jaw].astype(f32),
                            head_rotation=rotations[HEAD].astype(f32), head_translation=translation,
                            eye_rotation_left=rotations[EYE_LEFT].astype(f32),
                            eye_rotation_right=rotations[EYE_RIGHT].astype(f32))
        return ExpressionResult(blendshapes=weights, morph=morph, head_rotation=head_angles(rot).astype(np.float32),
                                head_translation=translation.copy(), region_confidence=confidence)
