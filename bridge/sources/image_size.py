"""An image file's width and height read from its header, without decoding it, so a 20000x20000 picture is
refused or decoded at a reduced size before it costs gigabytes. PNG, JPEG, BMP, WebP and TIFF; None for anything
else (the decoder's own pixel limit, OPENCV_IO_MAX_IMAGE_PIXELS, still applies then)."""
from __future__ import annotations

import struct
from pathlib import Path

HEADER_BYTES = 1 << 16  # JPEG's size marker may sit after a large EXIF block; beyond that we seek


def image_size(path: str | Path) -> tuple[str, int, int] | None:
    """(format, width, height) from the header; None when the format is not one of those above or is damaged."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
            size = None
            if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
                kind, size = "png", struct.unpack(">II", head[16:24])
            elif head.startswith(b"\xff\xd8"):
                kind, size = "jpeg", _jpeg(f)
            elif head.startswith(b"BM") and len(head) >= 26:
                kind, size = "bmp", tuple(abs(v) for v in struct.unpack("<ii", head[18:26]))
            elif head.startswith(b"RIFF") and head[8:12] == b"WEBP":
                kind, size = "webp", _webp(head)
            elif head[:4] in (b"II*\x00", b"MM\x00*"):
                kind, size = "tiff", _tiff(f, "<" if head[:2] == b"II" else ">")
    except (OSError, struct.error, ValueError):
        return None
    return (kind, int(size[0]), int(size[1])) if size else None


def _jpeg(f) -> tuple[int, int] | None:
    f.seek(2)
    while True:
        marker = f.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        kind = marker[1]
        if kind in (0xD8, 0x01) or 0xD0 <= kind <= 0xD7:  # markers without a length
            continue
        (length,) = struct.unpack(">H", f.read(2))
        if 0xC0 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):  # start of frame
            _precision, height, width = struct.unpack(">BHH", f.read(5))
            return width, height
        f.seek(length - 2, 1)


def _webp(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _tiff(f, order: str) -> tuple[int, int] | None:
    f.seek(4)
    (offset,) = struct.unpack(order + "I", f.read(4))
    f.seek(offset)
    (count,) = struct.unpack(order + "H", f.read(2))
    found: dict[int, int] = {}
    for _ in range(min(count, 512)):
        tag, kind, _n, value = struct.unpack(order + "HHI4s", f.read(12))
        if tag in (256, 257):
            found[tag] = struct.unpack(order + ("H" if kind == 3 else "I"), value[:2 if kind == 3 else 4])[0]
    return (found[256], found[257]) if 256 in found and 257 in found else None
