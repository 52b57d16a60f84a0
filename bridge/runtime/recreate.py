"""SessionRecreator: the output guard's `recreate(stage)`, through the live model swap (bridge/runtime/swap.py).

The guard names a stage ("landmarks", "iris", "expression", "emotion", "detect", or "describe" for all of its
models); each of the stage's models is asked of the run's `ModelSwapper` again, so a recreated session takes the
path a new release takes: built on the swap builder thread, checked, and taken by the thread that runs the model
at its swap point between two frames, while the stream goes on. The build repeats the loader of the request whose
replacement serves now (an installed release is rebuilt as it was installed), or, for a model that came with the
pipeline, the pipeline's own constructor; the check wants finite outputs on zeros (and the release's reference,
when the request had one). The announced version does not change. A model already on its way is not asked twice.

A signed release whose stage still fails after its session was recreated is not recreated again: `fallback`
(runtime/fallback.py) rolls it back, and the previous release or the shipped model is swapped in instead.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

from bridge.pipeline import SWAP_POINTS
from bridge.runtime.pipeline_protocol import Pipeline
from bridge.runtime.swap import SwapRefused, SwapRequest

log = logging.getLogger(__name__)

COMPONENTS = {"detect": "detector", "landmarks": "landmarker", "iris": "iris", "emotion": "emotion",
              "expression": "expression"}  # the guard's stage -> the pipeline component running its model


def finite_on_zeros(session) -> None:
    """One run on zeros of the session's input shapes (a dynamic axis counts 1), which also warms it; SwapRefused
    when an output is not finite."""
    feeds = {spec.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in spec.shape],
                                 dtype=np.dtype(spec.dtype)) for spec in session.inputs}
    for name, out in session.run(feeds).items():
        if not np.isfinite(np.asarray(out, np.float64)).all():
            raise SwapRefused(f"the recreated session's output {name} is not finite on zeros")


class SessionRecreator:
    """`recreator(stage)` asks the swapper for new sessions of the stage's models; `on_event(SwapEvent)` (wired to
    the swapper) counts the recreations that swapped in, in `stats` (a RunStats). The pipeline (a
    runtime/pipeline_protocol.py `Pipeline`) takes its new sessions from the same swapper (`use_swapper`)."""

    def __init__(self, pipeline: Pipeline, swapper, stats=None, fallback=None) -> None:
        self.pipeline, self.swapper, self.stats = pipeline, swapper, stats
        self.fallback = fallback  # fallback(model, release, version, why) -> bool, for a release that failed again
        self._asked: dict[str, str] = {}  # model -> the guard's stage, while on its way
        self._recreated: dict[str, str] = {}  # model -> the version whose recreated session serves now
        self._lock = threading.Lock()

    def models(self, stage: str) -> list[tuple[str, str]]:
        """(registry name, component) of each model `stage` runs (empty for a pipeline without swappable models:
        audio-only, remote)."""
        step = SWAP_POINTS["describe"] if stage == "describe" else [p for ps in SWAP_POINTS.values() for p in ps
                                                                   if p[1] == COMPONENTS.get(stage)]
        in_use = set(self.pipeline.swappable_models())  # the detector asked for, one of the two landmark paths
        return [(m, c) for m, c in step if m in in_use]

    def __call__(self, stage: str) -> None:
        models = self.models(stage)
        if not models:
            log.warning("cannot recreate '%s': this pipeline has no model session for it", stage)
            return
        for model, component in models:
            with self._lock:
                if model in self._asked:
                    continue
                serving = self.swapper.serving.get(model)
                failed_again = (serving is not None and serving.release > 0
                                and self._recreated.get(model) == serving.version)
            if failed_again and self._fall_back(model, serving, self._why(stage)):
                continue
            with self._lock:
                self._asked[model] = stage
            if not self.swapper.request(self._request(model, component)):
                with self._lock:
                    self._asked.pop(model, None)
                if not self._fall_back(model, serving, "its session cannot be recreated"):
                    log.warning("cannot recreate the %s session: its version was refused before", model)

    def _request(self, model: str, component: str) -> SwapRequest:
        serving = self.swapper.serving.get(model)
        if serving is not None:  # the loader that built what serves now, and its check, run again
            def check(session, first=serving.check):
                if first is not None:
                    first(session)
                finite_on_zeros(session)

            return SwapRequest(model, serving.version, serving.release, serving.build, check)
        key = "expression" if component == "expression" else model
        version = self.pipeline.model_versions.get(key, "")
        release = self.stats.releases.get(model, 0) if self.stats is not None else 0
        return SwapRequest(model, version, release, lambda: self.pipeline.build_session(component), finite_on_zeros)

    @staticmethod
    def _why(stage: str) -> str:
        return f"its {stage} output kept being replaced by the output guard after its session was recreated"

    def _fall_back(self, model: str, serving, why: str) -> bool:
        """Hand a signed release that failed again to the fallback; False for the shipped model (or no fallback)."""
        if self.fallback is None or serving is None or serving.release <= 0:
            return False
        self.fallback(model, serving.release, serving.version, why)
        return True

    def on_event(self, event) -> None:
        with self._lock:
            stage = self._asked.pop(event.model, None)
            if event.ok and stage is not None:
                self._recreated[event.model] = event.version
            elif event.ok:  # another version serves now: it gets its own recreation first
                self._recreated.pop(event.model, None)
        serving = self.swapper.serving.get(event.model)
        if stage is not None and not event.ok and serving is not None and serving.version == event.version:
            self._fall_back(event.model, serving, f"its {stage} output kept being replaced and its recreated "
                            f"session was refused ({event.detail})")  # the release cannot be mended
        if stage is not None and event.ok and self.stats is not None:
            self.stats.session_recreated(stage)
