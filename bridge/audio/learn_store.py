"""The on-device learning store: a bounded, owner-only folder of short windows that pair the lip-sync model's
log-mel input with the camera's mouth weights of the same instants (the teacher labels for the adapter).

Policy: the folder is 0700 and every file 0600; a window is written atomically (bridge/fsutil) or not at all;
when the store would exceed `max_bytes`, the oldest windows are deleted first, so it never grows past its bound.
Nothing here opens a socket: the windows never leave the device. Raw audio is kept only when the writer was
asked to (`LearnWindow.pcm`); by default only log-mel features are stored, from which speech cannot be replayed
intelligibly.

File format (one `.npz` per window, `w-<unix ms>-<n>.npz`):
    mel      (T, 40) float16   log-mel frames (bridge.audio.features), row t = frame t
    mouth    (T, 19) float16   teacher mouth weights in MOUTH_CHANNELS order, at frame t's instant
    trust    (T,)    float16   0..1 how far the teacher is trusted at frame t (face and mouth confidence)
    meta     ()      str       JSON: version, t_start (unix s), source, channels the teacher covers
    pcm      (S,)    int16     only when raw audio was asked for: 16 kHz samples under the window
"""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bridge.audio.features import N_MELS
from bridge.audio.visemes import MOUTH_CHANNELS
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_bytes, atomic_write_with
from bridge.paths import user_dir

FORMAT_VERSION = 1
DEFAULT_MAX_BYTES = 64 << 20  # about 45 minutes of 3 s windows without audio
# the camera cannot see the tongue: it teaches every mouth channel but tongueOut
CAMERA_CHANNELS = tuple(c for c in MOUTH_CHANNELS if c != "tongueOut")


def default_store_dir() -> Path:
    """$FACEBRIDGE_HOME/learn, else $XDG_DATA_HOME/facebridge/learn (~/.local/share/facebridge/learn)."""
    return user_dir("learn")


@dataclass
class LearnWindow:
    """One stored window. Rows of mel, mouth and trust describe the same 10 ms frames."""

    mel: np.ndarray  # (T, 40) log-mel
    mouth: np.ndarray  # (T, 19) teacher weights, MOUTH_CHANNELS order
    trust: np.ndarray  # (T,) 0..1
    t_start: float = 0.0  # unix seconds of frame 0
    source: str = "camera"  # what made the labels: camera (facebridge run --learn) or simulated (fedagent)
    channels: tuple[str, ...] = CAMERA_CHANNELS  # mouth channels the teacher covers
    pcm: np.ndarray | None = None  # (S,) int16 16 kHz, only when raw audio was asked for
    meta: dict = field(default_factory=dict)  # anything else the writer wants to keep (small)

    @property
    def frames(self) -> int:
        return int(len(self.mel))

    def check(self) -> None:
        t = len(self.mel)
        if self.mel.shape != (t, N_MELS) or self.mouth.shape != (t, len(MOUTH_CHANNELS)) or self.trust.shape != (t,):
            raise FaceBridgeError(f"learning window has mel {self.mel.shape}, mouth {self.mouth.shape}, trust "
                                  f"{self.trust.shape}; expected (T, {N_MELS}), (T, {len(MOUTH_CHANNELS)}), (T,)",
                                  "build windows with LearnRecorder or LearnWindow from aligned frames")
        if t == 0 or not (np.isfinite(self.mel).all() and np.isfinite(self.mouth).all()):
            raise FaceBridgeError("learning window is empty or holds NaN/inf values", "drop the window")
        unknown = set(self.channels) - set(MOUTH_CHANNELS)
        if unknown:
            raise FaceBridgeError(f"learning window names unknown mouth channels {sorted(unknown)}",
                                  f"use names from {', '.join(MOUTH_CHANNELS)}")


def encode_window(window: LearnWindow) -> bytes:
    window.check()
    meta = {"version": FORMAT_VERSION, "t_start": float(window.t_start), "source": window.source,
            "channels": list(window.channels), **window.meta}
    arrays = {"mel": window.mel.astype(np.float16), "mouth": np.clip(window.mouth, 0, 1).astype(np.float16),
              "trust": np.clip(window.trust, 0, 1).astype(np.float16), "meta": np.array(json.dumps(meta))}
    if window.pcm is not None:
        arrays["pcm"] = np.asarray(window.pcm, dtype=np.int16)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def decode_window(data: bytes | Path) -> LearnWindow:
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        with np.load(source, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("version") != FORMAT_VERSION:
                raise ValueError(f"format version {meta.get('version')}, this reader knows {FORMAT_VERSION}")
            window = LearnWindow(
                mel=z["mel"].astype(np.float32), mouth=z["mouth"].astype(np.float32),
                trust=z["trust"].astype(np.float32), t_start=float(meta.pop("t_start")),
                source=str(meta.pop("source")), channels=tuple(meta.pop("channels")),
                pcm=z["pcm"] if "pcm" in z.files else None,
                meta={k: v for k, v in meta.items() if k != "version"})
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        name = data if isinstance(data, Path) else "window"
        raise FaceBridgeError(f"learning window {name} is unreadable ({e})",
                              "delete it, or clear the store with `fedagent data clear`") from None
    window.check()
    return window


class LearnStore:
    """A folder of windows, oldest deleted first once `max_bytes` would be passed. Owner-only (0700/0600)."""

    def __init__(self, root: str | Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = Path(root) if root is not None else default_store_dir()
        self.max_bytes = int(max_bytes)
        if self.max_bytes <= 0:
            raise FaceBridgeError(f"learning store bound {max_bytes} bytes is not positive",
                                  "give the store a size of at least a few MB")
        self._counter = 0

    # -- folder ---------------------------------------------------------------------------------------------
    def _open(self) -> Path:
        """Create the folder 0700 (or tighten it), refusing one owned by another user."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            info = self.root.stat()
        except OSError as e:
            raise FaceBridgeError(f"cannot create the learning store {self.root} ({e.strerror})",
                                  "pick a writable folder with --store") from None
        if info.st_uid != os.getuid():
            raise FaceBridgeError(f"learning store {self.root} belongs to another user",
                                  "use a folder of your own with --store")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(self.root, 0o700)
        return self.root

    def paths(self) -> list[Path]:
        """Window files, oldest first (names sort by time); none when the store was never made."""
        if not self.root.is_dir():
            if self.root.exists():
                raise FaceBridgeError(f"learning store {self.root} is a file, where a folder is expected",
                                      "pass --store a folder (`facebridge run --learn` makes one)")
            return []
        return sorted(p for p in self.root.glob("w-*.npz") if p.is_file())

    def bytes_used(self) -> int:
        return sum(p.stat().st_size for p in self.paths())

    # -- writing --------------------------------------------------------------------------------------------
    def add(self, window: LearnWindow) -> Path:
        """Store one window (atomic, 0600) and delete the oldest ones beyond the bound."""
        data = encode_window(window)
        if len(data) > self.max_bytes:
            raise FaceBridgeError(f"one learning window ({len(data)} bytes) is larger than the store "
                                  f"({self.max_bytes} bytes)", "raise the store size or shorten the windows")
        root = self._open()
        self._counter += 1
        stamp = int((window.t_start or time.time()) * 1000)
        path = root / f"w-{stamp:014d}-{os.getpid()}-{self._counter:06d}.npz"
        self._make_room(len(data))
        return atomic_write_bytes(path, data, mode=0o600)

    def _make_room(self, incoming: int) -> None:
        paths = self.paths()
        sizes = [p.stat().st_size for p in paths]
        used = sum(sizes)
        for p, size in zip(paths, sizes):
            if used + incoming <= self.max_bytes:
                break
            p.unlink(missing_ok=True)
            used -= size

    # -- reading --------------------------------------------------------------------------------------------
    def read(self, path: Path) -> LearnWindow:
        return decode_window(Path(path))

    def windows(self) -> list[LearnWindow]:
        return [self.read(p) for p in self.paths()]

    def stats(self) -> dict:
        """What is stored, in numbers only (never the content)."""
        paths = self.paths()
        frames = audio = 0
        sources: dict[str, int] = {}
        for p in paths:
            w = self.read(p)
            frames += w.frames
            audio += w.pcm is not None
            sources[w.source] = sources.get(w.source, 0) + 1
        mode = stat.S_IMODE(self.root.stat().st_mode) if self.root.is_dir() else None
        return {"store": str(self.root), "windows": len(paths), "frames": frames, "seconds": frames / 100.0,
                "bytes": sum(p.stat().st_size for p in paths), "max_bytes": self.max_bytes,
                "windows_with_audio": audio, "sources": sources, "mode": oct(mode) if mode is not None else None}

    # -- removing and exporting -----------------------------------------------------------------------------
    def clear(self) -> int:
        """Delete every window; returns how many were deleted."""
        paths = self.paths()
        for p in paths:
            p.unlink(missing_ok=True)
        for stray in self.root.glob(".w-*") if self.root.is_dir() else ():  # temporaries of a crashed writer
            stray.unlink(missing_ok=True)
        return len(paths)

    def export(self, dest: str | Path) -> int:
        """Copy the windows to `dest` (created 0700, files 0600) for the owner to inspect; returns the count."""
        dest = Path(dest)
        if dest.resolve() == self.root.resolve():
            raise FaceBridgeError("export destination is the store itself", "export to another folder")
        blocking = next((f for f in (dest, *dest.parents) if f.exists() and not f.is_dir()), None)
        if blocking is not None:
            raise FaceBridgeError(f"export destination {dest}: {blocking} is a file, where a folder is expected",
                                  "give a new folder")
        target = LearnStore(dest, max_bytes=max(self.max_bytes, 1))._open()
        paths = self.paths()
        for p in paths:  # each window whole (Ctrl-C keeps the windows copied, never a part of one)
            atomic_write_with(target / p.name, lambda tmp, p=p: shutil.copyfile(p, tmp), mode=0o600)
        return len(paths)
