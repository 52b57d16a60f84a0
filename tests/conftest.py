"""Fixtures for every test; plain helpers are in tests/helpers.py."""
import pytest


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """Calibration profiles and other per-user state go to a temporary folder."""
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
