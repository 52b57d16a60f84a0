"""Audio inputs and the log-mel front end: real files through soundfile/soxr, real PortAudio queries."""
from __future__ import annotations

import ctypes.util
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from bridge.audio import features
from bridge.audio.sources import FileSource, list_input_devices, load_audio_file, open_audio
from bridge.errors import SourceError
from bridge.formats.livelinkface import decode_llf_packet
from tests.helpers import facebridge_cmd, subprocess_env


def _tone(freq: float, seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _peak_hz(pcm: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    return float(np.fft.rfftfreq(len(pcm), 1 / 16000)[spectrum.argmax()])


def test_stereo_44k_file_becomes_16k_mono_with_same_pitch_and_length(tmp_path):
    left = _tone(440, 1.0, 44100)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, left], axis=1), 44100, subtype="PCM_16")
    pcm = load_audio_file(path)
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    assert abs(len(pcm) - 16000) <= 2
    assert abs(_peak_hz(pcm) - 440) < 3
    assert 0.3 < np.abs(pcm).max() <= 0.51


def test_flac_and_8k_files_are_read(tmp_path):
    sf.write(tmp_path / "a.flac", _tone(300, 0.5, 48000), 48000)
    sf.write(tmp_path / "b.wav", _tone(300, 0.5, 8000), 8000)
    for name in ("a.flac", "b.wav"):
        pcm = load_audio_file(tmp_path / name)
        assert abs(len(pcm) - 8000) <= 2 and abs(_peak_hz(pcm) - 300) < 4


@pytest.mark.parametrize("case", ["missing", "folder", "corrupt", "text", "empty", "rate", "channels"])
def test_bad_audio_files_give_one_line_errors(tmp_path, case):
    path = tmp_path / "bad.wav"
    expect = {"missing": "does not exist", "folder": "is a folder", "corrupt": "cannot read audio file",
              "text": "cannot read audio file", "empty": "contains no samples",
              "rate": "unexpected sample rate of 4000 Hz", "channels": "has 40 channels"}[case]
    if case == "folder":
        path = tmp_path
    elif case == "corrupt":
        path.write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt " + bytes(range(200)))
    elif case == "text":
        path = tmp_path / "notes.mp4"
        path.write_text("this is not audio")
    elif case == "empty":
        sf.write(path, np.zeros(0, np.float32), 16000)
    elif case == "rate":
        sf.write(path, _tone(200, 0.2, 4000), 4000)
    elif case == "channels":
        sf.write(path, np.zeros((1600, 40), np.float32), 16000)
    with pytest.raises(SourceError) as err:
        open_audio(str(path))
    message = str(err.value)
    assert expect in message and "\n" not in message
    assert message.count(".") >= 1 and len(message.split(". ", 1)) == 2  # problem. fix.


def test_file_source_plays_at_real_time_with_consistent_capture_times(tmp_path):
    path = tmp_path / "tone.wav"
    sf.write(path, _tone(200, 0.3, 16000), 16000)
    source = open_audio(str(path))
    assert isinstance(source, FileSource)
    started = time.perf_counter()
    chunks = list(source)
    elapsed = time.perf_counter() - started
    assert elapsed >= 0.3  # real time, not instant (each chunk waits for its last sample; a busy machine only adds)
    assert sum(len(c.pcm) for c in chunks) == 4800
    # 10 ms chunks; a reader that fell behind (a busy machine) gets all that is due in one larger chunk, as a
    # microphone's buffer holds it: capture times follow the samples either way
    assert all(len(c.pcm) >= 160 for c in chunks[:-1]) and len(chunks[0].pcm) == 160
    steps = np.diff([c.t_capture_mono for c in chunks])
    assert np.allclose(steps, [len(c.pcm) / 16000 for c in chunks[:-1]], atol=1e-6)
    assert np.allclose(np.diff([c.t_capture for c in chunks]), steps, atol=1e-5)
    # each chunk arrives only after its last sample was "captured"
    assert chunks[-1].t_capture_mono + chunks[-1].duration <= time.perf_counter()


class _CountedWaits(threading.Event):
    """A FileSource's close event that records how long it was asked to wait (its pacing)."""

    def __init__(self):
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return super().wait(timeout)


def test_file_source_fast_mode_and_close(tmp_path):
    path = tmp_path / "tone.wav"
    sf.write(path, _tone(200, 2.0, 16000), 16000)
    fast = FileSource(path, realtime=False)
    fast._closed = _CountedWaits()
    assert sum(len(c.pcm) for c in fast) == 32000
    assert fast._closed.waits == []  # never paced
    paced = FileSource(path, realtime=True)
    got = []
    for chunk in paced:
        got.append(chunk)
        if len(got) == 3:
            paced.close()
    assert len(got) == 3


def test_microphone_errors_are_clear():
    with pytest.raises(SourceError, match="is not a number"):
        open_audio("mic:left")
    with pytest.raises(SourceError) as err:
        open_audio("mic:9999")  # no machine has that many devices
    assert "facebridge devices" in str(err.value) or "PortAudio" in str(err.value)
    devices, reason = list_input_devices(with_reason=True)
    if not devices:
        assert reason  # says why (no PortAudio, or no input device)
        with pytest.raises(SourceError) as err:
            open_audio("mic")
        assert "microphone" in str(err.value) or "PortAudio" in str(err.value)
    else:
        assert all({"index", "name", "channels", "samplerate"} <= set(d) for d in devices)


def test_streaming_log_mel_equals_whole_signal():
    rng = np.random.default_rng(0)
    pcm = rng.standard_normal(16000).astype(np.float32) * 0.1
    whole = features.log_mel(pcm)
    stream = features.StreamingLogMel()
    parts, pos = [], 0
    while pos < len(pcm):
        n = int(rng.integers(1, 700))
        parts.append(stream.push(pcm[pos:pos + n]))
        pos += n
    streamed = np.concatenate(parts)
    assert streamed.shape == whole.shape == (1 + (16000 - 400) // 160, 40)
    assert np.allclose(streamed, whole, atol=1e-4)


def test_log_mel_puts_a_tone_in_the_right_band():
    mel = features.log_mel(_tone(1000, 0.5, 16000))
    band = int(np.median(mel.argmax(axis=1)))
    centre_hz = 700 * (10 ** (np.linspace(2595 * np.log10(1 + 50 / 700), 2595 * np.log10(1 + 7600 / 700), 42)
                              / 2595) - 1)[band + 1]
    assert 850 < centre_hz < 1180
    assert features.frame_center_s(0) == pytest.approx(0.0125)


ALSA_CONF = Path("/usr/share/alsa/alsa.conf")
PORTAUDIO = ctypes.util.find_library("portaudio")


@pytest.mark.skipif(PORTAUDIO is None or not ALSA_CONF.exists(),
                    reason="PortAudio with ALSA not installed (Debian libportaudio2; `make test` installs it)")
def test_microphone_path_through_real_portaudio(tmp_path):
    """A real PortAudio ALSA input (the ALSA 'null' plugin as the capture device; PortAudio reads its config at
    start-up, so this runs in a subprocess): `facebridge devices` lists it and an audio-only run from 'mic'
    streams frames with a closed mouth, even though this device delivers garbage far faster than real time."""
    conf = tmp_path / "asound.conf"
    conf.write_text(f"<{ALSA_CONF}>\npcm.fbnull {{\n  type null\n  hint {{ show on description \"test input\" }}\n}}\n")
    env = subprocess_env(tmp_path / "home")
    env["ALSA_CONFIG_PATH"] = str(conf)
    listing = subprocess.run(facebridge_cmd("devices"), env=env, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0 and "mic:0" in listing.stdout and "fbnull" in listing.stdout, listing.stdout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(10)
        proc = subprocess.run(facebridge_cmd("run", "--audio-only", "--audio", "mic", "--max-frames", "30", "--llf",
                                             f"127.0.0.1:{sock.getsockname()[1]}", "--vmc", "off", "--quiet"),
                              env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        # a live source drops the oldest frame when the machine is busy, and a busy output skips one it could not
        # send in time (both counted and said): expect what the run says this output sent
        skipped = re.search(r"livelinkface: (\d+) frames skipped", proc.stdout)
        sent = int(re.search(r"(\d+) frames sent", proc.stdout).group(1)) - (int(skipped.group(1)) if skipped else 0)
        sock.settimeout(1.0)
        packets = []
        try:
            while len(packets) < sent:
                packets.append(sock.recv(65536))
        except TimeoutError:
            pass
    assert sent >= 1 and len(packets) == sent, proc.stdout
    assert all(p[0] == 6 for p in packets)  # Live Link Face v6

    jaw = [decode_llf_packet(p)["values"][17] for p in packets]  # JawOpen on the wire
    assert max(jaw) < 0.05


def test_bundled_sample_voice_plays_as_an_audio_source():
    """`--audio sample`: the bundled soundtrack (tools/make_sample_speech.py) is 16 kHz speech with pauses."""
    from bridge.audio.sources import open_audio

    src = open_audio("sample", realtime=False)
    pcm = np.concatenate([c.pcm for c in src])
    src.close()
    assert 10.0 < len(pcm) / 16000 < 30.0
    frames = pcm[: len(pcm) // 1600 * 1600].reshape(-1, 1600)  # 100 ms windows
    rms = np.sqrt((frames ** 2).mean(1))
    assert rms.max() > 0.05 and (rms < 1e-3).sum() >= 5, "speech with silent pauses"
