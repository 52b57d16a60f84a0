"""Pipeline: what the session, the control surface, the guard's session recreation and the runner ask of a pipeline.

A run has one of four kinds of pipeline: `FacePipeline` (bridge/pipeline.py, one face), `MultiFacePipeline`
(bridge/multiface.py, `--faces N`), `AudioOnlyPipeline` (bridge/audio/run_audio.py, `--audio-only`: the voice drives
the mouth of a neutral face) and `RemotePipeline` (bridge/runtime/remote.py, `--remote`: a `facebridge serve` box
tracks). Each implements every member below itself, so the callers never ask a pipeline what it is: a member that
does not apply to a kind gives the empty answer its docstring names (no models to swap, no face to calibrate, no
deferred work), and the caller treats that answer like any other. `tests/runtime/test_pipeline_protocol.py` holds
every kind to it, and `tests/test_layout.py` keeps `hasattr`/`getattr` probes of a pipeline out of runtime/.

The protocol lives here, with the callers, and the pipelines match it by shape (none imports it): the face domain
below runtime/ never imports runtime/.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from bridge.frame import FaceFrame, Frame
    from bridge.pipeline import FaceModels, FacePipeline
    from bridge.runtime.swap import ModelSwapper

Step = Callable[[Any], Any]


@runtime_checkable
class Pipeline(Protocol):
    # frames: what the runner's threads run (the session wraps the last step: audio fusion, mapping, output guard)
    def process(self, frame: Frame) -> FaceFrame | list[FaceFrame]:
        """One frame in, its FaceFrame out (several faces: a list, slot 0 first): `describe(track(frame))`."""

    def track(self, frame: Frame) -> Any:
        """Stage 1, the only one that carries state from one frame to the next (a kind that runs in one step hands
        the frame on unchanged; `overlaps()` is False for it, so the runner never runs it alone)."""

    def describe(self, tracked: Any) -> FaceFrame | list[FaceFrame]:
        """Stage 2: what `track` handed on, described (a kind that runs in one step: `process` of the frame)."""

    def overlaps(self) -> bool:
        """True when `track` and `describe` may run on two threads, `describe` of frame N beside `track` of frame N+1;
        False for a kind with one step (audio-only; remote, which has one frame in flight)."""

    def wrap_faces(self, wrap: Callable[[int, Step, Callable[[], None]], Step]) -> bool:
        """Several faces: each face's describe step k becomes `wrap(k, step, reset)` (its own output guard, the audio
        mouth on face 0 only) and True. One face or none: nothing is changed and False (the session wraps the last
        step whole)."""

    def guarded(self) -> bool:
        """True when the output guard checks this pipeline's frames on this machine; False for `--remote` (the
        server made them; a frame it lost is the runner's bad frame)."""

    def reset_description(self) -> None:
        """Forget describe's temporal state (pose tracking, blink baseline, filters) after a frame the output guard
        replaced; nothing to forget for a kind without it (audio-only)."""

    def run_deferred(self) -> None:
        """The work a frame left for after it was handed on (the runner calls it in the last step's thread after
        each frame); nothing for a kind that defers nothing."""

    # models
    @property
    def model_versions(self) -> dict[str, str]:
        """The versions of the models that make this pipeline's frames (a swap replaces the dict, never changes
        it): what gRPC GetStatus announces before the first frame."""

    def swappable_models(self) -> list[str]:
        """Registry names of the models this pipeline runs here and can swap live, each with a session now (the
        update watch follows their releases, the output guard recreates their sessions); [] for a kind with no
        face model here (audio-only: the lip-sync model is the audio's own; remote)."""

    def use_swapper(self, swapper: ModelSwapper) -> None:
        """Take new sessions of `swappable_models()` from the run's swapper, each in the thread that runs the model,
        between two frames; a kind without swappable models keeps nothing."""

    def build_session(self, component: str) -> Any:
        """A new session for a component's model (bridge/pipeline.py SWAP_POINTS), opened as at the start: the
        guard's recreation of a model that came with the pipeline. None for a kind without swappable models (never
        asked: the recreation asks only for `swappable_models()`)."""

    def face_models(self) -> FaceModels | None:
        """The backend and precision the face models run with here, and the landmark path and why (the start line,
        GetStatus); None where no face model runs on this machine (audio-only, remote)."""

    def detector_summary(self, verbose: bool = True) -> str:
        """Which face detector runs, and when (`verbose`: why); '' for a kind that detects no face here."""

    # calibration
    def face(self, subject: str) -> FacePipeline | None:
        """The single-face pipeline that describes `subject` (its calibration tap, identity and profile: what
        runtime/control.py calibrates through); None where no face is described here (audio-only; remote, whose
        server describes with its own profiles)."""

    # closing
    def close(self) -> None:
        """Release what the pipeline holds open (the session calls it once, after the runner's threads ended); a
        kind that holds nothing beyond its model sessions closes nothing."""
