"""Signed releases reaching `facebridge serve`: a newly active release of a batched model is built into a runner in
the background, checked, and swapped in between two batched passes; streams never stop.

The watch is the run's own (runtime/releases.py: one stat() of the update store a poll, files re-verified by the
registry) and so is the builder (runtime/swap.py: one thread, a refused release is never retried). What differs is
what gets built: the runner of that model's role, exactly as the server built the one in use
(multistream/runners.make_runner: same kind, batch sizes, precision), checked against the release's reference outputs
and then on a batch as large as the server's largest pass (a model that cannot take the server's batches is
refused: the installer's smoke test runs one item). `PassGate` is the lock every batched pass holds (the services
of every frame size share the runners); entering it first takes what the builder has ready, so a swap happens
between two passes and never waits for a build. The FaceFrames announce the versions in use (a new dict on each
swap); a frame whose pass ran just before a swap may still be described after it and name the new version, as in
`facebridge run`. A release that fails is refused with one line, and the models in use keep serving.

A release that passes every check and still fails on the streams' real faces is rolled back by the server itself:
`check_pass` reads each pass's results, and when the outputs of a role that runs a release are not finite on the
tracked rows of PERSIST_PASSES passes in a row (only the first role in ROLE_ORDER with such outputs is blamed:
values flow downstream), ReleaseFallback (runtime/fallback.py) rolls it back in the store and the previous release
or the shipped model is swapped in between two passes. Serve has no session to recreate (a runner is a function of
its weights), so it falls back at once. The status line and GetServeStatus.release say so.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path

import numpy as np

from bridge.runtime.fallback import ReleaseFallback
from bridge.runtime.releases import ReleaseWatch, check_reference
from bridge.runtime.swap import ModelSwapper, SwapRefused, SwapRequest
from bridge.updates.smoke import read_npz, split_reference

log = logging.getLogger(__name__)

PERSIST_PASSES = 5  # passes in a row with non-finite outputs of a release's role before it is rolled back
# the roles whose outputs a pass's results carry (multistream.service.StreamFaces fields), in the order values flow
ROLE_FIELDS = {"landmarks": ("landmarks",), "iris": ("irises",), "expression": ("blendshapes", "expression_head"),
               "emotion": ("emotion",)}
FP16_TOLERANCE = (3e-2, 3e-2)  # atol, rtol at least, for runners in half precision (the references are float32)
START_WAIT_S = 120.0  # at start, how long releases installed before are given to build before the first client


class PassGate:
    """A lock for the batched passes that swaps ready runners in as it is taken. `versions` is the dict the
    FaceFrames announce; `on_swap(roles)` (optional) runs under the lock after a swap (CUDA-graph recapture)."""

    def __init__(self, runners: dict, versions: dict[str, str], swapper: ModelSwapper | None = None,
                 models: dict[str, str] | None = None, on_swap=None) -> None:
        self.runners, self.versions, self.swapper = runners, dict(versions), swapper
        self.models = models or {}  # registry name -> role
        self.on_swap = on_swap
        self._lock = threading.Lock()

    def __enter__(self) -> PassGate:
        self._lock.acquire()
        if self.swapper is not None:
            try:
                self._take()
            except Exception as e:  # noqa: BLE001 - a swap that fails here keeps the runners in use
                log.warning("swapping runners failed (%s); the models in use keep serving", e)
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def _take(self) -> None:
        swapped = []
        for model, role in self.models.items():
            ready = self.swapper.take(model)  # a dictionary check when nothing is ready
            if ready is None:
                continue
            self.runners[role] = ready.replacement
            key = "expression" if role == "expression" else model
            self.versions = {**self.versions, key: ready.request.version}  # frames handed on keep their dict
            swapped.append(role)
        if swapped and self.on_swap is not None:
            self.on_swap(swapped)


def _model_io(path: Path) -> tuple[str, list[int | None], list[str]]:
    """(input name, its item shape, output names) of a single-input ONNX model, read without a session."""
    # optional extra: onnx (fed, tools), about 1.1 s to import
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise SwapRefused(f"the new model has {len(inputs)} inputs; a batched runner takes one")
    dims = [d.dim_value or None for d in inputs[0].type.tensor_type.shape.dim]
    return inputs[0].name, dims[1:], [o.name for o in graph.output]


def check_runner(runner, model_path: Path, reference: Path | None, tolerance: tuple[float, float], batch: int,
                 device: str) -> None:
    """SwapRefused unless `runner` gives the release's reference outputs, and gives them on every row of a batch of
    `batch` items made of the reference inputs (shipped models, without a reference, run one batch of zeros)."""
    # optional extra: torch (gpu), about 1.5 s to import
    import torch

    name, item_shape, outputs = _model_io(model_path)

    def run(feeds: dict) -> dict:
        x = torch.from_numpy(np.ascontiguousarray(feeds[name], np.float32)).to(device)
        return {n: o.float().cpu().numpy() for n, o in zip(outputs, runner(x))}

    if reference is None:
        x = np.zeros((batch, *[d or 1 for d in item_shape]), np.float32)
        expected = None
    else:
        check_reference(run, reference, tolerance)
        inputs, expected = split_reference(read_npz(reference, "reference.npz"))
        x = inputs[name]
        x = np.concatenate([x] * math.ceil(batch / len(x)))[:batch]
    try:
        got = run({name: x})
    except Exception as e:
        raise SwapRefused(f"the new model fails on a batch of {batch} ({str(e).splitlines()[0][:160]}); this "
                          "server needs a model with a dynamic batch dimension") from None
    atol, rtol = tolerance
    for out, values in got.items():
        if values.shape[0] != batch or not np.isfinite(values).all():
            raise SwapRefused(f"the new model's output {out} on a batch of {batch} is {list(values.shape)} or not "
                              "finite")
        if expected is not None and out in expected:
            want = expected[out][np.arange(batch) % len(expected[out])]
            error = np.abs(values.astype(np.float64) - want)
            if (error > atol + rtol * np.abs(want)).any():
                raise SwapRefused(f"the new model's output {out} on a batch of {batch} differs from its reference "
                                  f"by up to {float(error.max()):.3g}")


class ServeReleases:
    """The update store followed by one `facebridge serve`: swapper, watch and pass gate.

    build_runner(role, model_path) -> a runner as the server builds them; batch: the largest pass (max streams;
    the iris role takes two eyes a face); report(line): where swap lines go (the server's log)."""

    def __init__(self, state_dir: Path, runners: dict, versions: dict[str, str], models: dict[str, str],
                 build_runner, batch: int, device: str = "cpu", fp16: bool = False, report=None,
                 on_swap=None) -> None:
        self.build_runner, self.batch, self.device, self.fp16 = build_runner, batch, device, fp16
        self.models = models
        self.last = ""  # the last release swapped in or refused, one line
        self._report = report or (lambda line: log.warning("%s", line))
        self.swapper = ModelSwapper(report=self._report, on_event=self._event)
        self.gate = PassGate(runners, versions, self.swapper, models, on_swap=on_swap)
        self.releases: dict[str, int] = {}
        self.watch = ReleaseWatch(state_dir, list(models), self.swapper, make_request=self._request,
                                  on_release=self.releases.__setitem__)

        self.rolled_back: dict[str, int] = {}  # model -> the release that failed on the streams and was rolled back
        self.fallback = ReleaseFallback(self.watch, lambda model, release, why: self.rolled_back.__setitem__(
            model, release), report=self._report)
        self._bad_passes: dict[str, int] = {}  # model -> passes in a row whose outputs were not finite
        self._pass_lock = threading.Lock()

    def check_pass(self, faces) -> None:
        """One pass's results (multistream.service.StreamFaces): count the passes in a row on which a role that runs a
        release gave non-finite outputs, and roll that release back after PERSIST_PASSES of them."""
        rows = np.asarray(faces.tracked, bool)
        if not rows.any():
            return
        finite = getattr(faces, "finite", None)  # the service's check of each row, when it made one
        all_finite = finite is not None and bool(finite[rows].all())
        blamed = None if all_finite else next(  # which role's outputs are not finite
            (role for role, fields in ROLE_FIELDS.items()
             if not all(np.isfinite(getattr(faces, f)[rows]).all() for f in fields)), None)
        failed = []
        with self._pass_lock:
            for model, role in self.models.items():
                serving = self.swapper.serving.get(model)
                if serving is None or serving.release <= 0 or role != blamed:
                    self._bad_passes.pop(model, None)
                    continue
                self._bad_passes[model] = self._bad_passes.get(model, 0) + 1
                if self._bad_passes[model] >= PERSIST_PASSES:
                    self._bad_passes[model] = 0
                    failed.append((model, serving))
        for model, serving in failed:
            self.fallback(model, serving.release, serving.version,
                          f"its {self.models[model]} outputs were not finite on {PERSIST_PASSES} passes in a row")

    def _request(self, active, version: str, tolerance: tuple[float, float]) -> SwapRequest:
        role = self.models[active.name]
        if active.kind == "adapter":
            def refuse():
                raise SwapRefused(f"{active.name} takes whole models (model.onnx), not adapters")
            return SwapRequest(active.name, version, active.release, refuse)
        if self.fp16:
            tolerance = (max(tolerance[0], FP16_TOLERANCE[0]), max(tolerance[1], FP16_TOLERANCE[1]))
        batch = self.batch * 2 if role == "iris" else self.batch
        return SwapRequest(active.name, version, active.release, lambda: self.build_runner(role, active.model_path),
                           lambda runner: check_runner(runner, active.model_path, active.reference_path, tolerance,
                                                       batch, self.device))

    def _event(self, event) -> None:
        if event.ok:
            self.last = f"{event.model} {event.version} serving since {time.strftime('%H:%M:%S')}"
        else:
            self.last = f"{event.model} {event.version} refused: {event.detail}"

    def start(self, wait_s: float = START_WAIT_S) -> ServeReleases:
        """Give the releases installed before the start time to build, take them, then watch on a thread."""
        waiting = [m for m, release in self.releases.items() if release > 0]
        end = time.monotonic() + wait_s
        while waiting and time.monotonic() < end:
            waiting = [m for m in waiting if not self.swapper.settled(m)]
            time.sleep(0.05)
        if waiting:
            self._report(f"releases of {', '.join(waiting)} are still being built; they swap in once ready")
        with self.gate:  # takes what is ready
            pass
        self.watch.start()
        return self

    def status(self) -> dict:
        rolled = ", ".join(f"{m} r{r}" for m, r in sorted(self.rolled_back.items()))
        return {"model_versions": dict(self.gate.versions),
                "release": self.last + (f"; rolled back {rolled}" if rolled else "")}

    def close(self) -> None:
        self.watch.stop()
        self.swapper.close()
