"""What a Track request must be before its image is queued: a stream's first message opens it or refuses it, every
later one costs at most its own image.

The first message must parse, carry the stream's first image and name a subject a client can show (or none: the
server's default); otherwise the stream is refused (`StreamRefused`, INVALID_ARGUMENT). Every image is then checked
from its message and its header alone, before it may replace the image waiting for its turn: a message that does
not parse, no image, times or a frame rate that are not finite numbers in range, an image over MAX_IMAGE_BYTES, an
encoding the decoder refuses (not a JPEG, truncated, raw from beyond loopback, a size that is impossible or does
not match its bytes), a size other than the stream's first. Each is a `BadImage` with one line for the client.
"""
from __future__ import annotations

import math

from bridge.errors import SinkError
from bridge.formats.livelinkface import check_subject
from bridge.grpc.access import Malformed
from bridge.multistream.decode import BadImage

MAX_IMAGE_BYTES = 8 * 1024 * 1024 - 4096  # the image within an 8 MiB message (a raw 1080p frame is 6.2 MB)
MAX_TIME_S = 1e11  # seconds: beyond the year 5000 as a Unix time, far beyond any monotonic clock
MAX_FRAME_RATE = 1000.0


class StreamRefused(Exception):
    """The stream cannot be served at all (its first message): ends the call with INVALID_ARGUMENT."""


def first_subject(request, default_subject: str) -> str:
    """The stream's subject from its first message, or StreamRefused naming the problem and the fix."""
    if isinstance(request, Malformed):
        raise StreamRefused(f"the first message is not a facebridge.v1.TrackRequest ({request.error}); send the "
                            "stream's subject and first image in one TrackRequest")
    if not request.HasField("image"):
        raise StreamRefused("the first TrackRequest carries no image; send the stream's subject with its first "
                            "image")
    if not request.subject:
        return default_subject
    try:
        check_subject(request.subject)
    except SinkError as e:
        raise StreamRefused(f"subject {request.subject[:80]!r}: {e.problem.removeprefix('Live Link Face: ')}; "
                            f"{e.fix}") from None
    return request.subject


def image_size(request, decoder, raw_ok: bool, stream_hw: tuple[int, int] | None,
               allowed_hw: frozenset = frozenset()) -> tuple[int, int]:
    """(height, width) of the request's image from its header, or BadImage: nothing is decoded here.
    allowed_hw: the (height, width) sizes the server takes (`--frame-sizes`); empty: any."""
    if isinstance(request, Malformed):
        raise BadImage(f"a message that is not a facebridge.v1.TrackRequest ({request.error}); send TrackRequests")
    if not request.HasField("image"):
        raise BadImage("a TrackRequest without an image; send one image per request")
    image = request.image
    for name in ("capture_time", "source_time", "media_time"):
        value = getattr(image, name)
        if not (math.isfinite(value) and abs(value) < MAX_TIME_S):
            raise BadImage(f"image {image.seq}: {name} {value} is not a time in seconds; send the clock's "
                           "seconds (or 0)")
    if not (math.isfinite(image.frame_rate) and 0.0 <= image.frame_rate <= MAX_FRAME_RATE):
        raise BadImage(f"image {image.seq}: frame_rate {image.frame_rate} is outside 0..{MAX_FRAME_RATE:.0f}; "
                       "send the camera's frames per second (or 0 for 30)")
    data = image.data  # each read of a bytes field copies it
    if len(data) > MAX_IMAGE_BYTES:
        raise BadImage(f"image {image.seq} is {len(data)} bytes, over the {MAX_IMAGE_BYTES} limit; send "
                       "JPEG or a smaller frame")
    try:
        hw = decoder.measure(image.encoding, data, image.width, image.height, raw_ok=raw_ok)
    except BadImage as e:
        raise BadImage(f"image {image.seq}: {e}") from None
    if allowed_hw and hw not in allowed_hw:
        sizes = ", ".join(f"{w}x{h}" for h, w in sorted(allowed_hw))
        raise BadImage(f"image {image.seq}: {hw[1]}x{hw[0]} is not one of this server's frame sizes ({sizes}); "
                       "send one of them")
    if stream_hw is not None and hw != stream_hw:
        raise BadImage(f"image {image.seq}: the image size changed from {stream_hw[1]}x{stream_hw[0]} to "
                       f"{hw[1]}x{hw[0]}; open a new stream for another camera mode")
    return hw
