"""Voice-activity detection with Silero VAD (MIT), the ONNX file shipped unchanged from the silero-vad wheel.

The model takes 512 new samples at 16 kHz (32 ms) after the previous call's last 64 samples, and a recurrent
state; it returns the probability that the chunk holds speech.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bridge.engines import create_session
from bridge.models import verify_file
from bridge.models.registry import read_manifest

AUDIO_DIR = Path(__file__).resolve().parent
CHUNK = 512
CONTEXT = 64


def _manifest(name: str) -> dict:
    return read_manifest(AUDIO_DIR / f"{name}.json", "restore it with `git checkout bridge/audio`")


def shipped_model(name: str) -> tuple[Path, dict]:
    """(verified path, manifest) of a model shipped in bridge/audio (`lipsync`, `silero_vad`)."""
    entry = _manifest(name)
    hint = ("rebuild it with `python tools/train_lipsync.py`" if name == "lipsync"
            else "restore it with `git checkout bridge/audio`")
    return verify_file(AUDIO_DIR / entry["file"], entry["sha256"], hint), entry


class SileroVad:
    """Streaming speech probability. `push(pcm)` returns one probability per completed 32 ms chunk."""

    def __init__(self, backend: str = "onnxruntime"):
        path, _ = shipped_model("silero_vad")
        self._session = create_session(path, backend=backend, threads=1)
        self._sr = np.array(16000, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def push(self, pcm: np.ndarray) -> list[float]:
        self._pending = np.concatenate([self._pending, np.asarray(pcm, dtype=np.float32)])
        probs = []
        while len(self._pending) >= CHUNK:
            chunk, self._pending = self._pending[:CHUNK], self._pending[CHUNK:]
            x = np.concatenate([self._context, chunk])[None, :]
            out = self._session.run({"input": x, "state": self._state, "sr": self._sr})
            self._state = out["stateN"]
            self._context = chunk[-CONTEXT:]
            probs.append(float(out["output"].reshape(-1)[0]))
        return probs
