"""Head pose (bridge/stages/head_pose.py): the compiled refine and cv2's iterative solver land on the same pose, frame
after frame; a broken pose is solved afresh; without numba cv2's solver runs."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from bridge import compiled
from bridge.stages.head_pose import CANONICAL_PATH, HeadPoseEstimator, camera_matrix

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is in the litert extra")


def _turning_head(frames: int = 60) -> list[np.ndarray]:
    """The canonical mesh turning, nodding and moving in front of a 640x480 camera, landmarks with 0.8 px noise."""
    rng = np.random.default_rng(3)
    model = np.load(CANONICAL_PATH).astype(np.float64)
    k = camera_matrix(640, 480)
    out = []
    for i in range(frames):
        rvec = np.radians([8 * np.sin(i / 9), 25 * np.sin(i / 13), 5 * np.cos(i / 7)])
        tvec = np.array([2 * np.sin(i / 11), -1.0, 55 + 5 * np.sin(i / 17)])
        img, _ = cv2.projectPoints(model, rvec, tvec, k, None)
        noisy = img.reshape(-1, 2) + rng.normal(0, 0.8, (468, 2))
        out.append(np.hstack([noisy, np.zeros((468, 1))]).astype(np.float32))
    return out


@needs_numba
def test_the_compiled_refine_finds_cv2s_pose_frame_after_frame():
    ours, cv2s = HeadPoseEstimator(), HeadPoseEstimator(compiled_refine=False)
    assert ours._refine is not None and cv2s._refine is None
    for points in _turning_head():
        (ypr, t, rot), (ypr2, t2, rot2) = ours.estimate(points, 640, 480), cv2s.estimate(points, 640, 480)
        assert np.abs(ypr - ypr2).max() < 1e-3 and np.abs(t - t2).max() < 1e-3  # degrees, cm
        assert np.abs(rot - rot2).max() < 1e-4 and np.abs(rot @ rot.T - np.eye(3)).max() < 1e-9  # still a rotation


@needs_numba
def test_a_broken_last_pose_is_solved_afresh():
    points = _turning_head(1)[0]
    estimator = HeadPoseEstimator()
    want = estimator.estimate(points, 640, 480)
    estimator._rot = np.full((3, 3), np.nan)  # what a run of garbage landmarks could leave
    got = estimator.estimate(points, 640, 480)
    assert np.abs(got[0] - want[0]).max() < 1e-3 and np.isfinite(got[2]).all()


def test_without_numba_cv2s_solver_refines(monkeypatch):
    monkeypatch.setattr(compiled, "available", lambda: False)
    estimator = HeadPoseEstimator()
    assert estimator._refine is None
    frames = _turning_head(5)
    for points in frames:
        ypr, t, _ = estimator.estimate(points, 640, 480)
    assert abs(t[2] - (55 + 5 * np.sin(4 / 17))) < 1.0 and abs(ypr[0]) < 30


def test_lost_landmarks_give_no_pose_and_the_next_good_frame_is_solved_afresh():
    frames = _turning_head(3)
    estimator = HeadPoseEstimator()
    estimator.estimate(frames[0], 640, 480)
    lost = frames[1].copy()
    lost[33] = np.nan
    ypr, t, rot = estimator.estimate(lost, 640, 480)
    assert np.isnan(ypr).all() and np.isnan(t).all() and np.isnan(rot).all()
    want = HeadPoseEstimator().estimate(frames[2], 640, 480)
    got = estimator.estimate(frames[2], 640, 480)
    assert np.abs(got[0] - want[0]).max() < 1e-6


def _rows_against_singles(compiled_refine: bool):
    """Three streams of the turning head (different phases), in passes of changing membership: each row's pose
    from HeadPoseRows and from the stream's own HeadPoseEstimator, (rows, singles) per pass."""
    from bridge.stages.head_pose import HeadPoseRows

    streams = [_turning_head(40)[k:] for k in (0, 7, 15)]
    rows = HeadPoseRows(3, compiled_refine=compiled_refine)
    singles = [HeadPoseEstimator(compiled_refine=compiled_refine) for _ in streams]
    step = [0, 0, 0]
    rng = np.random.default_rng(5)
    for _ in range(20):
        members = np.sort(rng.choice(3, size=rng.integers(1, 4), replace=False))
        points = np.stack([streams[i][step[i]] for i in members])
        ypr, t = rows.estimate(members, points, np.array([[640, 480]] * len(members)))
        want = [singles[i].estimate(streams[i][step[i]], 640, 480) for i in members]
        for i in members:
            step[i] += 1
        yield (ypr, t), (np.stack([w[0] for w in want]), np.stack([w[1] for w in want]))


@needs_numba
def test_rows_refine_each_stream_as_its_own_estimator_does_bit_for_bit():
    for (ypr, t), (want_ypr, want_t) in _rows_against_singles(compiled_refine=True):
        assert np.array_equal(ypr, want_ypr) and np.array_equal(t, want_t)


def test_rows_without_numba_land_on_cv2s_pose():
    for (ypr, t), (want_ypr, want_t) in _rows_against_singles(compiled_refine=False):
        assert np.abs(ypr - want_ypr).max() < 1e-3 and np.abs(t - want_t).max() < 1e-3


@needs_numba
def test_kernels_that_fail_to_compile_leave_cv2s_solver_and_say_so(monkeypatch, caplog):
    from bridge.stages import head_pose_refine

    def broken():
        raise RuntimeError("numba: no target for this CPU")

    monkeypatch.setattr(compiled, "available", lambda: True)
    monkeypatch.setattr(head_pose_refine, "warm", broken)
    estimator = HeadPoseEstimator()
    assert estimator._refine is None and "cv2's solver refines the head pose instead" in caplog.text
    for points in _turning_head(3):
        ypr, t, _ = estimator.estimate(points, 640, 480)
    assert np.isfinite(ypr).all() and 50 < t[2] < 60


@pytest.mark.parametrize("broken", ["one point", "not finite"])
def test_points_no_pose_fits_give_that_face_no_pose_and_the_others_theirs(broken):
    """cv2's SQPNP asserts on points all in one place (or not finite): that face reads as lost, alone."""
    from bridge.stages.head_pose import HeadPoseRows

    frames = _turning_head(3)
    bad = np.full_like(frames[0], 100.0) if broken == "one point" else np.where(frames[0] > 0, np.nan, 0.0)
    ypr, t, rot = HeadPoseEstimator().estimate(bad.astype(np.float32), 640, 480)
    assert np.isnan(ypr).all() and np.isnan(t).all() and np.isnan(rot).all()
    rows = HeadPoseRows(3)
    sizes = np.array([[640, 480]] * 3)
    ypr, t = rows.estimate(np.arange(3), np.stack([frames[0], bad, frames[0]]).astype(np.float32), sizes)
    want = HeadPoseEstimator().estimate(frames[0], 640, 480)
    assert np.isnan(ypr[1]).all() and np.isnan(t[1]).all()
    for i in (0, 2):
        assert np.abs(ypr[i] - want[0]).max() < 1e-6 and np.abs(t[i] - want[1]).max() < 1e-6
    ypr, t = rows.estimate(np.array([1]), frames[1][None], sizes[:1])  # the next good frame: solved afresh
    assert np.abs(ypr[0] - HeadPoseEstimator().estimate(frames[1], 640, 480)[0]).max() < 1e-6
