"""`facebridge calibrate --ranges --source FILE` on a recorded clip of the sample's expressions: the gains it stores
bring the sample's peak blinks to at least 0.95 in a later run (received by a Live Link Face socket)."""
import re
import shutil
import subprocess

import numpy as np

from bridge.calibration import CalibrationProfile
from bridge.frame import ARKIT_INDEX
from bridge.sources.files import SAMPLE_PATH
from tests.e2e.test_run import parse_llf
from tests.helpers import facebridge_cmd, subprocess_env, udp_collector, wait_until

FRAMES = 300  # the whole sample clip


def test_range_calibration_from_a_clip_brings_the_blinks_to_full(tmp_path, isolated_home):
    clip = tmp_path / "expressions.mp4"
    shutil.copyfile(SAMPLE_PATH, clip)
    env = subprocess_env(isolated_home)
    cal = subprocess.run(facebridge_cmd("calibrate", "--ranges", "--source", str(clip), "--subject", "Ada"),
                         env=env, capture_output=True, text=True, timeout=300)
    assert cal.returncode == 0, cal.stderr[-3000:]
    measured = {m[1]: float(m[2]) for m in re.finditer(r"(\w+)\s+peak (\d\.\d\d)", cal.stdout)}
    assert measured["eyeBlinkLeft"] < 0.9 and measured["eyeBlinkRight"] < 0.95, "the clip's blinks read short"
    profile = CalibrationProfile.load("Ada", isolated_home / "profiles")
    gains = {n: s.get("gain", 1.0) for n, s in profile.mapping["blendshapes"].items()}
    assert gains["eyeBlinkLeft"] > 1.1 and gains["eyeBlinkRight"] > 1.0

    with udp_collector() as (port, packets):
        run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--subject", "Ada", "--fast", "--quiet",
                                            "--max-frames", str(FRAMES), "--llf", f"127.0.0.1:{port}",
                                            "--vmc", "off", "--monitor", "off"),
                             env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        wait_until(lambda: len(packets) >= FRAMES, timeout=10)
        values = np.array([parse_llf(p)[4][:52] for p in packets])
    assert values[:, ARKIT_INDEX["eyeBlinkLeft"]].max() >= 0.95
    assert values[:, ARKIT_INDEX["eyeBlinkRight"]].max() >= 0.95


def test_a_stored_mapping_file_is_used_by_later_runs_and_a_bad_one_is_one_line(tmp_path, isolated_home):
    good = tmp_path / "m.json"
    good.write_text('{"blendshapes": {"jawOpen": {"gain": 0.0}}}')
    env = subprocess_env(isolated_home)
    out = subprocess.run(facebridge_cmd("calibrate", "--subject", "Ada", "--mapping", str(good)), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    stored = CalibrationProfile.load("Ada", isolated_home / "profiles").mapping
    assert stored["blendshapes"] == {"jawOpen": {"gain": 0.0}}
    bad = tmp_path / "bad.json"
    bad.write_text('{"blendshapes": {"jawOpen": {"gain": -2}}}')
    out = subprocess.run(facebridge_cmd("calibrate", "--subject", "Ada", "--mapping", str(bad)), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1 and "gain is -2" in out.stderr
