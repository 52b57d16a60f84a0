"""The shipped model zoo: ONNX files beside this module, described by manifest.json.

Every load checks the file's sha256 against the manifest, so a corrupt or swapped file is caught before
ONNX Runtime or TensorRT sees it. `tools/build_models.py` rebuilds the files from their source wheels.
"""
from __future__ import annotations

import hashlib
import json
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
    try:
        return json.loads(MANIFEST_PATH.read_text())
    except FileNotFoundError:
        raise ModelError(f"model manifest {MANIFEST_PATH} is missing", REBUILD_HINT) from None
    except json.JSONDecodeError as e:
        raise ModelError(f"model manifest {MANIFEST_PATH} is not valid JSON ({e})", REBUILD_HINT) from None


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
    """Path of shipped model `name`, verified against its manifest sha256 (once per process)."""
    entry = model_entry(name)
    path = MODELS_DIR / entry["file"]
    if _verified.get(path) == entry["sha256"]:
        return path
    return verify_file(path, entry["sha256"])
