"""The serve front end's image decoder on the CPU: JPEG sizes read from the header, raw frames on loopback only,
every refusal a one-line reason for the client."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from bridge.multistream.decode import JPEG, RAW_BGR, RAW_RGB, BadImage, ImageDecoder, WrongSize, _jpeg_size
from tests.helpers import wait_until


def _sample_bgr():
    from bridge.engines.shipped import sample_frames

    return cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR)


def test_a_jpeg_decodes_to_the_rgb_frame_opencv_gives():
    from bridge.serving.client import encode_jpeg

    bgr = _sample_bgr()
    data = encode_jpeg(bgr)
    assert _jpeg_size(data) == (480, 360)
    frame, hw = ImageDecoder("cpu").decode(JPEG, data)
    want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert hw == (360, 480) and np.array_equal(frame, want)
    with pytest.raises(BadImage, match="480x360 but the message says 640x480"):
        ImageDecoder("cpu").decode(JPEG, data, 640, 480)


def test_raw_frames_are_taken_on_loopback_only_and_must_fit_their_size():
    bgr = _sample_bgr()
    frame, hw = ImageDecoder("cpu").decode(RAW_BGR, bgr.tobytes(), 480, 360)
    assert hw == (360, 480) and np.array_equal(frame, bgr[..., ::-1])
    assert ImageDecoder("cpu").decode(RAW_RGB, bgr.tobytes(), 480, 360)[0].flags.writeable
    with pytest.raises(BadImage, match="only from a client on loopback; send JPEG"):
        ImageDecoder("cpu", allow_raw=False).decode(RAW_RGB, bgr.tobytes(), 480, 360)
    with pytest.raises(BadImage, match="needs 518400 bytes, got 10"):
        ImageDecoder("cpu").decode(RAW_RGB, b"0123456789", 480, 360)


def test_what_is_not_an_image_is_refused_with_its_reason():
    decoder = ImageDecoder("cpu")
    with pytest.raises(BadImage, match="not a baseline JPEG"):
        decoder.decode(JPEG, b"GIF89a....")
    with pytest.raises(BadImage, match="unknown image encoding 7"):
        decoder.decode(7, b"")
    assert decoder.name == "cpu (opencv)" and not decoder.gpu_jpeg


def test_an_image_is_sized_from_its_header_and_refused_before_any_pixel_work():
    from bridge.multistream.decode import MAX_SEGMENTS
    from bridge.serving.client import encode_jpeg

    decoder = ImageDecoder("cpu")
    data = encode_jpeg(_sample_bgr())
    assert decoder.measure(JPEG, data) == (360, 480)
    with pytest.raises(BadImage, match="truncated"):
        decoder.measure(JPEG, data[:-100])
    tiny = encode_jpeg(np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(BadImage, match="16x16 is outside 32x32"):
        decoder.measure(JPEG, tiny)
    # a start of frame hidden behind more segments than any camera writes: not searched for
    crafted = b"\xff\xd8" + b"\xff\xe1\x00\x02" * (MAX_SEGMENTS + 1) + data[2:]
    assert _jpeg_size(crafted) is None and _jpeg_size(b"\xff\xd8\xff\xe0\x00\x00" + data[2:]) is None
    with pytest.raises(BadImage, match="only from a client on loopback"):
        decoder.measure(RAW_RGB, b"\0" * 480 * 360 * 3, 480, 360, raw_ok=False)
    with pytest.raises(BadImage, match="100000x100000 is outside"):
        decoder.measure(RAW_RGB, b"", 100000, 100000)


class _GatedDecoder(ImageDecoder):
    """The CPU decoder, its first start_jpegs call held until `gate` is set (the JPEG thread busy, as with a long
    batch on the GPU); `done` counts the calls that returned."""

    def __init__(self, gate=None) -> None:
        super().__init__("cpu")
        self.gate, self.calls, self.done = gate, 0, 0

    def start_jpegs(self, datas, sizes):
        self.calls += 1
        if self.calls == 1 and self.gate is not None:
            self.gate.wait(30)
        decoded = super().start_jpegs(datas, sizes)
        self.done += 1
        return decoded


def test_jpegs_waiting_are_decoded_in_one_call_and_a_bad_one_costs_only_itself():
    import threading

    from bridge.multistream.decode_batch import JpegBatches
    from bridge.serving.client import encode_jpeg

    data = encode_jpeg(_sample_bgr())
    want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    gate, got = threading.Event(), {}
    batches = JpegBatches(_GatedDecoder(gate))

    def then(decoded, times, key):
        got[key] = (decoded, times)

    try:
        batches.submit(data, (360, 480), then, "first")
        # its decode holds the JPEG thread: the next images wait
        wait_until(lambda: len(batches.batch_sizes) == 1, 30)
        for key in range(4):  # image 2 claims a size it does not decode to: refused alone
            batches.submit(data, (360, 480) if key != 2 else (480, 640), then, key)
        gate.set()
        wait_until(lambda: len(got) == 5, 30)
    finally:
        gate.set()
        batches.close()
    assert list(batches.batch_sizes) == [1, 4]  # one start_jpegs call a batch
    for key in ("first", 0, 1, 3):
        (frame, hw), times = got[key]
        assert hw == (360, 480) and np.array_equal(frame, want) and times.ms > 0
        assert times.posted <= times.started < times.ended
        # the JPEG thread's CPU time over its batch: OpenCV decodes on that thread, so some, and no more than wall
        assert 0 < times.cpu_ms <= (times.ended - times.started) * 1000.0 + 1.0
    # the four waited for the first image's decode: posted before their batch began, decoded together
    assert len({got[key][1].started for key in (0, 1, 2, 3)}) == 1
    assert got[0][1].started >= got["first"][1].ended
    assert isinstance(got[2][0], WrongSize) and "decodes to 480x360, not 640x480" in str(got[2][0])


def test_a_slow_hand_on_does_not_hold_the_next_decode_and_hand_ons_keep_their_order():
    """The JPEG thread only decodes; each batch is handed on by the batcher's finishing thread, in order (the
    engine's one thread doing both capped it near 10,000 frames a second on an H100)."""
    import threading

    from bridge.multistream.decode_batch import JpegBatches
    from bridge.serving.client import encode_jpeg

    data = encode_jpeg(_sample_bgr())
    hold, order = threading.Event(), []
    decoder = _GatedDecoder()
    batches = JpegBatches(decoder)

    def then(decoded, times, key):
        if key == "first":
            hold.wait(30)  # the finishing thread is busy handing this one on
        order.append((key, threading.current_thread().name))

    try:
        batches.submit(data, (360, 480), then, "first")
        wait_until(lambda: len(batches.batch_sizes) == 1, 30)
        batches.submit(data, (360, 480), then, "second")
        wait_until(lambda: decoder.done == 2, 10)
        decoded_while_held = decoder.done == 2 and not order
        hold.set()
        wait_until(lambda: len(order) == 2, 30)
    finally:
        hold.set()
        batches.close()
    assert decoded_while_held  # the second image was decoded while the first was still being handed on
    assert [key for key, _ in order] == ["first", "second"]
    assert {name for _, name in order} == {"serve-jpeg-finish"}


def test_images_submitted_together_are_handed_on_together_in_their_order():
    """submit_many (the engine's path: every image of a front end's message): one hand-on call for those decoded in
    the same batch, the lists in submission order, a bad image in its place as the BadImage it is."""
    import threading

    from bridge.multistream.decode_batch import JpegBatches
    from bridge.serving.client import encode_jpeg

    data = encode_jpeg(_sample_bgr())
    calls, done = [], threading.Event()
    batches = JpegBatches(ImageDecoder("cpu"))

    def then_many(decoded, times, tags):
        calls.append((decoded, times, tags))
        if sum(len(t) for _, _, t in calls) == 4:
            done.set()

    try:
        batches.submit_many([data] * 4, [(360, 480), (360, 480), (480, 640), (360, 480)], then_many, list("abcd"))
        assert done.wait(30)
    finally:
        batches.close()
    assert list(batches.batch_sizes) == [4] and len(calls) == 1  # one decode call, one hand-on
    decoded, times, tags = calls[0]
    assert tags == list("abcd") and len(times) == 4 and len({t.started for t in times}) == 1
    assert [isinstance(d, BadImage) for d in decoded] == [False, False, True, False]
    assert all(d[1] == (360, 480) and d[0].shape == (360, 480, 3) for i, d in enumerate(decoded) if i != 2)


def test_a_batch_the_decoder_cannot_take_answers_every_image_as_refused():
    import threading

    from bridge.multistream.decode_batch import JpegBatches

    done, got = threading.Event(), []
    batches = JpegBatches(ImageDecoder("cpu"))
    try:  # no size to decode to: start_jpegs itself fails, and the image is refused rather than left waiting
        batches.submit(b"\xff\xd8 not measured", None, lambda decoded, times: (got.append(decoded), done.set()))
        assert done.wait(30)
    finally:
        batches.close()
    assert isinstance(got[0], BadImage) and "could not be decoded" in str(got[0])
