"""The output guard: impossible values never reach a sink, the last good frame stands in under the new frame's
sequence number (no gap), and a stage whose bad output persists gets a new session while the stream goes on."""
from __future__ import annotations

import numpy as np

from bridge.formats.take import TakeReader
from bridge.frame import ARKIT_INDEX, Frame, MorphParams
from bridge.runtime.guard import PERSIST_FRAMES, OutputGuard, frame_faults, head_jump, morph_faults
from bridge.runtime.session import BridgeSession, OutputConfig, RunConfig
from bridge.stats import RunStats
from tests.helpers import face_frame


class NaNAfter:
    """A real model session whose outputs turn NaN after `good_calls` runs (a GPU context gone bad, say)."""

    def __init__(self, session, good_calls: int) -> None:
        self.session, self.good_calls, self.calls = session, good_calls, 0

    def __getattr__(self, name):
        return getattr(self.session, name)

    def run(self, feeds):
        self.calls += 1
        out = self.session.run(feeds)
        if self.calls > self.good_calls:
            out = {k: np.full_like(v, np.nan) for k, v in out.items()}
        return out


def test_a_nan_from_a_real_iris_session_is_replaced_and_the_session_recreated_without_a_gap(tmp_path):
    frames = 90
    config = RunConfig(source="sample", fast=True, max_frames=frames, monitor=None, status_line=False,
                       outputs=OutputConfig(llf=None, vmc=None, record=str(tmp_path / "take")))
    session = BridgeSession(config).open()
    iris = session.pipeline.iris
    broken = NaNAfter(iris.session, good_calls=10)
    iris.session = broken
    summary = session.run()

    take = list(TakeReader(tmp_path / "take"))
    assert [f.seq for f in take] == list(range(frames)), "every frame reached the recorder, none twice"
    for f in take:
        for values in (f.blendshapes, f.head_rotation, f.head_translation, f.eye_left, f.eye_right, f.emotion):
            assert np.isfinite(values).all() and (f.blendshapes >= 0).all() and (f.blendshapes <= 1).all()
    stats = summary.stats
    assert stats.recreated == {"iris": 1}, stats.recreated
    assert stats.engine_swaps == {"iris_landmark": 1} and stats.engine_builds == {"iris_landmark": 1}
    assert set(k.split("/")[1] for k in stats.guarded) == {"iris"}, stats.guarded
    assert PERSIST_FRAMES <= stats.guarded_total < frames - 20, "replaced while broken, then good again"
    assert iris.session is not broken and broken.calls < frames - 20, "the broken session is out of the stream"
    assert stats.bad_frames == 0 and stats.sent == frames
    assert "iris" in stats.last_guard
    # after the swap the face moves again: the last frames are the pipeline's own, not stand-ins
    tail = np.stack([f.blendshapes for f in take[-15:]])
    assert np.ptp(tail, axis=0).max() > 0


def _frame(seq: int) -> Frame:
    return Frame(image=np.zeros((4, 4, 3), np.uint8), seq=seq, t_capture=seq / 30, t_capture_mono=seq / 30, fps=30.0)


def _good(seq: int, yaw: float = 5.0):
    f = face_frame(seq)
    f.t_capture_mono, f.frame_rate = seq / 30, 30.0
    f.head_rotation = np.array([yaw, -3.0, 1.0], np.float32)
    f.landmarks = np.zeros((468, 3), np.float32)
    return f


def test_a_good_frame_has_no_faults_and_each_impossible_value_names_its_stage():
    assert frame_faults(_good(1)) == []
    over = _good(1)
    over.blendshapes[ARKIT_INDEX["jawOpen"]] = 1.4
    assert [(r, s) for r, s, _ in frame_faults(over)] == [("weight_range", "expression")]
    sad = _good(1)
    sad.emotion[2] = np.nan
    assert [(r, s) for r, s, _ in frame_faults(sad)] == [("nonfinite", "emotion")]
    cross = _good(1)
    cross.eye_left[:] = [170.0, 0.0]
    assert [(r, s) for r, s, _ in frame_faults(cross)] == [("gaze_range", "iris")]


def test_morph_coefficients_beyond_their_range_are_caught_but_an_identity_never_is():
    shipped = MorphParams(model_id="ict-face-light", identity=np.zeros(100, np.float32),
                          expression=np.full(53, 0.5, np.float32))
    assert morph_faults(shipped) is None
    shipped.identity[3] = 40.0  # 40 standard deviations from an N(0, 1) prior: who the person is, never a fault
    assert morph_faults(shipped) is None
    shipped.expression[7] = 1.2  # the weights map to [0, 1]
    assert "expression" in morph_faults(shipped)
    shipped.expression[7], shipped.jaw_rotation[:] = 0.5, [2.0, 0.0, 0.0]
    assert "jaw_rotation" in morph_faults(shipped)
    shipped.jaw_rotation[:], shipped.identity[3] = 0.0, np.nan
    assert "non-finite" in morph_faults(shipped)
    user = MorphParams(model_id="my-flame", identity=np.full(100, 1e4, np.float32),
                       expression=np.full(50, 2.5, np.float32))
    assert morph_faults(user) is None
    user.expression[0] = 1e4
    assert "beyond" in morph_faults(user)


def test_a_head_turn_no_human_can_make_is_a_jump_and_a_fast_real_one_is_not():
    assert head_jump(_good(1, yaw=0.0), _good(2, yaw=15.0)) is None  # 450 deg/s: a fast, real turn
    assert "turned" in head_jump(_good(1, yaw=0.0), _good(2, yaw=80.0))
    assert head_jump(_good(1, yaw=0.0), _good(40, yaw=80.0)) is None  # frames too far apart to judge


def test_a_bad_frame_is_replaced_by_the_last_good_one_under_its_own_sequence_number():
    stats, resets = RunStats(), []
    outputs = {1: _good(1), 2: _good(2)}
    outputs[2].blendshapes[0] = np.inf
    guard = OutputGuard(lambda frame: outputs[frame.seq], stats=stats, reset=lambda: resets.append(1))
    assert guard(_frame(1)) is outputs[1]
    stand_in = guard(_frame(2))
    assert stand_in.seq == 2 and stand_in.t_capture_mono == _frame(2).t_capture_mono
    np.testing.assert_array_equal(stand_in.blendshapes, outputs[1].blendshapes)
    assert stats.snapshot().guarded == {"nonfinite/expression": 1} and resets == [1]


def test_with_no_good_frame_yet_a_finite_frame_stands_in_for_itself_moved_into_range():
    over = _good(1)
    over.blendshapes[ARKIT_INDEX["jawOpen"]] = 1.4
    over.eye_left[:] = [170.0, 0.0]
    nan = _good(2)
    nan.blendshapes[0] = np.nan
    outputs = {1: over, 2: nan}
    stats = RunStats()
    guard = OutputGuard(lambda frame: outputs[frame.seq], stats=stats)
    first = guard(_frame(1))
    assert first.face_found and first.seq == 1 and frame_faults(first) == []
    assert first.weight("jawOpen") == 1.0 and first.eye_left[0] == 90.0
    assert first.weight("mouthSmileLeft") == over.weight("mouthSmileLeft")
    second = guard(_frame(2))  # nothing near a NaN is known: no face rather than a made-up one
    assert not second.face_found and second.seq == 2 and np.isfinite(second.blendshapes).all()
    assert stats.snapshot().guarded_total == 2


def test_a_describe_that_raises_still_yields_a_frame():
    def broken(frame):
        raise ValueError("boom")

    out = OutputGuard(broken)(_frame(7))
    assert out.seq == 7 and not out.face_found and np.isfinite(out.blendshapes).all()


def test_a_fault_that_persists_recreates_the_stage_it_came_from_once_per_streak():
    asked = []

    def step(frame):
        f = _good(frame.seq)
        if frame.seq > 1:
            f.emotion[:] = np.nan
        return f

    guard = OutputGuard(step, recreate=asked.append)
    for seq in range(1, 2 + 2 * PERSIST_FRAMES):
        guard(_frame(seq))
    assert asked == ["emotion", "emotion"]


def test_a_new_head_pose_that_holds_steady_is_accepted_and_a_single_spike_is_not():
    yaws = {1: 0.0, 2: 0.0, 3: 90.0, 4: 0.0}  # frame 3: a spike
    yaws.update({seq: 60.0 for seq in range(5, 5 + PERSIST_FRAMES)})  # from frame 5 on: the face is elsewhere
    asked = []
    guard = OutputGuard(lambda frame: _good(frame.seq, yaws[frame.seq]), recreate=asked.append)
    out = {seq: guard(_frame(seq)) for seq in sorted(yaws)}
    assert out[3].head_rotation[0] == 0.0, "the spike is held back"
    assert out[4].head_rotation[0] == 0.0
    assert out[5].head_rotation[0] == 0.0, "a new pose is first held back"
    last = 4 + PERSIST_FRAMES
    assert out[last].head_rotation[0] == 60.0, "and accepted once it holds steady"
    assert asked == []
