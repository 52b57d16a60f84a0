"""`facebridge bench pipeline --against-mediapipe`: FaceBridge and MediaPipe FaceMesh on the same frames, taking turns.

MediaPipe 0.10.21 runs in its own venv (`make mediapipe-venv`: it needs numpy<2 and protobuf<5) as a subprocess
(bridge/bench/mediapipe_side.py) on the same core. Every CHUNK frames the two sides take turns on the same frames,
the order alternating (FaceBridge first, then MediaPipe first), and neither runs while the other does: machine noise
from other jobs hits both alike, so read the ratio, which is also given per chunk to show its spread. FaceBridge is
timed over process() (everything it streams: landmarks, iris, head pose, gaze, expression, emotion, filters);
MediaPipe over FaceMesh.process() (478 landmarks with refine_landmarks, nothing else). Both wall time and CPU
time (time.process_time: every thread of the process) are taken per frame; on a machine that other jobs load, CPU
time is the steadier figure, and it is what a game on the same PC loses.

The first frame of each turn runs on a core the other side just had, its caches and predictors cold (1.4-2.1x a
side's median here): one frame in CHUNK, 3.3%, so in the plain p99 these frames are all there is. Each side's
summary therefore also gives `steady` (every frame but the first of a turn: the tracker's own spread) and
`after_switch` (those first frames alone: what a core shared with a game costs the first frame after it), and the
per-frame CPU times.

What our slow frames are made of: each of our frames is also marked by the periodic work it carried (`kinds`: the
emotion model, which runs on every 4th frame, and a step of the identity refresh, which runs in steps every 30
frames), and `by_kind` gives each kind's frames, median CPU and how many of the slowest 1% (the frames at or above
the p99) it holds. `without` (--without emotion,identity) leaves that periodic work out, to measure the spread
without it: a diagnosis, since those runs no longer stream everything FaceBridge streams.

Our deferred work (FacePipeline.run_deferred: a wanted frame's emotion model, applied on the next tracked frame, and
the identity refresh's spread steps) runs right after each frame, as the runner runs it once the frame went to the
sinks: outside the frame's time, so its CPU is given on its own (`deferred`) and in `cpu_with_deferred` (frame plus
what it left: the CPU a game on the same core loses, per frame). --inline-deferred runs it inside the next frame
instead (the A/B; the frames stream the same).

With --pace FPS each side takes its frames on a clock of FPS, idle between them, as a tracker fed by a camera is:
after every idle gap the caches and predictors have cooled (on the 2-core VMs here a frame then costs 1.7-1.9x
what it costs frame after frame, for both programs), so the paced figures are what a 30 fps webcam costs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bridge.bench.common import percentiles
from bridge.errors import FaceBridgeError

CHUNK = 30
VENV = ".venv-mediapipe"
PERIODIC = ("emotion", "identity")  # the periodic work --without can leave out


def mediapipe_python(explicit: str | None) -> Path:
    """The Python of MediaPipe's venv: --mediapipe-python, else .venv-mediapipe here or beside the package."""
    if explicit:
        candidates = [Path(explicit)]
    else:
        here = [Path.cwd(), Path(__file__).resolve().parents[2]]
        candidates = [root / VENV / "bin" / "python" for root in here]
    for path in candidates:
        if path.is_file():
            return path
    raise FaceBridgeError(f"MediaPipe's Python was not found ({', '.join(map(str, candidates))})",
                          "run `make mediapipe-venv` (mediapipe==0.10.21 in .venv-mediapipe), or pass "
                          "--mediapipe-python PATH")


class MediaPipeSide:
    """The worker subprocess: one JSON line each way (see mediapipe_side.py)."""

    def __init__(self, python: Path, frames_path: Path, refine: bool) -> None:
        worker = Path(__file__).with_name("mediapipe_side.py")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["GLOG_minloglevel"] = "2"
        self._proc = subprocess.Popen([str(python), str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, env=env)
        self.version = self._ask({"frames": str(frames_path), "refine": refine}).get("mediapipe")

    def _ask(self, msg: dict) -> dict:
        self._proc.stdin.write(json.dumps(msg) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise FaceBridgeError("the MediaPipe worker stopped", f"check the venv: {VENV}/bin/python -c 'import "
                                  "mediapipe' (run `make mediapipe-venv` again if it fails)")
        return json.loads(line)

    def run(self, start: int, count: int, period_s: float = 0.0) -> tuple[list[float], list[float], list[bool]]:
        reply = self._ask({"run": [start, count], "period_s": period_s})
        return reply["ms"], reply["cpu_ms"], reply["found"]

    def close(self) -> None:
        try:
            self._proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self._proc.stdin.close()
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()


def _summary(ms: list[float]) -> dict:
    median, p99 = percentiles(ms, (50, 99))
    return {"frames": len(ms), "median_ms": median, "p99_ms": p99, "mean_ms": round(float(np.mean(ms)), 3),
            "p99_over_median": round(p99 / median, 3) if median else None}


def _cpu_summary(cpu: list[float]) -> dict:
    """CPU time per frame: all frames, then split into the first frame of each turn (after_switch) and the rest
    (steady), with the frames themselves."""
    first = np.arange(len(cpu)) % CHUNK == 0
    values = np.asarray(cpu)
    return _summary(cpu) | {"steady": _summary(values[~first].tolist()),
                            "after_switch": _summary(values[first].tolist()),
                            "per_frame_ms": [round(v, 3) for v in cpu]}


def frame_kind(emotion: bool, identity: bool) -> str:
    """The periodic work one of our frames carried: plain, emotion, identity or emotion+identity."""
    return "+".join(name for name, ran in zip(PERIODIC, (emotion, identity)) if ran) or "plain"


def _by_kind(cpu: list[float], kinds: list[str]) -> dict:
    """Per kind of frame: how many, their median CPU ms, and how many of the slowest 1% (at or above the p99)."""
    values = np.asarray(cpu)
    labels = np.asarray(kinds)
    slowest = values >= percentiles(cpu, (99,))[0]
    return {kind: {"frames": int((labels == kind).sum()),
                   "median_ms": percentiles(values[labels == kind].tolist(), (50,))[0],
                   "of_slowest_1pct": int((slowest & (labels == kind)).sum())} for kind in sorted(set(kinds))}


def _cpu_of(values: list[float] | None, frames: int) -> dict:
    """A stage's CPU time: median per run, and per frame averaged over all frames (emotion runs on every 3rd, the
    identity update inside expression on some): the per-frame means add up to the frame's CPU time."""
    if not values:
        return {}
    return {"cpu_median_ms": percentiles(values, (50,))[0], "cpu_p99_ms": percentiles(values, (99,))[0],
            "cpu_per_frame_ms": round(float(np.sum(values)) / frames, 3)}


def paced(period_s: float):
    """Before each frame, wait for its tick of a clock with this period (0: no wait); a late frame is not made
    up for, the clock just moves on (mediapipe_side.py keeps the same clock)."""
    due = time.perf_counter()
    while True:
        if period_s:
            due = max(due + period_s, time.perf_counter())
            time.sleep(max(0.0, due - time.perf_counter()))
        yield


def run_side_by_side(pipeline, frames: list, n: int, python: Path, variants: list[str], pace_fps: float = 0.0,
                     without: tuple[str, ...] = (), deferred: bool = True) -> dict:
    """Interleave FaceBridge's process() with each MediaPipe variant ("refine", "plain") over n frames; pace_fps:
    each side's frames on a clock of that rate (0: frame after frame); without: periodic work left out (PERIODIC),
    a diagnosis; deferred: run_deferred after each frame (False: its work runs inside the next frame)."""
    period = 1.0 / pace_fps if pace_fps else 0.0
    expression = pipeline.expression
    images = np.stack([f.image for f in frames])
    with tempfile.TemporaryDirectory() as tmp:
        frames_path = Path(tmp) / "frames.npy"
        np.save(frames_path, images)
        sides = {v: MediaPipeSide(python, frames_path, refine=(v == "refine")) for v in variants}
        try:
            if "emotion" in without:  # then only a face's first tracked frame runs it
                pipeline.describer.emotion_every = n + 2
            if "identity" in without:  # the first second's refreshes still run, in the warm-up turn below
                expression.identity_every = n + CHUNK + 2
            for side in sides.values():  # warm-up: first detection, allocators
                side.run(0, CHUNK)
            for f in frames[:CHUNK]:
                pipeline.process(f)
            pipeline.reset()
            pipeline.stage_cpu = True  # per-stage CPU time (thread_time) beside the wall time
            stage_cpu: dict[str, list[float]] = {}
            ours: list[float] = []
            ours_cpu: list[float] = []
            deferred_cpu: list[float] = []
            kinds: list[str] = []
            stage_ms: dict[str, list[float]] = {}
            found = 0
            theirs = {v: ([], [], []) for v in variants}
            chunk_ratio = {v: [] for v in variants}
            for k, start in enumerate(range(0, n, CHUNK)):
                count = min(CHUNK, n - start)
                order = ["ours", *variants] if k % 2 == 0 else [*variants, "ours"]
                chunk = {}
                for who in order:
                    if who == "ours":
                        ms, clock = [], paced(period)
                        for i in range(start, start + count):
                            next(clock)
                            work = getattr(expression, "identity_work", 0)
                            c0, t0 = time.process_time(), time.perf_counter()
                            out = pipeline.process(frames[i % len(frames)])
                            ms.append((time.perf_counter() - t0) * 1000.0)
                            ours_cpu.append((time.process_time() - c0) * 1000.0)
                            kinds.append(frame_kind("emotion" in pipeline.last_stage_cpu_ms,
                                                    getattr(expression, "identity_work", 0) > work))
                            c0 = time.process_time()  # what the frame left for after it, as the runner runs it
                            if deferred:
                                pipeline.run_deferred()
                            deferred_cpu.append((time.process_time() - c0) * 1000.0)
                            found += out.face_found
                            for stage, v in out.latencies_ms.items():
                                stage_ms.setdefault(stage, []).append(v)
                            for stage, v in pipeline.last_stage_cpu_ms.items():
                                stage_cpu.setdefault(stage, []).append(v)
                        ours += ms
                    else:
                        ms, cpu, hit = sides[who].run(start, count, period)
                        for kept, new in zip(theirs[who], (ms, cpu, hit)):
                            kept.extend(new)
                    chunk[who] = float(np.median(ms))
                for v in variants:
                    chunk_ratio[v].append(chunk["ours"] / chunk[v])
        finally:
            for side in sides.values():
                side.close()
    with_deferred = (np.asarray(ours_cpu) + np.asarray(deferred_cpu)).tolist()
    ran = [v for v in deferred_cpu if v > 0.05]  # calls that ran a model (an empty call is ~1 us)
    result = {"chunk_frames": CHUNK, "pace_fps": pace_fps, "without": list(without), "deferred": deferred,
              "mediapipe": next(iter(sides.values())).version,
              "facebridge": _summary(ours) | {"cpu": _cpu_summary(ours_cpu) | {
                                                  "by_kind": _by_kind(ours_cpu, kinds), "kinds": kinds},
                                              "deferred": {"calls_that_ran": len(ran),
                                                           "cpu_median_ms": percentiles(ran, (50,))[0] if ran else 0.0,
                                                           "cpu_mean_per_frame_ms": round(float(np.mean(
                                                               deferred_cpu)), 4)},
                                              "cpu_with_deferred": _summary(with_deferred),
                                              "face_found_ratio": round(found / len(ours), 4),
                                              "stages": {k: {"median_ms": percentiles(v, (50,))[0], "runs": len(v)}
                                                         | _cpu_of(stage_cpu.get(k), len(ours))
                                                         for k, v in stage_ms.items()}}}
    for v in variants:
        ms, cpu, hit = theirs[v]
        ratios = chunk_ratio[v]
        result[f"mediapipe_{v}"] = _summary(ms) | {"cpu": _cpu_summary(cpu),
                                                   "face_found_ratio": round(float(np.mean(hit)), 4)}
        result[f"ratio_vs_{v}"] = {"median_of_all_frames": round(result["facebridge"]["median_ms"] / percentiles(
            ms, (50,))[0], 3), "cpu_median": round(float(np.median(ours_cpu) / np.median(cpu)), 3),
            "cpu_mean_with_deferred": round(float(np.mean(with_deferred) / np.mean(cpu)), 3),
            "per_chunk_median": round(float(np.median(ratios)), 3),
            "per_chunk_min": round(float(np.min(ratios)), 3), "per_chunk_max": round(float(np.max(ratios)), 3)}

    def spread(side: dict) -> str:  # CPU p99 over median, all frames and steady
        return f"CPU p99/median {side['cpu']['p99_over_median']} (steady {side['cpu']['steady']['p99_over_median']})"

    left_out = f", without {'+'.join(without)} (a diagnosis: not all it streams)" if without else ""
    print(f"side by side ({len(ours)} frames, one core {sorted(os.sched_getaffinity(0))}{left_out}): FaceBridge median "
          f"{result['facebridge']['median_ms']} ms, p99 {result['facebridge']['p99_ms']} ms, "
          f"{spread(result['facebridge'])}, deferred {result['facebridge']['deferred']['cpu_mean_per_frame_ms']} ms "
          f"CPU a frame; " + "; ".join(
              f"MediaPipe {v} median {result[f'mediapipe_{v}']['median_ms']} ms, {spread(result[f'mediapipe_{v}'])}, "
              f"ratio {result[f'ratio_vs_{v}']['median_of_all_frames']} (CPU time "
              f"{result[f'ratio_vs_{v}']['cpu_median']})" for v in variants), file=sys.stderr)
    return result
