"""`facebridge bench swap`: what a live model swap costs a running stream.

For each backend and each release kind, a real `facebridge run` session streams the sample (with the sample voice
for the lip-sync adapter) to a Live Link Face socket on 127.0.0.1 while `fedagent update install`, another
process, installs a new signed release from a repository folder (the publisher's keys and releases are made
first, also by `fedagent`, as subprocesses: the bridge never imports fedagent). Measured, per swap:
- active_to_first_new_frame_ms: from the store's commit (the installer's rename of state.json) to the first frame
  sent with the new model's version;
- dropped_frames_during_swap: frames the runner dropped between the commit and one second after the first new one;
- worst_gap_ms / median_gap_ms: frame-to-frame gaps at the Live Link Face receiver in the second around the
  swap (the frame interval is 33 ms at 30 fps), and the worst gap in the rest of the run for comparison;
- build_s and build_cpu_s: loader + reference check on the builder thread (wall and CPU seconds); the
  process's resident memory before the install and once the new model serves.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bridge.bench.common import percentiles, reporter
from bridge.models.registry import default_registry

_say = reporter("swap")
KINDS = ("adapter", "model")  # lip-sync adapter release, face model (face_landmark) release


def add_arguments(p) -> None:
    p.add_argument("--backends", default="onnxruntime,openvino", help="backends of the face pipeline to run")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="adapter (a lip-sync adapter release) and/or model (a face_landmark model release)")
    p.add_argument("--seconds", type=float, default=6.0, help="seconds of streaming after the swap")


def _fedagent(*args: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-m", "fedagent", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"fedagent {' '.join(args[:2])} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class _Receiver(threading.Thread):
    """A Live Link Face socket on 127.0.0.1 stamping each packet's arrival."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.arrivals: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sock.recv(4096)
                self.arrivals.append(time.perf_counter())
            except OSError:
                continue


def _prepare(work: Path, kind: str, env: dict) -> tuple[Path, Path, Path, str]:
    """Keys, a repository with releases 1 (baseline) and 2 (the swap), and a device bootstrapped on release 1."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.audio.lipsync import load_adapter, save_adapter

    keys, repo, state = work / "keys", work / "repo", work / "state"
    _fedagent("keys", "init", "--dir", str(keys), env=env)
    registry = default_registry()
    if kind == "adapter":
        base = load_adapter(registry.default_adapter_path("lipsync"))
        first, second = work / "adapter1.npz", work / "adapter2.npz"
        save_adapter(first, base)
        save_adapter(second, {k: v * 0.5 for k, v in base.items()})  # a different adapter, same shapes
        files = [str(first), str(second)]
    else:
        model = registry.shipped_path("face_landmark")
        files = [f"face_landmark={model}", f"face_landmark={model}"]  # same weights, a new signed release
    _fedagent("publish", "--keys", str(keys), "--repo", str(repo), files[0], env=env)
    _fedagent("update", "install", "--from", str(repo), "--state", str(state), "--trust", str(keys / "trust.json"),
              env=env)
    return keys, repo, state, files[1]


def _one(backend: str, kind: str, seconds: float) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.pipeline import PipelineOptions
    from bridge.runtime.session import BridgeSession, OutputConfig, RunConfig

    with tempfile.TemporaryDirectory(prefix="facebridge-bench-swap-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, FACEBRIDGE_HOME=str(work / "home"))
        keys, repo, state, second = _prepare(work, kind, env)
        receiver = _Receiver()
        receiver.start()
        landmarks = "mesh+iris" if kind == "model" else "auto"  # the face-model release is a face_landmark one
        config = RunConfig(source="sample", audio="sample" if kind == "adapter" else None, status_line=False,
                           monitor=None, pipeline=PipelineOptions(backend=backend, landmarks=landmarks),
                           updates=str(state),
                           outputs=OutputConfig(llf=f"127.0.0.1:{receiver.sock.getsockname()[1]}", vmc=None))
        sent: list[tuple[float, int, dict]] = []  # (time sent, seq, model versions)
        session = BridgeSession(config).open()
        on_frame = session.control.on_frame
        session.control.on_frame = lambda f: (sent.append((time.perf_counter(), f.seq, f.model_versions)),
                                              on_frame(f))
        runner = threading.Thread(target=session.run, daemon=True)
        runner.start()
        model = "lipsync" if kind == "adapter" else "face_landmark"
        time.sleep(3.0)  # steady state on release 1
        _fedagent("publish", "--keys", str(keys), "--repo", str(repo), second, env=env)
        rss_before = _rss_mb()
        _fedagent("update", "install", "--from", str(repo), "--state", str(state), env=env)
        # the commit is the rename of state.json: its mtime on the wall clock, mapped onto perf_counter
        committed = time.perf_counter() - (time.time() - (state / "state.json").stat().st_mtime)
        deadline = time.perf_counter() + 30
        while not any(v.get(model, "").startswith("r2-") for _, _, v in sent) and time.perf_counter() < deadline:
            time.sleep(0.01)
        rss_after = _rss_mb()
        time.sleep(seconds)
        session.runner.stop()
        runner.join(30)
        receiver.stop.set()
    events = [e for e in session.swapper.events if e.model == model and e.release == 2]
    first_new = next((t for t, _, v in sent if v.get(model, "").startswith("r2-")), None)
    if not events or first_new is None:
        return {"backend": backend, "kind": kind, "swapped": False,
                "detail": events[0].detail if events else "the release never reached the stream"}
    stats = session.stats.snapshot()
    arrivals = np.array(receiver.arrivals)
    gaps = np.diff(arrivals) * 1000.0
    near = np.abs(arrivals[1:] - first_new) < 0.5
    seqs = [s for t, s, _ in sent if committed <= t <= first_new + 1.0]
    return {
        "backend": backend, "kind": kind, "model": model, "swapped": True,
        "active_to_first_new_frame_ms": round((first_new - committed) * 1000.0, 1),
        "build_s": round(events[0].build_s, 3),
        "dropped_frames_during_swap": int(max(seqs) - min(seqs) + 1 - len(seqs)) if seqs else None,
        "dropped_frames_total": stats.dropped_total, "frames_sent": stats.sent,
        "worst_gap_ms": round(float(gaps[near].max()), 1) if near.any() else None,
        "median_gap_ms": percentiles(gaps[near], (50,), digits=1)[0] if near.any() else None,
        "worst_gap_elsewhere_ms": round(float(gaps[~near].max()), 1) if (~near).any() else None,
        "frame_interval_ms": round(1000.0 / 30.0, 1),
        "build_cpu_s": round(events[0].build_cpu_s, 3), "rss_mb_before": round(rss_before, 1),
        "rss_mb_after": round(rss_after, 1),
    }


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines import check_available

    out = {"runs": []}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if not check_available(backend).ok:
            out["runs"].append({"backend": backend, "skipped": check_available(backend).reason})
            continue
        for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
            _say(f"{backend}: swapping a {kind} release into a running session")
            result = _one(backend, kind, args.seconds)
            _say(f"{backend} {kind}: " + ", ".join(f"{k} {v}" for k, v in result.items()
                                                   if k not in ("backend", "kind")))
            out["runs"].append(result)
    return out
