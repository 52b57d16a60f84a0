"""Where FaceBridge keeps a user's files: $FACEBRIDGE_HOME/<name> when set (tests and portable installs), else the
XDG base directories (data: ~/.local/share/facebridge/<name>, config: ~/.config/facebridge/<name>). What can be
made again and is the same for every user and test session lives in the cache, apart from FACEBRIDGE_HOME
(cache: ~/.cache/facebridge/<name>, each with a variable of its own): the real faces and speech that `facebridge
bench faces|lipsync` and the tests score (tools/fetch_real_data.py), and the engine cache (engines/cache.py)."""
from __future__ import annotations

import os
from pathlib import Path

_XDG = {"data": ("XDG_DATA_HOME", "~/.local/share"), "config": ("XDG_CONFIG_HOME", "~/.config"),
        "cache": ("XDG_CACHE_HOME", "~/.cache")}


def user_dir(name: str, kind: str = "data") -> Path:
    """The folder `name` of this user's FaceBridge files of `kind` ("data" or "config")."""
    home = os.environ.get("FACEBRIDGE_HOME")
    if home:
        return Path(home) / name
    return _xdg(kind) / "facebridge" / name


def cache_dir(name: str, variable: str) -> Path:
    """The cache folder `name`: $<variable> when set, else $XDG_CACHE_HOME/facebridge/<name> (~/.cache/...)."""
    override = os.environ.get(variable)
    return Path(override) if override else _xdg("cache") / "facebridge" / name


def real_data_dir() -> Path:
    """The real corpus: $FACEBRIDGE_REAL_DATA, else ~/.cache/facebridge/real."""
    return cache_dir("real", "FACEBRIDGE_REAL_DATA")


def _xdg(kind: str) -> Path:
    variable, default = _XDG[kind]
    return Path(os.environ.get(variable) or os.path.expanduser(default))
