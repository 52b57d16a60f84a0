"""Two source trees' FacePipeline on the same frames, taking turns every 30 frames: CPU time per frame and stage.

Each tree runs in its own process pinned to the same core (an A/B of code, not of machines): the sample's 300
frames, looped, in chunks of CHUNK frames, the order alternating, neither side running while the other does, as
`facebridge bench pipeline --against-mediapipe` interleaves FaceBridge with MediaPipe. Machine noise from other
jobs falls on both sides alike, so the change between them is steadier than two side-by-side runs' ratios.
Per frame: process() CPU time (time.process_time) and FacePipeline.stage_cpu's per-stage thread CPU time.

    python tools/measure/pipeline_ab.py --frames 900 --json ab.json main=/tmp/main-tree this=.

(a tree: a checkout or `git archive` of the repository; every tree runs with this Python, so the same packages)
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHUNK = 30


def worker(frames_path: str, core: int) -> None:
    """One side: load the pipeline, warm it, then per request line "start count" answer one JSON line."""
    os.sched_setaffinity(0, {core})
    from bridge.pipeline import FacePipeline, PipelineOptions

    frames = pickle.loads(Path(frames_path).read_bytes())
    pipeline = FacePipeline(PipelineOptions(backend="auto", threads=1))
    for frame in frames[:CHUNK]:
        pipeline.process(frame)
    pipeline.reset()
    pipeline.stage_cpu = True
    print("ready", flush=True)
    for line in sys.stdin:
        start, count = map(int, line.split())
        cpu, stages = [], []
        for i in range(start, start + count):
            c0 = time.process_time()
            pipeline.process(frames[i % len(frames)])
            cpu.append((time.process_time() - c0) * 1000.0)
            stages.append(pipeline.last_stage_cpu_ms)
        print(json.dumps({"cpu": cpu, "stages": stages}), flush=True)


def summary(cpu: list[float], stages: list[dict], n: int) -> dict:
    values = np.array(cpu)
    per_stage: dict[str, float] = {}
    for frame in stages:
        for name, ms in frame.items():
            per_stage[name] = per_stage.get(name, 0.0) + ms
    median, p99 = float(np.median(values)), float(np.percentile(values, 99))
    return {"cpu_median_ms": round(median, 3), "cpu_mean_ms": round(float(values.mean()), 3),
            "cpu_p99_ms": round(p99, 3), "p99_over_median": round(p99 / median, 3),
            "stage_cpu_per_frame_ms": {k: round(v / n, 3) for k, v in per_stage.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs=2, metavar="NAME=PATH", help="the two source trees, the first the baseline")
    ap.add_argument("--frames", type=int, default=900)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    from bridge.sources.files import SampleSource

    with SampleSource(realtime=False, loop=True) as src:
        frames = [src.read() for _ in range(300)]
    with tempfile.TemporaryDirectory() as tmp:
        frames_path = Path(tmp) / "frames.pkl"
        frames_path.write_bytes(pickle.dumps(frames))
        sides = {}
        for tree in args.trees:
            name, path = tree.split("=", 1)
            path = str(Path(path).resolve())
            sides[name] = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(frames_path), str(args.core)],
                cwd=path, env=dict(os.environ, PYTHONPATH=path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True)
        for side in sides.values():
            if side.stdout.readline().strip() != "ready":
                raise SystemExit("a side did not start")
        load_before = os.getloadavg()
        got = {name: {"cpu": [], "stages": []} for name in sides}
        names = list(sides)
        for k, start in enumerate(range(0, args.frames, CHUNK)):
            for name in names if k % 2 == 0 else names[::-1]:
                side = sides[name]
                side.stdin.write(f"{start} {min(CHUNK, args.frames - start)}\n")
                side.stdin.flush()
                reply = json.loads(side.stdout.readline())
                got[name]["cpu"] += reply["cpu"]
                got[name]["stages"] += reply["stages"]
        for side in sides.values():
            side.stdin.close()
            side.wait()
    out = {"frames": args.frames, "chunk_frames": CHUNK, "core": args.core,
           "load_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
    out.update({name: summary(r["cpu"], r["stages"], args.frames) for name, r in got.items()})
    a, b = names
    out["median_change"] = round(out[b]["cpu_median_ms"] / out[a]["cpu_median_ms"] - 1.0, 4)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(main())
