"""Take recorder and reader round trip, crash tolerance, and `facebridge replay` end to end over real UDP."""
from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from bridge.errors import SinkError, SourceError
from bridge.formats.livelinkface import CURVE_NAMES, decode_llf_packet
from bridge.formats.take import TakeReader
from bridge.frame import ARKIT_NAMES, FaceFrame
from bridge.sinks.recorder import TakeRecorder
from tests.helpers import default_sigint, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_frames(n: int, rate: float = 30.0, seed: int = 0) -> list[FaceFrame]:
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000.0
    frames = []
    for i in range(n):
        f = FaceFrame(seq=i, t_capture=t0 + i / rate, t_capture_mono=50.0 + i / rate, subject="Actor_1",
                      face_found=True, image_size=(640, 480), frame_rate=rate)
        f.blendshapes = rng.uniform(0, 1, 52).astype(np.float32)
        f.head_rotation = rng.uniform(-30, 30, 3).astype(np.float32)
        f.head_translation = rng.uniform(-5, 60, 3).astype(np.float32)
        f.eye_left = rng.uniform(-15, 15, 2).astype(np.float32)
        f.eye_right = rng.uniform(-15, 15, 2).astype(np.float32)
        f.emotion = rng.dirichlet(np.ones(7)).astype(np.float32)
        f.confidence = np.float32(rng.uniform())  # a numpy scalar, as stages leave them
        f.region_confidence = {"eyes": np.float32(0.9), "mouth": 0.8}
        f.latencies_ms = {"detect": 1.25, "landmarks": 2.5}
        frames.append(f)
    return frames


def record(directory, frames, **kw) -> TakeRecorder:
    rec = TakeRecorder(directory, **kw)
    for f in frames:
        rec.send(f)
    rec.close()
    return rec


def test_round_trip(tmp_path):
    frames = make_frames(50)
    rec = record(tmp_path / "take", frames)
    assert rec.stats()["frames"] == 50 and rec.errors == 0
    back = list(TakeReader(tmp_path / "take"))
    assert len(back) == 50
    for a, b in zip(frames, back):
        assert (b.seq, b.subject, b.face_found, b.image_size, b.frame_rate) == \
            (a.seq, a.subject, a.face_found, a.image_size, a.frame_rate)
        assert b.t_capture == a.t_capture and b.t_capture_mono == a.t_capture_mono
        for name in ("blendshapes", "head_rotation", "head_translation", "eye_left", "eye_right", "emotion"):
            assert np.allclose(getattr(b, name), getattr(a, name), atol=1e-6, rtol=0), name
        assert b.confidence == pytest.approx(float(a.confidence))
        assert b.region_confidence == pytest.approx({"eyes": 0.9, "mouth": 0.8})
        assert b.latencies_ms == a.latencies_ms


def test_metadata_and_live_link_face_csv(tmp_path):
    frames = make_frames(12, rate=60.0)
    record(tmp_path / "t", frames)
    meta = json.loads((tmp_path / "t" / "take.json").read_text())
    assert meta["complete"] is True and meta["frames"] == 12 and meta["subject"] == "Actor_1"
    assert meta["frame_rate"] == 60.0 and meta["started"].startswith("2023-11-14T22:13:20")
    assert meta["curve_names"] == list(CURVE_NAMES) and meta["blendshape_names"] == list(ARKIT_NAMES)
    assert meta["facebridge_version"] and meta["duration_s"] == pytest.approx(11 / 60, abs=1e-5)
    with open(tmp_path / "t" / "frames.csv", newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    assert header[:2] == ["Timecode", "BlendShapeCount"] and sorted(header[2:]) == sorted(CURVE_NAMES)
    assert header[16:20] == ["JawForward", "JawRight", "JawLeft", "JawOpen"]  # the app's CSV order
    assert len(rows) == 12 and all(len(r) == 63 and r[1] == "61" for r in rows)
    for frame, row in zip(frames, rows):
        fn, sub, num, _ = frame.timecode()
        h, m, s, ff = (fn // num) // 3600, (fn // num) // 60 % 60, (fn // num) % 60, fn % num
        assert re.fullmatch(r"\d\d:\d\d:\d\d:\d\d\.\d\d\d", row[0])
        assert row[0].startswith(f"{h:02d}:{m:02d}:{s:02d}:{ff:02d}.")
        values = dict(zip(header, row))
        assert float(values["JawOpen"]) == pytest.approx(frame.weight("jawOpen"), abs=1e-6)
        assert float(values["JawLeft"]) == pytest.approx(frame.weight("jawLeft"), abs=1e-6)
        assert float(values["HeadYaw"]) == pytest.approx(frame.head_rotation[0] / 180, abs=1e-6)


def test_never_overwrites_a_take(tmp_path):
    record(tmp_path / "t", make_frames(3))
    before = (tmp_path / "t" / "frames.jsonl").read_bytes()
    with pytest.raises(SinkError, match="already has files") as e:
        TakeRecorder(tmp_path / "t")
    assert "never overwritten" in str(e.value)
    assert (tmp_path / "t" / "frames.jsonl").read_bytes() == before
    (tmp_path / "file").write_text("x")
    with pytest.raises(SinkError, match="is a file"):
        TakeRecorder(tmp_path / "file")
    record(tmp_path / "empty_dir_is_fine", make_frames(1))  # directory made by the recorder


def test_crash_keeps_synced_frames_and_truncated_last_line_is_skipped(tmp_path, caplog):
    frames = make_frames(20)
    rec = TakeRecorder(tmp_path / "t", sync_interval_s=0.0)  # sync after every frame
    for f in frames:
        rec.send(f)
    # No close(): as if the process died now. Everything sent is already on disk.
    path = tmp_path / "t" / "frames.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # and the last line was half written
    os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))  # a minute ago: not being recorded now
    with caplog.at_level(logging.WARNING):
        reader = TakeReader(tmp_path / "t")
        back = list(reader)
    assert len(back) == 19 and reader.skipped == 1
    assert np.allclose(back[-1].blendshapes, frames[18].blendshapes, atol=1e-6)
    assert "not closed cleanly" in caplog.text and "cut short" in caplog.text
    rec.close()


def test_bad_line_in_the_middle_is_skipped(tmp_path, caplog):
    record(tmp_path / "t", make_frames(5))
    path = tmp_path / "t" / "frames.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    path.write_text("".join(lines))
    with caplog.at_level(logging.WARNING):
        back = list(TakeReader(tmp_path / "t"))
    assert [f.seq for f in back] == [0, 1, 3, 4] and "line 3" in caplog.text


def test_reader_errors(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        TakeReader(tmp_path / "missing")
    (tmp_path / "d").mkdir()
    with pytest.raises(SourceError, match="no frames.jsonl"):
        TakeReader(tmp_path / "d")


def facebridge(*args):
    return [sys.executable, "-m", "bridge.cli", *args]


def udp_receiver():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(10.0)
    return sock


def received(sock, count: int) -> list[bytes]:
    """`count` datagrams: the first within 120 s (the command starting up; a loaded machine took over 10 s once),
    each later one within the socket's 10 s."""
    timeout = sock.gettimeout()
    sock.settimeout(120.0)
    try:
        first = sock.recv(65536)
    finally:
        sock.settimeout(timeout)
    return [first] + [sock.recv(65536) for _ in range(count - 1)]


def test_replay_streams_the_take_at_its_timing(tmp_path):
    frames = make_frames(30, rate=30.0)  # 29 intervals of 1/30 s = 0.967 s
    record(tmp_path / "t", frames)
    llf, vmc = udp_receiver(), udp_receiver()
    port, vmc_port = llf.getsockname()[1], vmc.getsockname()[1]
    proc = subprocess.Popen(facebridge("replay", str(tmp_path / "t"), "--llf", f"127.0.0.1:{port}",
                                       "--vmc", f"127.0.0.1:{vmc_port}", "--speed", "2", "--original-timecode"),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    packets = [decode_llf_packet(p) for p in received(llf, 30)]
    out, err = proc.communicate(timeout=120)
    llf.close()
    vmc.settimeout(0.5)
    applies = 0
    try:
        while True:
            applies += b"/VMC/Ext/Blend/Apply" in vmc.recv(65536)
    except TimeoutError:
        vmc.close()
    assert proc.returncode == 0, err
    assert "replayed 30 frames" in out and "livelinkface: 30 sent, 0 failed, vmc: 30 sent, 0 failed" in out
    assert applies == 30
    assert [p["frame_number"] for p in packets] == [f.timecode()[0] for f in frames]  # all, in order
    assert all(p["subject"] == "Actor_1" for p in packets)
    assert np.allclose(packets[7]["values"][:52], frames[7].blendshapes, atol=1e-6)
    seconds = float(re.search(r"in ([0-9.]+) s;", out).group(1))  # the sender's own clock
    assert seconds >= 0.48, out  # paced: 29 intervals of 1/30 s at --speed 2 are 0.483 s (a busy machine only adds)


def test_replay_loops_until_interrupted(tmp_path):
    record(tmp_path / "t", make_frames(10, rate=60.0))
    llf = udp_receiver()
    port = llf.getsockname()[1]
    proc = subprocess.Popen(facebridge("replay", str(tmp_path / "t"), "--llf", f"127.0.0.1:{port}", "--vmc", "off",
                                       "--loop", "--speed", "4"),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    packets = [decode_llf_packet(p) for p in received(llf, 25)]  # more than two passes
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    llf.close()
    assert proc.returncode == 130 and "replay stopped" in out, err
    frame_numbers = [p["frame_number"] for p in packets]
    assert frame_numbers == sorted(frame_numbers)  # replay time stamps keep counting up across passes


def test_replay_rejects_bad_arguments(tmp_path, capsys):
    from bridge.cli import main

    assert main(["replay", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("\n") == 1
    record(tmp_path / "t", make_frames(2))
    assert main(["replay", str(tmp_path / "t"), "--llf", "off", "--vmc", "off"]) == 1
    assert "nothing to send to" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "t"), "--speed", "0"]) == 1
    assert "--speed 0.0 is not a positive number" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "t"), "--llf", "127.0.0.1:70000"]) == 1
    assert "port 70000 is out of range" in capsys.readouterr().err


def test_malformed_frame_is_skipped_and_files_stay_in_step(tmp_path):
    frames = make_frames(4)
    frames[1].blendshapes = np.zeros(7, dtype=np.float32)
    rec = record(tmp_path / "t", frames)
    assert (rec.frames, rec.errors) == (3, 1)
    assert [f.seq for f in TakeReader(tmp_path / "t")] == [0, 2, 3]
    assert len((tmp_path / "t" / "frames.csv").read_text().splitlines()) == 1 + 3
    assert json.loads((tmp_path / "t" / "take.json").read_text())["frames"] == 3


def test_a_killed_recorder_leaves_both_files_in_step_and_repair_makes_the_take_whole(tmp_path):
    """SIGKILL at a random moment: frames.csv never lags frames.jsonl by more than the frame being written, and
    `repair_take` rebuilds take.json and frames.csv from what frames.jsonl holds."""
    from bridge.formats.take import repair_take

    take = tmp_path / "t"
    script = f"""
import sys
sys.path.insert(0, {REPO!r})
from bridge.sinks.recorder import TakeRecorder
from tests.sinks.test_recorder import make_frames
rec = TakeRecorder({str(take)!r}, sync_interval_s=1.0)
frames = make_frames(50)
i = 0
while True:
    f = frames[i % 50]
    f.seq = i
    rec.send(f)
    i += 1
    if i == 200:
        print("going", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "going"
    # take.json is rewritten as frames land (each sync): a killed take says how many it held without a repair
    assert wait_until(lambda: _frames_in_metadata(take) >= 200, 30)
    proc.kill()
    proc.wait(30)
    lines = (take / "frames.jsonl").read_bytes().split(b"\n")
    rows = (take / "frames.csv").read_bytes().split(b"\n")[1:]
    assert abs(len(lines) - len(rows)) <= 1  # the kernel had both lines of every frame but the last
    killed = json.loads((take / "take.json").read_text())
    assert killed["complete"] is False and 200 <= killed["frames"] <= len(lines)
    assert killed["subject"] == "Actor_1" and len(list(TakeReader(take))) >= killed["frames"]
    report = repair_take(take)
    meta = json.loads((take / "take.json").read_text())
    whole = (take / "frames.jsonl").read_text().splitlines()
    assert meta["complete"] is True and meta["frames"] == report.frames == len(whole) >= 200
    assert len((take / "frames.csv").read_text().splitlines()) == 1 + len(whole)
    assert len(list(TakeReader(take))) == len(whole) and "repaired" in meta


def _frames_in_metadata(take) -> int:
    try:
        return json.loads((take / "take.json").read_text())["frames"]
    except (OSError, ValueError, KeyError):
        return -1


def test_a_take_that_got_no_frame_is_removed_and_one_killed_before_its_first_frame_is_reused(tmp_path):
    TakeRecorder(tmp_path / "none").close()
    assert not (tmp_path / "none").exists()  # nothing recorded, nothing left: the name stays free
    (tmp_path / "kept").mkdir()
    TakeRecorder(tmp_path / "kept").close()
    assert (tmp_path / "kept").is_dir() and not any((tmp_path / "kept").iterdir())  # a folder the user made stays
    take = tmp_path / "killed"
    script = f"""
import sys
sys.path.insert(0, {REPO!r})
from bridge.sinks.recorder import TakeRecorder
rec = TakeRecorder({str(take)!r})
print("open", flush=True)
sys.stdin.read()
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "open"
    proc.kill()
    proc.wait(30)
    assert sorted(p.name for p in take.iterdir()) == ["frames.csv", "frames.jsonl", "take.json"]
    record(take, make_frames(3))  # the empty take left by the kill is reused
    assert len(list(TakeReader(take))) == 3
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(SinkError, match="already has files"):
        TakeRecorder(tmp_path / "other")


def test_symbolic_links_and_long_names_as_record_paths_are_refused_in_one_line(tmp_path):
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    os.symlink(tmp_path / "loop_b", tmp_path / "loop_a")
    os.symlink(tmp_path / "loop_a", tmp_path / "loop_b")
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "to_real")
    cases = {"dangling": "which does not exist", "loop_a": "symbolic link loop", "x" * 300: "too long"}
    for name, message in cases.items():
        with pytest.raises(SinkError) as err:
            TakeRecorder(tmp_path / name)
        assert message in str(err.value) and "\n" not in str(err.value), name
    record(tmp_path / "to_real", make_frames(2))  # a link to a real, empty directory records through it
    assert len(list(TakeReader(tmp_path / "real"))) == 2


def test_nan_values_are_written_as_zero_and_counted_so_the_take_stays_json(tmp_path):
    frames = make_frames(3)
    frames[1].head_rotation = np.array([np.nan, 1.0, np.inf], np.float32)
    frames[1].confidence = float("nan")
    rec = record(tmp_path / "t", frames)
    assert rec.nonfinite == 3 and rec.frames == 3
    for line in (tmp_path / "t" / "frames.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} token in the take"))
    assert [f.head_rotation[0] for f in TakeReader(tmp_path / "t")][1] == 0.0


def test_a_disk_without_a_free_byte_still_gets_the_final_take_json(tmp_path):
    """On a tmpfs filled to the last byte the atomic rewrite has no room; the first take.json reserved it."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = f"""
import json, os, sys
sys.path.insert(0, {REPO!r})
from bridge.sinks.recorder import TakeRecorder
from tests.sinks.test_recorder import make_frames
rec = TakeRecorder({str(mnt / "t")!r}, sync_interval_s=3600)  # no periodic sync during the test: only the first
for f in make_frames(5):
    rec.send(f)
import time
deadline = time.monotonic() + 60
while rec.syncs < 1 and time.monotonic() < deadline:  # the first frame's sync (take.json rewritten) is done
    time.sleep(0.01)
filler = os.open({str(mnt / "filler")!r}, os.O_WRONLY | os.O_CREAT)
for size in (4096, 512, 1):  # take every byte that is left
    try:
        while True:
            os.write(filler, b"x" * size)
    except OSError:
        pass
for f in make_frames(5):
    rec.send(f)
rec.close()
meta = json.loads(open({str(mnt / "t" / "take.json")!r}).read())
size = os.path.getsize({str(mnt / "t" / "take.json")!r})
print(json.dumps([meta["complete"], meta["frames"], rec.lost, rec.report()[1], size]))
"""
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mnt}"],
                           capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode:
        pytest.skip("mounting a tmpfs needs a private mount namespace (unshare -m), not allowed here")
    (tmp_path / "fill.py").write_text(script)
    out = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mnt} && "
                          f"{sys.executable} {tmp_path / 'fill.py'}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from bridge.sinks.recorder import RESERVED_METADATA_BYTES

    # complete, the 5 frames that landed, 5 lost (the run fails), rewritten within the reserved bytes
    assert json.loads(out.stdout.splitlines()[-1]) == [True, 5, 5, True, RESERVED_METADATA_BYTES]
