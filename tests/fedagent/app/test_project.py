"""The Flower app project holds settings only: Flower builds it into a FAB with no Python file in it."""
import subprocess
import zipfile

import pytest
import tomllib

from bridge.errors import FaceBridgeError
from fedagent.app.project import RUN_CONFIG, run_config_file, write_project
from fedagent.local.processes import BIN, flower_env


def test_flower_builds_the_project_into_a_fab_without_code(tmp_path):
    project = write_project(tmp_path / "app")
    config = tomllib.loads((project / "pyproject.toml").read_text())
    assert config["tool"]["flwr"]["app"]["components"] == {"serverapp": "fedagent.app.server_app:app",
                                                           "clientapp": "fedagent.app.client_app:app"}
    assert set(config["tool"]["flwr"]["app"]["config"]) == set(RUN_CONFIG)
    out = subprocess.run([str(BIN / "flwr"), "build", "--app", str(project)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=flower_env(tmp_path / "flwr-home"))
    assert out.returncode == 0, out.stdout + out.stderr
    fabs = list(tmp_path.glob("*.fab"))
    assert len(fabs) == 1
    names = zipfile.ZipFile(fabs[0]).namelist()
    assert "pyproject.toml" in names and not [n for n in names if n.endswith(".py")]


def test_unknown_run_settings_are_refused(tmp_path):
    with pytest.raises(FaceBridgeError, match="unknown run setting"):
        run_config_file(tmp_path / "run.toml", {"round": 3})
    text = run_config_file(tmp_path / "run.toml", {"rounds": 3, "state-dir": "/tmp/x", "dp-noise": 0.5}).read_text()
    assert tomllib.loads(text) == {"rounds": 3, "state-dir": "/tmp/x", "dp-noise": 0.5}
