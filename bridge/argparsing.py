"""The argument parser every `facebridge` and `fedagent` command is built with.

It refuses an option given twice when only one value can count (`--vmc A --vmc B` would otherwise keep B
silently): options that collect values (`--llf`, action="append") are untouched. And `output_file` is the
argparse type of every option that names a file to write, so a path that cannot be written is refused before a
long run starts rather than after it.
"""
from __future__ import annotations

import argparse
import os
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
    """argparse type of an option naming a file to write: its folder must exist and be writable, and the path
    must not be a folder; checked before any work starts."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name inside it")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text} does not exist; create it first or write elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {folder} (permission denied); write elsewhere")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot overwrite {text} (permission denied); write elsewhere")
    return text
