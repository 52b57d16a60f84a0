"""CPU backend by measurement: per model, the fastest CPU backend whose outputs agree with ONNX Runtime's.

`--backend auto` on a machine without a usable GPU backend ends here. Each CPU backend that is installed and
opens the model (LiteRT needs a shipped .tflite) runs it on real sample frames at the batch its caller uses;
one whose outputs differ from ONNX Runtime f32 by more than PARITY (relative to the output's range) is refused,
and of the rest the lowest median CPU time per call (the process's, so a backend's own worker threads count),
the candidates taking turns round by round, wins (wall time on a loaded machine picked OpenVINO over LiteRT for
the iris model, which costs about 20% more CPU). The choice, with every
candidate's time and the reason for each refusal, is printed and kept in `cpu-backends.json` in the engine cache
folder, keyed by the model's bytes, the CPU, the library versions, threads, precision and batch, so later starts
open only the chosen backend; `facebridge engines clear` forgets them (measure again on a quiet machine). Which
backend wins differs by CPU (AVX2 or AMX) and by model (small models run faster on ONNX Runtime), which is why it
is measured rather than ordered.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bridge.engines.base import EngineError
from bridge.engines.cache import CPU_CHOICES, default_cache_dir
from bridge.engines.select import check_available
from bridge.engines.shipped import find_model, frames_as_input, value_range_of
from bridge.fsutil import atomic_write_json

CPU_BACKENDS = ("litert", "openvino", "onnxruntime")
# Max |difference| to ONNX Runtime f32, as a share of max(1, |reference|): the tolerance of the backend-parity
# tests (1e-3, about 0.15 px on the landmark model's 192 px scale); bf16, asked for explicitly, is held to its
# own measured bound instead (docs/PERFORMANCE.md, "CPU inference precision").
PARITY = {"f32": 1e-3, "bf16": 2e-2}
ROUNDS, RUNS, WARMUP = 4, 4, 2  # 16 timed calls a backend, taking turns: about 1-2 s on a first start
CHOSEN: dict = {}  # model file name -> the Choice made for it in this process (benchmarks report them)
MEASURE_VERSION = 4  # part of the stored key: bump when a backend's sessions change speed (2: ORT's PRelu rewrite,
#                     3: LiteRT runs a batch in one invoke, CPU time measured; 4: choices stored under 3 by builds
#                     that still timed wall time, which picked OpenVINO for the iris model at 20% more CPU)


@dataclass
class Choice:
    backend: str
    reason: str  # one line: the winner's time, the others' times or why they were refused
    timings_ms: dict  # backend -> median CPU ms per call (only those that passed parity)


def _versions() -> dict:
    out = {}
    for dist in ("onnxruntime", "openvino", "ai-edge-litert"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def cpu_name() -> str:
    """The CPU's model name (Linux), else what platform knows: benchmark JSON and the measured-engine cache key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _key(model_path: Path, threads: int, precision: str, batch: int) -> str:
    fields = {"v": MEASURE_VERSION, "model": hashlib.sha256(model_path.read_bytes()).hexdigest()[:16],
              "cpu": cpu_name(), "versions": _versions(), "threads": threads, "precision": precision, "batch": batch}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def _feed(model_path: Path, session, batch: int) -> dict:
    """One input per model input: real sample frames for image inputs (in the model's value range), seeded noise
    for other float inputs, zeros for the rest; a dynamic first axis gets `batch`, other dynamic axes 1."""
    rng, feed = np.random.default_rng(0), {}
    for spec in session.inputs:
        shape = tuple(d if isinstance(d, int) else (batch if i == 0 else 1) for i, d in enumerate(spec.shape))
        if spec.dtype != "float32":
            feed[spec.name] = np.zeros(shape, spec.dtype)
        elif len(shape) == 4 and shape[1] in (1, 3):
            entry = find_model(str(model_path)).entry
            feed[spec.name] = frames_as_input(shape[1:], value_range_of(entry), count=shape[0])
        else:
            feed[spec.name] = rng.normal(0.0, 1.0, shape).astype(np.float32)
    return feed


def _agrees(out: dict, ref: dict, tolerance: float) -> tuple[bool, float]:
    worst = 0.0
    for name, want in ref.items():
        got = np.asarray(out[name], np.float64).reshape(want.shape)
        worst = max(worst, float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max())))
    return worst <= tolerance, worst


def measure(sessions: dict, feed: dict, precision: str) -> Choice:
    """Of `sessions` (backend -> open session, onnxruntime among them), the fastest agreeing with onnxruntime."""
    try:
        ref = sessions["onnxruntime"].run(feed)
    except Exception as e:  # a model our synthetic input does not suit: keep the first backend that opened
        first = next(iter(sessions))
        return Choice(first, f"not measured ({str(e).splitlines()[0][:80]})", {})
    passed, refused = {}, []
    for name, session in sessions.items():
        try:
            ok, worst = _agrees(session.run(feed), ref, PARITY.get(precision, PARITY["f32"]))
        except Exception as e:  # noqa: BLE001 - any backend failure only refuses that backend
            refused.append(f"{name} refused: {str(e).splitlines()[0][:80]}")
            continue
        if ok:
            passed[name] = session
        else:
            refused.append(f"{name} refused: {worst:.1e} of the output range off ONNX Runtime")
    times: dict = {name: [] for name in passed}
    for session in passed.values():
        for _ in range(WARMUP):
            session.run(feed)
    for _ in range(ROUNDS):  # taking turns: a burst of machine noise hits every candidate alike
        for name, session in passed.items():
            for _ in range(RUNS):
                t0 = time.process_time()  # CPU time, every thread of the process: what the call costs the
                session.run(feed)           # machine, and far steadier than wall time when other jobs load it
                times[name].append((time.process_time() - t0) * 1000.0)
    medians = {name: round(float(np.median(v)), 3) for name, v in times.items()}
    best = min(medians, key=medians.get)
    others = ", ".join(f"{n} {ms} ms" for n, ms in medians.items() if n != best)
    reason = f"fastest agreeing with ONNX Runtime: {medians[best]} ms CPU" + (f" (then {others})" if others else "")
    return Choice(best, reason + "".join(f"; {r}" for r in refused), medians)


def chosen_summary() -> str:
    """One line for a run's banner: which CPU backend each model got in this process and why ('' when `auto` chose
    none here, e.g. a GPU run or an explicit --backend)."""
    by_backend: dict[str, list[str]] = {}
    only = [f"{Path(name).stem} on {c.backend}, {c.reason}" for name, c in CHOSEN.items() if not c.timings_ms
            and c.reason.startswith("the only backend")]
    for name, choice in CHOSEN.items():
        if not (not choice.timings_ms and choice.reason.startswith("the only backend")):
            by_backend.setdefault(choice.backend, []).append(Path(name).stem)
    if not by_backend and not only:
        return ""
    measured = ("; ".join(f"{backend} for {', '.join(sorted(models))}" for backend, models in by_backend.items())
                + " (each the least CPU time of the backends agreeing with ONNX Runtime; `facebridge -v` shows the "
                "times)") if by_backend else ""
    return "; ".join(x for x in (measured, *only) if x)


def _store(cache_dir) -> Path:
    return Path(cache_dir or default_cache_dir()) / CPU_CHOICES


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def choose(model_path: Path, opener, threads: int = 1, precision: str = "f32", batch: int = 1,
           cache_dir=None) -> tuple[object, Choice]:
    """(open session, Choice) for `model_path`. `opener(backend)` opens it or raises EngineError. A stored choice
    is reused; otherwise every CPU backend is measured and the choice stored."""
    store, key = _store(cache_dir), _key(model_path, threads, precision, batch)
    known = _load(store).get(key)
    if known and known.get("backend") in CPU_BACKENDS:
        try:
            choice = Choice(known["backend"], "measured before: " + known["reason"], known.get("timings_ms", {}))
            session = opener(known["backend"])
            CHOSEN[model_path.name] = choice
            return session, choice
        except EngineError:
            pass  # the stored backend no longer opens here: measure again
    session, choice = _measure_and_store(model_path, opener, precision, batch, store, key)
    CHOSEN[model_path.name] = choice
    return session, choice


def _measure_and_store(model_path: Path, opener, precision: str, batch: int, store: Path, key: str):
    sessions, skipped = {}, []
    for name in CPU_BACKENDS:
        available = check_available(name)
        if not available.ok:
            skipped.append(f"{name}: {available.reason}")
            continue
        try:
            sessions[name] = opener(name)
        except EngineError as e:
            skipped.append(f"{name}: {e.problem}")
    if "onnxruntime" not in sessions:
        raise EngineError(f"ONNX Runtime cannot open {model_path.name}: " + "; ".join(skipped),
                          "check the model file with `facebridge engines verify`")
    choice = measure(sessions, _feed(model_path, sessions["onnxruntime"], batch), precision)
    if skipped:
        choice.reason += "; not measured: " + "; ".join(skipped)
    try:
        stored = _load(store)
        stored[key] = {"model": model_path.name, "backend": choice.backend, "reason": choice.reason,
                       "timings_ms": choice.timings_ms, "measured": time.time()}
        atomic_write_json(store, stored)
    except OSError:
        pass  # a read-only cache only costs the measurement next time
    return sessions[choice.backend], choice
