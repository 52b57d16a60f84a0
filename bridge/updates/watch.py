"""Noticing that the active release changed, for the running bridge (live swap): poll, never block.

The committed state is one file replaced by rename, so its (inode, mtime, size) changes exactly when an install
or a rollback commits. `ReleaseWatcher.poll()` is a stat() call; when it reports a change the caller asks the
registry for the verified files of the new active release (`ModelRegistry.active(name)`), builds its sessions
off the frame thread and swaps them in between two frames.
"""
from __future__ import annotations

import os
from pathlib import Path

from bridge.models.registry import ActiveModel, ModelRegistry
from bridge.updates.store import default_state_dir


class ReleaseWatcher:
    """`poll()` -> the ActiveModel of `model` when its active release changed since the last report, else None
    (a stat() when nothing was committed). The first poll reports the current one."""

    def __init__(self, model: str = "lipsync", state_dir: str | Path | None = None):
        self.model = model
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self._seen: tuple | None = None
        self._active: tuple | None = None

    def _token(self) -> tuple:
        try:
            info = os.stat(self.state_dir / "state.json")
        except FileNotFoundError:
            return ()
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def poll(self) -> ActiveModel | None:
        token = self._token()
        if token == self._seen:
            return None
        self._seen = token
        registry = ModelRegistry(self.state_dir)
        installed = registry.installed(self.model)
        key = (installed.release, installed.slot) if installed else (0, "")
        if key == self._active:
            return None
        active = registry.active(self.model)  # verifies the files; raises ModelError if they are damaged
        self._active = key
        return active
