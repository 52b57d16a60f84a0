"""A face as UsdSkel: a SkelRoot holding a Skeleton (Head, Head/LeftEye, Head/RightEye) whose animation source
is a SkelAnimation with ARKit `blendShapes` and time-sampled `blendShapeWeights` and joint rotations.

Coordinates: Y up, the face looks down +Z (toward a viewer on +Z), centimetres (metersPerUnit 0.01). FaceBridge
head angles (+yaw = the subject turns to their own left, +pitch = looks up, +roll = tilts toward their own left
shoulder) become the rotation Ry(yaw) * Rx(-pitch) * Rz(-roll): turning left swings the face toward +X (the
avatar's left), looking up swings it toward +Y, and the head's top tilts toward +X.
"""
from __future__ import annotations

import math

import numpy as np
from pxr import Gf, Sdf, Usd, UsdGeom, UsdSkel, Vt

JOINTS = ("Head", "Head/LeftEye", "Head/RightEye")
PREFIX = "facebridge:"  # namespace of our extra attributes on the SkelAnimation


def _axis_quat(axis: tuple[float, float, float], degrees: float) -> np.ndarray:
    half = math.radians(degrees) / 2.0
    s = math.sin(half)
    return np.array([math.cos(half), axis[0] * s, axis[1] * s, axis[2] * s])


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product (w, x, y, z): the rotation b, then a."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw])


def head_quat(yaw_deg: float, pitch_deg: float, roll_deg: float = 0.0) -> Gf.Quatf:
    """FaceBridge angles -> rotation in the rig's frame (see the module docstring)."""
    q = _mul(_mul(_axis_quat((0, 1, 0), yaw_deg), _axis_quat((1, 0, 0), -pitch_deg)),
             _axis_quat((0, 0, 1), -roll_deg))
    return Gf.Quatf(float(q[0]), Gf.Vec3f(float(q[1]), float(q[2]), float(q[3])))


def prepare_stage(stage: Usd.Stage, frame_rate: float) -> None:
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.y)
    UsdGeom.SetStageMetersPerUnit(stage, 0.01)
    stage.SetTimeCodesPerSecond(frame_rate)
    stage.SetFramesPerSecond(frame_rate)


def prim_name(subject: str) -> str:
    """A valid USD prim name for a subject ("Anna B." -> "Anna_B_")."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in subject) or "Subject"
    return name if not name[0].isdigit() else f"_{name}"


class FaceRig:
    """The prims of one subject and how one sample is written into them."""

    def __init__(self, stage: Usd.Stage, path: str, blend_shapes: list[str], emotion_names: list[str] = ()):
        self.stage = stage
        self.blend_shapes = list(blend_shapes)
        root = UsdSkel.Root.Define(stage, path)
        self.root = root
        skeleton = UsdSkel.Skeleton.Define(stage, f"{path}/Skeleton")
        identity = Vt.Matrix4dArray([Gf.Matrix4d(1.0)] * len(JOINTS))
        skeleton.CreateJointsAttr(Vt.TokenArray(JOINTS))
        skeleton.CreateBindTransformsAttr(identity)
        skeleton.CreateRestTransformsAttr(identity)
        anim = UsdSkel.Animation.Define(stage, f"{path}/Skeleton/Animation")
        anim.CreateJointsAttr(Vt.TokenArray(JOINTS))
        anim.CreateBlendShapesAttr(Vt.TokenArray(self.blend_shapes))
        anim.CreateTranslationsAttr(Vt.Vec3fArray([Gf.Vec3f(0.0)] * len(JOINTS)))
        anim.CreateScalesAttr(Vt.Vec3hArray([Gf.Vec3h(1.0)] * len(JOINTS)))
        UsdSkel.BindingAPI.Apply(skeleton.GetPrim()).CreateAnimationSourceRel().SetTargets([anim.GetPath()])
        UsdSkel.BindingAPI.Apply(root.GetPrim()).CreateSkeletonRel().SetTargets([skeleton.GetPath()])
        self.skeleton, self.anim = skeleton, anim
        self.weights = anim.CreateBlendShapeWeightsAttr()
        self.rotations = anim.CreateRotationsAttr()
        prim = anim.GetPrim()
        self.emotion_names = list(emotion_names)
        if self.emotion_names:
            prim.CreateAttribute(PREFIX + "emotionNames", Sdf.ValueTypeNames.TokenArray, custom=True,
                                 variability=Sdf.VariabilityUniform).Set(Vt.TokenArray(self.emotion_names))
        self.emotions = prim.CreateAttribute(PREFIX + "emotions", Sdf.ValueTypeNames.FloatArray, custom=True)
        self.confidence = prim.CreateAttribute(PREFIX + "confidence", Sdf.ValueTypeNames.Float, custom=True)
        self.face_found = prim.CreateAttribute(PREFIX + "faceFound", Sdf.ValueTypeNames.Bool, custom=True)
        self.capture_time = prim.CreateAttribute(PREFIX + "captureTime", Sdf.ValueTypeNames.Double, custom=True)
        self.head_translation = prim.CreateAttribute(PREFIX + "headTranslationCm", Sdf.ValueTypeNames.Float3,
                                                     custom=True)

    def write(self, time: Usd.TimeCode, weights, head_ypr, eye_left_yp, eye_right_yp, *, confidence: float = 0.0,
              face_found: bool = True, emotions=None, capture_time: float | None = None,
              head_translation_cm=None) -> None:
        """One sample at `time` (Usd.TimeCode.Default() for a live, unanimated value)."""
        values = np.asarray(weights, dtype=np.float32)
        if values.shape != (len(self.blend_shapes),):
            raise ValueError(f"{values.size} weights for {len(self.blend_shapes)} blend shapes")
        self.weights.Set(Vt.FloatArray.FromNumpy(values), time)
        yaw, pitch, roll = (float(v) for v in head_ypr)
        self.rotations.Set(Vt.QuatfArray([head_quat(yaw, pitch, roll),
                                          head_quat(float(eye_left_yp[0]), float(eye_left_yp[1])),
                                          head_quat(float(eye_right_yp[0]), float(eye_right_yp[1]))]), time)
        self.confidence.Set(float(confidence), time)
        self.face_found.Set(bool(face_found), time)
        if emotions is not None and len(emotions):
            self.emotions.Set(Vt.FloatArray.FromNumpy(np.asarray(emotions, dtype=np.float32)), time)
        if capture_time is not None:
            self.capture_time.Set(float(capture_time), time)
        if head_translation_cm is not None:
            self.head_translation.Set(Gf.Vec3f(*(float(v) for v in head_translation_cm)), time)
