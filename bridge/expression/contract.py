"""The expression model contract: a manifest (JSON) beside an ONNX model says what goes in and which outputs
are blendshapes, shape, expression and pose, so a user can replace the shipped regressor with their own model
(for example an image-to-FLAME encoder they are licensed to use). docs/FACE.md, "Expression model
contract", is the user-facing description; bridge/expression/regressor.json is the shipped example.

Manifest ("format": "facebridge-expression-model/1"):
  file, model_id (streamed as MorphParams.model_id), optional sha256 (checked when given)
  input:   {"name", "layout": "landmarks-2d-v1"}  -- the 944 features of bridge/expression/features.py
        or {"name", "layout": "face-image-v1", "size": [w, h], "order": "nchw"|"nhwc", "channels": "rgb"|"bgr",
            "scale": 1/255, "mean": [3], "std": [3], "crop_scale": 1.4} -- a square crop around the landmarks
  outputs: role -> {"name": output name, optional "slice": [start, stop] along the last axis}; roles:
    blendshapes        (52) ARKit weights, bridge.frame.ARKIT_NAMES order, [0, 1]
    shape              identity / shape coefficients            -> MorphParams.identity, unchanged
    expression         expression coefficients                  -> MorphParams.expression, unchanged
    head_rotation      (3) yaw, pitch, roll degrees (FaceFrame conventions)
    head_rotation_axis_angle (3) radians, model space           -> MorphParams.head_rotation, unchanged
    jaw_rotation       (3) axis-angle radians                   -> MorphParams.jaw_rotation, unchanged
    eye_rotation_left, eye_rotation_right (3) axis-angle radians -> MorphParams, unchanged
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from bridge.errors import ModelError
from bridge.models import sha256_file
from bridge.models.registry import read_manifest

FORMAT = "facebridge-expression-model/1"
LAYOUTS = ("landmarks-2d-v1", "face-image-v1")
ROLES = ("blendshapes", "shape", "expression", "head_rotation", "head_rotation_axis_angle", "jaw_rotation",
         "eye_rotation_left", "eye_rotation_right")
ROLE_SIZES = {"blendshapes": 52, "head_rotation": 3, "head_rotation_axis_angle": 3, "jaw_rotation": 3,
              "eye_rotation_left": 3, "eye_rotation_right": 3}
MANIFEST_NAMES = ("model.json", "regressor.json")


@dataclass
class ModelContract:
    path: Path  # the ONNX file
    model_id: str
    input_name: str
    layout: str
    image: dict = field(default_factory=dict)  # face-image-v1 settings
    outputs: dict[str, tuple[str, tuple[int, int] | None]] = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)

    def pick(self, role: str, values: dict[str, np.ndarray]) -> np.ndarray | None:
        """The first row of the role's output (its slice), float32, or None when the model does not give it."""
        if role not in self.outputs:
            return None
        return self.pick_rows(role, values)[0].copy()

    def pick_rows(self, role: str, values: dict[str, np.ndarray]) -> np.ndarray:
        """Every row of the role's output (its slice): (rows, width) float32 (a batch of many faces' outputs)."""
        name, sl = self.outputs[role]
        v = np.asarray(values[name], dtype=np.float32)
        v = v.reshape(v.shape[0], -1)
        return v[:, sl[0]:sl[1]] if sl else v


def _bad(path: Path, problem: str) -> ModelError:
    return ModelError(f"expression model manifest {path}: {problem}",
                      "fix it as described in docs/FACE.md, 'Expression model contract'")


def find_manifest(model_dir: str | Path) -> Path:
    d = Path(model_dir)
    if d.is_file():
        return d
    for name in MANIFEST_NAMES:
        if (d / name).is_file():
            return d / name
    raise ModelError(f"no expression model manifest ({' or '.join(MANIFEST_NAMES)}) in {d}",
                     "point model_dir at the folder holding the ONNX file and its manifest")


_digests: dict[tuple, str] = {}  # (path, inode, size, mtime) -> sha256: every serve stream loads the contract


def _digest(path: Path) -> str:
    """The file's sha256, hashed again only when the file changed (a replaced file has a new inode and mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _digests:
        _digests[key] = sha256_file(path)
    return _digests[key]


def load_contract(model_dir: str | Path) -> ModelContract:
    path = find_manifest(model_dir)
    m = read_manifest(path, "fix it as described in docs/FACE.md, 'Expression model contract'")
    if m.get("format") != FORMAT:
        raise _bad(path, f"'format' must be '{FORMAT}'")
    for key in ("file", "model_id", "input", "outputs"):
        if key not in m:
            raise _bad(path, f"'{key}' is missing")
    onnx_path = path.parent / m["file"]
    if not onnx_path.is_file():
        raise ModelError(f"expression model file {onnx_path} is missing", "put the ONNX file beside its manifest")
    if m.get("sha256"):
        digest = _digest(onnx_path)
        if digest != m["sha256"]:
            raise ModelError(f"expression model {onnx_path} does not match the sha256 in {path.name}",
                             "restore the file, or update 'sha256' if you replaced the model on purpose")
    inp = m["input"]
    layout = inp.get("layout")
    if layout not in LAYOUTS:
        raise _bad(path, f"input layout '{layout}' is unknown; use one of {', '.join(LAYOUTS)}")
    if layout == "face-image-v1" and len(inp.get("size", [])) != 2:
        raise _bad(path, "a face-image-v1 input needs 'size': [width, height]")
    outputs = {}
    for role, spec in m["outputs"].items():
        if role not in ROLES:
            raise _bad(path, f"output role '{role}' is unknown; use {', '.join(ROLES)}")
        sl = spec.get("slice")
        outputs[role] = (spec["name"], (int(sl[0]), int(sl[1])) if sl else None)
    if not outputs:
        raise _bad(path, "'outputs' names no role")
    return ModelContract(path=onnx_path, model_id=str(m["model_id"]), input_name=inp.get("name", "input"),
                         layout=layout, image=inp, outputs=outputs, manifest=m)


def check_session(contract: ModelContract, session) -> None:
    """Raise ModelError unless the opened model has the declared input and outputs."""
    names = {o.name for o in session.outputs}
    inputs = {i.name: i for i in session.inputs}
    if contract.input_name not in inputs:
        raise ModelError(f"expression model {contract.path.name} has no input '{contract.input_name}' "
                         f"(it has {', '.join(inputs)})", "fix 'input.name' in its manifest")
    for role, (name, _) in contract.outputs.items():
        if name not in names:
            raise ModelError(f"expression model {contract.path.name} has no output '{name}' for '{role}' "
                             f"(it has {', '.join(sorted(names))})", "fix 'outputs' in its manifest")


def face_crop(image: np.ndarray, xy: np.ndarray, spec: dict) -> np.ndarray:
    """The face-image-v1 input: a square crop around the landmarks, resized and normalised as the manifest says."""
    w, h = (int(v) for v in spec["size"])
    lo, hi = xy.min(0), xy.max(0)
    centre, side = (lo + hi) / 2, float((hi - lo).max()) * float(spec.get("crop_scale", 1.4))
    src = np.float32([centre - side / 2, [centre[0] + side / 2, centre[1] - side / 2], centre + side / 2])
    dst = np.float32([[0, 0], [w, 0], [w, h]])
    crop = cv2.warpAffine(image, cv2.getAffineTransform(src[:3], dst), (w, h), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT)
    if crop.ndim == 2:
        crop = np.repeat(crop[..., None], 3, axis=2)
    if spec.get("channels", "rgb") == "rgb":
        crop = crop[..., ::-1]  # frames are BGR (OpenCV)
    x = crop.astype(np.float32) * float(spec.get("scale", 1.0 / 255.0))
    x = (x - np.asarray(spec.get("mean", [0, 0, 0]), np.float32)) / np.asarray(spec.get("std", [1, 1, 1]), np.float32)
    if spec.get("order", "nchw") == "nchw":
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x[None])
