"""What `facebridge run` prints reads at a glance (issue 40): two short start lines (the details with -v), plain
`facebridge run` without a camera says in words that it streams the sample, warnings carry no logger names, the
outputs' failure counts agree, and audio-only mode is shown as such instead of "face NO"."""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers import facebridge_cmd, free_udp_port, subprocess_env

FRAMES = 12


def _run(*args, home, verbose=False):
    cmd = facebridge_cmd(*(["-v"] if verbose else []), "run", "--monitor", "off", "--updates", "off", *args)
    proc = subprocess.run(cmd, env=subprocess_env(home), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc


def test_a_plain_run_says_it_streams_the_sample_in_two_short_lines_and_counts_alike(isolated_home):
    from bridge.sources.camera import camera_available

    if camera_available(0):
        pytest.skip("this machine has a camera: a plain run streams it")
    llf, vmc = free_udp_port(), free_udp_port()  # nothing listens: every frame is refused
    proc = _run("--max-frames", str(FRAMES), "--llf", f"127.0.0.1:{llf}", "--vmc", f"127.0.0.1:{vmc}",
                home=isolated_home)
    lines = proc.stdout.splitlines()
    first, second = lines[:2]
    assert first.startswith("facebridge: no camera found, so the bundled sample clip -> livelinkface"), first
    assert second.startswith("facebridge: ") and "(-v: why)" in second and "calibration" in second, second
    assert max(len(first), len(second)) <= 160, (len(first), len(second))
    assert not any(line.startswith("facebridge: ") and " -> " in line for line in lines[2:])
    # the same frames lost to both missing receivers are counted the same
    assert f"facebridge: livelinkface: {FRAMES} sends failed" in proc.stdout, proc.stdout
    assert f"facebridge: vmc: {FRAMES} sends failed" in proc.stdout, proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line.lower()]
    assert warnings and all(line.startswith("facebridge: warning: ") for line in warnings), warnings
    assert "bridge.sinks" not in proc.stderr and "WARNING" not in proc.stderr


def test_verbose_adds_each_models_backend_and_why(isolated_home):
    proc = _run("--source", "sample", "--max-frames", "2", "--llf", "off", "--vmc", "off", "--quiet", "--grpc",
                "127.0.0.1:0", home=isolated_home, verbose=True)
    assert "gRPC stream on 127.0.0.1:" in proc.stdout
    loud = _run("--source", "sample", "--max-frames", "2", "--llf", "off", "--vmc", "off", home=isolated_home,
                verbose=True)
    second = loud.stdout.splitlines()[1]
    assert "the least CPU time of the backends" in second or " on " in second, second
    assert "landmarks " in second and "detector BlazeFace" in second


def test_audio_only_mode_is_shown_as_such(isolated_home):
    proc = _run("--audio", "sample", "--audio-only", "--max-frames", "3", "--llf", "off", "--vmc", "off",
                home=isolated_home)
    assert "audio only: the voice drives the mouth" in proc.stdout.splitlines()[1]
    assert "audio only (no camera)" in proc.stderr and "face NO" not in proc.stderr, proc.stderr
