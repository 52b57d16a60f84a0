"""A model file is used only after its sha256 matched what its manifest or signed release says.

`verify_file` hashes the whole file and remembers the result per path for this process (`_verified`), so a
shipped model is hashed once per run; installed releases are re-checked on every lookup by the registry.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from bridge.errors import ModelError

REBUILD_HINT = ("restore it with `git checkout -- {path}` in a checkout, or reinstall FaceBridge (the face models "
                "rebuild from their source wheels with `python tools/build_models.py`)")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages) holding bridge/

_verified: dict[Path, str] = {}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(path: Path, expected_sha256: str, hint: str = REBUILD_HINT) -> Path:
    """Raise ModelError unless `path` exists, is readable and hashes to `expected_sha256`."""
    path = Path(path)
    hint = hint.format(path=_shown(path)) if "{path}" in hint else hint
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


def _shown(path: Path) -> str:
    """The path relative to the checkout where it lies inside it (what `git checkout --` takes)."""
    try:
        return str(path.resolve().relative_to(PACKAGE_ROOT))
    except ValueError:
        return str(path)


def is_verified(path: Path, sha256: str) -> bool:
    """True when `path` already hashed to `sha256` in this process."""
    return _verified.get(Path(path)) == sha256
