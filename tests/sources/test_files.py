"""File sources: an image folder skips unreadable images."""

import numpy as np
import pytest

from bridge.errors import SourceError


def test_image_folder_skips_unreadable_images(tmp_path):
    import cv2

    from bridge.sources import open_source

    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "b.png").write_bytes(b"garbage")
    cv2.imwrite(str(tmp_path / "c.png"), np.ones((8, 8, 3), np.uint8))
    src = open_source(str(tmp_path), realtime=False)
    got = [src.read(), src.read(), src.read()]
    assert got[0] is not None and got[1] is not None and got[2] is None
    assert src.skipped == 1 and [g.seq for g in got[:2]] == [0, 1]
    with pytest.raises(SourceError, match="not a number"):
        open_source("camera:x")
