"""The device's training data: the bounded, owner-only learning store `facebridge run --learn` writes
(bridge/audio/learn_store.py), read as training rows for fedagent/app/task.py.

Policy: the store is only ever read here, never sent; what leaves the device is the masked adapter update.
The frozen base's outputs for each window (h, z0) are cached beside the windows (`.features-<model>.npz`,
0600, rebuilt when the windows or the model change), so a round costs training, not re-running the GRU. The
cache lives in the store folder, so `fedagent data clear` removes it with the windows. Held-out slice: every
`holdout_every`-th window by time, the same on every call, so early stopping and before/after errors are
measured on data the adapter did not train on.
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bridge.audio.learn_store import DEFAULT_MAX_BYTES, LearnStore
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_bytes
from fedagent.app.task import Frames, Trunk, frames_from_windows, shipped_base, split_windows

MIN_WINDOWS = 2


def open_store(path: str | Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> LearnStore:
    return LearnStore(path, max_bytes=max_bytes)


@dataclass
class DeviceData:
    """One device's (train, held-out) rows and how many windows each came from."""

    train: Frames
    held_out: Frames
    train_windows: int
    held_out_windows: int


def _cache_path(store: LearnStore, trunk_sha: str) -> Path:
    return store.root / f".features-{trunk_sha[:12]}.npz"


def _fingerprint(names: list[str]) -> str:
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def load_device_data(store: LearnStore, trunk: Trunk | None = None, holdout_every: int = 5) -> DeviceData:
    """The store's windows as training rows, from the feature cache when it matches the windows."""
    paths = store.paths()
    if len(paths) < MIN_WINDOWS:
        raise FaceBridgeError(f"the learning store {store.root} holds {len(paths)} window(s); at least {MIN_WINDOWS} "
                              "are needed", "record some with `facebridge run --audio mic --learn` first, or point "
                              "--store at a store that has data")
    windows = [store.read(p) for p in paths]
    train_w, held_w = split_windows(windows, holdout_every)
    names = [p.name for p in paths]
    trunk_sha = _model_sha()
    cache = _cache_path(store, trunk_sha)
    fingerprint = _fingerprint(names + [str(holdout_every)])
    cached = _read_cache(cache, fingerprint)
    if cached is not None:
        train, held = cached
    else:
        trunk = trunk or Trunk()
        train, held = frames_from_windows(trunk, train_w), frames_from_windows(trunk, held_w)
        _write_cache(cache, fingerprint, train, held)
    return DeviceData(train, held, len(train_w), len(held_w))


def store_frames(store: LearnStore, trunk: Trunk | None = None) -> Frames:
    """All of a store's windows as rows (the server's held-out set), through the same cache."""
    paths = store.paths()
    if not paths:
        raise FaceBridgeError(f"the learning store {store.root} is empty", "fill it before using it for evaluation")
    fingerprint = _fingerprint([p.name for p in paths] + ["all"])
    cache = _cache_path(store, _model_sha())
    cached = _read_cache(cache, fingerprint)
    if cached is not None:
        return cached[0]
    frames = frames_from_windows(trunk or Trunk(), [store.read(p) for p in paths])
    _write_cache(cache, fingerprint, frames, Frames.concat([]))
    return frames


def _model_sha() -> str:
    return shipped_base()[1]["sha256"]


def _read_cache(path: Path, fingerprint: str) -> tuple[Frames, Frames] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["fingerprint"]) != fingerprint:
                return None
            return tuple(Frames(*(z[f"{part}.{k}"] for k in ("h", "z0", "teacher", "mask")))
                         for part in ("train", "held"))
    except (OSError, KeyError, ValueError):
        return None


def _write_cache(path: Path, fingerprint: str, train: Frames, held: Frames) -> None:
    arrays = {"fingerprint": np.array(fingerprint)}
    for part, frames in (("train", train), ("held", held)):
        for k in ("h", "z0", "teacher", "mask"):
            arrays[f"{part}.{k}"] = getattr(frames, k)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    for stale in path.parent.glob(".features-*.npz"):
        stale.unlink(missing_ok=True)
    try:
        atomic_write_bytes(path, buf.getvalue(), mode=0o600)
    except OSError:  # a read-only store still trains, just slower
        pass


def stats(store: LearnStore) -> dict:
    """Numbers about the store (never its content), for `fedagent data stats`."""
    out = store.stats()
    out["cache_bytes"] = sum(p.stat().st_size for p in store.root.glob(".features-*.npz")) if store.root.is_dir() else 0
    return out


def clear(store: LearnStore) -> int:
    """Delete the windows and the feature cache."""
    count = store.clear()
    if store.root.is_dir():
        for p in store.root.glob(".features-*.npz"):
            p.unlink(missing_ok=True)
    return count
