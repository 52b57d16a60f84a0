"""SessionRecreator: the output guard's `recreate(stage)`, through the live model swap (bridge/runtime/swap.py).

The guard names a stage ("landmarks", "iris", "expression", "emotion", "detect", or "describe" for all of its
models); each of the stage's models is asked of the run's `ModelSwapper` again, so a recreated session takes the
path a new release takes: built on the swap builder thread, checked, and taken by the thread that runs the model
at its swap point between two frames, while the stream goes on. The build repeats the loader of the request whose
replacement serves now (an installed release is rebuilt as it was installed), or, for a model that came with the
pipeline, the pipeline's own constructor; the check wants finite outputs on zeros (and the release's reference,
when the request had one). The announced version does not change. A model already on its way is not asked twice.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

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
    the swapper) counts the recreations that swapped in, in `stats` (a RunStats)."""

    def __init__(self, pipeline, swapper, stats=None) -> None:
        self.pipeline, self.swapper, self.stats = pipeline, swapper, stats
        self._asked: dict[str, str] = {}  # model -> the guard's stage, while on its way
        self._lock = threading.Lock()

    def models(self, stage: str) -> list[tuple[str, str]]:
        """(registry name, component) of each model `stage` runs (empty for a pipeline without swap points)."""
        if not hasattr(self.pipeline, "swappable_models"):  # an audio-only run: no face model sessions
            return []
        from bridge.pipeline import SWAP_POINTS

        step = SWAP_POINTS["describe"] if stage == "describe" else [p for ps in SWAP_POINTS.values() for p in ps
                                                                   if p[1] == COMPONENTS.get(stage)]
        in_use = set(self.pipeline.swappable_models())  # the detector asked for, one of the two landmark paths
        return [(m, c) for m, c in step if m in in_use
                and getattr(getattr(self.pipeline, c, None), "session", None) is not None]

    def __call__(self, stage: str) -> None:
        models = self.models(stage)
        if not models or getattr(self.pipeline, "swapper", None) is not self.swapper:
            log.warning("cannot recreate '%s': this pipeline has no model session for it", stage)
            return
        for model, component in models:
            with self._lock:
                if model in self._asked:
                    continue
                self._asked[model] = stage
            if not self.swapper.request(self._request(model, component)):
                with self._lock:
                    self._asked.pop(model, None)
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

    def on_event(self, event) -> None:
        with self._lock:
            stage = self._asked.pop(event.model, None)
        if stage is not None and event.ok and self.stats is not None:
            self.stats.session_recreated(stage)
