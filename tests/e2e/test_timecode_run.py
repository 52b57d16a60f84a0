"""`facebridge run --timecode-source ltc` on LTC audio generated in the test (25 fps, twelve hours away from the
system clock): the take's CSV and take.json, the Live Link Face packets and the USD export carry the LTC's time."""
from __future__ import annotations

import json
import subprocess
import time

import numpy as np
import pytest

from bridge.timecode import frames_of
from tests.audio.ltc_signal import ltc_audio
from tests.e2e.test_run import parse_llf
from tests.helpers import facebridge_cmd, subprocess_env, udp_collector, wait_until

FRAMES = 60
SECONDS = 40  # longer than the run: the models load while the LTC plays


def test_a_take_recorded_with_ltc_carries_the_ltc_timecode(tmp_path, isolated_home):
    soundfile = pytest.importorskip("soundfile")
    hour = (time.gmtime().tm_hour + 12) % 24  # far from the system clock's time of day
    wav = tmp_path / "ltc.wav"
    soundfile.write(str(wav), ltc_audio((hour, 0, 0, 0), 25, SECONDS), 48000)
    take = tmp_path / "take"
    with udp_collector() as (port, packets):
        proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", str(FRAMES), "--quiet",
                                             "--timecode-source", "ltc", "--ltc-input", str(wav),
                                             "--timecode-rate", "25", "--record", str(take),
                                             "--llf", f"127.0.0.1:{port}", "--vmc", "off", "--monitor", "off"),
                              env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        wait_until(lambda: len(packets) >= FRAMES, timeout=10)
        llf = [parse_llf(p)[2] for p in packets]

    start, end = frames_of(f"{hour:02d}:00:00:00", 25, 1), frames_of(f"{hour:02d}:00:{SECONDS}:00", 25, 1)
    rows = (take / "frames.csv").read_text().splitlines()[1:]
    labels = [row.split(",")[0] for row in rows]
    numbers = [frames_of(label.split(".")[0], 25, 1) for label in labels]
    assert len(labels) == FRAMES and all(start <= n < end for n in numbers), labels[:3]
    assert all(0 <= b - a <= 2 for a, b in zip(numbers, numbers[1:])), "the timecode runs on at 25 fps"
    meta = json.loads((take / "take.json").read_text())
    assert meta["frame_rate"] == 25.0 and meta["start_timecode"] == labels[0]
    # Live Link Face packets: rate 25/1, frame numbers of the LTC's time of day
    assert all((num, den) == (25, 1) and start <= frame < end for frame, _, num, den in llf)
    assert abs(np.median([f for f, *_ in llf]) - np.median(numbers)) < 25

    pytest.importorskip("pxr", reason="usd-core not installed")
    from pxr import Usd

    usd = tmp_path / "take.usda"
    out = subprocess.run(facebridge_cmd("export-usd", str(take), str(usd)), env=subprocess_env(isolated_home),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stage = Usd.Stage.Open(str(usd))
    layer = stage.GetRootLayer()
    assert layer.customLayerData["facebridge:startTimecode"] == labels[0]
    assert layer.customLayerData["facebridge:frameRate"] == 25.0


def test_ltc_missing_on_the_input_is_one_line(tmp_path, isolated_home):
    soundfile = pytest.importorskip("soundfile")
    silence = tmp_path / "silence.wav"
    soundfile.write(str(silence), np.zeros(48000 * 12, np.float32), 48000)
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "5", "--timecode-source", "ltc",
                                         "--ltc-input", str(silence), "--timecode-rate", "25", "--llf", "off",
                                         "--vmc", "off", "--monitor", "off"),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("facebridge: error:")]
    assert len(lines) == 1 and "no LTC found" in lines[0], proc.stderr


@pytest.mark.parametrize("args, expected", [
    (["--timecode-rate", "31"], "is not a timecode rate"),
    (["--timecode-source", "ltc"], "needs --timecode-rate"),
])
def test_bad_timecode_options_are_one_line(isolated_home, args, expected):
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "2", "--llf", "off", "--vmc",
                                         "off", "--monitor", "off", *args),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("facebridge: error:")]
    assert len(lines) == 1 and expected in lines[0], proc.stderr


def ntp_server(ahead_s: float):
    """A one-thread SNTP server on 127.0.0.1 (RFC 4330 reply layout) whose clock runs `ahead_s` ahead."""
    import socket
    import struct
    import threading

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def ntp(t: float) -> tuple[int, int]:
        t += 2208988800  # 1900 epoch
        return int(t), int((t % 1) * 2**32)

    def serve():
        while not stop.is_set():
            try:
                request, client = sock.recvfrom(512)
            except TimeoutError:
                continue
            now = ntp(time.time() + ahead_s)
            reply = struct.pack("!BBbb11I", (0 << 6) | (3 << 3) | 4, 2, 6, -20, 0, 0, 0, *now,
                                *struct.unpack("!II", request[40:48]), *now, *now)
            sock.sendto(reply, client)

    threading.Thread(target=serve, daemon=True).start()
    return sock, stop


def test_ntp_time_reaches_the_take(tmp_path, isolated_home):
    sock, stop = ntp_server(3 * 3600.0)
    take = tmp_path / "take"
    try:
        proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "10", "--fast", "--quiet",
                                             "--timecode-source", "ntp", "--ntp-server",
                                             f"127.0.0.1:{sock.getsockname()[1]}", "--timecode-rate", "29.97",
                                             "--record", str(take), "--llf", "off", "--vmc", "off", "--monitor",
                                             "off"),
                              env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((take / "take.json").read_text())
    label = meta["start_timecode"]
    assert ";" in label, "29.97 is drop-frame"
    seconds = frames_of(label.split(".")[0], 30000, 1001) * 1001 / 30000
    expected = (meta["started_unix"]) % 86400
    assert abs(seconds - expected) < 1.0
    assert abs(((meta["started_unix"] - time.time()) % 86400) - 3 * 3600) < 120, "three hours ahead of this clock"
