"""The argument parser every `facebridge` and `fedagent` command is built with.

It refuses an option given twice when only one value can count (`--vmc A --vmc B` would otherwise keep B
silently): options that collect values (`--llf`, action="append") are untouched. And `output_file` is the
argparse type of every option that names a file to write, so a path that cannot be written is refused before a
long run starts rather than after it.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import weakref
from pathlib import Path

_SINGLE = {"store": argparse._StoreAction, "store_true": argparse._StoreTrueAction,
           "store_false": argparse._StoreFalseAction, "store_const": argparse._StoreConstAction}


def _once(base: type) -> type:
    class Once(base):
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string is not None:  # an option (a positional is given once by nature)
                seen = self.__dict__.setdefault("_seen", {})  # id -> weak reference (a Namespace is unhashable)
                earlier = seen.get(id(namespace))
                if earlier is not None and earlier() is namespace:
                    names = "/".join(self.option_strings)
                    parser.error(f"{names} is given twice; give it once")
                seen[id(namespace)] = weakref.ref(namespace)
            super().__call__(parser, namespace, values, option_string)

    Once.__name__ = f"Once{base.__name__}"
    return Once


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose single-valued options refuse being repeated (subparsers inherit it)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, base in _SINGLE.items():
            self.register("action", name, _once(base))
        self.register("action", None, _once(argparse._StoreAction))


def output_file(text: str) -> str:
    """argparse type of an option naming a file to write, checked before any work starts: the path is not a
    folder, and a file can really be created in its folder (folders still missing are made for the probe and
    removed again; the command makes them when it writes). A probe, not os.access: root passes every access
    check, yet cannot write into /proc or a read-only disk."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name inside it")
    folder, made = path.parent, []
    try:
        missing = [f for f in (folder, *folder.parents) if not f.exists()]
        for f in reversed(missing):
            f.mkdir()
            made.append(f)
        tempfile.TemporaryFile(dir=folder).close()
    except (FileExistsError, NotADirectoryError):
        blocking = next((f for f in (folder, *folder.parents) if f.exists() and not f.is_dir()), folder)
        raise argparse.ArgumentTypeError(f"cannot write {text}: {blocking} is a file, where a folder is expected"
                                         ) from None
    except PermissionError:
        raise argparse.ArgumentTypeError(f"cannot write into {folder} (permission denied); write elsewhere"
                                         ) from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write into {folder} ({e.strerror}); write elsewhere") from None
    finally:
        for f in reversed(made):
            f.rmdir()
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot overwrite {text} (permission denied); write elsewhere")
    return text


def folder_path(text: str) -> str:
    """argparse type of an option naming a folder (made when missing): refused at once when it, or a folder above
    it, is a file, rather than after the work that would have filled it."""
    path = Path(text)
    blocking = next((f for f in (path, *path.parents) if f.exists() and not f.is_dir()), None)
    if blocking == path:
        raise argparse.ArgumentTypeError(f"{text} is a file, where a folder is expected; give a folder")
    if blocking is not None:
        raise argparse.ArgumentTypeError(f"{text}: {blocking} is a file, where a folder is expected; check the path")
    return text


def input_file(text: str, hint: str = "check the path") -> str:
    """argparse type of an option naming a file to read: it must exist, be a file (not a folder) and be readable."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, where a file is expected; give the file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist; {hint}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text} (permission denied); make it readable for this user")
    return text


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number (give 1 or more)")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def port_number(text: str) -> int:
    """argparse type of a TCP/UDP port option: 0 (the system picks a free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number; give 1 to 65535 (0: any free port)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range; give 1 to 65535 (0: any free port)")
    return port
