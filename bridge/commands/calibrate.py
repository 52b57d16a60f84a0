"""`facebridge calibrate`."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("calibrate: not yet implemented") or 2)
