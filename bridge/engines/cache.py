"""On-disk engine cache: one engine per (ONNX bytes, TensorRT flavour+version, GPU, precision, profiles, ...).

Layout under the cache directory:
    <model>/<key>.engine      the serialized plan
    <model>/<key>.json        what it was built from (the key fields), its sha256, size, build time, parity
    <model>/<key>.fp16.onnx   the converted FP16 graph, when precision is fp16
    timing/<flavour>-<version>-<target>.cache   TensorRT timing caches, one per flavour, version and GPU
    torch-inductor/           torch.compile's kernels for the torch-cuda runners (Inductor's own layout)
    rewritten/<kind>-<key>.npz  model bytes rewritten at load for the CPU backends (engines/rewritten.py)

An entry is used only if its metadata matches the wanted key fields and the plan still hashes to the recorded
sha256; anything else (stale, corrupt, another version or GPU) is reported, evicted and rebuilt, never loaded.
"""
from __future__ import annotations

import errno
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from bridge.engines.base import EngineBuildError
from bridge.fsutil import atomic_write_bytes, atomic_write_json
from bridge.paths import cache_dir

KEY_VERSION = 1
INDUCTOR_DIR = "torch-inductor"  # torch.compile's kernels (see torch_runner)
REWRITTEN_DIR = "rewritten"  # model bytes rewritten at load (engines/rewritten.py)
NOT_MODELS = ("timing", INDUCTOR_DIR, REWRITTEN_DIR)  # folders of the cache that hold no engines
CPU_CHOICES = "cpu-backends.json"  # the CPU backend measured fastest per model (engines/fastest.py)


def default_cache_dir() -> Path:
    """$FACEBRIDGE_ENGINE_CACHE, else ~/.cache/facebridge/engines (bridge/paths.py)."""
    return cache_dir("engines", "FACEBRIDGE_ENGINE_CACHE")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_of(fields: dict) -> str:
    return sha256_bytes(json.dumps({"key_version": KEY_VERSION, **fields}, sort_keys=True).encode())[:24]


@dataclass
class CacheEntry:
    model: str
    key: str
    plan_path: Path
    meta: dict

    @property
    def fields(self) -> dict:
        return self.meta.get("key_fields", {})

    def read_plan(self) -> bytes:
        """The plan bytes, or EngineBuildError('corrupt') when they no longer match the recorded sha256."""
        try:
            plan = self.plan_path.read_bytes()
        except OSError as e:
            raise CorruptEngine(f"engine {self.plan_path} cannot be read ({e.strerror})") from None
        if sha256_bytes(plan) != self.meta.get("plan_sha256"):
            raise CorruptEngine(f"engine {self.plan_path} is corrupt (sha256 differs from when it was built)")
        return plan


class CorruptEngine(EngineBuildError):
    def __init__(self, problem: str):
        super().__init__(problem, "it is rebuilt automatically; `facebridge engines clear` removes it")


class EngineCache:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root else default_cache_dir()

    @property
    def inductor_dir(self) -> Path:
        return self.root / INDUCTOR_DIR

    # --- lookup and store -------------------------------------------------------------------------------
    def get(self, model: str, fields: dict) -> CacheEntry | None:
        """The entry for these key fields, or None. Does not read the plan (see CacheEntry.read_plan)."""
        key = key_of(fields)
        meta_path = self.root / model / f"{key}.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if meta.get("key_fields") != fields:  # hash collision or hand-edited: never trust it
            return None
        return CacheEntry(model, key, meta_path.with_suffix(".engine"), meta)

    def put(self, model: str, fields: dict, plan: bytes, extra: dict) -> CacheEntry:
        """Store a plan atomically (plan first, metadata last: metadata present means the plan is whole)."""
        key = key_of(fields)
        directory = self.root / model
        meta = {"model": model, "key": key, "key_fields": fields, "plan_sha256": sha256_bytes(plan),
                "plan_bytes": len(plan), "created": time.time(), **extra}
        try:
            atomic_write_bytes(directory / f"{key}.engine", plan)
            atomic_write_json(directory / f"{key}.json", meta)
        except OSError as e:
            for leftover in (directory / f"{key}.engine", directory / f"{key}.json"):
                leftover.unlink(missing_ok=True)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise EngineBuildError(f"no space left on the disk of {self.root} to store the "
                                       f"{len(plan) / 1e6:.1f} MB engine for {model}",
                                       "free some space or pass --cache-dir on another disk") from None
            raise EngineBuildError(f"cannot write the engine cache {self.root} ({e.strerror})",
                                   "pass --cache-dir with a writable directory") from None
        return CacheEntry(model, key, directory / f"{key}.engine", meta)

    def evict(self, entry: CacheEntry) -> None:
        for suffix in (".engine", ".json", ".fp16.onnx"):
            (entry.plan_path.parent / f"{entry.key}{suffix}").unlink(missing_ok=True)

    def derived_path(self, model: str, fields: dict, suffix: str) -> Path:
        return self.root / model / f"{key_of(fields)}{suffix}"

    def timing_cache_path(self, flavour: str, version: str, target: str) -> Path:
        return self.root / "timing" / f"{flavour}-{version}-{target}.cache"

    # --- listing and housekeeping ---------------------------------------------------------------------
    def entries(self, model: str | None = None) -> list[CacheEntry]:
        found = []
        if not self.root.is_dir():
            return found
        for meta_path in sorted(self.root.glob(f"{model or '*'}/*.json")):
            if meta_path.parent.name in NOT_MODELS:
                continue
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, json.JSONDecodeError):
                meta = {"key_fields": {}, "broken_metadata": True}
            found.append(CacheEntry(meta_path.parent.name, meta_path.stem, meta_path.with_suffix(".engine"), meta))
        return found

    def clear(self, model: str | None = None) -> int:
        """Remove engines (of one model, or all, plus timing caches, compiled torch kernels, rewritten model bytes and
        the stored CPU backend choices, so the next start measures again). Returns how many files went."""
        removed = 0
        choices = self.root / CPU_CHOICES
        if model is None and choices.is_file():
            choices.unlink()
            removed += 1
        inductor = self.inductor_dir
        if model is None and inductor.is_dir():
            removed += sum(1 for path in inductor.rglob("*") if path.is_file())
            shutil.rmtree(inductor)
        patterns = [f"{model}/*"] if model else ["*/*"]
        for pattern in patterns:
            for path in self.root.glob(pattern) if self.root.is_dir() else []:
                if path.is_file():
                    path.unlink()
                    removed += 1
        for directory in sorted(self.root.glob("*")) if self.root.is_dir() else []:
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        return removed
