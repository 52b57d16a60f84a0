"""`facebridge models verify`: every shipped model really works, not only the face zoo.

A model passes when its file hashes to its manifest's sha256, loads in ONNX Runtime and gives finite outputs for
one forward pass on zeros (batch 1; other free axes from its manifest, else 1). The shipped models are the ones
the registry (registry.py, the one reader of manifests) knows: the face zoo of bridge/models/manifest.json and the
lip-sync, voice-activity and expression models described beside the code that uses them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bridge import models
from bridge.engines import create_session
from bridge.errors import ModelError
from bridge.models.registry import ModelRegistry
from bridge.models.verify import verify_file


@dataclass(frozen=True)
class ModelCheck:
    name: str
    path: Path
    sha256: str  # expected, from the manifest
    entry: dict  # its manifest entry
    in_zoo: bool  # described by bridge/models/manifest.json


def _shapes(entry: dict) -> dict:
    """Input shapes from either manifest style: [{"name", "shape"}, ...] or {name: shape}."""
    inputs = entry.get("inputs", {})
    if isinstance(inputs, dict):
        return {k: list(v) for k, v in inputs.items() if isinstance(v, list)}
    return {t["name"]: list(t.get("shape", [])) for t in inputs if isinstance(t, dict) and "name" in t}


def shipped_checks() -> list[ModelCheck]:
    """Every shipped model, the zoo first, each group by name."""
    registry = ModelRegistry(zoo_dir=models.MODELS_DIR, zoo_manifest=models.MANIFEST_PATH)
    zoo = set(models.model_names())
    shipped = registry.shipped_models()
    ordered = sorted(shipped.values(), key=lambda m: (m.name not in zoo, m.name))
    return [ModelCheck(m.name, m.path, m.sha256, m.entry, m.name in zoo) for m in ordered]


def find_checks(names: list[str]) -> list[ModelCheck]:
    """The checks for `names` (all when empty); an unknown name fails with the list of known ones."""
    checks = shipped_checks()
    if not names:
        return checks
    by_name = {c.name: c for c in checks}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ModelError(f"unknown model '{unknown[0]}'", f"choose one of: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def verify(check: ModelCheck) -> float:
    """sha256, load, one forward pass on zeros. Returns the run time in ms; raises ModelError."""
    path = verify_file(check.path, check.sha256)
    shapes = _shapes(check.entry)
    try:
        session = create_session(path, threads=1)
        feeds = {t.name: np.zeros(_dims(t.shape, shapes.get(t.name, [])), t.dtype) for t in session.inputs}
        t0 = time.perf_counter()
        outputs = session.run(feeds)
        ms = (time.perf_counter() - t0) * 1e3
    except ModelError:
        raise
    except Exception as e:  # the runtime's own words, one line
        raise ModelError(f"model file {path} does not run ({str(e).splitlines()[0][:160]})",
                         "rebuild it with `python tools/build_models.py` or `git checkout bridge`") from None
    for name, out in outputs.items():
        if out is None or not np.isfinite(out).all():
            raise ModelError(f"model file {path} gives no finite '{name}' output on zeros",
                             "rebuild it with `python tools/build_models.py`")
    return ms


def _dims(shape, manifest_shape) -> list[int]:
    """A concrete shape: the model's fixed axes, else the manifest's number for that axis, else 1."""
    dims = []
    for i, d in enumerate(shape):
        given = manifest_shape[i] if i < len(manifest_shape) else None
        dims.append(d if isinstance(d, int) else given if isinstance(given, int) else 1)
    return dims
