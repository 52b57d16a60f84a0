"""FramePool (multistream/decode_process.py) on the CPU: what a decode process writes into a row, the engine's view
of that row reads, for every row and two frame sizes; another process's pool opened from the spec sees the same
memory; closing the engine's removes the block."""
from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np
import pytest

from bridge.multistream.decode_process import FramePool


def test_a_row_put_is_the_row_the_engine_views_and_another_process_sees_it(monkeypatch):
    pool = FramePool(rows=5, entry_bytes=64 * 48 * 3)
    # opened as a decode process opens it; here in the owner's own process, whose resource tracker must keep the
    # block registered (a decode process takes it off its own, or its exit would remove the engine's block)
    monkeypatch.setattr("bridge.multistream.decode_process.untrack", lambda block: None)
    writer = FramePool.open(pool.spec())
    try:
        rng = np.random.default_rng(1)
        for h, w in ((48, 64), (32, 40)):
            frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(pool.rows)]
            for row, frame in enumerate(frames):
                writer.put(row, frame)
            views = pool.frames(h, w)
            assert len(views) == pool.rows and all(v.shape == (h, w, 3) for v in views)
            for row, frame in enumerate(frames):
                assert np.array_equal(views[row], frame) and np.array_equal(pool.frame(row, h, w), frame)
        assert pool.takes(48, 64) and not pool.takes(49, 64)
    finally:
        writer.close()
        name = pool.spec()["name"]
        pool.close()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)


def test_a_decode_batch_writes_the_good_rows_and_says_why_each_other_one_was_not():
    """_decode_batch, the decode process's one call: a sound JPEG written into its row; one whose message claims
    another size than it decodes to, and bytes that are no JPEG, each named with its own status (the engine's
    reason for the client), their rows untouched."""
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.decode import ImageDecoder
    from bridge.multistream.decode_process import NOT_DECODED, OK, REASONS, WRONG_SIZE, _decode_batch
    from bridge.multistream.rings import SlotRing

    frame = sample_frames(1)[0]  # RGB 360x480
    jpeg = cv2.imencode(".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    ring = SlotRing.create(3, 64 * 1024)
    pool = FramePool(rows=3, entry_bytes=360 * 480 * 3)
    try:
        garbage = b"\xff\xd8" + bytes(range(256)) * 8
        for slot, data in enumerate((jpeg, jpeg, garbage)):
            ring.images[slot, :len(data)] = np.frombuffer(data, np.uint8)
        pool.array[:] = 7  # what an untouched row holds
        items = np.array([[0, len(jpeg), 360, 480], [1, len(jpeg), 240, 320], [2, len(garbage), 360, 480]])
        reply = _decode_batch(items, [ring], 3, pool, ImageDecoder("cpu", allow_raw=False), None)
        started, ended = reply[:2]
        assert started <= ended
        assert reply[3:6].tolist() == [0, 1, 2]
        assert reply[6:].tolist() == [OK, WRONG_SIZE, NOT_DECODED]
        assert np.abs(pool.frame(0, 360, 480).astype(int) - frame).mean() < 3  # the frame, to JPEG's loss
        assert (pool.array[1:] == 7).all()
        assert "another size" in REASONS[WRONG_SIZE] and "could not be decoded" in REASONS[NOT_DECODED]
    finally:
        pool.close()
        ring.close()
