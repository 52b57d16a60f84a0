"""An LTC encoder for the tests, written from the SMPTE 12M layout (not from bridge/audio/ltc.py): 80-bit frames,
BCD fields least significant bit first, sync word 0011 1111 1111 1101, biphase mark code."""
from __future__ import annotations

import numpy as np

SYNC_BITS = [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1]


def frame_bits(hours: int, minutes: int, seconds: int, frames: int, drop: bool = False) -> list[int]:
    bits = [0] * 80

    def put(value: int, start: int, count: int) -> None:
        for i in range(count):
            bits[start + i] = (value >> i) & 1

    put(frames % 10, 0, 4)
    put(frames // 10, 8, 2)
    bits[10] = int(drop)
    put(seconds % 10, 16, 4)
    put(seconds // 10, 24, 3)
    put(minutes % 10, 32, 4)
    put(minutes // 10, 40, 3)
    put(hours % 10, 48, 4)
    put(hours // 10, 56, 2)
    bits[64:80] = SYNC_BITS
    return bits


def ltc_audio(start: tuple[int, int, int, int], fps: int, seconds: float, rate: int = 48000,
              amplitude: float = 0.5, invert: bool = False) -> np.ndarray:
    """Non-drop LTC at a whole `fps` from `start` (h, m, s, f), float32 mono at `rate`."""
    h, m, s, f = start
    first = ((h * 60 + m) * 60 + s) * fps + f
    halves = []
    level = -1.0 if invert else 1.0
    for n in range(int(seconds * fps) + 1):
        total = first + n
        ff, rest = total % fps, total // fps
        bits = frame_bits(rest // 3600 % 24, rest // 60 % 60, rest % 60, ff)
        for bit in bits:
            level = -level  # every cell starts with a change
            halves.append(level)
            if bit:
                level = -level  # a 1 changes again in the middle
            halves.append(level)
    count = int(seconds * rate)
    index = (np.arange(count) * (2 * 80 * fps) / rate).astype(np.int64)
    return (amplitude * np.asarray(halves, np.float32)[index]).astype(np.float32)
