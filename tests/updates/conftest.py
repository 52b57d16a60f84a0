"""Fixtures of the updates tests: a publisher, a device that already runs release 1, a loopback server."""
import pytest

from tests.updates.kit import Device, HostileServer, Publisher


@pytest.fixture
def publisher(tmp_path):
    return Publisher(tmp_path / "publisher")


@pytest.fixture
def server(publisher):
    with HostileServer(publisher.repo) as running:
        yield running


@pytest.fixture
def device(tmp_path, publisher, server, monkeypatch):
    """A device whose update state is in tmp_path, already running release 1 installed over HTTP."""
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    assert publisher.publish() == 1
    dev = Device(tmp_path / "state", publisher.trust)
    assert dev.install(server.url)[0].status == "installed"
    dev.assert_intact(1)
    return dev
