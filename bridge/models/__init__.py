"""The shipped model zoo: ONNX files beside this module, described by manifest.json.

Every load checks the file's sha256 against the manifest, so a corrupt or swapped file is caught before
ONNX Runtime or TensorRT sees it. `tools/build_models.py` rebuilds the files from their source wheels.
Manifests are read, and installed signed releases are found, by `registry.py`; `model_path` asks it, so a
model installed by `fedagent update install` replaces the shipped one only after its hash is checked.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from bridge.errors import ModelError

MODELS_DIR = Path(__file__).resolve().parent
MANIFEST_PATH = MODELS_DIR / "manifest.json"
REBUILD_HINT = "rebuild it with `python tools/build_models.py` (or restore it with `git checkout bridge/models`)"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=1)
def manifest() -> dict:
    """The parsed manifest: {"models": {name: entry}}. Each entry has at least file and sha256."""
    from bridge.models.registry import read_manifest

    return read_manifest(MANIFEST_PATH, REBUILD_HINT)


def model_names() -> list[str]:
    return sorted(manifest()["models"])


def model_entry(name: str) -> dict:
    models = manifest()["models"]
    if name not in models:
        raise ModelError(f"unknown model '{name}'", f"choose one of: {', '.join(sorted(models))}")
    return models[name]


_verified: dict[Path, str] = {}


def verify_file(path: Path, expected_sha256: str, hint: str = REBUILD_HINT) -> Path:
    """Raise ModelError unless `path` exists, is readable and hashes to `expected_sha256`."""
    path = Path(path)
    try:
        digest = sha256_file(path)
    except FileNotFoundError:
        raise ModelError(f"model file {path} is missing", hint) from None
    except OSError as e:
        raise ModelError(f"model file {path} cannot be read ({e.strerror})", hint) from None
    if digest != expected_sha256:
        raise ModelError(f"model file {path} is corrupt or modified (sha256 {digest[:12]}…, expected "
                         f"{expected_sha256[:12]}…)", hint)
    _verified[path] = digest
    return path


def model_path(name: str) -> Path:
    """Verified path of model `name`: its installed signed release (kind "model") if there is one, else the
    shipped file checked against its manifest sha256 (once per process)."""
    from bridge.models.registry import default_registry

    return default_registry().model_path(name)
