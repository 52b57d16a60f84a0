"""Signed releases reaching the running bridge: a watcher thread notices that the update store's active release of
a model changed and asks the swapper to build it, checked against the release's own reference outputs.

The store is only read (a stat() every poll; the files are re-verified by the registry before anything loads),
so an install or rollback by `fedagent update` in another process reaches a running `facebridge run` (or
`facebridge serve`, whose requests build batched runners: runtime/serve_releases.py) within one poll. A release
whose files are damaged, whose model does not open, or whose outputs differ from its declared reference is refused
once and never retried; the model in use keeps serving.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bridge.audio.lipsync import LipSyncModel, model_bytes_with_adapter
from bridge.engines import create_session
from bridge.engines.cache import EngineCache
from bridge.engines.shipped import ShippedModel, find_model
from bridge.engines.tensorrt.flavour import load_flavour
from bridge.engines.tensorrt.prepare import prepare_engine, spec_for
from bridge.fsutil import atomic_write_bytes
from bridge.models import sha256_file
from bridge.models.registry import ModelRegistry
from bridge.runtime.swap import ModelSwapper, SwapRefused, SwapRequest
from bridge.updates.bundle import parse as parse_bundle
from bridge.updates.smoke import read_npz, split_reference
from bridge.updates.watch import ReleaseWatcher

log = logging.getLogger(__name__)

POLL_S = 1.0  # a release is picked up within a second; each poll stats every model's store (about 0.3 ms)
DEFAULT_TOLERANCE = (1e-3, 1e-3)  # atol, rtol when a release's bundle does not say


def release_version(active) -> str:
    """How FaceFrame.model_versions names an installed release: 'r<counter>-<sha256 prefix of its main file>'."""
    main = active.adapter_path or active.model_path

    return f"r{active.release}-{sha256_file(main)[:12]}"


def check_reference(run: Callable[[dict], dict], reference: Path | None, tolerance: tuple[float, float]) -> None:
    """SwapRefused unless `run` reproduces every output of the release's reference (finite, within tolerance)."""
    if reference is None:
        return

    inputs, expected = split_reference(read_npz(reference, "reference.npz"))
    try:
        got = run(inputs)
    except Exception as e:
        raise SwapRefused(f"the new model fails on its reference inputs ({str(e).splitlines()[0][:120]})") from None
    atol, rtol = tolerance
    for name, want in expected.items():
        out = np.asarray(got.get(name))
        if out.shape != want.shape or not np.isfinite(out).all():
            raise SwapRefused(f"the new model's output {name} is {list(out.shape)} or not finite "
                              f"(reference {list(want.shape)})")
        error = np.abs(out.astype(np.float64) - want)
        if (error > atol + rtol * np.abs(want)).any():
            raise SwapRefused(f"the new model's output {name} differs from its reference by up to "
                              f"{float(error.max()):.3g}")


def _tolerance(state_dir: Path, model: str) -> tuple[float, float]:
    """atol, rtol from the active release's signed bundle (kept in its slot), else the defaults."""
    try:
        release = ModelRegistry(state_dir).installed(model)
        if release is not None:
            bundle = parse_bundle((state_dir / "slots" / release.slot / "bundle.json").read_bytes())
            return bundle.atol, bundle.rtol
    except Exception as e:  # the registry re-verifies the files anyway; a missing bundle costs only tolerance
        log.debug("no tolerance from the bundle of %s: %s", model, e)
    return DEFAULT_TOLERANCE


def lipsync_request(active, version: str, tolerance: tuple[float, float]) -> SwapRequest:
    def build():
        return LipSyncModel(model_path=active.model_path, adapter=active.adapter_path, version=version)

    return SwapRequest("lipsync", version, active.release, build,
                       lambda model: check_reference(model.run_raw, active.reference_path, tolerance))


def session_request(active, version: str, tolerance: tuple[float, float], backend: str, cpu_precision: str
                    ) -> SwapRequest:
    """A face model: a new inference session on the bridge's backend, warmed on the reference inputs."""
    def build():
        return create_session(active.model_path, backend=backend, cpu_precision=cpu_precision)

    return SwapRequest(active.name, version, active.release, build,
                       lambda session: check_reference(session.run, active.reference_path, tolerance))


class ReleaseWatch:
    """Polls the update store for `models` on its own thread and requests a swap when one's active release moves.
    make_request(active, version, tolerance) -> SwapRequest builds what the owner swaps in (default: a lip-sync
    model, or an inference session on `backend`)."""

    def __init__(self, state_dir: Path, models: list[str], swapper: ModelSwapper, backend: str = "onnxruntime",
                 cpu_precision: str = "f32", on_release: Callable[[str, int], None] | None = None,
                 make_request: Callable[..., SwapRequest] | None = None) -> None:
        self.state_dir, self.swapper = Path(state_dir), swapper
        self.make_request = make_request
        self.backend, self.cpu_precision = backend, cpu_precision
        self.on_release = on_release or (lambda model, release: None)
        self._watchers = {m: ReleaseWatcher(m, self.state_dir) for m in models}
        self._polling = threading.Lock()  # one poll at a time: a change is reported to one caller only
        self._asked_lock = threading.Lock()
        self._requested: dict[str, str] = {}  # model -> the version last asked for through this watch
        for watcher in self._watchers.values():  # an installed release is built at once; the shipped model is
            self._poll_one(watcher, first=True)  # what the pipeline loaded
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="facebridge-release-watch", daemon=True)

    def start(self) -> ReleaseWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll_now()

    def poll_now(self) -> None:
        """Poll every model now (the watch thread, or a caller that just changed the store: a fallback)."""
        with self._polling:
            for watcher in self._watchers.values():
                self._poll_one(watcher)

    def _poll_one(self, watcher, first: bool = False) -> None:
        model = watcher.model
        try:
            active = watcher.poll()
        except Exception as e:  # damaged files of a newly active release: refused, the old model serves on
            self.swapper.refuse(model, "unreadable release", str(e), release=-1)
            return
        if active is None:
            return
        self.on_release(model, active.release)
        if first and active.release == 0:
            return
        self.request(active)

    def request(self, active) -> bool:
        """Ask the swapper to build `active` (a registry ActiveModel) and swap it in; False when that version was
        refused before, or was the last one asked for (a fallback asks before the store says so)."""
        model = active.name

        version = release_version(active) if active.release else sha256_file(active.model_path)[:12]
        with self._asked_lock:
            if self._requested.get(model) == version:
                return False
            self._requested[model] = version
        tolerance = _tolerance(self.state_dir, model) if active.release else DEFAULT_TOLERANCE
        if self.make_request is not None:
            request = self.make_request(active, version, tolerance)
        elif model == "lipsync":
            request = lipsync_request(active, version, tolerance)
        else:
            request = session_request(active, version, tolerance, self.backend, self.cpu_precision)
        return self.swapper.request(request)


def tensorrt_adapter_engine(weights: dict, flavour_name: str = "tensorrt-rtx", cache_dir=None, report=None):
    """The TensorRT engine of the lip-sync model with `weights` as its adapter, through the engine cache.

    The shipped graph is written with the new adapter initializers (same names and shapes), and its engine is
    prepared with those initializers refittable, so a GPU that has the base engine can refit it in place
    (`TrtSession.refit`) instead of rebuilding. Where refittable builds are impossible (TensorRT-RTX needs a GPU to
    compile refittable layers) the engine is built with fixed weights and the cache entry says why; the key holds
    the new graph's sha256, so it never collides with the base engine."""
    flavour, cache = load_flavour(flavour_name), EngineCache(cache_dir)
    baked = model_bytes_with_adapter(weights)
    shipped = find_model("lipsync")
    path = atomic_write_bytes(cache.root / "releases" / "lipsync-adapted.onnx", baked)
    model = ShippedModel("lipsync", path, {**shipped.entry, "sha256": sha256_file(path)})
    return prepare_engine(model, flavour, cache, spec_for(model, baked, flavour), report=report)
