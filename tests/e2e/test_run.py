"""`facebridge run` end to end on the bundled sample, received by real sockets on 127.0.0.1."""
import math
import re
import struct
import subprocess
import threading

import numpy as np
import pytest
from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import ThreadingOSCUDPServer

from bridge.frame import ARKIT_NAMES
from tests.helpers import facebridge_cmd, free_udp_port, subprocess_env, udp_collector, wait_until

FRAMES = 45


def parse_llf(packet: bytes):
    """Independent decoder of a Live Link Face v6 packet (big-endian, length-prefixed strings)."""
    assert packet[0] == 6
    (n,) = struct.unpack_from(">i", packet, 1)
    device = packet[5:5 + n].decode()
    (m,) = struct.unpack_from(">i", packet, 5 + n)
    subject = packet[9 + n:9 + n + m].decode()
    off = 9 + n + m
    frame, sub, num, den = struct.unpack_from(">ifii", packet, off)
    count = packet[off + 16]
    values = struct.unpack_from(">61f", packet, off + 17)
    return device, subject, (frame, sub, num, den), count, np.array(values)


@pytest.fixture
def receivers():
    osc = {"names": [], "apply": 0}
    dispatcher = Dispatcher()
    dispatcher.map("/VMC/Ext/Blend/Val", lambda addr, name, value: osc["names"].append((name, value)))
    dispatcher.map("/VMC/Ext/Blend/Apply", lambda addr: osc.__setitem__("apply", osc["apply"] + 1))
    server = ThreadingOSCUDPServer(("127.0.0.1", 0), dispatcher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with udp_collector() as (llf_port, packets):
        yield {"llf_port": llf_port, "vmc_port": server.server_address[1], "packets": packets, "osc": osc}
    server.shutdown()
    server.server_close()


def test_run_streams_sample_to_live_link_face_and_vmc(receivers, isolated_home):
    cmd = facebridge_cmd("run", "--source", "sample", "--max-frames", str(FRAMES), "--fast", "--subject", "Astro",
                         "--llf", f"127.0.0.1:{receivers['llf_port']}", "--vmc", f"127.0.0.1:{receivers['vmc_port']}")
    proc = subprocess.run(cmd, env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{FRAMES} frames sent" in proc.stdout
    packets, osc = receivers["packets"], receivers["osc"]
    wait_until(lambda: len(packets) >= FRAMES and osc["apply"] >= FRAMES, timeout=10)  # the receivers drain
    assert len(packets) >= FRAMES * 0.9  # loopback UDP: nothing should be lost, allow a little
    decoded = [parse_llf(p) for p in packets]
    prev = None
    changes = 0
    for packet, (device, subject, (_frame, sub, num, den), count, values) in zip(packets, decoded):
        assert len(packet) == 270 + len(device.encode()) + len(subject.encode())
        assert subject == "Astro" and len(device) == 36
        assert count == 61 and num > 0 and den == 1 and 0 <= sub < 1
        assert all(math.isfinite(v) for v in values)
        assert values[:52].min() >= 0.0 and values[:52].max() <= 1.0
        assert np.abs(values[52:]).max() <= 1.0
        if prev is not None and not np.array_equal(prev, values):
            changes += 1
        prev = values
    assert changes >= len(decoded) * 0.8, "values should change from frame to frame (the head moves)"
    # head yaw must actually vary across the clip (the sample turns its head)
    yaws = np.array([d[4][52] for d in decoded])
    assert yaws.max() - yaws.min() > 0.02

    assert osc["apply"] >= FRAMES * 0.9
    names = [n for n, _ in osc["names"]]
    assert set(names) == set(ARKIT_NAMES)
    assert len(names) == 52 * osc["apply"]


def test_receiver_gone_is_counted_and_stream_goes_on(isolated_home):
    port = free_udp_port()  # nobody listens: every send after the first gets ICMP port unreachable
    cmd = facebridge_cmd("run", "--source", "sample", "--max-frames", "20", "--fast", "--quiet",
                         "--llf", f"127.0.0.1:{port}", "--vmc", "off")
    proc = subprocess.run(cmd, env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "20 frames sent" in proc.stdout
    assert "sends failed" in proc.stdout


@pytest.mark.parametrize("args, expected", [
    (["--source", "camera:7"], "camera 7 cannot be opened"),
    (["--source", "/nonexistent/clip.mp4"], "/nonexistent/clip.mp4 does not exist"),
    (["--llf", "localhost:99999"], "99999"),
    (["--max-frames", "0"], "--max-frames must be at least 1"),
])
def test_bad_input_gives_one_line_error(args, expected, isolated_home):
    defaults = [x for option, value in (("--source", "sample"), ("--max-frames", "2")) if option not in args
                for x in (option, value)]  # an option is given once: a repeated one is refused
    cmd = facebridge_cmd("run", *defaults, "--vmc", "off", *args)
    proc = subprocess.run(cmd, env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("facebridge: error:")]
    assert len(lines) == 1 and expected in lines[0], proc.stderr


def test_unreadable_video_and_empty_folder(tmp_path, isolated_home):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00not a video" * 100)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    for source, expected in ((bad, "cannot decode video"), (empty, "has no images")):
        proc = subprocess.run(facebridge_cmd("run", "--source", str(source), "--max-frames", "2", "--vmc", "off",
                                             "--monitor", "off"),  # another bridge may hold the monitor's port
                              env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1
        assert expected in proc.stderr and "\n" not in proc.stderr.strip(), proc.stderr


def test_sigterm_ends_the_run_cleanly_and_keeps_the_recording(tmp_path, isolated_home):
    """A service manager's SIGTERM stops the stream like Ctrl-C: sinks close, the take is complete."""
    import json
    import signal

    take = tmp_path / "take"
    proc = subprocess.Popen(facebridge_cmd("run", "--source", "sample", "--llf", "off", "--vmc", "off", "--quiet",
                                           "--record", str(take)),
                            env=subprocess_env(isolated_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    frames = take / "frames.jsonl"
    wait_until(lambda: frames.exists() and frames.read_bytes().count(b"\n") >= 5, timeout=60)  # being recorded
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    sent = re.search(r"(\d+) frames sent", out)
    lines = (take / "frames.jsonl").read_text().splitlines()
    assert len(lines) >= 5 and all(json.loads(line)["seq"] >= 0 for line in lines)  # every line whole
    meta = json.loads((take / "take.json").read_text())
    assert meta["subject"] == "FaceBridge" and meta["complete"] is True
    assert sent and meta["frames"] == len(lines) == int(sent.group(1)), (meta["frames"], len(lines), out[-300:])


def test_calibrate_stores_a_profile_that_run_applies(isolated_home, tmp_path):
    import json

    cal = subprocess.run(facebridge_cmd("calibrate", "--source", "sample", "--frames", "20", "--subject", "Neutral"),
                         env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    assert cal.returncode == 0, cal.stderr
    from bridge.calibration import profile_file_name

    assert "bundled sample clip, as asked" in cal.stderr  # calibrating from someone else's face is said
    profile = json.loads((isolated_home / "profiles" / profile_file_name("Neutral")).read_text())
    assert profile["frames"] == 20 and len(profile["neutral_blendshapes"]) == 52 and profile["identity"]
    take = tmp_path / "take"
    run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "20", "--fast", "--subject",
                                        "Neutral", "--llf", "off", "--vmc", "off", "--record", str(take)),
                         env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "calibration 'Neutral'" in run.stdout, run.stderr
    frames = [json.loads(line) for line in (take / "frames.jsonl").read_text().splitlines()]
    # the same frames the neutral was measured on now read close to neutral (the smile is subtracted)
    smile = np.mean([f["blendshapes"][ARKIT_NAMES.index("mouthSmileLeft")] for f in frames])
    assert smile < 0.2
    yaw0 = frames[0]["head_rotation"][0]
    assert abs(yaw0) < 10
    # every recorded frame carries its whole route: stamped before the recorder's thread took it, never after
    assert all("capture_to_send" in f["latencies_ms"] for f in frames)


def test_devices_lists_backends_with_reasons(isolated_home):
    proc = subprocess.run(facebridge_cmd("devices"), env=subprocess_env(isolated_home), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    backends = proc.stdout.split("Inference backends", 1)[1]
    assert "yes onnxruntime" in backends and "tensorrt " in backends  # every candidate, usable or not, with why
