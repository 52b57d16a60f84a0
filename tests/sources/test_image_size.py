"""Image sizes from headers, checked against OpenCV's own encoders for every format the image folder reads."""
import cv2
import numpy as np
import pytest

from bridge.sources.image_size import image_size


@pytest.mark.parametrize("suffix, kind", [(".png", "png"), (".jpg", "jpeg"), (".bmp", "bmp"), (".webp", "webp"),
                                          (".tif", "tiff")])
def test_header_size_matches_what_opencv_wrote(tmp_path, suffix, kind):
    path = tmp_path / f"img{suffix}"
    assert cv2.imwrite(str(path), np.zeros((37, 53, 3), np.uint8))
    assert image_size(path) == (kind, 53, 37)


def test_unknown_or_damaged_headers_give_none(tmp_path):
    (tmp_path / "a.png").write_bytes(b"garbage")
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8\xff")
    assert image_size(tmp_path / "a.png") is None and image_size(tmp_path / "b.jpg") is None
    assert image_size(tmp_path / "missing.png") is None
