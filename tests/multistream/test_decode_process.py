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
