"""Log-mel front end in numpy: 16 kHz mono, 25 ms Hann window, 10 ms hop, 40 mel bands.

Frame i covers samples [i*HOP, i*HOP + WINDOW); its time is the window centre, i*10 ms + 12.5 ms. The same
code makes training features (tools/gen_lipsync_data.py) and live features, so they cannot drift apart.
"""
from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000
HOP = 160  # 10 ms
WINDOW = 400  # 25 ms
N_FFT = 512
N_MELS = 40
FMIN, FMAX = 50.0, 7600.0
LOG_FLOOR = 1e-8
FRAME_RATE = SAMPLE_RATE / HOP  # 100 frames per second


def frame_center_s(index: np.ndarray | int) -> np.ndarray | float:
    """Time (s, from the first sample) that frame `index` describes."""
    return (np.asarray(index) * HOP + WINDOW / 2) / SAMPLE_RATE


def mel_band_edges_hz() -> np.ndarray:
    """The N_MELS + 2 edges (Hz) of the triangular filters, equally spaced on the HTK mel scale: band m spans
    edges[m]..edges[m + 2] and peaks at edges[m + 1]."""
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    return mel_to_hz(np.linspace(hz_to_mel(FMIN), hz_to_mel(FMAX), N_MELS + 2))


def _mel_filterbank() -> np.ndarray:
    """(N_FFT//2+1, N_MELS) triangular filters on the HTK mel scale, area-normalised (Slaney style)."""
    edges = mel_band_edges_hz()
    bins = np.fft.rfftfreq(N_FFT, 1.0 / SAMPLE_RATE)
    fb = np.zeros((len(bins), N_MELS))
    for m in range(N_MELS):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        rising = (bins - lo) / (mid - lo)
        falling = (hi - bins) / (hi - mid)
        fb[:, m] = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (hi - lo))
    return fb.astype(np.float32)


MEL_FILTERS = _mel_filterbank()
HANN = np.hanning(WINDOW + 1)[:WINDOW].astype(np.float32)  # periodic Hann


def log_mel_frames(frames: np.ndarray) -> np.ndarray:
    """(T, WINDOW) float32 sample windows -> (T, N_MELS) log-mel energies."""
    spectrum = np.fft.rfft(frames * HANN, n=N_FFT, axis=-1)
    power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)
    return np.log(power @ MEL_FILTERS + LOG_FLOOR).astype(np.float32)


def log_mel(pcm: np.ndarray) -> np.ndarray:
    """Whole signal (float32, 16 kHz mono) -> (T, N_MELS), T = number of complete windows."""
    pcm = np.asarray(pcm, dtype=np.float32)
    if len(pcm) < WINDOW:
        return np.zeros((0, N_MELS), dtype=np.float32)
    count = 1 + (len(pcm) - WINDOW) // HOP
    windows = np.lib.stride_tricks.sliding_window_view(pcm, WINDOW)[::HOP][:count]
    return log_mel_frames(np.ascontiguousarray(windows))


class StreamingLogMel:
    """Feed any number of samples; get back the log-mel frames that became complete. Keeps only the last
    WINDOW - HOP samples between calls (a tiny ring buffer), so memory does not grow."""

    def __init__(self):
        self._tail = np.zeros(0, dtype=np.float32)
        self.frames_emitted = 0

    def push(self, pcm: np.ndarray) -> np.ndarray:
        buf = np.concatenate([self._tail, np.asarray(pcm, dtype=np.float32)])
        if len(buf) < WINDOW:
            self._tail = buf
            return np.zeros((0, N_MELS), dtype=np.float32)
        count = 1 + (len(buf) - WINDOW) // HOP
        windows = np.lib.stride_tricks.sliding_window_view(buf, WINDOW)[::HOP][:count]
        self._tail = buf[count * HOP:].copy()
        self.frames_emitted += count
        return log_mel_frames(np.ascontiguousarray(windows))
