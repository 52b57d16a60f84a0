"""The state folder must be the installing user's alone: staging/, tmp/ or slots/ replaced by a link (recovery
would empty whatever it points at), a link inside a slot, a folder group or others may write, and a folder
another local user made (with a trust root of theirs) are each refused as `unsafe-state` in one line naming the
fix, before anything in it is read, followed or removed. Once fixed, a valid release installs."""
import os
import shutil

import pytest

from bridge.updates.store import StateDir
from tests.updates.kit import Device, Publisher, cli_install
from tests.updates.test_hostile_metadata import recovers

NOBODY = 65534


@pytest.mark.parametrize("folder", ["staging", "tmp", "slots"])
def test_a_state_folder_replaced_by_a_link_is_refused_and_its_target_untouched(publisher, device, server, tmp_path,
                                                                               folder):
    publisher.publish()
    victim = tmp_path / "victim"
    real = device.state / folder
    shutil.move(real, victim)  # slots/ keeps the active release in the moved folder
    (victim / "precious.txt").write_text("not the installer's")
    os.symlink(victim, real)
    code, out = cli_install(server.url, device.state, tmp_path / "home")
    assert (code, out["reason"]) == (31, "unsafe-state"), out
    assert f"{real} is a link" in out["message"] and "remove the link" in out["message"]
    assert (victim / "precious.txt").read_text() == "not the installer's"
    os.unlink(real)
    (victim / "precious.txt").unlink()
    shutil.move(victim, real)
    recovers(publisher, device, server)


def test_a_link_inside_a_slot_is_refused(publisher, device, server, tmp_path):
    publisher.publish()
    store = StateDir(device.state)
    slot = store.slot_path(store.read().model("lipsync").active.slot)
    elsewhere = tmp_path / "adapter.npz"
    shutil.move(slot / "adapter.npz", elsewhere)
    os.symlink(elsewhere, slot / "adapter.npz")
    error = device_refused_unsafe(device, server)
    assert "adapter.npz is a link" in str(error)
    os.unlink(slot / "adapter.npz")
    shutil.move(elsewhere, slot / "adapter.npz")
    recovers(publisher, device, server)


def test_a_state_folder_others_may_write_is_refused_with_the_chmod_to_run(publisher, device, server):
    publisher.publish()
    os.chmod(device.state, 0o777)
    error = device_refused_unsafe(device, server)
    assert "writable by group or others" in str(error) and "chmod -R go-w" in str(error)
    os.chmod(device.state, 0o700)
    recovers(publisher, device, server)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to a second user (uid 65534)")
def test_a_state_folder_another_user_made_never_replaces_the_trust_given(publisher, server, tmp_path):
    """Another local user prepares the default state folder with their own publisher's root and release; the
    installing user's `--trust` must not be ignored in favour of theirs."""
    other = Publisher(tmp_path / "other")
    other.publish()
    home = tmp_path / "home"
    state = home / "updates"  # the default state folder under FACEBRIDGE_HOME
    from tests.updates.kit import HostileServer
    with HostileServer(other.repo) as theirs:
        Device(state, other.trust).install(theirs.url)
    for path in (state, *state.rglob("*")):
        os.lchown(path, NOBODY, NOBODY)
    publisher.publish()
    trust = tmp_path / "trust.json"
    trust.write_bytes(publisher.trust)
    code, out = cli_install(server.url, state, home, trust=trust)
    assert (code, out["reason"]) == (31, "unsafe-state"), out
    assert f"belongs to uid {NOBODY}" in out["message"] and f"rm -r {state}" in out["message"]
    shutil.rmtree(state)
    code, out = cli_install(server.url, state, home, trust=trust)
    assert code == 0 and out["results"][0]["release"] == 1, out
    mine = Device(state, publisher.trust)
    mine.assert_intact(1)
    assert (state / "trust" / "root.json").read_bytes() == publisher.trust


def device_refused_unsafe(device, server):
    from bridge.updates.reasons import UnsafeState
    with pytest.raises(UnsafeState) as info:
        device.install(server.url)
    assert info.value.exit_code == 31 and "\n" not in str(info.value)
    return info.value
