"""`facebridge replay`."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("replay: not yet implemented") or 2)
