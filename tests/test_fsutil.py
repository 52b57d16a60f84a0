"""Atomic writes leave no temporary files, give new files the mode the umask gives, and a temporary file a
killed writer left is removed by the next write to the same path."""
import json
import os
import signal
import subprocess
import sys

import pytest

from bridge.fsutil import atomic_write_json, current_umask, printable, remove_stale_temporaries
from tests.helpers import ROOT


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "sub" / "results.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]


@pytest.mark.parametrize("umask, mode", [(0o077, 0o600), (0o022, 0o644), (0o002, 0o664)])
def test_new_files_get_what_the_umask_gives(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        assert current_umask() == umask
        path = atomic_write_json(tmp_path / "take.json", {"frames": 1})
        with open(tmp_path / "plain", "w"):
            pass
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode == (tmp_path / "plain").stat().st_mode & 0o777


def test_takes_profiles_and_usd_under_umask_077_are_private(tmp_path):
    """Everything a run writes under umask 077 is 0600, as the frame files always were."""
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
os.umask(0o077)
os.environ["FACEBRIDGE_HOME"] = {str(tmp_path / "home")!r}
from bridge.calibration import CalibrationProfile
from bridge.sinks.recorder import TakeRecorder
from tests.helpers import face_frame
rec = TakeRecorder({str(tmp_path / "take")!r})
for i in range(3):
    rec.send(face_frame(i))
rec.close()
CalibrationProfile.from_frames("Ann", [face_frame(i) for i in range(10)]).save()
try:
    from bridge.usd_export import export_take
    export_take({str(tmp_path / "take")!r}, {str(tmp_path / "take.usda")!r})
except Exception as e:
    print("no usd:", e)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 4
    for path in written:
        assert path.stat().st_mode & 0o777 == 0o600, path


def test_a_killed_writers_temporary_file_goes_with_the_next_write(tmp_path):
    target = tmp_path / "take.usda"
    script = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from bridge.fsutil import atomic_write_with
def slow(tmp):
    tmp.write_text("half")
    print("writing", flush=True)
    time.sleep(60)
atomic_write_with({str(target)!r}, slow, suffix=".usda")
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".take.usda.tmp-")  # what SIGKILL leaves
    atomic_write_json(target, {"ok": True})
    assert [p.name for p in tmp_path.iterdir()] == ["take.usda"]
    assert remove_stale_temporaries(target) == 0


def test_a_live_writers_temporary_file_is_kept(tmp_path):
    mine = tmp_path / f".out.json.tmp-{os.getpid()}-abc.tmp"
    mine.write_text("in progress")
    assert remove_stale_temporaries(tmp_path / "out.json") == 0 and mine.exists()


def test_names_that_are_not_utf8_print():
    assert printable(os.fsdecode(b"caf\xe9.png")) == "caf\\xe9.png"
