"""The face pipeline on real images: the bundled sample and the astronaut photograph."""
import cv2
import numpy as np
import pytest

from bridge.frame import ARKIT_INDEX, FaceFrame, Frame
from tests.helpers import tool_module


@pytest.fixture(scope="module")
def pipeline():
    from bridge.pipeline import FacePipeline

    return FacePipeline()


@pytest.fixture(scope="module")
def sample_frames():
    from bridge.sources.files import SampleSource

    with SampleSource(realtime=False, loop=False) as src:
        frames = []
        while (f := src.read()) is not None:
            frames.append(f)
    return frames


def astronaut_frame(seq=0) -> Frame:
    from skimage import data

    image = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    return Frame(image=image, seq=seq, t_capture=1_700_000_000.0 + seq / 30, t_capture_mono=seq / 30, t_media=seq / 30)


def test_sample_face_found_in_95_percent_and_tracking_spares_the_detector(pipeline, sample_frames):
    pipeline.reset()
    runs_before = pipeline.detector_runs
    outs = [pipeline.process(f) for f in sample_frames]
    found = sum(o.face_found for o in outs) / len(outs)
    assert len(outs) == 300
    assert found >= 0.95, f"face found in {found:.1%}"
    # tracking: the detector runs only when the landmark model loses the face
    assert pipeline.detector_runs - runs_before <= 0.05 * len(outs)
    last = outs[-1]
    assert {"landmarks", "iris", "head_pose", "expression", "filter"} <= set(last.latencies_ms)
    assert [o.seq for o in outs] == list(range(300))
    # the head pose follows the clip's known motion (tools/make_sample.py)
    sample = tool_module("make_sample")
    FPS, motion, expression = sample.FPS, sample.motion, sample.expression

    truth = np.array([[motion(o.seq / FPS)[k] for k in ("yaw", "pitch", "roll")] for o in outs])
    est = np.array([o.head_rotation for o in outs])
    for axis, name in enumerate(("yaw", "pitch", "roll")):
        r = np.corrcoef(est[:, axis], truth[:, axis])[0, 1]
        assert r > 0.9, f"{name} should follow the clip's motion (r = {r:.2f})"
    # ... and so do the blinks and mouth openings the clip was made with
    true_blink = np.array([expression(o.seq / FPS)["eyeBlinkLeft"] for o in outs])
    true_jaw = np.array([expression(o.seq / FPS)["jawOpen"] for o in outs])
    blink = np.array([[o.weight("eyeBlinkLeft"), o.weight("eyeBlinkRight")] for o in outs])
    jaw = np.array([o.weight("jawOpen") for o in outs])
    assert np.corrcoef(blink.mean(1), true_blink)[0, 1] > 0.8
    assert blink[true_blink > 0.9].mean() > 0.4 and np.percentile(blink[true_blink == 0], 95) < 0.2
    assert np.corrcoef(jaw, true_jaw)[0, 1] > 0.7


def test_astronaut_smiles_with_open_eyes(pipeline):
    pipeline.reset()
    out = None
    for i in range(10):  # a still photo as a short live sequence (filter settles, identity adapts)
        out = pipeline.process(astronaut_frame(i))
    assert out.face_found and out.confidence > 0.9
    w = out.blendshapes
    assert w[ARKIT_INDEX["mouthSmileLeft"]] > 0.3 and w[ARKIT_INDEX["mouthSmileRight"]] > 0.3, w
    assert w[ARKIT_INDEX["eyeBlinkLeft"]] < 0.3 and w[ARKIT_INDEX["eyeBlinkRight"]] < 0.3, w
    assert abs(out.head_rotation[0]) < 15 and abs(out.head_rotation[2]) < 15  # near frontal
    from bridge.frame import EMOTION_NAMES

    assert EMOTION_NAMES[int(np.argmax(out.emotion))] == "happy"
    assert out.morph.model_id and out.morph.expression.size > 0


def test_no_face_frame_is_reported_not_raised(pipeline):
    pipeline.reset()
    blank = Frame(image=np.full((360, 480, 3), 127, np.uint8), seq=0, t_capture=0.0, t_capture_mono=0.0)
    out = pipeline.process(blank)
    assert isinstance(out, FaceFrame) and not out.face_found and out.confidence == 0.0
    assert np.all((out.blendshapes >= 0) & (out.blendshapes <= 1))


def test_head_pose_follows_a_known_rotation():
    """Project the canonical mesh with a known pose; PnP must recover it."""
    from bridge.stages.head_pose import CANONICAL_PATH, HeadPoseEstimator, camera_matrix, rotation_to_ypr

    model = np.load(CANONICAL_PATH).astype(np.float64)
    k = camera_matrix(640, 480)
    for yaw, pitch in ((0, 0), (25, 0), (-20, 10), (10, -15)):
        rot_y = cv2.Rodrigues(np.array([0.0, np.radians(-yaw), 0.0]))[0]
        rot_x = cv2.Rodrigues(np.array([np.radians(-pitch), 0.0, 0.0]))[0]
        rot = rot_y @ rot_x
        rvec = cv2.Rodrigues(rot)[0]
        expected = rotation_to_ypr(rot)
        img, _ = cv2.projectPoints(model, rvec, np.array([0.0, 0.0, 60.0]), k, None)
        pts = np.hstack([img.reshape(-1, 2), np.zeros((468, 1))]).astype(np.float32)
        ypr, t, _ = HeadPoseEstimator().estimate(pts, 640, 480)
        assert np.allclose(ypr, expected, atol=0.5) and abs(ypr[0] - yaw) < 0.5 and abs(ypr[1] - pitch) < 0.5
        assert abs(t[2] - 60.0) < 1.0


@pytest.mark.parametrize("backend", ["litert", "openvino"])
def test_every_cpu_backend_tracks_the_sample_like_onnxruntime(backend, sample_frames):
    """The tracking loop feeds each frame's landmarks into the next frame's crop, so model differences of 1e-4 px
    grow along the clip: measured over 300 frames 0.45 px and 0.042 (LiteRT), 0.59 px and 0.045 (OpenVINO f32)
    at most. The bounds are about twice what 120 frames give."""
    from bridge.engines import check_available
    from bridge.pipeline import FacePipeline, PipelineOptions

    if not check_available(backend).ok:
        pytest.skip(f"{backend} is not installed")
    runs = {}
    for name in ("onnxruntime", backend):
        pipe = FacePipeline(PipelineOptions(backend=name, landmarks="mesh+iris", smoothing=False))  # same models
        assert pipe.landmarker.session.backend_name == name and pipe.landmarker.session.precision == "f32"
        runs[name] = [pipe.process(f) for f in sample_frames[:120]]
    for ref, out in zip(runs["onnxruntime"], runs[backend]):
        assert ref.face_found and out.face_found
        assert np.linalg.norm(out.landmarks[:, :2] - ref.landmarks[:, :2], axis=1).max() < 1.0
        assert np.abs(out.blendshapes - ref.blendshapes).max() < 0.05


def test_smoothing_strength_scales_every_one_euro_filter_and_a_stronger_one_jitters_less(sample_frames):
    """--smoothing 2 halves each filter's min cutoff and beta; on the same frames the head moves less from frame
    to frame than at 1, and 0 turns the filters off."""
    from bridge.pipeline import FacePipeline, PipelineOptions
    from bridge.stages.describe import FILTER_SLICES, FILTERS

    strong = FacePipeline(PipelineOptions(smoothing=2.0))
    for name, (min_cutoff, beta) in FILTERS.items():
        channels = FILTER_SLICES[name]
        assert strong.describer._filter.min_cutoff[channels] == pytest.approx(min_cutoff / 2)
        assert strong.describer._filter.beta[channels] == pytest.approx(beta / 2)
    default, off = FacePipeline(PipelineOptions(smoothing=1.0)), FacePipeline(PipelineOptions(smoothing=0.0))
    steps = {}
    for label, p in (("strong", strong), ("default", default), ("off", off)):
        yaws = np.array([p.process(f).head_rotation[0] for f in sample_frames[:40]])
        steps[label] = np.abs(np.diff(np.diff(yaws))).mean()  # frame-to-frame roughness
    assert steps["strong"] < steps["default"] < steps["off"]


@pytest.fixture(scope="module")
def both_paths(sample_frames):
    """The sample's 300 frames through each landmark path on LiteRT, unsmoothed."""
    from bridge.engines import check_available
    from bridge.pipeline import FacePipeline, PipelineOptions

    if not check_available("litert").ok:
        pytest.skip("the attention mesh runs on LiteRT")
    runs = {}
    for path in ("mesh+iris", "attention"):
        pipe = FacePipeline(PipelineOptions(backend="litert", landmarks=path, smoothing=False))
        assert pipe.landmark_path == path and (pipe.iris is None) == (path == "attention")
        runs[path] = [pipe.process(f) for f in sample_frames]
    return runs


def test_the_attention_mesh_is_closer_to_mediapipe_refine_than_the_two_models(both_paths):
    """MediaPipe FaceMesh refine_landmarks' own points on the sample (tests/data, tools/mediapipe_refine_points.py):
    measured 0.37 px median from the attention path, 1.53 px from face_landmark + iris_landmark (face ~90 px wide)."""
    from tests.helpers import ROOT

    ref = np.load(ROOT / "tests" / "data" / "mediapipe_refine_sample.npz")
    gap = {}
    for path, outs in both_paths.items():
        ours = np.array([outs[s].landmarks[:, :2] for s in ref["seq"]])
        gap[path] = np.linalg.norm(ours - ref["points"][:, :468], axis=2)
    assert np.median(gap["attention"]) < 0.6 and np.percentile(gap["attention"], 95) < 2.0
    assert np.median(gap["attention"]) < 0.5 * np.median(gap["mesh+iris"])


def test_the_attention_mesh_follows_the_samples_truth_as_well_as_the_two_models(both_paths):
    """Against the clip's known head motion, blinks and jaw (tools/make_sample.py), and within the measured
    distance of the two-model path's blendshapes (other weights, so not the backend-parity bounds): measured pose
    r 0.990 / 0.967 / 0.988 against 0.971 / 0.948 / 0.985, blink r 0.969 against 0.970, jawOpen r 0.991 against
    0.859; blendshapes 0.030 apart on average."""
    sample = tool_module("make_sample")
    seq = np.arange(300)
    truth = np.array([[sample.motion(s / sample.FPS)[k] for k in ("yaw", "pitch", "roll")] for s in seq])
    true_blink = np.array([sample.expression(s / sample.FPS)["eyeBlinkLeft"] for s in seq])
    true_jaw = np.array([sample.expression(s / sample.FPS)["jawOpen"] for s in seq])
    score = {}
    for path, outs in both_paths.items():
        assert all(o.face_found for o in outs)
        pose = np.array([o.head_rotation for o in outs])
        blink = np.array([(o.weight("eyeBlinkLeft") + o.weight("eyeBlinkRight")) / 2 for o in outs])
        jaw = np.array([o.weight("jawOpen") for o in outs])
        score[path] = [np.corrcoef(pose[:, i], truth[:, i])[0, 1] for i in range(3)] + [
            np.corrcoef(blink, true_blink)[0, 1], np.corrcoef(jaw, true_jaw)[0, 1]]
    assert all(a > b - 0.02 for a, b in zip(score["attention"], score["mesh+iris"])), score
    assert min(score["attention"]) > 0.9, score
    shapes = {p: np.array([o.blendshapes for o in outs]) for p, outs in both_paths.items()}
    assert np.abs(shapes["attention"] - shapes["mesh+iris"]).mean() < 0.05


def test_the_astronaut_smiles_with_open_eyes_through_the_attention_mesh():
    from bridge.engines import check_available
    from bridge.frame import EMOTION_NAMES
    from bridge.pipeline import FacePipeline, PipelineOptions

    if not check_available("litert").ok:
        pytest.skip("the attention mesh runs on LiteRT")
    pipe = FacePipeline(PipelineOptions(backend="litert", landmarks="attention"))
    for i in range(10):
        out = pipe.process(astronaut_frame(i))
    w = out.blendshapes
    assert out.face_found and out.confidence > 0.9
    assert w[ARKIT_INDEX["mouthSmileLeft"]] > 0.3 and w[ARKIT_INDEX["mouthSmileRight"]] > 0.3, w
    assert w[ARKIT_INDEX["eyeBlinkLeft"]] < 0.3 and w[ARKIT_INDEX["eyeBlinkRight"]] < 0.3, w
    assert EMOTION_NAMES[int(np.argmax(out.emotion))] == "happy"
    assert "iris" not in out.latencies_ms and "landmarks" in out.latencies_ms


def test_auto_takes_the_attention_mesh_on_a_cpu_with_litert_and_says_why():
    from bridge.engines import check_available
    from bridge.pipeline import PipelineOptions, landmark_path

    assert landmark_path(PipelineOptions(backend="onnxruntime"))[0] == "mesh+iris"
    assert landmark_path(PipelineOptions(backend="openvino", landmarks="attention"))[0] == "attention"
    path, why = landmark_path(PipelineOptions(backend="litert"))
    assert (path, bool(why)) == (("attention" if check_available("litert").ok else "mesh+iris"), True)
    with pytest.raises(Exception, match="--landmarks"):
        PipelineOptions(landmarks="both").check()


def test_a_frames_periodic_work_runs_after_it_is_handed_on_and_the_stream_is_the_same(sample_frames):
    """The emotion model of a wanted frame and the identity refresh's spread steps run in run_deferred (the runner
    calls it once the frame went to the sinks, in the time before the next one), not inside a frame, and the
    FaceFrames are the same whether it is called or not; the probabilities reach the stream one tracked frame
    after the frame they were classified on."""
    from bridge.pipeline import FacePipeline

    deferred, inline = FacePipeline(), FacePipeline()
    calls = []
    run = deferred.emotion.run
    deferred.emotion.run = lambda *a: calls.append(1) or run(*a)
    expression = deferred.expression
    frames = sample_frames[:100]  # past the first second's 30 inline identity updates: 2 spread refreshes
    steps_after = 0
    for i, f in enumerate(frames):
        want = inline.process(f)
        work = expression.identity_work
        got = deferred.process(f)
        assert "emotion" not in got.latencies_ms, f"frame {i}: its describe step ran the emotion model"
        assert i < 30 or expression.identity_work == work, f"frame {i}: an identity step ran inside it"
        before, work = len(calls), expression.identity_work
        deferred.run_deferred()
        assert len(calls) - before == (1 if deferred.describer.wants_emotion(deferred.describer.tracked_count)
                                       else 0), i
        steps_after += expression.identity_work - work
        assert np.array_equal(got.emotion, want.emotion) and np.array_equal(got.blendshapes, want.blendshapes), i
        assert np.array_equal(got.morph.identity, want.morph.identity), i
    assert len(calls) == 25  # tracked frames 1, 5, 9, ... of 100
    assert steps_after == 8  # two refreshes (frames 60 and 90) of four steps each
    # the first tracked frame's probabilities arrive with the second
    fresh = FacePipeline()
    first, second = fresh.process(frames[0]), fresh.process(frames[1])
    assert not first.emotion.any() and second.emotion.sum() == pytest.approx(1.0, abs=1e-5)


def test_emotion_keeps_its_cadence_after_a_frame_dropped_between_the_two_stages(pipeline, sample_frames):
    """With track and describe in two threads, a busy describe stage drops a tracked frame now and then (latest
    wins): the emotion model still runs on every 4th described frame, instead of never again (the tracker's count
    and the describer's would be out of step for good)."""
    calls = []
    run = pipeline.emotion.run
    pipeline.emotion.run = lambda *a: calls.append(1) or run(*a)
    try:
        pipeline.reset()
        for i, f in enumerate(sample_frames[:60]):
            tracked = pipeline.track(f)
            if i in (20, 41):
                continue  # dropped between the stages
            pipeline.describe(tracked)
            pipeline.run_deferred()
    finally:
        pipeline.emotion.run = run
    assert len(calls) == 15  # described frames 1, 5, 9, ... of 58
