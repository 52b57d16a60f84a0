"""MediaPipe's attention mesh on stock LiteRT: the model through the registry, the custom ops compiled (numba), and the
landmark stage's conventions (the mesh index sets, the eye order of IrisResult); the ops' compiled loops held to
references written from their definitions."""
import math

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="the attention mesh runs on LiteRT only")

MODEL = "face_landmark_with_attention"


@pytest.fixture(scope="module")
def landmarker():
    from bridge.stages.attention import AttentionLandmarker

    return AttentionLandmarker()


def test_the_model_ships_unchanged_from_its_wheel_and_opens_on_litert_whatever_the_backend(landmarker):
    from bridge.engines import EngineUnavailable, create_session
    from bridge.models import MODELS_DIR, manifest, model_path, sha256_file

    entry = manifest()["models"][MODEL]
    assert entry["source"]["package"] == "mediapipe" and entry["license"] == "Apache-2.0"
    assert entry["sha256"] == entry["source"]["sha256"] == sha256_file(MODELS_DIR / entry["file"])
    assert landmarker.session.backend_name == "litert"
    session = create_session(model_path(MODEL), "onnxruntime")  # no other backend can run it: LiteRT
    assert session.backend_name == "litert"
    with pytest.raises(EngineUnavailable, match="cannot run"):
        create_session(model_path(MODEL), "openvino", strict=True)


def test_the_models_refinement_regions_are_the_mesh_index_sets(landmarker):
    """The model crops its lip and eye regions by these mesh points (its own op options): the stage writes its
    lips head back to LIP_REFINEMENT and its eye heads' first 16 points to the lids, in EYE_CONTOURS' order."""
    from bridge.mesh import EYE_CONTOURS, EYE_REFINEMENT, LIP_REFINEMENT

    lips, image_left_eye, image_right_eye = (tuple(o["subset_idxs"]) for o in landmarker.session.options)
    assert lips == LIP_REFINEMENT
    assert (image_right_eye, image_left_eye) == EYE_REFINEMENT  # [subject's left, subject's right]
    assert all(eye[:16] == contour for eye, contour in zip(EYE_REFINEMENT, EYE_CONTOURS))


def _bilinear_reference(feature: np.ndarray, m: np.ndarray, size: int = 16) -> np.ndarray:
    """TransformTensorBilinear v2 written sample by sample from its definition (MediaPipe,
    mediapipe/util/tflite/operations/transform_tensor_bilinear.cc): each output pixel's centre mapped by the
    matrix, half a pixel back, bilinear inside the map, zero when it falls outside."""
    h, w, ch = feature.shape
    out = np.zeros((size, size, ch), np.float32)
    for y in range(size):
        for x in range(size):
            tx = m[0, 0] * (x + 0.5) + m[0, 1] * (y + 0.5) + m[0, 3] - 0.5
            ty = m[1, 0] * (x + 0.5) + m[1, 1] * (y + 0.5) + m[1, 3] - 0.5
            if not (0 <= tx <= w - 1 and 0 <= ty <= h - 1):
                continue
            x0, y0 = math.floor(tx), math.floor(ty)
            x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
            fx, fy = tx - x0, ty - y0
            out[y, x] = ((1 - fy) * ((1 - fx) * feature[y0, x0] + fx * feature[y0, x1])
                         + fy * ((1 - fx) * feature[y1, x0] + fx * feature[y1, x1]))
    return out


def test_feature_crops_follow_the_ops_definition_also_at_the_maps_edges():
    from bridge.engines.litert_mediapipe_kernels import bilinear_crop

    rng = np.random.default_rng(0)
    feature = rng.normal(size=(48, 48, 32)).astype(np.float32)
    matrices = []
    for _ in range(12):  # rotated, scaled, some reaching past the edges
        a, scale = rng.uniform(-1, 1), rng.uniform(0.5, 4)
        m = np.eye(4, dtype=np.float32)
        m[:2, :2] = scale * np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        m[:2, 3] = rng.uniform(-20, 60, 2)
        matrices.append(m)
    for m in matrices:
        crop = np.empty((16, 16, 32), np.float32)
        bilinear_crop(feature, m, crop)
        assert np.abs(crop - _bilinear_reference(feature, m.astype(np.float64))).max() < 1e-4


def test_transform_matrix_maps_the_crop_onto_the_regions_rotated_box():
    """Landmarks2TransformMatrix v2: the 16x16 output crop's corners land on the corners of the region's box,
    rotated so its two rotation points are level and scaled by scale_x, scale_y about its centre."""
    from bridge.engines.litert_mediapipe_kernels import region_matrix

    rng = np.random.default_rng(1)
    points = rng.uniform(10, 40, (468, 3)).astype(np.float32)
    m = np.empty((4, 4), np.float32)
    region_matrix(points, np.arange(10), 0, 1, 0.0, 16, 16, 1.5, 1.5, m)
    assert (m[2:] == np.eye(4, dtype=np.float32)[2:]).all() and (m[:2, 2] == 0).all()
    m = m.astype(np.float64)
    rot = -math.atan2(points[1, 1] - points[0, 1], points[1, 0] - points[0, 0])
    c, s = math.cos(rot), math.sin(rot)
    p = points[:10, :2].astype(np.float64)
    u, v = p[:, 0] * c - p[:, 1] * s, p[:, 0] * s + p[:, 1] * c
    centre = np.array([(u.max() + u.min()) / 2, (v.max() + v.min()) / 2])
    half = np.array([u.max() - u.min(), v.max() - v.min()]) * 1.5 / 2
    for corner in ((0, 0), (16, 0), (0, 16), (16, 16)):
        image = m[:2, :2] @ np.array(corner, float) + m[:2, 3]
        rotated = np.array([image[0] * c - image[1] * s, image[0] * s + image[1] * c])
        want = centre + half * (np.array(corner) / 8.0 - 1.0)
        assert np.allclose(rotated, want, atol=1e-4)


def test_transform_points_maps_each_point_by_the_matrix():
    """TransformLandmarks v2, 2-D: each point's x, y through the matrix's rotation-scale part and shift."""
    from bridge.engines.litert_mediapipe_kernels import transform_points

    rng = np.random.default_rng(2)
    points, m = rng.normal(size=(71, 2)).astype(np.float32), rng.normal(size=(4, 4)).astype(np.float32)
    got = np.empty((71, 2), np.float32)
    transform_points(points, m, got)
    want = points.astype(np.float64) @ m[:2, :2].T.astype(np.float64) + m[:2, 3]
    assert np.abs(got - want).max() < 1e-5


def test_on_a_sample_frame_the_eyes_and_irises_follow_the_iris_models_conventions(landmarker):
    """Same crop as the two-model path; IrisResult [subject's left, right]: each eye's irises inside its own lids,
    and the lids close to where the iris model puts them."""
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.stages.detection import FaceDetector
    from bridge.stages.landmarks import FaceLandmarker, IrisLandmarker, roi_from_detection

    image = cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR)
    roi = roi_from_detection(FaceDetector().detect(image)[0])
    found = landmarker.run(image, roi)
    assert found.presence > 0.9 and found.points.shape == (468, 3) and found.points.dtype == np.float32
    eyes = found.eyes
    assert eyes.iris.shape == (2, 5, 3) and eyes.contour.shape == (2, 71, 3)
    two_model = FaceLandmarker().run(image, roi)
    iris = IrisLandmarker().run(image, two_model.points)
    for eye in range(2):
        lids = eyes.contour[eye, :16, :2]
        centre = eyes.iris[eye, 0, :2]
        assert lids[:, 0].min() < centre[0] < lids[:, 0].max() and lids[:, 1].min() < centre[1] < lids[:, 1].max()
        assert np.linalg.norm(centre - iris.iris[eye, 0, :2]) < 2.0  # px, on a face about 90 px wide
        assert np.median(np.linalg.norm(lids - iris.contour[eye, :16, :2], axis=1)) < 2.0
