"""The deadline batcher: a lone stream is never held back, batches form under load, results per stream in order."""
from __future__ import annotations

import threading
import time

import pytest

from bridge.multistream.batcher import DeadlineBatcher


def test_lone_stream_is_not_held_back_for_a_batch():
    with DeadlineBatcher(lambda streams, items: [i * 2 for i in items], max_batch=256) as batcher:
        assert batcher.submit("only", 21).result(timeout=60) == 42  # no company comes: waiting for it never ends
        assert list(batcher.batch_sizes) == [1]


def test_batches_form_under_load_and_results_return_in_order_per_stream():
    def slow_double(streams, items):
        time.sleep(0.01)  # a GPU pass
        return [(s, i * 2) for s, i in zip(streams, items)]

    with DeadlineBatcher(slow_double, max_batch=64) as batcher:
        futures = {s: [] for s in range(8)}

        def stream(s):
            for i in range(20):
                futures[s].append(batcher.submit(s, i))
                time.sleep(0.001)

        threads = [threading.Thread(target=stream, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s, fs in futures.items():
            assert [f.result(timeout=5) for f in fs] == [(s, i * 2) for i in range(20)]
        assert max(batcher.batch_sizes) > 1 and sum(batcher.batch_sizes) == 160


def test_a_failing_batch_fails_only_its_own_frames():
    calls = []

    def flaky(streams, items):
        calls.append(list(items))
        if "bad" in items:
            raise ValueError("bad frame")
        return items

    with DeadlineBatcher(flaky, max_batch=4) as batcher:
        bad = batcher.submit(0, "bad")
        with pytest.raises(ValueError):
            bad.result(timeout=2)
        assert batcher.submit(0, "good").result(timeout=2) == "good"


def test_max_wait_gathers_a_fuller_batch_but_respects_the_deadline():
    with DeadlineBatcher(lambda s, items: items, max_batch=3, max_wait_s=30.0) as batcher:
        futures = [batcher.submit(i, i) for i in range(3)]  # however slowly they come (well within 30 s)
        assert [f.result(timeout=60) for f in futures] == [0, 1, 2]  # a full batch runs at once, not after 30 s
        assert list(batcher.batch_sizes) == [3]
    with DeadlineBatcher(lambda s, items: items, max_batch=8, max_wait_s=0.05) as batcher:
        started = time.perf_counter()
        assert batcher.submit(0, 0).result(timeout=60) == 0  # the 7 others never come: the deadline ends the wait
        assert time.perf_counter() - started >= 0.05 and list(batcher.batch_sizes) == [1]  # it did wait


def test_a_finish_stage_makes_each_batch_s_results_as_one_unit_on_its_own_thread():
    seen = []

    def finish(streams, items, raw):
        seen.append((threading.current_thread().name, list(streams), raw))
        return [f"{x}!" for x in raw]

    with DeadlineBatcher(lambda streams, items: [i * 2 for i in items], name="b", finish=finish) as batcher:
        futures = [batcher.submit(s, i) for s, i in ((0, 1), (1, 2))]
        assert [f.result(timeout=10) for f in futures] == ["2!", "4!"]
    assert all(name == "b-finish" for name, _, _ in seen) and sum(len(s) for _, s, _ in seen) == 2

    def broken(streams, items, raw):
        raise RuntimeError("finish failed")

    with DeadlineBatcher(lambda streams, items: items, finish=broken) as batcher:
        with pytest.raises(RuntimeError, match="finish failed"):
            batcher.submit(0, 1).result(timeout=10)


def test_batches_queued_for_a_busy_finisher_are_finished_together_in_order():
    release, go, calls, ran = threading.Event(), threading.Event(), [], []

    def finish(streams, items, raw):
        calls.append(list(streams))
        release.wait(30)  # the first finish holds the finisher while the next batches queue behind it
        return [f"{s}:{x}" for s, x in zip(streams, raw)]

    def run(streams, items):
        ran.append(list(streams))
        if streams == ["x"]:
            go.wait(30)  # holds the worker while the frames after it queue, so they form batches of two
        return list(items)

    def wait_for(condition):
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.001)

    with DeadlineBatcher(run, max_batch=2, name="m", finish=finish, merge=lambda parts: sum(parts, [])) as batcher:
        first = batcher.submit("a", 0)
        wait_for(lambda: calls)
        gate = batcher.submit("x", 9)
        wait_for(lambda: len(ran) == 2)
        # queued while the finisher is busy: two batches of distinct streams, then one sharing stream "b"
        rest = [batcher.submit(s, i) for s, i in (("b", 1), ("c", 2), ("d", 3), ("e", 4), ("b", 5))]
        go.set()
        wait_for(lambda: len(batcher._finishing) == 4)  # x, (b, c), (d, e), (b)
        release.set()
        assert first.result(timeout=10) == "a:0" and gate.result(timeout=10) == "x:9"
        assert [f.result(timeout=10) for f in rest] == ["b:1", "c:2", "d:3", "e:4", "b:5"]
    assert ran[2:] == [["b", "c"], ["d", "e"], ["b"]]
    # the batches queued behind the first finish as one call; b's second frame waits for the next, after its first
    assert calls == [["a"], ["x", "b", "c", "d", "e"], ["b"]]
    assert list(batcher.finish_sizes) == [1, 5, 1]


def test_posted_items_run_in_batches_with_no_future_and_a_failure_is_logged(caplog):
    seen, done, failed = [], threading.Event(), threading.Event()

    def hand_on(streams, items):  # like JpegBatches: each item is handed on by run_batch itself
        if "bad" in items:
            failed.set()
            raise ValueError("bad batch")
        seen.extend(items)
        if len(seen) == 3:
            done.set()
        return [None] * len(items)

    with DeadlineBatcher(hand_on, max_batch=8) as batcher:
        assert batcher.post(None, "bad") is None
        assert failed.wait(timeout=30)
        for i in range(3):
            batcher.post(None, i)
        assert done.wait(timeout=30) and seen == [0, 1, 2]
        assert batcher.submit(None, 9).result(timeout=30) is None  # submit still answers through its Future
    assert "a batch failed for 1 posted items: bad batch" in caplog.text
