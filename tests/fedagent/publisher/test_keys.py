"""Publisher keys: thresholds, rotation of every role, revocation, and devices following the root chain."""
import shutil
import stat

import pytest

from fedagent.publisher.keys import KeyRing, KeysError
from tests.updates.kit import Device, Publisher


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    pub = Publisher(tmp_path / "pub", thresholds={"root": (2, 3)})
    pub.publish()
    device = Device(tmp_path / "state", pub.trust)
    device.install(pub.repo)
    return pub, device


def test_init_writes_private_keys_privately_and_a_public_trust_file(tmp_path):
    ring = KeyRing.init(tmp_path / "k", {"targets": (2, 3)})
    assert stat.S_IMODE((tmp_path / "k" / "private").stat().st_mode) == 0o700
    pems = list((tmp_path / "k" / "private").glob("*.pem"))
    assert len(pems) == 6 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pems)
    trust = (tmp_path / "k" / "trust.json").read_text()
    assert "PRIVATE" not in trust and ring.root().signed.roles["targets"].threshold == 2
    with pytest.raises(KeysError):
        KeyRing.init(tmp_path / "k")


@pytest.mark.parametrize("role", ["root", "targets", "snapshot", "timestamp"])
def test_after_rotating_a_role_devices_follow_and_the_old_key_is_refused(env, role):
    pub, device = env
    old = pub.ring.signers(role)
    assert pub.ring.rotate(role) == 2
    pub.publish()
    device.install(pub.repo)
    device.assert_intact(2)
    assert all(pub.ring.config["keys"][s.public_key.keyid]["status"] == "retired" for s in old)
    if role != "root":
        pub.forge(**{f"{role}_signers": old})
        device.refused(pub.repo, "untrusted-key")


def test_a_device_several_root_versions_behind_walks_the_chain(env):
    pub, device = env
    pub.ring.rotate("root")
    pub.ring.rotate("targets")
    pub.ring.add("targets", threshold=2)
    assert pub.ring.root().signed.version == 4
    pub.publish()
    device.install(pub.repo)
    device.assert_intact(2)
    from bridge.updates.status import status
    assert status(device.state)["trusted_root_version"] == 4


def test_revoking_one_of_three_root_keys_keeps_the_device_updating(env):
    pub, device = env
    victim = pub.ring.root().signed.roles["root"].keyids[0]
    pub.ring.revoke(victim[:10])
    assert pub.ring.config["keys"][victim]["status"] == "revoked"
    assert victim not in pub.ring.root().signed.roles["root"].keyids
    assert not (pub.keys / "private" / f"{victim}.pem").exists()
    pub.publish()
    device.install(pub.repo)
    device.assert_intact(2)


def test_revoking_the_only_root_key_is_refused_and_says_rotate(tmp_path):
    ring = KeyRing.init(tmp_path / "k")
    with pytest.raises(KeysError, match="rotate"):
        ring.revoke(ring.root().signed.roles["root"].keyids[0])


def test_revoking_a_one_of_one_targets_key_puts_a_new_key_in_its_place(env):
    pub, device = env
    old = pub.ring.signers("targets")
    pub.ring.revoke(old[0].public_key.keyid)
    assert len(pub.ring.root().signed.roles["targets"].keyids) == 1
    pub.publish()
    device.install(pub.repo)
    pub.forge(targets_signers=old)
    device.refused(pub.repo, "untrusted-key")


def test_a_two_of_two_role_cannot_be_signed_with_one_key_held(env, tmp_path):
    pub, device = env
    pub.ring.add("targets", threshold=2)
    half = tmp_path / "half-keys"
    shutil.copytree(pub.keys, half)
    (half / "private" / f"{pub.ring.root().signed.roles['targets'].keyids[0]}.pem").unlink()
    from fedagent.publisher.publish import ReleaseSpec, publish
    with pytest.raises(KeysError, match="1 of the 2 targets keys"):
        publish(half, pub.repo, [ReleaseSpec("lipsync", pub.adapter())])
    pub.publish()  # the folder holding both signs
    device.install(pub.repo)
    device.assert_intact(2)
