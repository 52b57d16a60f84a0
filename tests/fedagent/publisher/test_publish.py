"""Publishing: release counters, installing in order, older copies, rollback, and what the publisher refuses."""
import shutil

import numpy as np
import pytest

from bridge.updates.rollback import rollback
from bridge.updates.status import status
from fedagent.publisher.publish import PublishError, ReleaseSpec, publish, publish_release
from tests.updates.kit import Device, Publisher, adapter_bytes


@pytest.fixture
def pub(tmp_path, monkeypatch):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    return Publisher(tmp_path / "pub")


def test_the_same_adapter_published_three_times_installs_in_order(pub, tmp_path):
    adapter = pub.adapter()
    device = Device(tmp_path / "state", pub.trust)
    for expected in (1, 2, 3):
        assert publish_release(pub.keys, pub.repo, [adapter]) == expected
        result = device.install(pub.repo)[0]
        assert (result.status, result.release, result.previous_release) == ("installed", expected, expected - 1)
        device.assert_intact(expected)
    assert device.install(pub.repo)[0].status == "up-to-date"
    report = status(device.state)
    assert report["release"] == 3 and report["previous_release"] == 2 and report["floor"] == 3
    assert set(report["files"]) == {"adapter.npz", "reference.npz"} and report["verified"]
    assert [h["release"] for h in report["history"] if h["action"] == "install"] == [1, 2, 3]


def test_installing_from_a_copy_of_an_older_repository_never_lowers_the_release(pub, tmp_path):
    device = Device(tmp_path / "state", pub.trust)
    pub.publish()
    shutil.copytree(pub.repo, tmp_path / "old")
    pub.publish()
    device.install(pub.repo)
    device.refused(tmp_path / "old", "rollback")
    device.assert_intact(2)
    assert status(device.state)["last_refusal"]["reason"] == "rollback"


def test_rollback_returns_to_the_previous_release_and_is_recorded(pub, tmp_path):
    device = Device(tmp_path / "state", pub.trust)
    for _ in range(3):
        pub.publish()
        device.install(pub.repo)
    result = rollback(device.state)
    assert (result.release, result.from_release) == (2, 3)
    device.assert_intact(2)
    report = status(device.state)
    assert report["history"][-1]["action"] == "rollback" and report["rolled_back"] == [3]
    device.refused(pub.repo, "rollback")  # release 3 was rolled back: never again
    device.assert_intact(2)
    assert rollback(device.state).release == 0  # then the shipped model
    with pytest.raises(Exception) as err:
        rollback(device.state)
    assert getattr(err.value, "reason", None) == "no-previous"
    assert pub.publish() == 4 and device.install(pub.repo)[0].release == 4
    device.assert_intact(4)


def test_publishing_without_files_re_signs_and_devices_stay_up_to_date(pub, tmp_path):
    device = Device(tmp_path / "state", pub.trust)
    pub.publish()
    device.install(pub.repo)
    version = pub.md("timestamp").signed.version
    assert publish(pub.keys, pub.repo) == {}
    assert pub.md("timestamp").signed.version == version + 1
    assert device.install(pub.repo)[0].status == "up-to-date"


def test_release_numbers_never_go_back_even_into_a_fresh_repository(pub, tmp_path):
    pub.publish()
    pub.publish()
    assert publish_release(pub.keys, tmp_path / "fresh", [pub.adapter()]) == 3


def test_the_publisher_refuses_what_devices_would_refuse(pub, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(adapter_bytes(0, **{"adapter.A": np.zeros((4, 4), np.float32)}))
    with pytest.raises(Exception, match="needs float32"):
        publish_release(pub.keys, pub.repo, [bad])
    with pytest.raises(PublishError, match="one adapter or model file"):
        publish_release(pub.keys, pub.repo, [pub.adapter(), pub.adapter()])
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(PublishError):
        publish(pub.keys, pub.repo, [ReleaseSpec("lipsync", text)])


def test_a_repository_made_by_other_keys_is_refused(pub, tmp_path):
    pub.publish()
    other = Publisher(tmp_path / "other")
    with pytest.raises(PublishError, match="other keys"):
        publish_release(other.keys, pub.repo, [other.adapter()])
