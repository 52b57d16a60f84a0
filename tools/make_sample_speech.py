"""Build the bundled sample soundtrack (bridge/data/sample_speech.wav): about ten seconds of speech with pauses,
spoken by espeak-ng (Debian package espeak-ng), resampled to 16 kHz mono 16-bit PCM.

`--audio sample` plays it, so lip-sync can be tried on any machine with no microphone. espeak-ng runs only here,
offline; its output audio is ours to ship.

    python tools/make_sample_speech.py
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

OUT = Path(__file__).resolve().parents[1] / "bridge" / "data" / "sample_speech.wav"
RATE = 16000
PAUSE_S = 0.8
SENTENCES = (
    "Hello from FaceBridge.",
    "This is the bundled sample voice.",
    "Watch the jaw open on the vowels, and the lips close for map, bob and pop.",
    "Then the mouth rests in the pauses.",
)


def speak(text: str, voice: str = "en-us", words_per_minute: int = 150) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(words_per_minute), "-w", str(wav), text], check=True)
        audio, rate = sf.read(wav, dtype="float32")
    return soxr.resample(audio, rate, RATE)


def main() -> None:
    if not shutil.which("espeak-ng"):
        raise SystemExit("espeak-ng is missing: apt-get install espeak-ng")
    silence = np.zeros(int(PAUSE_S * RATE), np.float32)
    parts = [silence]
    for sentence in SENTENCES:
        parts += [speak(sentence), silence]
    audio = np.concatenate(parts)
    audio *= 0.7 / max(1e-6, float(np.abs(audio).max()))
    tmp = OUT.with_suffix(".tmp.wav")
    sf.write(tmp, audio, RATE, subtype="PCM_16")
    tmp.replace(OUT)
    print(f"wrote {OUT}: {len(audio) / RATE:.1f} s at {RATE} Hz, "
          f"sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
