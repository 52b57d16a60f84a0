"""`facebridge run --audio-only --audio speech.wav --llf ...` end to end: a real subprocess, a real UDP socket
on 127.0.0.1, Live Link Face packets decoded independently. JawOpen must move with the words and rest in
the silences."""
from __future__ import annotations

import json
import struct
import subprocess

import numpy as np
import pytest
import soundfile as sf

from bridge.frame import ARKIT_INDEX
from tests.helpers import espeak_or_skip, facebridge_cmd, subprocess_env, udp_collector, wait_until

JAW_WIRE_INDEX = 17
JAW_ARKIT_INDEX = ARKIT_INDEX["jawOpen"]
SILENCE_S = (1.0, 1.5, 1.0)  # before, between and after the two phrases


def _jaw(packet: bytes) -> float:
    assert packet[0] == 6
    (n,) = struct.unpack_from(">i", packet, 1)
    (m,) = struct.unpack_from(">i", packet, 5 + n)
    off = 9 + n + m + 16
    assert packet[off] == 61
    return struct.unpack_from(">61f", packet, off + 1)[JAW_WIRE_INDEX]


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory):
    gen, espeak = espeak_or_skip()
    phrases = []
    for text in ("Good morning, how are you?", "Please open the window."):
        pcm, _ = gen.render(espeak, gen.UtteranceSpec(text, "en-us", "f3", 170, 50, 50, 0), None, (0.0, 0.0))
        phrases.append(pcm)
    silence = [np.zeros(int(s * 16000), np.float32) for s in SILENCE_S]
    pcm = np.concatenate([silence[0], phrases[0], silence[1], phrases[1], silence[2]])
    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    sf.write(path, pcm * 0.5, 16000, subtype="PCM_16")
    return path, [len(p) / 16000 for p in phrases]


def _take_frames(take) -> list[dict]:
    path = take / "frames.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _runs(active: np.ndarray) -> list[tuple[bool, int]]:
    out = []
    for value in active:
        if out and out[-1][0] == value:
            out[-1] = (value, out[-1][1] + 1)
        else:
            out.append((bool(value), 1))
    return out


def test_audio_only_run_sends_llf_jaw_that_follows_the_words(speech_wav, tmp_path):
    """--fast follows the file in step (a tick every 1/60 s of audio, none dropped), so the jaw is the same on an
    idle or a busy machine; the recorded take holds every tick, the Live Link Face packets carry the same jaw."""
    path, phrase_s = speech_wav
    take = tmp_path / "take"
    with udp_collector() as (port, packets):
        proc = subprocess.run(facebridge_cmd("run", "--audio-only", "--audio", str(path), "--fast", "--record",
                                             str(take), "--llf", f"127.0.0.1:{port}", "--vmc", "off", "--quiet"),
                              env=subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=240)
        wait_until(lambda: len(packets) >= len(_take_frames(take)), timeout=5)
    assert proc.returncode == 0, proc.stderr
    frames = _take_frames(take)
    jaw = np.array([f["blendshapes"][JAW_ARKIT_INDEX] for f in frames])
    total_s = sum(SILENCE_S) + sum(phrase_s)
    # every tick of the file, up to its last result (the final 52.5 ms of lookahead and half a window have none)
    assert total_s * 60 - 6 <= len(jaw) <= total_s * 60 + 1 and f"{len(jaw)} frames sent" in proc.stdout
    # loopback UDP may drop datagrams sent in a burst, but every one that arrives carries a recorded jaw
    wire = [_jaw(p) for p in packets]
    assert wire and all(np.abs(jaw - value).min() < 1e-5 for value in wire)
    # smooth over 100 ms, then the jaw must show exactly two speaking stretches separated by a long rest
    smooth = np.convolve(jaw, np.ones(6) / 6, mode="same")
    active = smooth > 0.08
    runs = _runs(active)
    start = 0
    for is_active, n in runs:  # pauses shorter than 0.3 s (commas, stops) belong to the phrase
        if not is_active and n < 18 and 0 < start and start + n < len(active):
            active[start:start + n] = True
        start += n
    runs = _runs(active)
    speaking = [n for is_active, n in runs if is_active and n >= 12]
    assert len(speaking) == 2, runs
    assert jaw.max() > 0.3
    first_on = int(np.argmax(active))
    assert jaw[:first_on - 6].max() < 0.05 and first_on > 0.7 * 60  # closed in the leading second
    rests = [n for is_active, n in runs[1:-1] if not is_active]
    assert max(rests) >= 1.0 * 60  # the 1.5 s pause between phrases
    assert jaw[-30:].max() < 0.05  # closed at the end


@pytest.mark.parametrize("args,message", [
    (["--audio-only"], "--audio-only does nothing without --audio"),
    (["--audio-only", "--audio", "missing.wav"], "does not exist"),
    (["--audio-only", "--audio", "mic:twelve"], "is not a number"),
])
def test_bad_audio_options_give_one_line_errors(args, message, tmp_path):
    # the monitor off: on a shared machine another bridge may hold its port, and the fallback warns
    proc = subprocess.run(facebridge_cmd("run", *args, "--llf", "off", "--vmc", "off", "--monitor", "off", "--quiet"),
                          env=subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_camera_and_audio_are_fused_in_recorded_frames(speech_wav, tmp_path):
    """--source sample (face visible) + --audio FILE with --fast: the audio follows the video frames in step, so
    every frame carries visemes and the lip-sync latency, on an idle or a busy machine, and the face pipeline
    still runs (head pose from the camera)."""
    path, _ = speech_wav
    take = tmp_path / "take"
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--audio", str(path), "--max-frames", "90",
                                         "--fast", "--record", str(take), "--llf", "off", "--vmc", "off", "--quiet"),
                          env=subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    frames = _take_frames(take)
    assert len(frames) == 90  # a file read with --fast loses no frame
    assert all(f["visemes"] is not None and len(f["visemes"]) == 15 and "lipsync" in f["latencies_ms"]
               for f in frames)  # the speech file is longer than the 3 s of video
    assert any(f["face_found"] for f in frames)
