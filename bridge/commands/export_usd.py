"""`facebridge export-usd TAKE OUT.usda`: a recorded take as a UsdSkel animation (Omniverse, USD tools)."""
from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-usd", help="export a recorded take as USD (UsdSkel blend shape animation) for Omniverse",
        description="Write a take recorded with `facebridge run --record DIR` as a UsdSkel SkelAnimation: ARKit "
                    "blendShapes with time-sampled blendShapeWeights and Head/eye joint rotations, at the "
                    "take's frame rate. .usda writes text, .usdc/.usd binary.")
    p.add_argument("take", metavar="TAKE", help="the take directory (holds frames.jsonl and take.json)")
    p.add_argument("out", metavar="OUT", help="the USD file to write, e.g. take.usda")
    p.set_defaults(func=run)


def run(args) -> int:
    from bridge.usd_export import export_take

    def progress(done: int, total: int) -> None:
        print(f"export-usd: {done}/{total} frames", file=sys.stderr, flush=True)

    summary = export_take(args.take, args.out, progress=progress)
    skipped = f", {summary.skipped} skipped" if summary.skipped else ""
    print(f"export-usd: wrote {summary.path}: {summary.frames} frames{skipped}, "
          f"{summary.duration_s:.2f} s at {summary.frame_rate:g} fps, subjects {', '.join(summary.subjects)}")
    return 0
