"""Model bytes rewritten at load, kept in the engine cache: the CPU provider's exact ONNX rewrites (onnx_passes.py,
onnx_twins.py) and the attention mesh cut at MediaPipe's custom ops (litert_mediapipe_ops.py).

Each rewrite is a pure function of the shipped bytes (and of the library versions named in its key), yet it ran at
every start: 1.8 s of a bridge's 4.3 s on the 2-core VM (importing onnx alone 0.76 s, unpacking the .tflite's
flatbuffers 1.1 s). Stored as an .npz of named byte blobs under <cache>/rewritten/ (written whole or not at all;
zip's checksums refuse a damaged file, which is then rewritten). Nothing here decides what the rewrite is: a file
that cannot be read or written costs only the time of rewriting again.
"""
from __future__ import annotations

import io
import logging
import sys
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType

import numpy as np

from bridge.engines.cache import REWRITTEN_DIR, default_cache_dir, key_of, sha256_bytes
from bridge.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)

Blobs = dict[str, bytes]


def versions_of(*code: ModuleType | Callable, packages: tuple[str, ...] = ()) -> dict:
    """Key fields for a rewrite: the source of the modules that do it (modules, or functions of them: an edited
    rewrite is never served from an older one's file) and the versions of the packages it uses ("absent" where one
    is not installed)."""
    modules = [c if isinstance(c, ModuleType) else sys.modules[c.__module__] for c in code]
    fields = {m.__name__: sha256_bytes(Path(m.__file__).read_bytes())[:16] for m in modules}
    for package in packages:
        try:
            fields[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            fields[package] = "absent"
    return fields


def cached_rewrite(kind: str, key_fields: dict, source: bytes, rewrite: Callable[[bytes], Blobs | None]
                   ) -> Blobs | None:
    """rewrite(source) (named byte blobs, or None when there is nothing to rewrite), from the cache when this kind,
    these key fields (versions of what the rewrite depends on) and these source bytes were rewritten before."""
    key = key_of({"kind": kind, "source_sha256": sha256_bytes(source), **key_fields})
    path = default_cache_dir() / REWRITTEN_DIR / f"{kind}-{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            blobs = {name: stored[name].tobytes() for name in stored.files}
        return blobs or None
    except FileNotFoundError:
        pass
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:  # damaged: rewritten below, then replaced
        log.info("rewritten model %s unreadable (%s): rewriting it", path, e)
    blobs = rewrite(source)
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.frombuffer(data, np.uint8) for name, data in (blobs or {}).items()})
    try:
        atomic_write_bytes(path, buffer.getvalue())
    except OSError as e:  # a read-only or full cache: the next start rewrites again
        log.info("rewritten model not stored in %s (%s)", path.parent, e.strerror)
    return blobs
