"""`facebridge devices`."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("devices", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("devices: not yet implemented") or 2)
