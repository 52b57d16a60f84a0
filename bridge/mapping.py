"""Per-subject blendshape mapping: how one person's measured face becomes the avatar's, after calibration and before
every output (Live Link Face, VMC, iFacialMocap, gRPC, takes, USD).

Trackers read faces differently (the sample's blinks peak at 0.78 and 0.85, so an avatar's eyes never close); peers
let the user tune each blendshape (VSeeFace, VTube Studio, VBridger). A mapping holds, for each of the 52 ARKit
blendshapes, in the order applied to a calibrated weight w in [0, 1]:

    dead_zone  d in [0, 1)     w = max(w - d, 0) / (1 - d)     (small twitches read 0, the full range stays)
    gain       g >= 0          w = w * g
    offset     o in [-1, 1]    w = clamp(w + o, 0, 1)
    gamma      y > 0           w = w ** y                      (or a curve: control points, linear between)
    min, max   in [0, 1]       w = min + w * (max - min)       (the output range)

plus smoothing strengths per region (head, eyes, brows, mouth; the One-Euro filter of stages/describe.py) and a
head dead zone in degrees (the head holds still until it moves further than that: a backlash per angle, applied
by runtime/tuning.py). Every setting has a default that changes nothing, so a file holding only
`{"blendshapes": {"eyeBlinkLeft": {"gain": 2.0}}}` is a whole mapping. The format is documented in
docs/MAPPING.md; a file is checked field by field and refused in one line naming the field and the fix.
"""
from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bridge.errors import FaceBridgeError
from bridge.frame import ARKIT_INDEX, ARKIT_NAMES, NUM_BLENDSHAPES

MAPPING_VERSION = 1
REGIONS = ("head", "eyes", "brows", "mouth")  # smoothing regions; "mouth" holds jaw, mouth, cheeks, nose, tongue
MAX_GAIN = 100.0
MAX_GAMMA = 10.0
MAX_SMOOTHING = 10.0  # as --smoothing (bridge/pipeline.py MAX_SMOOTHING)
MAX_HEAD_DEAD_ZONE = 30.0  # degrees
MAX_CURVE_POINTS = 16
SHAPE_KEYS = ("gain", "offset", "gamma", "curve", "dead_zone", "min", "max")
TOP_KEYS = ("version", "subject", "blendshapes", "smoothing", "head_dead_zone")
_BY_LOWER = {name.lower(): name for name in ARKIT_NAMES}


def region_of(name: str) -> str:
    """The smoothing region of a blendshape: eyes, brows or mouth (jaw, mouth, cheeks, nose, tongue)."""
    return "eyes" if name.startswith("eye") else "brows" if name.startswith("brow") else "mouth"


@dataclass
class ShapeMapping:
    """One blendshape's settings (defaults change nothing)."""

    gain: float = 1.0
    offset: float = 0.0
    gamma: float = 1.0
    curve: list[list[float]] | None = None  # [[x, y], ...] control points, x rising from 0 to 1, y in [0, 1]
    dead_zone: float = 0.0
    min: float = 0.0
    max: float = 1.0

    def to_dict(self) -> dict:
        """Only what differs from the default (a mapping file stays short and readable)."""
        default = ShapeMapping()
        return {k: getattr(self, k) for k in SHAPE_KEYS if getattr(self, k) != getattr(default, k)}


@dataclass
class Mapping:
    """A subject's mapping (see the module docstring); `apply` is vectorised over the 52 weights."""

    shapes: dict[str, ShapeMapping] = field(default_factory=dict)  # ARKit name -> settings; absent = default
    smoothing: dict[str, float] = field(default_factory=dict)  # region -> One-Euro strength; absent = --smoothing
    head_dead_zone: float = 0.0  # degrees, per angle

    def __post_init__(self) -> None:
        self._compile()

    def _compile(self) -> None:
        self._gain = np.ones(NUM_BLENDSHAPES, np.float32)
        self._offset = np.zeros(NUM_BLENDSHAPES, np.float32)
        self._gamma = np.ones(NUM_BLENDSHAPES, np.float32)
        self._dead = np.zeros(NUM_BLENDSHAPES, np.float32)
        self._lo = np.zeros(NUM_BLENDSHAPES, np.float32)
        self._hi = np.ones(NUM_BLENDSHAPES, np.float32)
        self._curves: list[tuple[int, np.ndarray, np.ndarray]] = []
        for name, s in self.shapes.items():
            i = ARKIT_INDEX[name]
            self._gain[i], self._offset[i], self._gamma[i] = s.gain, s.offset, s.gamma
            self._dead[i], self._lo[i], self._hi[i] = s.dead_zone, s.min, s.max
            if s.curve:
                points = np.asarray(s.curve, np.float32)
                self._curves.append((i, points[:, 0].copy(), points[:, 1].copy()))
        self._powered = np.flatnonzero(self._gamma != 1.0)
        self.identity = not self.shapes or all(s == ShapeMapping() for s in self.shapes.values())

    def apply(self, weights: np.ndarray) -> np.ndarray:
        """The mapped copy of 52 calibrated weights in [0, 1] (float32, in [0, 1])."""
        if self.identity:
            return np.clip(np.asarray(weights, np.float32), 0.0, 1.0)
        w = np.maximum(np.asarray(weights, np.float32) - self._dead, 0.0) / (1.0 - self._dead)
        w = np.clip(w * self._gain + self._offset, 0.0, 1.0)
        if len(self._powered):
            w[self._powered] = w[self._powered] ** self._gamma[self._powered]
        for i, xs, ys in self._curves:
            w[i] = np.interp(w[i], xs, ys)
        return np.clip(self._lo + w * (self._hi - self._lo), 0.0, 1.0).astype(np.float32)

    def shape(self, name: str) -> ShapeMapping:
        return self.shapes.get(name, ShapeMapping())

    def with_shape(self, name: str, **settings) -> Mapping:
        """A new mapping with `name`'s settings changed (each checked as a file's would be)."""
        data = self.to_dict()
        data.setdefault("blendshapes", {}).setdefault(name, {}).update(settings)
        return parse_mapping(data, "the new settings")

    def to_dict(self) -> dict:
        out: dict = {"version": MAPPING_VERSION,
                     "blendshapes": {n: s.to_dict() for n, s in self.shapes.items() if s.to_dict()}}
        if self.smoothing:
            out["smoothing"] = dict(self.smoothing)
        if self.head_dead_zone:
            out["head_dead_zone"] = self.head_dead_zone
        return out


def _number(value, where: str, lo: float, hi: float, what: str, fix: str, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise FaceBridgeError(f"mapping {origin}: {where} is {json.dumps(value)}, not {what}", fix)
    return float(value)


def _shape_name(name, origin: str) -> str:
    if isinstance(name, str) and name in ARKIT_INDEX:
        return name
    if isinstance(name, str) and name.lower() in _BY_LOWER:  # Live Link's PascalCase names (EyeBlinkLeft)
        return _BY_LOWER[name.lower()]
    near = difflib.get_close_matches(str(name), ARKIT_NAMES, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise FaceBridgeError(f"mapping {origin}: {json.dumps(name)} is not an ARKit blendshape name",
                          f"{hint}use one of the 52 names in docs/MAPPING.md (e.g. eyeBlinkLeft, jawOpen)")


def _unknown(key, allowed: tuple[str, ...], where: str, origin: str) -> FaceBridgeError:
    near = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    return FaceBridgeError(f"mapping {origin}: {where} has an unknown setting {json.dumps(key)}",
                           f"{hint}the settings are {', '.join(allowed)} (docs/MAPPING.md)")


def _curve(points, where: str, origin: str) -> list[list[float]]:
    fix = "give 2 to 16 [x, y] points with x rising from 0 to 1 and y from 0 to 1, e.g. [[0, 0], [0.5, 0.8], [1, 1]]"
    if not isinstance(points, list) or not 2 <= len(points) <= MAX_CURVE_POINTS or any(
            not isinstance(p, list) or len(p) != 2 for p in points):
        raise FaceBridgeError(f"mapping {origin}: {where} is not a list of [x, y] points", fix)
    out = [[_number(x, where, 0.0, 1.0, "a curve of points in [0, 1]", fix, origin),
            _number(y, where, 0.0, 1.0, "a curve of points in [0, 1]", fix, origin)] for x, y in points]
    xs = [p[0] for p in out]
    if any(b <= a for a, b in zip(xs, xs[1:])) or xs[0] != 0.0 or xs[-1] != 1.0:
        raise FaceBridgeError(f"mapping {origin}: {where}'s x values must rise from 0 to 1", fix)
    return out


def parse_shape(name: str, data, origin: str) -> ShapeMapping:
    where = f"blendshapes.{name}"
    if not isinstance(data, dict):
        raise FaceBridgeError(f"mapping {origin}: {where} is {json.dumps(data)}, not an object of settings",
                              'write it as {"gain": 1.5}, with any of ' + ", ".join(SHAPE_KEYS))
    for key in data:
        if key not in SHAPE_KEYS:
            raise _unknown(key, SHAPE_KEYS, where, origin)
    s = ShapeMapping()
    if "gain" in data:
        s.gain = _number(data["gain"], f"{where}.gain", 0.0, MAX_GAIN, f"a number from 0 to {MAX_GAIN:g}",
                         "1 leaves the weight as measured, 2 doubles it, 0 turns the shape off", origin)
    if "offset" in data:
        s.offset = _number(data["offset"], f"{where}.offset", -1.0, 1.0, "a number from -1 to 1",
                           "0 leaves the weight as measured", origin)
    if "gamma" in data:
        s.gamma = _number(data["gamma"], f"{where}.gamma", 0.01, MAX_GAMMA, f"a number from 0.01 to {MAX_GAMMA:g}",
                          "1 is linear, below 1 lifts weak values, above 1 holds them down", origin)
    if data.get("curve") is not None:
        if "gamma" in data and s.gamma != 1.0:
            raise FaceBridgeError(f"mapping {origin}: {where} has both a gamma and a curve", "keep one of the two")
        s.curve = _curve(data["curve"], f"{where}.curve", origin)
    if "dead_zone" in data:
        s.dead_zone = _number(data["dead_zone"], f"{where}.dead_zone", 0.0, 0.95, "a number from 0 to 0.95",
                              "0 is off; 0.1 makes weights under 0.1 read 0", origin)
    for key in ("min", "max"):
        if key in data:
            setattr(s, key, _number(data[key], f"{where}.{key}", 0.0, 1.0, "a number from 0 to 1",
                                    "the output range is within 0 to 1", origin))
    if s.min > s.max:
        raise FaceBridgeError(f"mapping {origin}: {where}.min {s.min:g} is above its max {s.max:g}",
                              "give min below max (the output range)")
    return s


def parse_mapping(data, origin: str = "file") -> Mapping:
    """A Mapping from its JSON object, every field checked; FaceBridgeError names the first one that is wrong."""
    if not isinstance(data, dict):
        raise FaceBridgeError(f"mapping {origin} holds a JSON {type(data).__name__}, not an object",
                              'write an object such as {"blendshapes": {"eyeBlinkLeft": {"gain": 2.0}}}')
    for key in data:
        if key not in TOP_KEYS:
            raise _unknown(key, TOP_KEYS, "the top level", origin)
    version = data.get("version", MAPPING_VERSION)
    if version != MAPPING_VERSION:
        raise FaceBridgeError(f"mapping {origin}: version {json.dumps(version)} is not one this FaceBridge reads",
                              f"write version {MAPPING_VERSION}, or leave it out")
    shapes_data = data.get("blendshapes", {})
    if not isinstance(shapes_data, dict):
        raise FaceBridgeError(f"mapping {origin}: blendshapes is not an object",
                              'write it as {"eyeBlinkLeft": {"gain": 2.0}, ...}')
    shapes = {}
    for name, settings in shapes_data.items():
        arkit = _shape_name(name, origin)
        shapes[arkit] = parse_shape(arkit, settings, origin)
    smoothing_data = data.get("smoothing", {})
    if not isinstance(smoothing_data, dict):
        raise FaceBridgeError(f"mapping {origin}: smoothing is not an object",
                              'write it as {"head": 2, "eyes": 1, "brows": 1, "mouth": 0.5}')
    smoothing = {}
    for region, value in smoothing_data.items():
        if region not in REGIONS:
            raise _unknown(region, REGIONS, "smoothing", origin)
        smoothing[region] = _number(value, f"smoothing.{region}", 0.0, MAX_SMOOTHING,
                                    f"a strength from 0 to {MAX_SMOOTHING:g}",
                                    "0 is off, 1 the tuned default, 2 twice as smooth", origin)
    dead = _number(data.get("head_dead_zone", 0.0), "head_dead_zone", 0.0, MAX_HEAD_DEAD_ZONE,
                   f"degrees from 0 to {MAX_HEAD_DEAD_ZONE:g}", "0 is off; 1 holds the head until it moves 1 degree",
                   origin)
    return Mapping(shapes=shapes, smoothing=smoothing, head_dead_zone=dead)


def load_mapping(path: str | Path) -> Mapping:
    """A mapping file, checked; a missing, unreadable or malformed file is one line naming it and the fix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FaceBridgeError(f"mapping file {path} does not exist", "check the path given to --mapping") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FaceBridgeError(f"cannot read mapping file {path} ({getattr(e, 'strerror', None) or e})",
                              "check the path and its permissions") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise FaceBridgeError(f"mapping file {path} is not JSON ({e})",
                              "fix the JSON (docs/MAPPING.md has an example)") from None
    return parse_mapping(data, f"file {path}")
