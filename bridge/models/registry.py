"""The one reader of model manifests: which version of every model is shipped and which signed release is
installed, and a verified path for each. No path leaves here before its sha256 matched.

Shipped models are described by bridge/models/manifest.json (the zoo) and by one-model manifests beside the
package that owns them (bridge/audio/lipsync.json, silero_vad.json, bridge/expression/regressor.json). Installed
releases are those the update store (bridge/updates/store.py) names as active; an installed file is checked to be
a regular file (never a link) with the signed length and sha256 on every lookup, so a file swapped after install
is refused rather than run. A corrupt installed release is an error, not a silent fall back: the owner decides
(`fedagent update rollback`).
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from bridge.errors import ModelError
from bridge.models.verify import REBUILD_HINT, is_verified, sha256_file, verify_file
from bridge.updates.store import InstalledRelease, StateDir, default_state_dir, read_state

PACKAGE_DIR = Path(__file__).resolve().parents[1]
ZOO_DIR = Path(__file__).resolve().parent  # bridge/models: the zoo's ONNX files and manifest.json
ONE_MODEL_MANIFESTS = ("audio/lipsync.json", "audio/silero_vad.json", "expression/regressor.json")
ROLLBACK_HINT = "run `fedagent update rollback`, or install the release again with `fedagent update install`"


def read_manifest(path: Path, hint: str) -> dict:
    """A manifest JSON object, or ModelError naming the file and `hint`."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ModelError(f"model manifest {path} is missing", hint) from None
    except IsADirectoryError:
        raise ModelError(f"model manifest {path} is a folder, not a JSON file", hint) from None
    except PermissionError:
        raise ModelError(f"model manifest {path} cannot be read (permission denied)", hint) from None
    except (OSError, ValueError) as e:  # ValueError: JSON syntax, or bytes that are not UTF-8 text
        raise ModelError(f"model manifest {path} is not valid JSON ({str(e)[:120]})", hint) from None
    if not isinstance(doc, dict):
        raise ModelError(f"model manifest {path} is not a JSON object", hint)
    return doc


@dataclass(frozen=True)
class ShippedModel:
    name: str  # "face_landmark", "lipsync", ...
    path: Path  # the ONNX file in the package (not yet verified)
    sha256: str  # what the manifest says it must hash to
    entry: dict  # its manifest entry (inputs, outputs, adapter_initializers, default_adapter, ...)

    @property
    def contract(self) -> int:
        """Model-contract version a release must declare (manifests may say `contract`; default 1)."""
        return int(self.entry.get("contract", 1))


@dataclass(frozen=True)
class ActiveModel:
    """What a session should load for one model right now. Paths are verified; release 0 is the shipped model."""

    name: str
    release: int
    kind: str  # "shipped", "adapter" or "model"
    model_path: Path  # the ONNX file to open
    adapter_path: Path | None  # adapter weights (.npz) to apply, None: the ones inside the ONNX file
    reference_path: Path | None  # reference inputs/outputs (.npz) of the installed release, None when shipped


class ModelRegistry:
    """Shipped and installed versions of every model. `state_dir` is the update store (default per user);
    `zoo_dir` / `zoo_manifest` locate the shipped zoo (default bridge/models, its manifest.json)."""

    def __init__(self, state_dir: str | Path | None = None, zoo_dir: Path | None = None,
                 zoo_manifest: Path | None = None):
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.zoo_dir = Path(zoo_dir or ZOO_DIR)
        self.zoo_manifest = Path(zoo_manifest or self.zoo_dir / "manifest.json")

    # -- shipped -----------------------------------------------------------------------------------------------
    def shipped_models(self) -> dict[str, ShippedModel]:
        return _shipped_models(self.zoo_manifest, self.zoo_dir)

    def names(self) -> list[str]:
        return sorted(self.shipped_models())

    def shipped(self, name: str) -> ShippedModel:
        models = self.shipped_models()
        if name not in models:
            raise ModelError(f"unknown model '{name}'", f"choose one of: {', '.join(sorted(models))}")
        return models[name]

    def shipped_path(self, name: str) -> Path:
        """The shipped file, verified against its manifest sha256 (once per process and path)."""
        model = self.shipped(name)
        if is_verified(model.path, model.sha256):
            return model.path
        return verify_file(model.path, model.sha256)

    # -- installed ---------------------------------------------------------------------------------------------
    def installed(self, name: str) -> InstalledRelease | None:
        """The active installed release of `name` as committed (not verified), None when the shipped one serves."""
        if not self._committed():
            return None
        return read_state(self.state_dir).model(name).active

    def _committed(self) -> bool:
        """Whether the update store holds a committed state, after the installer's own check of its folder (a
        file, an unreadable folder or another user's is refused, never read as "nothing installed")."""
        return StateDir(self.state_dir).check() and (self.state_dir / "state.json").exists()

    def verified_file(self, release: InstalledRelease, file_name: str) -> Path:
        """Path of one file of an installed release after checking it is a regular file with its signed length
        and sha256."""
        path = self.state_dir / "slots" / release.slot / file_name
        want = release.files.get(file_name, {})
        what = f"installed release {release.release} of {release.model}: {file_name}"
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise ModelError(f"{what} is missing", ROLLBACK_HINT) from None
        if not stat.S_ISREG(info.st_mode):
            raise ModelError(f"{what} is not a regular file (a link or special file)", ROLLBACK_HINT)
        if info.st_size != want.get("length") or sha256_file(path) != want.get("sha256"):
            raise ModelError(f"{what} is corrupt or modified (does not match its signed sha256)", ROLLBACK_HINT)
        return path

    def active(self, name: str) -> ActiveModel:
        """The verified files a session of `name` should load: the installed release, else the shipped model."""
        return self._files_of(name, self.installed(name))

    def previous(self, name: str) -> ActiveModel:
        """The verified files a rollback of `name` would serve: the previous release, else the shipped model."""
        if not self._committed():
            return self._files_of(name, None)
        return self._files_of(name, read_state(self.state_dir).model(name).previous)

    def _files_of(self, name: str, release: InstalledRelease | None) -> ActiveModel:
        if release is None:
            return ActiveModel(name, 0, "shipped", self.shipped_path(name), None, None)
        reference = self.verified_file(release, "reference.npz")
        if release.kind == "adapter":
            return ActiveModel(name, release.release, "adapter", self.shipped_path(name),
                               self.verified_file(release, "adapter.npz"), reference)
        return ActiveModel(name, release.release, "model", self.verified_file(release, "model.onnx"), None, reference)

    def model_path(self, name: str) -> Path:
        return self.active(name).model_path

    def adapter_path(self, name: str) -> Path | None:
        return self.active(name).adapter_path

    def default_adapter_path(self, name: str) -> Path | None:
        """The shipped default adapter (.npz) of a model that has one, verified."""
        model = self.shipped(name)
        spec = model.entry.get("default_adapter")
        if not spec:
            return None
        return verify_file(model.path.parent / spec["file"], spec["sha256"])

    def versions(self) -> dict[str, dict]:
        """name -> {"shipped_sha256", "release" (0 = shipped), "kind"} without hashing anything."""
        out = {}
        for name, model in self.shipped_models().items():
            release = self.installed(name)
            out[name] = {"shipped_sha256": model.sha256, "release": release.release if release else 0,
                         "kind": release.kind if release else "shipped"}
        return out


@lru_cache(maxsize=4)
def _shipped_models(zoo_manifest: Path, zoo_dir: Path) -> dict[str, ShippedModel]:
    models = {}
    zoo = read_manifest(zoo_manifest, REBUILD_HINT)
    for name, entry in zoo.get("models", {}).items():
        models[name] = ShippedModel(name, zoo_dir / entry["file"], entry["sha256"], entry)
    for rel in ONE_MODEL_MANIFESTS:
        path = PACKAGE_DIR / rel
        if path.exists():
            entry = read_manifest(path, "restore it with `git checkout bridge`")
            models[path.stem] = ShippedModel(path.stem, path.parent / entry["file"], entry["sha256"], entry)
    return models


def shipped_zoo() -> dict[str, ShippedModel]:
    """Every shipped model by name, from the zoo's manifest and the one-model manifests (read once)."""
    return _shipped_models(ZOO_DIR / "manifest.json", ZOO_DIR)


def default_registry() -> ModelRegistry:
    """The registry for this user's update store ($FACEBRIDGE_HOME or the XDG data dir), read now."""
    return ModelRegistry()
