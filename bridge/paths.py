"""Where FaceBridge keeps a user's files: $FACEBRIDGE_HOME/<name> when set (tests and portable installs), else the
XDG base directories (data: ~/.local/share/facebridge/<name>, config: ~/.config/facebridge/<name>). The real faces
and speech that `facebridge bench faces|lipsync` and the tests score (tools/fetch_real_data.py) are the same for
every user and test session: they live in the cache, apart from FACEBRIDGE_HOME."""
from __future__ import annotations

import os
from pathlib import Path

_XDG = {"data": ("XDG_DATA_HOME", "~/.local/share"), "config": ("XDG_CONFIG_HOME", "~/.config")}


def user_dir(name: str, kind: str = "data") -> Path:
    """The folder `name` of this user's FaceBridge files of `kind` ("data" or "config")."""
    home = os.environ.get("FACEBRIDGE_HOME")
    if home:
        return Path(home) / name
    variable, default = _XDG[kind]
    return Path(os.environ.get(variable) or os.path.expanduser(default)) / "facebridge" / name


def real_data_dir() -> Path:
    """The real corpus: $FACEBRIDGE_REAL_DATA when set, else $XDG_CACHE_HOME/facebridge/real
    (~/.cache/facebridge/real)."""
    env = os.environ.get("FACEBRIDGE_REAL_DATA")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "facebridge" / "real"
