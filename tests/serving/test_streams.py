"""LiveStream and StreamTable over a real MultiStreamFaceService (torch CPU runners): latest wins, one image of a
stream in the service at a time, its result wakes the stream, late images dropped, admission, and a stream that
ends while its image is in a pass keeps its slot until the image comes back."""
from __future__ import annotations

import threading
import time

import pytest


@pytest.fixture(scope="module")
def clip():
    from bridge.engines.shipped import sample_frames

    return sample_frames(3, step=1)


@pytest.fixture
def table():
    torch = pytest.importorskip("torch")
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService
    from bridge.serving.streams import StreamTable

    torch.set_num_threads(1)
    runners = make_runners("torch", 2)
    table = StreamTable(lambda hw, n: MultiStreamFaceService(n, hw, runners, device="cpu"), max_streams=2,
                        deadline_s=60.0)
    yield table
    table.close()


def _woken(stream) -> threading.Event:
    woken = threading.Event()
    stream.wake = woken.set
    return woken


def test_latest_wins_one_image_in_the_service_and_its_result_wakes_the_stream(table, clip):
    stream = table.open()
    woken = _woken(stream)
    assert stream.offer("a") and stream.offer("b")  # nothing in the service: its turn can come
    todo, done = stream.poll()
    assert todo.request == "b" and done is None and stream.counters.stale == 1  # "a" was replaced
    assert not stream.offer("c")  # "b" is being decoded: "c" waits, woken by "b"'s result
    assert stream.poll() == (None, None)  # no second turn while "b" is out
    stream.bind(clip[0].shape[:2])
    stream.submit(todo, clip[0])
    assert woken.wait(120)
    todo, done = stream.poll()
    assert done.request == "b" and done.future.result().tracked and todo.request == "c"
    stream.abandon()  # "c" refused on decode: the turn is free again
    assert stream.holds_image() is False
    stream.end_of_input()
    assert stream.poll() is None  # input ended, nothing left
    assert stream.close()
    assert table.stats()["streams"] == 0 and table.totals["received"] == 3 and table.totals["stale"] == 1


def test_an_image_past_its_deadline_is_dropped_as_late(table):
    stream = table.open()
    stream.offer("old", deadline_s=0.001)
    time.sleep(0.01)
    assert stream.poll() == (None, None)
    assert stream.counters.late == 1 and table.totals["late"] == 1
    assert stream.close()


def test_a_stream_ended_with_its_image_in_a_pass_keeps_its_slot_until_the_image_comes_back(table, clip):
    first, second = table.open(), table.open()
    assert table.open() is None and table.totals["refused"] == 1  # max_streams 2
    released = threading.Event()
    first.on_released = released.set
    first.offer("x")
    todo, _ = first.poll()
    first.bind(clip[0].shape[:2])
    first.submit(todo, clip[0])
    freed_now = first.close()  # its image may still be in the pass
    assert released.wait(120)  # freed once the image came back (or at once, if it already had)
    assert freed_now or first.slot is None
    assert table.stats()["streams"] == 1
    third = table.open()  # the slot goes to a newcomer, its tracking state reset
    third.bind(clip[0].shape[:2])
    assert third.slot is not None
    for stream in (second, third):
        assert stream.close()


def test_a_served_image_is_freed_without_the_garbage_collector(table, clip):
    """No reference cycle through an image's trip (served -> future -> done callback): once the front end has
    dropped a result and the next pass has run (the batcher lets go of its last batch then), reference counting
    has freed it and its request, where a server at hundreds of frames a second would otherwise leave them all to
    the collector (runtime/gc_pauses.py)."""
    import gc
    import weakref

    class Request:  # a plain object whose lifetime the test can watch
        pass

    stream = table.open()
    woken = _woken(stream)
    stream.bind(clip[0].shape[:2])
    watches = []
    gc.disable()
    try:
        for k in range(4):
            request = Request()
            watches.append(weakref.ref(request))
            woken.clear()
            stream.offer(request)
            todo, _ = stream.poll()
            stream.submit(todo, clip[k % len(clip)])
            del request, todo
            assert woken.wait(120)
            _, done = stream.poll()
            assert done.future.result().tracked is not None
            del done
            if k >= 1:
                assert watches[k - 1]() is None, f"image {k - 1} outlived its pass: a cycle keeps it for the collector"
    finally:
        gc.enable()
    stream.end_of_input()
    assert stream.close()
