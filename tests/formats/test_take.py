"""TakeReader trusts nothing in a take: hostile or hand-edited records are skipped with their line number and
reason, take.json of the wrong shape is ignored, capture-time jumps are clamped both ways; `facebridge replay`
and `export-usd` go on through all of it with no traceback, and `--repair` makes a killed take whole."""
from __future__ import annotations

import json
import logging
import subprocess

import pytest

from bridge.formats.livelinkface import decode_llf_packet
from bridge.formats.take import TakeReader, repair_take
from bridge.formats.take_check import MAX_GAP_S
from bridge.sinks.recorder import TakeRecorder
from tests.helpers import facebridge_cmd, subprocess_env, udp_collector
from tests.sinks.test_recorder import make_frames

RATE = 30.0


def recorded(directory, count=30):
    rec = TakeRecorder(directory)
    for frame in make_frames(count, rate=RATE):
        rec.send(frame)
    rec.close()
    return directory


def edit_line(directory, index: int, change) -> None:
    path = directory / "frames.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[index])
    result = change(record)
    lines[index] = result if isinstance(result, str) else json.dumps(result if result is not None else record)
    path.write_text("\n".join(lines) + "\n")


HOSTILE = {
    "string t_capture": (lambda r: r.update(t_capture="soon"), "'t_capture' is str"),
    "null t_capture": (lambda r: r.update(t_capture=None), "'t_capture' is missing"),
    "t_capture 1e300": (lambda r: r.update(t_capture=1e300), "outside"),
    "t_capture inf": (lambda r: '{"seq": 1, "t_capture": Infinity}', "'t_capture' is inf"),
    "NaN t_capture": (lambda r: json.dumps(r).replace(str(r["t_capture"]), "NaN"), "'t_capture' is nan"),
    "empty eye array": (lambda r: r.update(eye_left=[]), "'eye_left' has 0 values"),
    "frame_rate 1e12": (lambda r: r.update(frame_rate=1e12), "'frame_rate'"),
    "NaN blendshape": (lambda r: json.dumps(r).replace(str(r["blendshapes"][3]), "NaN", 1), "not a finite"),
    "a list": (lambda r: "[1, 2]", "JSON list"),
    "a number": (lambda r: "7", "JSON int"),
    "string in an array": (lambda r: r.update(head_rotation=[1, "2", 3]), "'head_rotation' is not a list"),
    "a dict for a list": (lambda r: r.update(blendshapes={"a": 1}), "'blendshapes' is not a list"),
    "subject a number": (lambda r: r.update(subject=5), "'subject' is int"),
    "bad morph": (lambda r: r.update(morph=[1]), "'morph' is not an object"),
    "bool face_found": (lambda r: r.update(face_found="yes"), "'face_found'"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_record_is_skipped_with_its_line_and_reason(tmp_path, caplog, name):
    change, reason = HOSTILE[name]
    take = recorded(tmp_path / "t", 10)
    edit_line(take, 0 if "NaN t_capture" in name else 4, change)  # NaN first timestamps too
    with caplog.at_level(logging.WARNING):
        reader = TakeReader(take)
        frames = list(reader)
    assert len(frames) == 9 and reader.skipped == 1
    line = 1 if "NaN t_capture" in name else 5
    assert f"line {line} is not a frame" in caplog.text and reason in caplog.text, caplog.text


@pytest.mark.parametrize("meta", ["[1, 2, 3]", "42", '"text"', '{"frame_rate": 1e12, "frames": "many"}',
                                  '{"complete": "no", "subject": 3}'])
def test_a_take_json_of_the_wrong_shape_is_ignored_not_fatal(tmp_path, caplog, meta):
    take = recorded(tmp_path / "t", 5)
    (take / "take.json").write_text(meta)
    with caplog.at_level(logging.WARNING):
        reader = TakeReader(take)
    assert "frame_rate" not in reader.metadata and "frames" not in reader.metadata
    assert len(list(reader)) == 5 and "take.json" in caplog.text


def test_capture_time_jumps_are_clamped_both_ways_and_move_nothing_else(tmp_path):
    take = recorded(tmp_path / "t", 30)
    edit_line(take, 10, lambda r: r.update(t_capture=r["t_capture"] + 86400))  # one stamp a day ahead
    edit_line(take, 20, lambda r: r.update(t_capture=r["t_capture"] - 3600))  # one an hour back
    reader = TakeReader(take)
    times = [f.t_capture for f in reader]
    steps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) == 30 and all(0 < s <= MAX_GAP_S for s in steps)
    assert reader.clamped == 4 and "clamped 4 capture-time jumps" in reader.summary()
    assert times[-1] - times[0] == pytest.approx(29 / RATE, abs=1e-6)  # the take keeps its length


def _hostile_take(directory):
    take = recorded(directory, 40)
    edit_line(take, 3, lambda r: r.update(t_capture=None))
    edit_line(take, 7, lambda r: r.update(eye_right=[]))
    edit_line(take, 12, lambda r: r.update(t_capture=r["t_capture"] + 86400))  # would sleep a day
    edit_line(take, 15, lambda r: json.dumps(r).replace(str(r["blendshapes"][0]), "NaN", 1))
    (take / "take.json").write_text("[]")
    return take


def test_replay_goes_through_a_hostile_take_without_sleeping_or_a_traceback(tmp_path):
    take = _hostile_take(tmp_path / "t")
    with udp_collector() as (port, packets):
        proc = subprocess.run(facebridge_cmd("replay", str(take), "--llf", f"127.0.0.1:{port}", "--vmc", "off",
                                             "--speed", "4"),
                              env=subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "replayed 37 frames" in proc.stdout and "skipped 3 damaged lines" in proc.stdout, proc.stdout
    assert "clamped 2 capture-time jumps" in proc.stdout
    assert "line 4 is not a frame" in proc.stderr and "line 16 is not a frame" in proc.stderr
    numbers = [decode_llf_packet(p)["frame_number"] for p in packets]
    assert numbers == sorted(numbers) and len(numbers) >= 30  # loopback UDP, a little loss allowed


def test_export_usd_goes_through_a_hostile_take_and_keeps_every_good_frame(tmp_path):
    pytest.importorskip("pxr", reason="usd-core not installed")
    from pxr import Usd

    take = _hostile_take(tmp_path / "t")
    out = tmp_path / "take.usda"
    proc = subprocess.run(facebridge_cmd("export-usd", str(take), str(out)), env=subprocess_env(tmp_path / "home"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "37 frames, 3 skipped, 2 capture-time jumps clamped" in proc.stdout, proc.stdout
    stage = Usd.Stage.Open(str(out))
    anim = stage.GetPrimAtPath("/Take/Actor_1/Skeleton/Animation")
    codes = anim.GetAttribute("blendShapeWeights").GetTimeSamples()
    assert len(codes) == 37 and codes == sorted(codes) and stage.GetEndTimeCode() < 60


def test_replay_repair_rebuilds_take_json_and_csv_of_a_killed_take(tmp_path):
    take = recorded(tmp_path / "t", 20)
    (take / "take.json").write_text(json.dumps({"frames": 0, "complete": False}))
    rows = (take / "frames.csv").read_text().splitlines()
    (take / "frames.csv").write_text("\n".join(rows[:9]) + "\n")  # lagging, as a kill left it
    with open(take / "frames.jsonl", "a") as f:
        f.write('{"seq": 20, "t_capt')  # half-written last line
    with udp_collector() as (port, _packets):
        proc = subprocess.run(facebridge_cmd("replay", str(take), "--repair", "--llf", f"127.0.0.1:{port}", "--vmc",
                                             "off", "--speed", "8"),
                              env=subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "repaired" in proc.stdout and "cut a half-written last line" in proc.stdout, proc.stdout
    meta = json.loads((take / "take.json").read_text())
    assert meta["frames"] == 20 and meta["complete"] is True
    assert len((take / "frames.csv").read_text().splitlines()) == 21
    assert (take / "frames.jsonl").read_text().endswith("\n")
    assert repair_take(take).truncated_bytes == 0  # a second repair finds nothing to cut


def _with_long_line(take, megabytes: int) -> None:
    """Insert one line of `megabytes` MiB (no newline inside) as the 3rd line of frames.jsonl."""
    path = take / "frames.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as f:
        f.writelines(lines[:2])
        f.write(b'{"seq": "' + b"x" * (megabytes << 20) + b'"}\n')
        f.writelines(lines[2:])


def test_a_line_longer_than_any_frame_is_skipped_without_being_read_whole(tmp_path, caplog):
    import tracemalloc

    from bridge.formats.take import MAX_LINE_BYTES

    take = recorded(tmp_path / "t", count=6)
    _with_long_line(take, 32)
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING):
            reader = TakeReader(take)
            seqs = [f.seq for f in reader]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seqs == list(range(6)) and reader.skipped == 1
    assert peak < 4 * MAX_LINE_BYTES, f"reading held {peak >> 20} MiB"  # a 32 MiB line would hold 32+
    assert any(f"line 3 is longer than {MAX_LINE_BYTES // 1024} KiB" in r.getMessage() for r in caplog.records)


def _max_rss_mb(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """The command's peak memory (MiB), measured by a Python parent that runs nothing else."""
    probe = ("import json, resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, "
             "text=True); print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode, "
             "p.stdout, p.stderr]))")
    out = subprocess.run([*facebridge_cmd()[:1], "-c", probe, *cmd], capture_output=True, text=True, timeout=300,
                         env=subprocess_env())
    rss_kb, code, stdout, stderr = json.loads(out.stdout)
    return rss_kb / 1024, subprocess.CompletedProcess(cmd, code, stdout, stderr)


def test_export_usd_and_replay_of_a_take_with_a_huge_line_and_a_hostile_subject_stay_small_and_escape_it(tmp_path):
    plain, hostile = recorded(tmp_path / "plain", count=6), tmp_path / "hostile"
    rec = TakeRecorder(hostile)
    for frame in make_frames(6, rate=RATE):
        frame.subject = "Ev\x1b[31mil\nNext\x00Line"
        rec.send(frame)
    rec.close()
    _with_long_line(hostile, 96)
    base, _ = _max_rss_mb(facebridge_cmd("export-usd", str(plain), str(tmp_path / "plain.usda")))
    rss, done = _max_rss_mb(facebridge_cmd("export-usd", str(hostile), str(tmp_path / "hostile.usda")))
    assert done.returncode == 0, done.stderr
    assert rss < base + 48, f"export-usd of a take with a 96 MiB line: {rss:.0f} MiB, {base:.0f} MiB without it"
    assert "subjects Ev\\x1b[31mil\\nNext\\x00Line" in done.stdout
    with udp_collector() as (port, _packets):
        replayed = subprocess.run(facebridge_cmd("replay", str(hostile), "--llf", f"127.0.0.1:{port}", "--vmc", "off",
                                                 "--speed", "10"), capture_output=True, text=True, timeout=120,
                                  env=subprocess_env())
    assert replayed.returncode == 0, replayed.stderr
    for output in (done.stdout, done.stderr, replayed.stdout, replayed.stderr):
        assert not any(ch in output for ch in "\x1b\x00"), output
        assert "Ev\x1b" not in output and "il\nNext" not in output
