"""Degradations are never silent and recording a file loses nothing (real `facebridge run` processes, real
sockets): a recorded file keeps every frame at its own rate, --max-frames counts frames sent, the summary says
how many frames lip-sync reached, an audio-only take covers its whole file, several Live Link Face targets each
get the stream, and a run is quiet (no backend essay, no gRPC internals). Counts only, never timing."""
from __future__ import annotations

import json
import subprocess

import cv2
import numpy as np
import soundfile as sf

from tests.helpers import facebridge_cmd, subprocess_env, udp_collector

OFF = ("--llf", "off", "--vmc", "off", "--monitor", "off")  # the monitor off: another bridge may hold its port


def _run(*args, home, timeout=300):
    proc = subprocess.run(facebridge_cmd("run", *args), env=subprocess_env(home), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


def _clip(path, frames: int) -> None:
    """The first `frames` frames of the bundled sample as an mp4 at 30 fps."""
    from bridge.sources.files import SAMPLE_PATH

    cap = cv2.VideoCapture(str(SAMPLE_PATH))
    writer = None
    for _ in range(frames):
        ok, image = cap.read()
        assert ok
        if writer is None:
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, image.shape[1::-1])
        writer.write(image)
    writer.release()
    cap.release()


def _takes_frames(take) -> list[dict]:
    return [json.loads(line) for line in (take / "frames.jsonl").read_text().splitlines()]


def test_recording_a_file_keeps_every_frame_without_fast(tmp_path, isolated_home):
    clip, take = tmp_path / "take.mp4", tmp_path / "take"
    _clip(clip, 45)
    proc = _run("--source", str(clip), "--record", str(take), *OFF, home=isolated_home)
    assert "every frame kept" in proc.stdout.splitlines()[0]
    assert "facebridge: 45 frames sent, face found in" in proc.stdout and ", 0 dropped, 0 bad" in proc.stdout
    assert [f["seq"] for f in _takes_frames(take)] == list(range(45))


def test_max_frames_counts_frames_sent(isolated_home):
    proc = _run("--source", "sample", "--max-frames", "20", "--quiet", *OFF, home=isolated_home)
    assert "facebridge: 20 frames sent" in proc.stdout  # at the file's rate: dropped frames do not count


def test_a_fused_run_says_how_many_frames_got_the_audio_mouth(tmp_path, isolated_home):
    take = tmp_path / "take"
    proc = _run("--source", "sample", "--audio", "sample", "--max-frames", "30", "--record", str(take), "--quiet",
                *OFF, home=isolated_home)
    assert "lip-sync: mouth from audio in 30 of the 30 frames described while the audio played (100%)" in proc.stdout
    frames = _takes_frames(take)
    assert len(frames) == 30 and all(f["visemes"] is not None for f in frames)


def test_an_audio_only_take_covers_its_whole_file(tmp_path, isolated_home):
    t = np.arange(2 * 16000) / 16000
    sf.write(tmp_path / "tone.wav", (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), 16000)
    take = tmp_path / "take"
    proc = _run("--audio-only", "--audio", str(tmp_path / "tone.wav"), "--record", str(take), "--quiet", *OFF,
                home=isolated_home)
    frames = _takes_frames(take)
    assert 0.95 * 120 <= len(frames) <= 120  # 60 Hz for the 2 s file (lip-sync's lookahead keeps the last 52 ms)
    assert "audio: the frames sent cover" in proc.stdout and "of the 2.00 s file (9" in proc.stdout
    assert "0 dropped" in proc.stdout


def test_several_live_link_face_targets_each_get_the_stream(isolated_home):
    with udp_collector() as (port_a, packets_a), udp_collector() as (port_b, packets_b):
        proc = _run("--source", "sample", "--max-frames", "10", "--fast", "--quiet", "--vmc", "off",
                    "--llf", f"127.0.0.1:{port_a}", "--llf", f"127.0.0.1:{port_b}", home=isolated_home)
        import time

        time.sleep(0.3)  # let the last datagrams land
    assert "10 frames sent" in proc.stdout
    assert len(packets_a) >= 9 and len(packets_b) >= 9  # loopback UDP: nothing lost, allow one


def test_a_run_is_quiet_by_default(isolated_home):
    # a first start on a machine times the CPU backends once and says so (one `engines:` line); this test is about
    # every start after it, whichever test ran first in this session
    _run("--source", "sample", "--max-frames", "1", "--fast", "--quiet", *OFF, home=isolated_home)
    proc = _run("--source", "sample", "--max-frames", "5", "--fast", "--grpc", "127.0.0.1:0", *OFF,
                home=isolated_home)
    start, models = proc.stdout.splitlines()[:2]  # two short lines: where frames go, then what tracks them
    assert start.startswith("facebridge: sample -> grpc 127.0.0.1:")  # the port the system chose
    backends = models.removeprefix("facebridge: ").split()[0].split("+")
    assert set(backends) <= {"litert", "openvino", "onnxruntime"}, models  # the backends, then precision
    for noise in ("engines:", "skipped tensorrt", "fork_posix", "Other threads are currently calling into gRPC",
                  "XNNPACK delegate"):
        assert noise not in proc.stderr, proc.stderr
    quiet = _run("--source", "sample", "--max-frames", "5", "--fast", "--quiet", *OFF, home=isolated_home)
    assert quiet.stderr.strip() == "" and quiet.stdout.startswith("facebridge: 5 frames sent")
