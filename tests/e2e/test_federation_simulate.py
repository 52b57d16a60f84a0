"""`fedagent simulate` end to end (marker `flower`): real processes, every stage shown, a signed release at the end
that `fedagent update install` verifies and installs."""
import json
import subprocess

import pytest

from tests.helpers import fedagent_cmd, subprocess_env

pytestmark = [pytest.mark.flower, pytest.mark.timeout(600)]


def test_simulate_ends_with_a_signed_release_a_device_installs(speaker_population, tmp_path):
    cache = speaker_population[0][0].root.parent  # the session's simulated speakers, already generated
    work = tmp_path / "work"
    out = subprocess.run(fedagent_cmd("simulate", "--clients", "2", "--rounds", "1", "--utterances", "8",
                                      "--held-out", "1", "--cache", str(cache), "--work", str(work),
                                      "--set", "max-epochs=2", "--json", str(tmp_path / "sim.json")),
                         capture_output=True, text=True, timeout=540, env=subprocess_env(tmp_path / "server-home"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for stage in ("setup", "share_keys", "collect_masked_vectors", "unmask"):
        assert f"round 1  {stage}" in out.stdout
    assert "published as signed release 1" in out.stdout
    result = json.loads((tmp_path / "sim.json").read_text())
    assert result["status"] == "finished:completed" and result["rounds"][0]["published"]
    leftovers = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout
    assert leftovers == "", "simulate left processes running"
    install = subprocess.run(fedagent_cmd("update", "install", "--from", str(work / "repo"), "--trust",
                                          str(work / "keys" / "trust.json"), "--json"),
                             capture_output=True, text=True, timeout=120, env=subprocess_env(tmp_path / "device"))
    assert install.returncode == 0, install.stdout + install.stderr
    assert "lipsync" in install.stdout and "1" in install.stdout
