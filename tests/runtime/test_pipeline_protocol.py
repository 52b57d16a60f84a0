"""Every kind of pipeline is a runtime/pipeline_protocol.py `Pipeline`, each member implemented by the kind itself
(none left to the protocol's empty body), so the session, control, the guard's recreation and the runner never need
to ask a pipeline what it is; the kinds without face models here give the empty answers by design."""
from __future__ import annotations

import inspect

import pytest

from bridge.audio.lipsync import LipSyncStream
from bridge.audio.run_audio import AudioOnlyPipeline
from bridge.frame import Frame
from bridge.multiface import MultiFacePipeline
from bridge.pipeline import FaceModels, FacePipeline, PipelineOptions
from bridge.runtime.pipeline_protocol import Pipeline
from bridge.runtime.remote import RemotePipeline

KINDS = (FacePipeline, MultiFacePipeline, AudioOnlyPipeline, RemotePipeline)
MEMBERS = sorted(name for name, value in vars(Pipeline).items()
                 if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)))


def _defined_by(kind: type, name: str):
    """The class in `kind`'s own ancestry that defines `name` (never the protocol), or None."""
    return next((c for c in kind.__mro__ if name in vars(c) and c not in (Pipeline, object)), None)


def test_the_protocol_names_what_its_callers_need_each_with_a_docstring():
    assert {"process", "track", "describe", "overlaps", "wrap_faces", "guarded", "reset_description",
            "run_deferred", "model_versions", "swappable_models", "use_swapper", "build_session", "face_models",
            "detector_summary", "face", "close"} == set(MEMBERS)
    for name in MEMBERS:
        member = vars(Pipeline)[name]
        assert inspect.getdoc(member.fget if isinstance(member, property) else member), name


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_kind_implements_every_member_itself(kind):
    assert Pipeline not in kind.__mro__, "a kind matches the protocol by shape (the face domain imports no runtime/)"
    for name in MEMBERS:
        owner = _defined_by(kind, name)
        assert owner is not None, f"{kind.__name__} does not implement {name}"
        protocol_member, member = vars(Pipeline)[name], vars(owner)[name]
        assert isinstance(member, property) == isinstance(protocol_member, property), f"{kind.__name__}.{name}"
        if not isinstance(member, property):
            ours, theirs = (inspect.signature(m).parameters for m in (member, protocol_member))
            assert len(ours) == len(theirs), f"{kind.__name__}.{name}{tuple(ours)}"


@pytest.fixture(scope="module")
def face():
    return FacePipeline(PipelineOptions(backend="onnxruntime"))


def test_a_face_pipeline_and_a_multi_face_pipeline_are_pipelines_with_their_face_models_here(face):
    multi = MultiFacePipeline(PipelineOptions(backend="onnxruntime"), ["Left", "Right"])
    for pipeline in (face, multi):
        assert isinstance(pipeline, Pipeline)
        models = pipeline.face_models()
        assert isinstance(models, FaceModels) and models.backend == "onnxruntime"
        assert models.landmark_path == "mesh+iris" and models.landmark_reason
        assert "regressor" in pipeline.swappable_models() and pipeline.overlaps() and pipeline.guarded()
        assert pipeline.model_versions["emotion"] and pipeline.detector_summary(verbose=False)
    assert face.face("FaceBridge") is face and not face.wrap_faces(lambda k, step, reset: step)
    assert multi.face("Right") is multi.slots[1]
    wrapped = []
    assert multi.wrap_faces(lambda k, step, reset: wrapped.append((k, step, reset)) or step)
    assert [(k, step.__self__, reset.__self__) for k, step, reset in wrapped] == [(0, multi.slots[0], multi.slots[0]),
                                                                                 (1, multi.slots[1], multi.slots[1])]


def test_an_audio_only_pipeline_is_a_pipeline_with_no_face_here():
    stream = LipSyncStream()
    pipeline = AudioOnlyPipeline(stream)
    assert isinstance(pipeline, Pipeline)
    assert pipeline.swappable_models() == [] and pipeline.face_models() is None and pipeline.face("FaceBridge") is None
    assert pipeline.detector_summary() == "" and not pipeline.overlaps() and pipeline.guarded()
    assert not pipeline.wrap_faces(lambda k, step, reset: step) and pipeline.build_session("emotion") is None
    assert set(pipeline.model_versions) == {"lipsync"}
    frame = Frame(image=None, seq=0, t_capture=0.0, t_capture_mono=0.0)
    assert pipeline.track(frame) is frame
