"""One answer for one face: DescribeRows (every stream of a pass at once, `facebridge serve`) gives each stream the
FaceFrames its own FaceDescriber (`facebridge run`) gives, on the sample as the batched tracker measures it, with
passes of changing membership, lost faces, a calibrated subject and a row handed to a new stream.

Head pose, gaze, blink, emotion context and the expression result run the same formulas on both paths (over floats
or one face for one stream, arrays or a loop over rows for many); what differs is the order of a few sums. Measured:
head pose bit-equal where numba is installed (both refine with head_pose_refine's loop), else within cv2's stop (the
rows' guess from the rotation matrix, the estimator's from cv2's own rotation vector); 7e-5 degrees of gaze, 3e-6 of
a blendshape; emotion, region confidence and morph blocks within 1e-5.
"""
from __future__ import annotations

import numpy as np
import pytest

from bridge.calibration import CalibrationProfile
from bridge.expression.stage import ExpressionEstimator
from bridge.frame import Frame
from bridge.stages.describe import FaceDescriber, MeasuredFace
from bridge.stages.describe_rows import DescribeRows, MeasuredFaces

STREAMS = 7  # passes of 1-7 rows
FRAMES = 24


@pytest.fixture(scope="module")
def measured():
    """The sample's frames as the batched tracker measures them (one stream, consecutive frames)."""
    pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService

    frames = sample_frames(FRAMES, step=1)
    hw = frames[0].shape[:2]
    with MultiStreamFaceService(1, hw, make_runners("onnxruntime", 1), device="cpu") as service:
        faces = [service.submit(0, f).result(timeout=120) for f in frames]
    assert all(f.tracked for f in faces)
    return faces, (hw[1], hw[0])


def _profile(subject: str) -> CalibrationProfile:
    neutral = np.linspace(0.0, 0.3, 52)
    return CalibrationProfile(subject=subject, neutral_blendshapes=neutral.tolist(),
                              neutral_head_rotation=[1.5, -2.0, 0.5], neutral_eyes=[[1.0, -1.0], [0.5, 2.0]])


def _close(got, want, k):
    assert got.face_found == want.face_found and got.subject == want.subject and got.seq == want.seq
    tolerances = {"head_rotation": 0.005, "head_translation": 0.001, "eye_left": 0.001, "eye_right": 0.001,
                  "blendshapes": 1e-4, "emotion": 1e-5}
    for name, tol in tolerances.items():
        assert np.abs(getattr(got, name) - getattr(want, name)).max() < tol, (k, name)
    assert abs(got.confidence - want.confidence) < 1e-6
    for name in ("identity", "expression", "jaw_rotation", "head_rotation", "head_translation", "eye_rotation_left",
                 "eye_rotation_right"):
        a, b = getattr(got.morph, name), getattr(want.morph, name)
        assert a.shape == b.shape and (a.size == 0 or np.abs(a - b).max() < 1e-3), (k, name)
    assert got.region_confidence.keys() == want.region_confidence.keys()
    for name, value in got.region_confidence.items():
        assert abs(value - want.region_confidence[name]) < 1e-3, (k, name)


def test_a_pass_described_at_once_gives_every_stream_its_own_describers_frames(measured):
    faces, size = measured
    contract = ExpressionEstimator(session=False).contract
    blend, head = contract.outputs["blendshapes"][0], contract.outputs["head_rotation"][0]
    subjects = [f"Subject{i}" for i in range(STREAMS)]
    profiles = [_profile(s) if i in (1, 5) else None for i, s in enumerate(subjects)]
    singles = [FaceDescriber(ExpressionEstimator(session=False), subject=s, profile=p)
               for s, p in zip(subjects, profiles)]
    rows = DescribeRows(STREAMS)
    row_of = [rows.open(s, ExpressionEstimator(session=False), p) for s, p in zip(subjects, profiles)]
    rng = np.random.default_rng(7)
    step = np.zeros(STREAMS, int)
    compared = 0
    for k in range(2 * FRAMES):
        if k == FRAMES:  # stream 3 ends; a new stream takes its row (and starts from nothing, as a new describer)
            rows.close(row_of[3])
            row_of[3] = rows.open("Subject3", ExpressionEstimator(session=False))
            singles[3] = FaceDescriber(ExpressionEstimator(session=False), subject="Subject3")
            step[3] = 0
        streams = np.sort(rng.choice(STREAMS, size=rng.integers(1, STREAMS + 1), replace=False))
        lost = rng.random(len(streams)) < 0.1
        measured_faces = [faces[(step[i] + 11 * i) % FRAMES] for i in streams]
        frames = [Frame(image=None, seq=int(step[i]), t_capture=1000 + step[i] / 30, t_capture_mono=step[i] / 30,
                        t_media=step[i] / 30) for i in streams]
        step[streams] += 1
        want = [singles[i].describe(frame, None if gone else MeasuredFace(
            points=f.landmarks, presence=f.presence, iris=f.irises, emotion=f.emotion,
            expression_outputs={blend: f.blendshapes[None], head: f.expression_head[None]}), image_size=size)
            for i, frame, f, gone in zip(streams, frames, measured_faces, lost)]
        batch = MeasuredFaces(found=~lost, points=np.stack([f.landmarks for f in measured_faces]),
                              presence=np.array([f.presence for f in measured_faces]),
                              iris=np.stack([f.irises for f in measured_faces]),
                              emotion=np.stack([f.emotion for f in measured_faces]),
                              expression_outputs={blend: np.stack([f.blendshapes for f in measured_faces]),
                                                  head: np.stack([f.expression_head for f in measured_faces])})
        got = rows.describe([row_of[i] for i in streams], frames, batch, np.tile(size, (len(streams), 1)))
        for j in range(len(streams)):
            _close(got.frame(j), want[j], k)
            compared += 1
    assert compared > 2 * FRAMES


def test_an_emotion_classified_by_the_describer_reads_as_one_handed_to_it(measured):
    """FacePipeline hands the emotion model's run to the describer (run after the expression step, while the
    runtime's code is still in the core's caches): the FaceFrames are those of probabilities given up front."""
    faces, size = measured
    contract = ExpressionEstimator(session=False).contract
    blend, head = contract.outputs["blendshapes"][0], contract.outputs["head_rotation"][0]
    given, lazy = (FaceDescriber(ExpressionEstimator(session=False), subject="S") for _ in range(2))
    calls = []

    def classify(f):
        calls.append(f.emotion)
        return f.emotion

    for k, f in enumerate(faces):
        frame = Frame(image=None, seq=k, t_capture=1000 + k / 30, t_capture_mono=k / 30, t_media=k / 30)
        wanted = given.wants_emotion(given.tracked_count + 1)
        kwargs = dict(points=f.landmarks, presence=f.presence, iris=f.irises,
                      expression_outputs={blend: f.blendshapes[None], head: f.expression_head[None]})
        want = given.describe(frame, MeasuredFace(**kwargs, emotion=f.emotion if wanted else None), image_size=size)
        got = lazy.describe(frame, MeasuredFace(**kwargs, emotion=(lambda f=f: classify(f)) if wanted else None),
                            image_size=size)
        _close(got, want, k)
        assert np.array_equal(got.emotion, want.emotion)
    assert 0 < len(calls) < len(faces)


def test_rows_are_bounded_and_given_back():
    rows = DescribeRows(2)
    first = rows.open("A", ExpressionEstimator(session=False))
    rows.open("B", ExpressionEstimator(session=False))
    with pytest.raises(ValueError, match="all 2 describe rows are in use"):
        rows.open("C", ExpressionEstimator(session=False))
    rows.close(first)
    assert rows.open("C", ExpressionEstimator(session=False)) == first


def test_a_face_no_pose_fits_reads_as_lost_and_the_rest_of_its_pass_is_described(measured):
    """A row whose points are all in one place (cv2's SQPNP asserts on them) no longer fails its whole pass."""
    faces, size = measured
    contract = ExpressionEstimator(session=False).contract
    blend, head = contract.outputs["blendshapes"][0], contract.outputs["head_rotation"][0]
    rows = DescribeRows(3)
    row_of = [rows.open(f"S{i}", ExpressionEstimator(session=False)) for i in range(3)]
    f = faces[0]
    points = np.stack([f.landmarks] * 3)
    points[1] = points[1, 0]  # every point of row 1 in one place
    batch = MeasuredFaces(found=np.ones(3, bool), points=points, presence=np.full(3, f.presence),
                          iris=np.stack([f.irises] * 3), emotion=np.stack([f.emotion] * 3),
                          expression_outputs={blend: np.stack([f.blendshapes] * 3),
                                              head: np.stack([f.expression_head] * 3)})
    frames = [Frame(image=None, seq=0, t_capture=1000.0, t_capture_mono=0.0, t_media=0.0) for _ in range(3)]
    got = rows.describe(row_of, frames, batch, np.tile(size, (3, 1)))
    assert got.face_found.tolist() == [True, False, True]
    assert np.isfinite(got.head_rotation[[0, 2]]).all() and np.isfinite(got.blendshapes).all()
