"""LTC (SMPTE linear timecode) decoded from audio, as a Tentacle Sync or a timecode generator sends it.

An LTC frame is 80 bits, sent in biphase mark code: every bit cell starts with a level change, and a 1 has a second
change in the middle of its cell, so a 0 is one long interval between zero crossings and a 1 two short ones, at
any polarity and any level. The frame ends with the sync word 0011 1111 1111 1101 (0x3FFD in the order sent), bits
64-79. Bits 0-63 carry the time in binary-coded decimal, least significant bit first: frame units 0-3, frame tens
8-9, the drop-frame flag 10, second units 16-19, tens 24-26, minute units 32-35, tens 40-42, hour units 48-51, tens
56-57 (the rest are user bits and flags). A frame's label names the video frame that starts where its bit 0
starts.

The decoder is streaming: `feed(pcm)` takes any number of samples and returns the frames completed in them, each
with the sample (since the first fed) where it began. Zero crossings are placed between samples by linear
interpolation, with a hysteresis of a tenth of the signal's level so that noise near zero makes no crossings; the
bit length is learned from the signal (the longest of the first intervals, then a running average), so any rate
from 23.976 to 30 frames per second decodes without being told, at 16 kHz or more. Played backwards, LTC is not
read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYNC = (0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1)  # bits 64-79 as sent: 0x3FFD
FRAME_BITS = 80
LEARN_INTERVALS = 48  # intervals seen before the bit length is trusted


@dataclass(frozen=True)
class LtcFrame:
    hours: int
    minutes: int
    seconds: int
    frames: int
    drop_frame: bool
    start_sample: float  # where bit 0 began, in samples since the first sample fed

    @property
    def text(self) -> str:
        sep = ";" if self.drop_frame else ":"
        return f"{self.hours:02d}:{self.minutes:02d}:{self.seconds:02d}{sep}{self.frames:02d}"


def _bcd(bits, start: int, count: int) -> int:
    return sum(bits[start + i] << i for i in range(count))


def parse_frame(bits, start_sample: float) -> LtcFrame | None:
    """The time in 80 bits (sent order), or None when a field is out of range (a misread)."""
    frames = _bcd(bits, 0, 4) + 10 * _bcd(bits, 8, 2)
    seconds = _bcd(bits, 16, 4) + 10 * _bcd(bits, 24, 3)
    minutes = _bcd(bits, 32, 4) + 10 * _bcd(bits, 40, 3)
    hours = _bcd(bits, 48, 4) + 10 * _bcd(bits, 56, 2)
    if frames >= 30 or seconds >= 60 or minutes >= 60 or hours >= 24:
        return None
    return LtcFrame(hours, minutes, seconds, frames, bool(bits[10]), start_sample)


class LtcDecoder:
    def __init__(self) -> None:
        self._pos = 0  # samples fed so far
        self._level = 0.0  # the signal's recent peak (for the hysteresis)
        self._state = 0  # +1 / -1: the side of zero the signal is on; 0 before the first
        self._prev = 0.0  # the last sample fed (to interpolate a crossing across two feeds)
        self._last_cross: float | None = None
        self._intervals: list[float] = []
        self._bit: float | None = None  # samples per bit, once learned
        self._half: float | None = None  # where a pending first half of a 1 began
        self._bits: list[int] = []
        self._bit_starts: list[float] = []

    def feed(self, pcm: np.ndarray) -> list[LtcFrame]:
        x = np.asarray(pcm, np.float64).reshape(-1)
        out: list[LtcFrame] = []
        if not len(x):
            return out
        self._level = max(self._level * 0.5, float(np.max(np.abs(x))))
        threshold = 0.1 * self._level
        # samples past the hysteresis on either side; a crossing is where the side changes
        side = np.where(x > threshold, 1, np.where(x < -threshold, -1, 0))
        idx = np.flatnonzero(side)
        sides = side[idx]
        before = np.concatenate([[self._state], sides[:-1]])
        prev_x = np.concatenate([[self._prev], x[:-1]])
        for i in idx[sides != before]:  # where the signal reached the other side
            s = side[i]
            if self._state != 0:
                # the zero crossing: between the last sample at or before zero and this one
                j = i
                while j > 0 and np.sign(x[j - 1]) == s:
                    j -= 1
                a, b = (prev_x[j], x[j])
                frac = a / (a - b) if a != b else 0.0
                cross = self._pos + j - 1 + min(max(frac, 0.0), 1.0)
                self._on_cross(cross, out)
            self._state = s
        self._prev = float(x[-1])
        self._pos += len(x)
        return out

    def _on_cross(self, cross: float, out: list[LtcFrame]) -> None:
        last, self._last_cross = self._last_cross, cross
        if last is None:
            return
        interval = cross - last
        if self._bit is None:
            self._intervals.append(interval)
            if len(self._intervals) >= LEARN_INTERVALS:
                self._bit = max(self._intervals)
            return
        if interval > 0.75 * self._bit:  # a whole cell: a 0
            if interval > 1.6 * self._bit:  # a gap: the signal was lost; learn again
                self._reset_bits()
                self._bit = None
                self._intervals = [interval]
                return
            self._half = None
            self._push(0, last, out)
            self._bit += 0.05 * (interval - self._bit)
        elif self._half is None:  # the first half of a 1
            self._half = last
        else:  # the second half: a 1 that began where the first half did
            start, self._half = self._half, None
            self._push(1, start, out)
            self._bit += 0.05 * (cross - start - self._bit)

    def _push(self, bit: int, start: float, out: list[LtcFrame]) -> None:
        self._bits.append(bit)
        self._bit_starts.append(start)
        if len(self._bits) > FRAME_BITS:
            del self._bits[0], self._bit_starts[0]
        if len(self._bits) == FRAME_BITS and tuple(self._bits[64:]) == SYNC:
            frame = parse_frame(self._bits, self._bit_starts[0])
            if frame is not None:
                out.append(frame)
            self._reset_bits()

    def _reset_bits(self) -> None:
        self._bits.clear()
        self._bit_starts.clear()
        self._half = None
