"""`facebridge run` refuses what it cannot do in one line at start, before any model loads (a real subprocess,
through facebridge_cmd): a subject Unreal cannot show, a photo given as a video, a repeated --llf target,
camera options for a file, a smoothing strength out of range."""
from __future__ import annotations

import subprocess

import cv2
import numpy as np
import pytest

from tests.helpers import facebridge_cmd, subprocess_env


def _one_error_line(args, home, cwd=None) -> str:
    proc = subprocess.run(facebridge_cmd("run", "--max-frames", "2", "--vmc", "off", *args), cwd=cwd,
                          env=subprocess_env(home), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


@pytest.mark.parametrize("subject, expected", [("", "empty subject name"), ("x" * 65, "65 bytes, the limit is 64")])
def test_a_subject_unreal_cannot_show_is_refused(subject, expected, isolated_home):
    line = _one_error_line(["--source", "sample", "--subject", subject], isolated_home)
    assert line.startswith("facebridge: error: --subject") and expected in line


def test_a_jpeg_renamed_mp4_is_refused(tmp_path, isolated_home):
    ok, data = cv2.imencode(".jpg", np.full((120, 160, 3), 90, np.uint8))
    (tmp_path / "clip.mp4").write_bytes(data.tobytes())
    line = _one_error_line(["--source", str(tmp_path / "clip.mp4")], isolated_home)
    assert "is a single image, not a video" in line


@pytest.mark.parametrize("args, expected", [
    (["--llf", "127.0.0.1:11111", "--llf", "127.0.0.1:11111"], "--llf 127.0.0.1:11111 is given twice"),
    (["--llf", "off", "--llf", "127.0.0.1:11111"], "--llf off was given together with an address"),
    (["--camera-size", "1280x720"], "apply to a camera, not to --source sample"),
    (["--camera-size", "big"], "'big' is not WIDTHxHEIGHT"),
    (["--smoothing", "-1"], "--smoothing -1 is out of range"),
])
def test_options_that_cannot_work_are_refused_in_one_line(args, expected, isolated_home):
    assert expected in _one_error_line(["--source", "sample", *args], isolated_home)


def test_help_describes_the_new_options():
    proc = subprocess.run(facebridge_cmd("run", "--help"), env=subprocess_env(), capture_output=True, text=True,
                          timeout=60)
    text = " ".join(proc.stdout.split())
    for option in ("--camera-size WxH", "--camera-fps FPS", "--mirror", "--smoothing STRENGTH",
                   "repeat it for several editors", "stop after N frames sent"):
        assert option in text, option


def test_the_emotion_cadence_run_offers_is_the_describers():
    from bridge.commands.run import EMOTION_EVERY
    from bridge.pipeline import PipelineOptions
    from bridge.stages import describe, describe_rows

    assert EMOTION_EVERY == describe.EMOTION_EVERY == PipelineOptions().emotion_every
    assert describe_rows.DescribeRows(1).emotion_every == describe.EMOTION_EVERY


def test_run_help_reads_in_groups_and_every_option_sits_in_one():
    """`facebridge run --help`: the 60-odd options in groups by what they are for, none left in the flat list."""
    import argparse

    from bridge.commands import run

    parser = argparse.ArgumentParser()
    run.add_parser(parser.add_subparsers())
    (sub,) = parser._subparsers._group_actions[0].choices.values()  # the run parser
    titles = [g.title for g in sub._action_groups if g._group_actions]
    assert {"where frames come from", "tracking", "audio and lip-sync"} <= set(titles)
    flat = [a.option_strings for g in sub._action_groups if g.title == "options" for a in g._group_actions]
    assert flat == [["-h", "--help"]]
