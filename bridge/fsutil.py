"""Crash-safe file writes: write a temporary file, fsync, rename. Nothing is ever half-written."""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write_with(path: str | Path, write: Callable[[Path], None], suffix: str = ".tmp",
                      mode: int = 0o644) -> Path:
    """Have `write(tmp)` fill a temporary file beside `path`, then fsync it and rename it over `path`, so
    readers see the old file or the new one, never a part. `suffix` is for writers that choose the format by
    the file name (USD)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, mode)  # mkstemp makes 0600 files; results and takes are for sharing
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> Path:
    return atomic_write_with(path, lambda tmp: tmp.write_bytes(data), mode=mode)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
