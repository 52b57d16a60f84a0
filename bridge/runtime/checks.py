"""Checks of what a run is pointed at, made before anything opens: a local lip-sync adapter trial must match the
hash the user gave, and an update store given by path must exist (the session's composition root uses both)."""
from __future__ import annotations

from pathlib import Path

from bridge.errors import FaceBridgeError


def update_state_dir(spec: str | None) -> Path | None:
    """The update store a run follows: None when off, or "auto" and this user has none (nothing installed yet)."""
    if spec is None:
        return None
    if spec != "auto":
        path = Path(spec)
        if not path.is_dir():
            raise FaceBridgeError(f"update state directory {path} does not exist",
                                  "install a release first (`fedagent update install --state DIR`), or drop --updates")
        return path
    from bridge.updates.store import default_state_dir

    path = default_state_dir()
    return path if (path / "state.json").is_file() else None


def checked_adapter(path: str, sha256: str | None) -> dict:
    """A local lip-sync adapter trial: its file hash must match what the user gave, its tensors must fit."""
    from bridge.audio.lipsync import load_adapter
    from bridge.models import sha256_file

    if not sha256 or len(sha256) < 12:
        raise FaceBridgeError("--adapter needs --adapter-sha256 (at least 12 hex digits of the file's sha256)",
                              f"run `sha256sum {path}` and pass what it prints")
    try:
        digest = sha256_file(Path(path))
    except OSError as e:
        raise FaceBridgeError(f"cannot read adapter {path} ({e.strerror})",
                              "check the path given to --adapter") from None
    if not digest.startswith(sha256.lower()):
        raise FaceBridgeError(f"adapter {path} has sha256 {digest[:16]}…, not {sha256[:16]}…",
                              "the file changed since its hash was taken; use the file you meant")
    return load_adapter(path)
