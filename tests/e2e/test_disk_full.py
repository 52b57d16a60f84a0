"""A recording disk that fills up: `facebridge run --record` keeps streaming, finalises take.json with the frames
that landed, states the loss, and exits non-zero. The disk is a real 256 KiB tmpfs (in a private mount namespace,
where the machine allows it) or a real per-process file size limit (RLIMIT_FSIZE, always)."""
from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess

import pytest

from tests.helpers import ROOT, facebridge_cmd, subprocess_env

FRAMES = 90


def _can_mount_tmpfs(tmp_path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
                           capture_output=True)
    return probe.returncode == 0


def _check_take(take, out: str, rc: int, reason: str) -> None:
    assert rc == 1, out
    lost = [line for line in out.splitlines() if "were NOT recorded" in line]
    assert len(lost) == 1 and reason in lost[0], out
    meta = json.loads((take / "take.json").read_text())
    lines = (take / "frames.jsonl").read_text().splitlines()
    rows = (take / "frames.csv").read_text().splitlines()[1:]
    assert meta["complete"] is True and 0 < meta["frames"] == len(lines) == len(rows) < FRAMES
    assert meta["frames_lost"] == FRAMES - meta["frames"] and f"holds the {meta['frames']} that landed" in lost[0]
    assert all(json.loads(line)["seq"] >= 0 for line in lines)  # no half frame anywhere
    assert "Traceback" not in out


def test_a_full_tmpfs_costs_the_frames_that_did_not_fit_and_says_so(tmp_path, isolated_home):
    mnt, out_dir = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    out_dir.mkdir()
    if not _can_mount_tmpfs(mnt):
        pytest.skip("mounting a tmpfs needs a private mount namespace (unshare -m), not allowed here")
    run = " ".join(facebridge_cmd("run", "--source", "sample", "--fast", "--max-frames", str(FRAMES), "--llf",
                                  "off", "--vmc", "off", "--quiet", "--record", str(mnt / "take")))
    script = (f"mount -t tmpfs -o size=256k tmpfs {mnt} && cd {ROOT} && {run}; rc=$?; "
              f"cp -a {mnt / 'take'} {out_dir}/; exit $rc")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], env=subprocess_env(isolated_home),
                          capture_output=True, text=True, timeout=300)
    _check_take(out_dir / "take", proc.stdout + proc.stderr, proc.returncode, "No space left on device")


def test_a_file_size_limit_costs_the_frames_over_it_and_says_so(tmp_path, isolated_home):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    take = tmp_path / "take"
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--fast", "--max-frames", str(FRAMES), "--llf",
                                         "off", "--vmc", "off", "--quiet", "--record", str(take)),
                          env=subprocess_env(isolated_home), preexec_fn=limit, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    _check_take(take, proc.stdout + proc.stderr, proc.returncode, "File too large")
