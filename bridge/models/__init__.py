"""The shipped model zoo: ONNX files beside this module, described by manifest.json.

Every load checks the file's sha256 against the manifest, so a corrupt or swapped file is caught before
ONNX Runtime or TensorRT sees it. `tools/build_models.py` rebuilds the files from their source wheels.
Manifests are read, and installed signed releases are found, by `registry.py`; `model_path` asks it, so a
model installed by `fedagent update install` replaces the shipped one only after its hash is checked.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from bridge.errors import ModelError
from bridge.models.registry import ModelRegistry, read_manifest
from bridge.models.verify import REBUILD_HINT, _verified, sha256_file, verify_file  # noqa: F401 (re-exported)

MODELS_DIR = Path(__file__).resolve().parent
MANIFEST_PATH = MODELS_DIR / "manifest.json"


@lru_cache(maxsize=1)
def manifest() -> dict:
    """The parsed manifest: {"models": {name: entry}}. Each entry has at least file and sha256."""
    return read_manifest(MANIFEST_PATH, REBUILD_HINT)


def model_names() -> list[str]:
    return sorted(manifest()["models"])


def model_entry(name: str) -> dict:
    models = manifest()["models"]
    if name not in models:
        raise ModelError(f"unknown model '{name}'", f"choose one of: {', '.join(sorted(models))}")
    return models[name]


def model_path(name: str) -> Path:
    """Verified path of model `name`: its installed signed release (kind "model") if there is one, else the
    shipped file checked against its manifest sha256 (once per process)."""
    return ModelRegistry(zoo_dir=MODELS_DIR, zoo_manifest=MANIFEST_PATH).model_path(name)
