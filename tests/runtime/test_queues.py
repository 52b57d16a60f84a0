"""LatestQueue: drops the oldest when full and counts it; a blocking put keeps every item."""
import threading

import pytest

from bridge.runtime.queues import Closed, LatestQueue


def test_latest_queue_drops_oldest_and_counts():
    q = LatestQueue(2)
    for i in range(5):
        q.put(i)
    assert q.dropped == 3
    assert q.get() == 3 and q.get() == 4
    assert q.get(timeout=0.01) is None
    q.close()
    with pytest.raises(Closed):
        q.get()


def test_latest_queue_blocking_put_keeps_every_item():
    q = LatestQueue(2)
    got = []

    def consume():
        while True:
            try:
                item = q.get(timeout=1)
            except Closed:
                return
            if item is not None:
                got.append(item)

    t = threading.Thread(target=consume)
    t.start()
    for i in range(50):
        q.put(i, block=True)
    q.close()
    t.join(5)
    assert got == list(range(50)) and q.dropped == 0


def test_latest_queue_wakes_consumer():
    q = LatestQueue(2)
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
    t.start()
    q.put("frame")
    t.join(2)
    assert got == ["frame"]
