"""Where FaceBridge keeps a user's files: $FACEBRIDGE_HOME/<name> when set (tests and portable installs), else the
XDG base directories (data: ~/.local/share/facebridge/<name>, config: ~/.config/facebridge/<name>)."""
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
