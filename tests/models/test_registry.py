"""The registry: the one reader of manifests, shipped and installed versions, and no unverified path."""
import os
import shutil

import numpy as np
import pytest

from bridge.errors import ModelError
from bridge.models import model_path
from bridge.models.registry import ModelRegistry
from bridge.updates.watch import ReleaseWatcher
from tests.updates.kit import Device, Publisher


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Release 1 of the lip-sync adapter installed in this user's default state (FACEBRIDGE_HOME)."""
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    pub = Publisher(tmp_path / "pub")
    pub.publish(pub.adapter(seed=3))
    device = Device(tmp_path / "home" / "updates", pub.trust)
    device.install(pub.repo)
    return pub, device


def test_every_shipped_model_is_known_with_its_sha256(tmp_path):
    registry = ModelRegistry(tmp_path)
    assert {"face_landmark", "emotion", "lipsync", "silero_vad"} <= set(registry.names())
    versions = registry.versions()
    assert versions["lipsync"]["release"] == 0 and len(versions["emotion"]["shipped_sha256"]) == 64
    with pytest.raises(ModelError, match="unknown model"):
        registry.shipped("nope")


def test_nothing_installed_means_the_shipped_files(tmp_path):
    active = ModelRegistry(tmp_path).active("lipsync")
    assert active.release == 0 and active.kind == "shipped" and active.adapter_path is None
    assert active.model_path.name == "lipsync.onnx"


def test_an_installed_adapter_is_what_the_lipsync_model_loads(installed):
    from bridge.audio.lipsync import LipSyncModel

    pub, device = installed
    active = ModelRegistry().active("lipsync")
    assert active.release == 1 and active.adapter_path.parent.parent.name == "slots"
    mel = np.random.default_rng(0).standard_normal((20, 40)).astype(np.float32)
    with_update = LipSyncModel().step(mel)[1]
    shipped = LipSyncModel(adapter=ModelRegistry().default_adapter_path("lipsync")).step(mel)[1]
    assert not np.allclose(with_update, shipped, atol=1e-4)  # the seed-3 adapter changed the mouth


def test_an_installed_file_swapped_for_a_link_or_edited_is_refused(installed, tmp_path):
    from bridge.updates.status import status

    registry = ModelRegistry()
    adapter = registry.adapter_path("lipsync")
    copy = tmp_path / "copy.npz"
    shutil.copyfile(adapter, copy)
    adapter.unlink()
    os.symlink(copy, adapter)  # same bytes, but a link: never followed
    with pytest.raises(ModelError, match="not a regular file"):
        registry.active("lipsync")
    adapter.unlink()
    data = bytearray(copy.read_bytes())
    data[-10] ^= 1
    adapter.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="corrupt or modified") as err:
        registry.active("lipsync")
    assert "fedagent update rollback" in str(err.value)
    report = status()
    assert report["verified"] is False and "corrupt" in report["problem"]


def test_a_whole_model_release_replaces_the_shipped_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    pub = Publisher(tmp_path / "pub")
    shipped = ModelRegistry().shipped_path("emotion")
    assert pub.publish(shipped, model="emotion") == 1
    device = Device(tmp_path / "home" / "updates", pub.trust)
    result = installer_install(device, pub.repo, "emotion")
    assert result.status == "installed" and result.files["model.onnx"]["length"] == shipped.stat().st_size
    assert model_path("emotion").parent.parent.name == "slots"  # bridge.models.model_path asks the registry


def installer_install(device, source, model):
    from bridge.updates.install import install
    return install(str(source), device.state, trust=device.trust, models=[model])[0]


def test_the_watcher_reports_each_new_active_release_once(installed):
    pub, device = installed
    watcher = ReleaseWatcher("lipsync")
    assert watcher.poll().release == 1
    assert watcher.poll() is None
    pub.publish()
    device.install(pub.repo)
    assert watcher.poll().release == 2
    assert watcher.poll() is None
