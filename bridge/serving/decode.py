"""Images from the wire to the batched service's input (uint8 RGB, HxWx3), decoded where it pays.

JPEG goes to nvJPEG (torchvision.io.decode_jpeg on the service's GPU) when the service runs on a CUDA device: the
decoded frame is already where the tracker reads it, and the host does no pixel work at all (a 480x360 JPEG is
about 1.5 ms of CPU in OpenCV; at 30,000 frames a second that is 45 cores). Elsewhere OpenCV decodes on the CPU.
Raw frames (loopback only) are wrapped without a copy. Every refusal is a `BadImage` with a message for the client.
"""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

JPEG, RAW_RGB, RAW_BGR = 1, 2, 3  # facebridge.v1.ImageFrame.Encoding
MAX_PIXELS = 3840 * 2160


class BadImage(ValueError):
    """An image that cannot be served (its message goes back to the client's log)."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame marker, without decoding; None if there is none."""
    i, n = 2, len(data)
    if data[:2] != b"\xff\xd8":
        return None
    while i + 9 < n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + length
    return None


class ImageDecoder:
    """decode(encoding, data, width, height) -> (frame, (height, width)). device: the service's torch device."""

    def __init__(self, device: str = "cpu", allow_raw: bool = True, gpu_jpeg: bool | None = None) -> None:
        self.device = device
        self.allow_raw = allow_raw
        self._torch = None
        on_gpu = str(device).startswith("cuda")
        if gpu_jpeg is None:
            gpu_jpeg = on_gpu
        if gpu_jpeg:
            try:
                import torch
                from torchvision.io import decode_jpeg

                self._torch, self._decode_jpeg = torch, decode_jpeg
            except ImportError as e:
                log.warning("nvJPEG is not available (%s); JPEG is decoded on the CPU", e)
                gpu_jpeg = False
        self.gpu_jpeg = bool(gpu_jpeg and on_gpu)
        self.name = "gpu (nvjpeg)" if self.gpu_jpeg else "cpu (opencv)"

    def decode(self, encoding: int, data: bytes, width: int = 0, height: int = 0):
        if encoding == JPEG:
            return self._jpeg(data, width, height)
        if encoding in (RAW_RGB, RAW_BGR):
            if not self.allow_raw:
                raise BadImage("raw images are accepted only by a server bound to loopback; send JPEG")
            if not (0 < width * height <= MAX_PIXELS) or len(data) != width * height * 3:
                raise BadImage(f"a raw image of {width}x{height} needs {width * height * 3} bytes, got {len(data)}")
            frame = np.frombuffer(bytearray(data), np.uint8).reshape(height, width, 3)  # writable, for torch
            return (frame[..., ::-1] if encoding == RAW_BGR else frame), (height, width)
        raise BadImage(f"unknown image encoding {encoding}; send JPEG (1), RAW_RGB (2) or RAW_BGR (3)")

    def _jpeg(self, data: bytes, width: int, height: int):
        size = _jpeg_size(data)
        if size is None:
            raise BadImage(f"not a baseline JPEG ({len(data)} bytes); send camera frames encoded as JPEG")
        w, h = size
        if not 0 < w * h <= MAX_PIXELS:
            raise BadImage(f"a JPEG of {w}x{h} is outside 1..{MAX_PIXELS} pixels")
        if (width and width != w) or (height and height != h):
            raise BadImage(f"the JPEG is {w}x{h} but the message says {width}x{height}")
        if self.gpu_jpeg:
            torch = self._torch
            raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            try:
                frame = self._decode_jpeg(raw, device=self.device)  # (3, H, W) uint8 RGB on the GPU
            except RuntimeError as e:
                raise BadImage(f"nvJPEG cannot decode this JPEG ({str(e).splitlines()[0][:120]})") from None
            return frame.permute(1, 2, 0).contiguous(), (h, w)
        import cv2

        frame = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if frame is None or frame.shape[:2] != (h, w):
            raise BadImage(f"the JPEG of {len(data)} bytes does not decode")
        return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB), (h, w)
