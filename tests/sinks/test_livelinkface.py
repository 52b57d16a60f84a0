"""Live Link Face sink: real UDP sockets on 127.0.0.1, packets decoded field by field with struct."""
from __future__ import annotations

import logging
import math
import socket
import struct
import time

import numpy as np
import pytest

from bridge.errors import SinkError
from bridge.formats.livelinkface import CURVE_NAMES, decode_llf_packet, device_id_for
from bridge.frame import ARKIT_INDEX, FaceFrame
from bridge.sinks.livelinkface import LiveLinkFaceSink

MIDNIGHT = 1700006400.0  # 2023-11-15 00:00:00 UTC


@pytest.fixture
def receiver():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2.0)
    yield sock
    sock.close()


def address(sock) -> str:
    return f"127.0.0.1:{sock.getsockname()[1]}"


def random_frame(rng, seq=0, subject="FaceBridge") -> FaceFrame:
    f = FaceFrame(seq=seq, t_capture=MIDNIGHT + 3600 + seq / 60, t_capture_mono=seq / 60, subject=subject,
                  frame_rate=60, face_found=True)
    f.blendshapes = rng.uniform(-0.2, 1.2, 52).astype(np.float32)  # out of range on purpose: must be clipped
    f.head_rotation = rng.uniform(-200, 200, 3).astype(np.float32)
    f.eye_left = rng.uniform(-40, 40, 2).astype(np.float32)
    f.eye_right = rng.uniform(-40, 40, 2).astype(np.float32)
    return f


def parse_with_struct(data: bytes) -> dict:
    """An independent reading of the v6 layout, straight from protocols.md 1.2."""
    version = data[0]
    (n,) = struct.unpack_from(">i", data, 1)
    device = data[5:5 + n].decode()
    (m,) = struct.unpack_from(">i", data, 5 + n)
    subject = data[9 + n:9 + n + m].decode()
    frame_number, subframe, num, den = struct.unpack_from(">ifii", data, 9 + n + m)
    count = data[25 + n + m]
    values = struct.unpack_from(">61f", data, 26 + n + m)
    return dict(version=version, n=n, device=device, m=m, subject=subject, frame_number=frame_number,
                subframe=subframe, num=num, den=den, count=count, values=values)


def test_known_vector_exact_bytes(receiver):
    sink = LiveLinkFaceSink(address(receiver), device_id="1b4e28ba-2fa1-11d2-883f-0016d3cca427")
    frame = FaceFrame(seq=0, t_capture=MIDNIGHT + (2233801 + 0.5) / 60, t_capture_mono=0.0, subject="Subject_1",
                      frame_rate=60)
    frame.blendshapes[ARKIT_INDEX["eyeBlinkLeft"]] = 1.0
    frame.blendshapes[ARKIT_INDEX["jawOpen"]] = 0.75
    frame.head_rotation[:] = [-45.0, 0.0, 0.0]  # HeadYaw = yaw / 180 = -0.25
    frame.eye_right[:] = [0.0, -22.5]  # RightEyePitch = -pitch / 180 = 0.125
    sink.send(frame)
    data = receiver.recv(2048)
    sink.close()
    assert len(data) == 315 == 270 + 36 + 9
    assert data[:5] == bytes.fromhex("0600000024")
    assert data[5:41] == b"1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    assert data[41:54] == bytes.fromhex("00000009") + b"Subject_1"
    assert data[54:58] == bytes.fromhex("002215c9")  # frame 2233801
    assert abs(struct.unpack(">f", data[58:62])[0] - 0.5) < 1e-3
    assert data[62:70] == bytes.fromhex("0000003c00000001")  # rate 60/1
    assert data[70] == 0x3D  # count 61
    assert data[71:75] == bytes.fromhex("3f800000")  # EyeBlinkLeft 1.0
    assert data[71 + 17 * 4:75 + 17 * 4] == bytes.fromhex("3f400000")  # JawOpen 0.75
    assert data[71 + 52 * 4:75 + 52 * 4] == bytes.fromhex("be800000")  # HeadYaw -0.25
    assert data[71 + 59 * 4:75 + 59 * 4] == bytes.fromhex("3e000000")  # RightEyePitch 0.125
    others = set(range(61)) - {0, 17, 52, 59}
    assert all(data[71 + 4 * i:75 + 4 * i] == b"\0\0\0\0" for i in others)


def test_random_frames_decode_field_by_field(receiver):
    rng = np.random.default_rng(7)
    sink = LiveLinkFaceSink(address(receiver))
    subjects = ["FaceBridge", "Gesicht_ü", "actor 2"]
    for seq in range(30):
        frame = random_frame(rng, seq, subjects[seq % 3])
        sink.send(frame)
        data = receiver.recv(2048)
        p = parse_with_struct(data)
        name = frame.subject.encode()
        assert len(data) == 270 + p["n"] + p["m"]
        assert p["version"] == 6 and p["count"] == 61
        assert p["n"] == 36 and p["device"] == device_id_for(frame.subject)
        assert p["subject"] == frame.subject and p["m"] == len(name)
        assert (p["frame_number"], p["num"], p["den"]) == (frame.timecode()[0], 60, 1)
        assert 0.0 <= p["subframe"] < 1.0
        values = np.array(p["values"])
        assert np.all(np.isfinite(values))
        assert np.all((values[:52] >= 0) & (values[:52] <= 1))
        assert np.all((values[52:] >= -1) & (values[52:] <= 1))
        expected = np.clip(frame.blendshapes, 0, 1)
        assert np.allclose(values[:52], expected, atol=1e-6)
        yaw, pitch, roll = np.clip(frame.head_rotation / 180.0 * [1, -1, -1], -1, 1)
        assert np.allclose(values[52:55], [yaw, pitch, roll], atol=1e-6)
        assert values[57] == 0.0 and values[60] == 0.0  # eye roll
        decoded = decode_llf_packet(data)
        assert decoded["values"] == list(p["values"]) and decoded["subject"] == frame.subject
        assert decoded["curves"]["JawOpen"] == p["values"][17]
    assert sink.stats() == {"sent": 30, "errors": 0, "nonfinite_values": 0}
    sink.close()


def test_device_id_is_a_stable_uuid_per_subject():
    a, b = device_id_for("FaceBridge"), device_id_for("Other")
    assert len(a) == 36 and a == device_id_for("FaceBridge") and a != b


def test_sign_convention_and_mirror(receiver):
    frame = FaceFrame(seq=0, t_capture=MIDNIGHT, t_capture_mono=0.0)
    frame.head_rotation[:] = [30.0, 18.0, 9.0]  # own left, up, toward own left shoulder
    frame.eye_left[:] = [36.0, 9.0]
    for mirror, signs in ((False, (1, -1, -1)), (True, (-1, -1, 1))):
        sink = LiveLinkFaceSink(address(receiver), mirror=mirror)
        sink.send(frame)
        c = decode_llf_packet(receiver.recv(2048))["curves"]
        sink.close()
        assert [round(c[k], 6) for k in ("HeadYaw", "HeadPitch", "HeadRoll")] == \
            [round(s * v, 6) for s, v in zip(signs, (30 / 180, 18 / 180, 9 / 180))]
        assert round(c["LeftEyeYaw"], 6) == round(signs[0] * 0.2, 6) and round(c["LeftEyePitch"], 6) == -0.05


def test_nonfinite_values_are_sent_as_zero_and_counted(receiver):
    frame = FaceFrame(seq=0, t_capture=MIDNIGHT, t_capture_mono=0.0)
    frame.blendshapes[3] = np.nan
    frame.blendshapes[4] = 0.5
    frame.head_rotation[:] = [np.inf, 10.0, -np.inf]
    sink = LiveLinkFaceSink(address(receiver))
    sink.send(frame)
    values = parse_with_struct(receiver.recv(2048))["values"]
    assert values[3] == 0.0 and values[4] == 0.5 and values[52] == 0.0 and values[54] == 0.0
    assert math.isclose(values[53], -10 / 180, rel_tol=1e-6)
    assert sink.stats() == {"sent": 1, "errors": 0, "nonfinite_values": 3}
    sink.close()


def test_receiver_gone_mid_run_is_counted_and_the_stream_goes_on(caplog):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(2.0)
    port = receiver.getsockname()[1]
    sink = LiveLinkFaceSink(f"127.0.0.1:{port}")
    rng = np.random.default_rng(1)
    for seq in range(5):
        sink.send(random_frame(rng, seq))
        receiver.recv(2048)
    receiver.close()  # Unreal closed: the kernel answers with ICMP port unreachable
    # The kernel reports each ICMP "port unreachable" on a later send; it rate-limits ICMP machine-wide, so
    # keep sending (never raising) until a few failures were counted.
    seq, deadline = 5, time.monotonic() + 5.0
    with caplog.at_level(logging.WARNING):
        while sink.errors < 3 and time.monotonic() < deadline:
            sink.send(random_frame(rng, seq))
            seq += 1
            time.sleep(0.005)
    assert sink.errors >= 3 and sink.sent + sink.errors == seq
    assert "nothing listens" in caplog.text
    # The receiver comes back on the same port: the stream reaches it again.
    back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    back.bind(("127.0.0.1", port))
    back.settimeout(2.0)
    errors_before = sink.errors
    sink.send(random_frame(rng, seq))
    sink.send(random_frame(rng, seq + 1))
    got = decode_llf_packet(back.recv(2048))
    assert got["version"] == 6 and sink.errors <= errors_before + 1
    back.close()
    sink.close()


@pytest.mark.parametrize("bad, words", [
    ("127.0.0.1:99999", "out of range"),
    ("127.0.0.1:abc", "not a number"),
    ("no-such-host.invalid:11111", "cannot resolve"),
    ("", "empty address"),
    ("[::1:11111", "unclosed"),
])
def test_unusable_addresses_raise_one_line_sink_errors(bad, words):
    with pytest.raises(SinkError) as e:
        LiveLinkFaceSink(bad)
    assert words in str(e.value) and "\n" not in str(e.value) and e.value.fix


def test_default_port_and_subject_validation(receiver):
    sink = LiveLinkFaceSink("127.0.0.1")
    assert sink.address == ("127.0.0.1", 11111)
    sink.close()
    for bad in ("", "x" * 65, "bad\nname"):
        with pytest.raises(SinkError):
            LiveLinkFaceSink(address(receiver), subject=bad)
    # A frame with an unusable subject is counted, not raised, and the next frame goes out.
    sink = LiveLinkFaceSink(address(receiver))
    sink.send(FaceFrame(seq=0, t_capture=MIDNIGHT, t_capture_mono=0.0, subject="y" * 300))
    sink.send(FaceFrame(seq=1, t_capture=MIDNIGHT, t_capture_mono=0.0, subject="ok"))
    assert decode_llf_packet(receiver.recv(2048))["subject"] == "ok"
    assert sink.stats()["errors"] == 1 and sink.stats()["sent"] == 1
    sink.close()


@pytest.mark.parametrize("mangle, words", [
    (lambda d: d[:100], "at least"),
    (lambda d: b"\x05" + d[1:], "version 5"),
    (lambda d: d[:-245] + b"\x3c" + d[-244:], "count 60"),
    (lambda d: d + b"\0", "header says"),
])
def test_decoder_rejects_malformed_packets(receiver, mangle, words):
    sink = LiveLinkFaceSink(address(receiver))
    sink.send(FaceFrame(seq=0, t_capture=MIDNIGHT, t_capture_mono=0.0))
    data = receiver.recv(2048)
    sink.close()
    assert decode_llf_packet(data)["count"] == 61
    with pytest.raises(ValueError, match=words):
        decode_llf_packet(mangle(data))


def test_curve_names_are_unreal_names():
    assert CURVE_NAMES[0] == "EyeBlinkLeft" and CURVE_NAMES[17] == "JawOpen" and CURVE_NAMES[51] == "TongueOut"
    assert CURVE_NAMES[52:] == ("HeadYaw", "HeadPitch", "HeadRoll", "LeftEyeYaw", "LeftEyePitch", "LeftEyeRoll",
                                "RightEyeYaw", "RightEyePitch", "RightEyeRoll")


def test_listen_tool_prints_what_arrives(capsys):
    import threading

    from bridge.sinks.livelinkface import listen

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", listen(port, seconds=0.6)))
    thread.start()
    time.sleep(0.2)
    sink = LiveLinkFaceSink(f"127.0.0.1:{port}", subject="Probe")
    frame = FaceFrame(seq=0, t_capture=MIDNIGHT, t_capture_mono=0.0)
    frame.blendshapes[ARKIT_INDEX["jawOpen"]] = 0.5
    sink.send(frame)
    sink._sock.send(b"\x06garbage")
    thread.join(5)
    sink.close()
    out = capsys.readouterr().out
    assert result["rc"] == 0 and "subject 'Probe'" in out and "JawOpen 0.50" in out
    assert "1 packets, 1 malformed" in out


def test_malformed_frame_is_counted_not_raised(receiver):
    sink = LiveLinkFaceSink(address(receiver))
    broken = FaceFrame(seq=0, t_capture=MIDNIGHT, t_capture_mono=0.0)
    broken.blendshapes = np.zeros(10, dtype=np.float32)
    sink.send(broken)
    sink.send(FaceFrame(seq=1, t_capture=MIDNIGHT, t_capture_mono=0.0))
    assert decode_llf_packet(receiver.recv(2048))["count"] == 61
    assert (sink.sent, sink.errors) == (1, 1)
    sink.close()


def _listener(*args):
    import subprocess
    import sys

    from tests.helpers import subprocess_env

    return subprocess.run([sys.executable, "-m", "bridge.sinks.livelinkface", *args], env=subprocess_env(),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, expected", [(["99999"], "port 99999 is out of range"),
                                            (["abc"], "'abc' is not a port number")])
def test_the_listener_refuses_a_bad_port_in_one_line(args, expected):
    proc = _listener(*args)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("livelinkface: error:") and expected in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_the_listener_says_when_its_port_is_busy():
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    try:
        proc = _listener(str(busy.getsockname()[1]), "--seconds", "0.2")
    finally:
        busy.close()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "cannot listen on 127.0.0.1:" in proc.stderr and "close Unreal" in proc.stderr
