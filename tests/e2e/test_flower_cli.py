"""`flwr run` through FlowerCli against a real SuperLink that is not yet answering (marker `flower`)."""
from __future__ import annotations

import threading

import pytest

from bridge.errors import FaceBridgeError
from fedagent.app.project import run_config_file, write_project
from fedagent.local.flower_cli import FlowerCli
from fedagent.local.processes import free_port, stop_all, superlink

pytestmark = [pytest.mark.flower, pytest.mark.timeout(180)]


def test_a_run_started_while_the_superlink_comes_up_is_tried_again_and_started_once(tmp_path):
    port = free_port()
    cli = FlowerCli(tmp_path / "cli", f"127.0.0.1:{port}")
    app = write_project(tmp_path / "app")
    config = run_config_file(tmp_path / "run-config.toml", {"state-dir": str(tmp_path / "server"), "rounds": 1})
    links = []
    # the SuperLink starts a second after the first `flwr run` found nothing listening
    late = threading.Timer(1.0, lambda: links.append(superlink(tmp_path / "link", tmp_path / "logs", control_port=port,
                                                                       fleet_port=free_port())))
    late.start()
    try:
        run_id = cli.run(app, config, attempts=4)
        late.join()
        runs = cli._call("list", "fedagent")["runs"]
        assert [int(run["run-id"]) for run in runs] == [run_id]
        cli.stop_run(run_id)
    finally:
        late.cancel()
        late.join()
        stop_all(links)


def test_a_superlink_that_never_answers_gives_one_line_naming_it(tmp_path):
    port = free_port()
    cli = FlowerCli(tmp_path / "cli", f"127.0.0.1:{port}")
    with pytest.raises(FaceBridgeError) as caught:
        cli.run(write_project(tmp_path / "app"), run_config_file(tmp_path / "c.toml", {"rounds": 1}), attempts=2)
    assert "unavailable" in str(caught.value) and f"127.0.0.1:{port}" in str(caught.value)
