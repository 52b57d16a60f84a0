"""`facebridge models`."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("models: not yet implemented") or 2)
