"""Run settings have one source of defaults (fedagent/app/project.py RUN_CONFIG): the ServerApp, a device's round
training and the command line all read it, so they cannot disagree."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from fedagent.app.project import RUN_CONFIG
from fedagent.app.task import TrainConfig


def test_a_rounds_training_defaults_are_the_run_settings():
    cfg = TrainConfig()
    for field in dataclasses.fields(cfg):
        key = field.name.replace("_", "-")
        if key in RUN_CONFIG:
            assert getattr(cfg, key.replace("-", "_")) == RUN_CONFIG[key][0], key
    personal = TrainConfig.personal()
    assert personal.max_epochs > cfg.max_epochs and personal.patience > cfg.patience


def test_the_server_app_falls_back_to_the_same_defaults():
    server_app = pytest.importorskip("fedagent.app.server_app")
    for key, (default, _) in RUN_CONFIG.items():
        assert server_app._get({}, key) == default, key
    assert server_app._get({"rounds": "3"}, "rounds") == 3  # the run's value, as the default's type


@pytest.mark.parametrize("command", ["server", "simulate"])
def test_the_command_line_defaults_are_the_same(command):
    module = __import__(f"fedagent.commands.{command}", fromlist=["add_parser"])
    parser = argparse.ArgumentParser()
    module.add_parser(parser.add_subparsers())
    args = parser.parse_args([command, *(["--eval-store", "x"] if command == "server" else [])])
    assert args.rounds == RUN_CONFIG["rounds"][0]
    if command == "server":
        assert (args.min_clients, args.clients_per_round) == (RUN_CONFIG["min-clients"][0],
                                                              RUN_CONFIG["clients-per-round"][0])
