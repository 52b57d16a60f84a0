"""The ONNX models FaceBridge ships, as the model registry lists them (bridge/models/registry.py, the one reader
of manifests): each with its manifest entry (pre-processing, optional `engine` hints such as refittable weights),
verified against its sha256 before use. Also real frames from the bundled sample for parity checks and benchmarks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from bridge.engines.base import EngineError
from bridge.models import verify_file
from bridge.models.registry import shipped_zoo

PACKAGE_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ShippedModel:
    name: str  # file stem, e.g. "face_landmark"
    path: Path
    entry: dict = field(default_factory=dict, compare=False)  # its manifest entry, {} when not listed

    def verified_path(self) -> Path:
        if "sha256" in self.entry:
            return verify_file(self.path, self.entry["sha256"])
        return self.path

    @property
    def engine_hints(self) -> dict:
        """Per-model build hints from the manifest: `engine` {"refittable": ["adapter.*"], "profiles": {input:
        [min, opt, max]}}; a model whose manifest lists `adapter_initializers` (the lip-sync adapter, whose
        weights change with federated updates) gets those as refittable weights."""
        hints = dict(self.entry.get("engine", {}))
        if "refittable" not in hints and self.entry.get("adapter_initializers"):
            hints["refittable"] = sorted(self.entry["adapter_initializers"])
        return hints


def shipped_models() -> list[ShippedModel]:
    """All shipped ONNX models (the registry's, less the LiteRT-only ones), sorted by path."""
    models = [ShippedModel(m.path.stem, m.path, m.entry) for m in shipped_zoo().values() if m.path.suffix == ".onnx"]
    return sorted(models, key=lambda m: m.path)


def find_model(name_or_path: str) -> ShippedModel:
    """A shipped model by name, or any ONNX file by path."""
    path = Path(name_or_path)
    if path.suffix == ".onnx" and path.exists():
        for model in shipped_models():
            if model.path == path.resolve():
                return model
        return ShippedModel(path.stem, path.resolve(), {})
    for model in shipped_models():
        if model.name == name_or_path:
            return model

    names = ", ".join(m.name for m in shipped_models())
    raise EngineError(f"no shipped model or ONNX file named '{name_or_path}'", f"choose one of: {names}")


def sample_frames(count: int = 4, step: int = 15) -> list[np.ndarray]:
    """Real RGB frames (uint8 HxWx3) from the bundled sample clip, for parity checks and benchmarks: every
    `step`-th frame (15 = half a second apart, varied content; 1 = consecutive, real motion between frames)."""
    clip = PACKAGE_DIR / "data" / "sample.mp4"
    frames = []
    capture = cv2.VideoCapture(str(clip))
    try:
        index = 0
        while len(frames) < count:
            ok, bgr = capture.read()
            if not ok:
                break
            if index % step == 0:
                frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            index += 1
    finally:
        capture.release()
    if not frames:  # no clip (stripped install): a deterministic gradient image still exercises every layer
        y, x = np.mgrid[0:360, 0:480]
        frames = [np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)]
    return frames


def frames_as_input(shape: tuple[int, ...], value_range: tuple[float, float] = (0.0, 1.0),
                    count: int = 4) -> np.ndarray:
    """Real frames resized to an NCHW (or NHWC) item shape, scaled to `value_range`, as a float32 batch."""
    nchw = shape[0] in (1, 3)
    channels, height, width = shape if nchw else (shape[2], shape[0], shape[1])
    batch = []
    for rgb in sample_frames(count):
        img = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
        if channels == 1:
            img = img.mean(axis=2, keepdims=True)
        lo, hi = value_range
        img = lo + img * (hi - lo)
        batch.append(img.transpose(2, 0, 1) if nchw else img)
    return np.stack(batch).astype(np.float32)


def value_range_of(entry: dict) -> tuple[float, float]:
    """The input value range a manifest entry describes (defaults to [0, 1])."""
    text = str(entry.get("preprocessing", {}).get("value_range", ""))
    return (-1.0, 1.0) if "[-1, 1]" in text or "[-1,1]" in text else (0.0, 1.0)


# Shipped models TensorRT cannot build today, with the reason. They run on ONNX Runtime (create_session falls
# back by itself); tests check that they still fail, so a TensorRT release that fixes them is noticed.
NOT_BUILDABLE = {
    "silero_vad": "TensorRT-RTX 1.7 asserts on its data-dependent If branches (graphScope.cpp:471); it is a "
                  "0.1 ms-per-chunk CPU model, so ONNX Runtime CPU serves it",
}
