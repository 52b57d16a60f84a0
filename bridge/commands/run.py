"""`facebridge run`."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("run: not yet implemented") or 2)
