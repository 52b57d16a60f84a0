"""Signed releases reaching a running bridge (runtime/releases.py) through a real update store: a newly installed
release is built and checked; one whose files were damaged after install is refused while the model in use keeps
serving; a later good release still swaps in; a rollback swaps the previous release back."""
from __future__ import annotations

import pytest

from bridge.runtime.releases import POLL_S, ReleaseWatch
from bridge.runtime.swap import ModelSwapper
from tests.helpers import wait_until
from tests.updates.kit import Device, Publisher


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    publisher = Publisher(tmp_path / "publisher")
    device = Device(tmp_path / "state", publisher.trust)
    publisher.publish()
    device.install(publisher.repo)
    return publisher, device


def test_the_watch_swaps_new_releases_follows_a_rollback_and_refuses_a_damaged_release(store):
    from bridge.models.registry import ModelRegistry
    from bridge.updates.rollback import rollback

    publisher, device = store
    swapper = ModelSwapper(report=lambda line: None)
    seen: list[tuple[str, int]] = []
    watch = ReleaseWatch(device.state, ["lipsync"], swapper, on_release=lambda m, r: seen.append((m, r))).start()
    try:
        assert wait_until(lambda: swapper._ready, 30, POLL_S / 5)  # release 1 was active at start: built at once
        one = swapper.take("lipsync").request.version
        assert one.startswith("r1-")

        publisher.publish()
        device.install(publisher.repo)  # release 2
        assert wait_until(lambda: swapper._ready, 30, POLL_S / 5)
        two = swapper.take("lipsync")
        assert two.request.release == 2 and two.replacement.version == two.request.version

        rollback(device.state, "lipsync")  # the owner goes back: release 1 serves again
        assert wait_until(lambda: swapper._ready, 30, POLL_S / 5)
        assert swapper.take("lipsync").request.version == one

        publisher.publish()
        watch.stop()  # release 3 is installed, then damaged on disk before the bridge looks (a disk error, an intruder)
        device.install(publisher.repo)
        slot = device.state / "slots" / ModelRegistry(device.state).installed("lipsync").slot
        (slot / "adapter.npz").write_bytes(b"not an adapter any more")
        watch = ReleaseWatch(device.state, ["lipsync"], swapper).start()
        assert wait_until(lambda: any(not e.ok for e in swapper.events), 30, POLL_S / 5)
        refused = next(e for e in swapper.events if not e.ok)
        assert "corrupt or modified" in refused.detail and swapper.take("lipsync") is None

        publisher.publish()
        device.install(publisher.repo)  # release 4: good again, swaps in
        assert wait_until(lambda: swapper._ready, 30, POLL_S / 5)
        assert swapper.take("lipsync").request.release == 4
    finally:
        watch.stop()
        swapper.close()
    assert seen[:2] == [("lipsync", 1), ("lipsync", 2)]
