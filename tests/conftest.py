"""Fixtures for every test; plain helpers are in tests/helpers.py."""
import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_state(tmp_path_factory):
    """No test reads or writes the user's own state: profiles, installed releases and the engine cache (with the
    CPU backend choices measured there) go to folders of this test session; subprocesses inherit them."""
    saved = {k: os.environ.get(k) for k in ("FACEBRIDGE_HOME", "FACEBRIDGE_ENGINE_CACHE")}
    os.environ["FACEBRIDGE_HOME"] = str(tmp_path_factory.mktemp("home"))
    os.environ["FACEBRIDGE_ENGINE_CACHE"] = str(tmp_path_factory.mktemp("engine-cache"))
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """Calibration profiles and other per-user state go to a temporary folder of this test."""
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def fresh_engine_lines(monkeypatch):
    """Engines print each distinct line once per process (bridge/engines `_say`): a test that reads what a session
    says starts from none printed, whatever earlier tests opened (test_fastest asks OpenVINO for bf16 too)."""
    import bridge.engines

    monkeypatch.setattr(bridge.engines, "_announced", set())


@pytest.fixture(scope="session")
def speaker_population(tmp_path_factory):
    """(3 device stores, 1 held-out store) of simulated espeak-ng speakers, 8 sentences each, made once per session
    (fedagent and its federation tests share them); skips without espeak-ng."""
    from tests.helpers import speaker_stores

    return speaker_stores(tmp_path_factory.mktemp("population"), devices=3, held_out=1, utterances=8)
