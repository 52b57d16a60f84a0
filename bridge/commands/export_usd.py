"""`facebridge export-usd TAKE OUT.usda`: a recorded take as a UsdSkel animation (Omniverse, USD tools)."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from bridge.argparsing import output_file
from bridge.commands.replay import repair_first
from bridge.errors import FaceBridgeError
from bridge.fsutil import escaped


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-usd", help="export a recorded take as USD (UsdSkel blend shape animation) for Omniverse",
        description="Write a take recorded with `facebridge run --record DIR` as a UsdSkel SkelAnimation: ARKit "
                    "blendShapes with time-sampled blendShapeWeights and Head/eye joint rotations, at the "
                    "take's frame rate. .usda writes text, .usdc/.usd binary.")
    p.add_argument("take", metavar="TAKE", help="the take directory (holds frames.jsonl and take.json)")
    p.add_argument("out", metavar="OUT", type=usd_out, help="the USD file to write, e.g. take.usda")
    p.add_argument("--force", action="store_true", help="overwrite OUT when it exists")
    p.add_argument("--repair", action="store_true",
                   help="first make a take that was killed whole again: rebuild its take.json and frames.csv "
                        "from the frames frames.jsonl holds")
    p.set_defaults(func=run)


def usd_out(text: str) -> str:
    """OUT: a writable file whose extension USD knows (checked before the take is read)."""
    output_file(text)
    if not text.endswith((".usda", ".usdc", ".usd")):
        raise argparse.ArgumentTypeError(f"{text} does not end in .usda, .usdc or .usd; name the file e.g. take.usda")
    return text


def _stop(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through the atomic write, which removes its temporary file


def run(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.formats.take import TakeReader
    from bridge.usd_export import export_take

    def progress(done: int, total: int) -> None:
        print(f"export-usd: {done}/{total} frames", file=sys.stderr, flush=True)

    if not args.repair:
        TakeReader(args.take)  # a wrong take is named before OUT
    if Path(args.out).exists() and not args.force:
        raise FaceBridgeError(f"{args.out} exists", "pass --force to overwrite it, or choose another name")
    if args.repair:
        repair_first(args.take, "export-usd")
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        summary = export_take(args.take, args.out, progress=progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
    notes = [f"{summary.skipped} skipped"] if summary.skipped else []
    notes += [f"{summary.clamped} capture-time jumps clamped"] if summary.clamped else []
    subjects = ", ".join(map(escaped, summary.subjects))  # a subject is read from the take: never raw to a terminal
    print(f"export-usd: wrote {summary.path}: {summary.frames} frames{''.join(', ' + n for n in notes)}, "
          f"{summary.duration_s:.2f} s at {summary.frame_rate:g} fps, subjects {subjects}")
    return 0
