"""The state directory: committed state round trip, the lock, recovery of orphans, the default location."""
import json

import pytest

from bridge.updates import reasons
from bridge.updates.store import InstalledRelease, ModelState, StateDir, UpdateState, default_state_dir


def test_default_state_dir_honours_facebridge_home_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "fb"))
    assert default_state_dir() == tmp_path / "fb" / "updates"
    monkeypatch.delenv("FACEBRIDGE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "facebridge" / "updates"


def test_committed_state_reads_back_equal(tmp_path):
    store = StateDir(tmp_path).ensure()
    release = InstalledRelease("lipsync", 3, "adapter", "lipsync-r3-abcd", "ab" * 32,
                               {"adapter.npz": {"sha256": "cd" * 32, "length": 10}}, "2026-01-01T00:00:00Z")
    state = UpdateState({"lipsync": ModelState(release, None, 3, (2,))}, {"timestamp": 4}).with_event(
        action="install", model="lipsync", release=3, from_release=0)
    store.commit(state)
    assert store.read() == state and store.read().slots() == {"lipsync-r3-abcd"}


@pytest.mark.parametrize("content", [b"{not json", b'{"schema": 99}', b"[]", b""])
def test_unreadable_state_is_state_corrupt_never_an_empty_state(tmp_path, content):
    """Treating a damaged state as empty would forget the release floor: refuse instead."""
    StateDir(tmp_path).ensure()
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(reasons.StateCorrupt) as err:
        StateDir(tmp_path).read()
    assert err.value.exit_code == 29 and "\n" not in str(err.value)


def test_the_lock_admits_one_holder(tmp_path):
    store = StateDir(tmp_path)
    with store.lock():
        with pytest.raises(reasons.Busy):
            with StateDir(tmp_path).lock():
                pass
    with store.lock():  # released
        pass


def test_recover_removes_staging_buffers_temporaries_and_unnamed_slots(tmp_path):
    store = StateDir(tmp_path).ensure()
    keep = InstalledRelease("lipsync", 1, "adapter", "lipsync-r1-aaaa", "a" * 64)
    store.commit(UpdateState({"lipsync": ModelState(keep)}))
    for path in (store.slot_path("lipsync-r1-aaaa"), store.slot_path("lipsync-r2-bbbb"), store.new_staging()):
        path.mkdir(exist_ok=True)
        (path / "adapter.npz").write_bytes(b"x")
    (store.tmp_dir / "tmpbuffer").write_bytes(b"x")
    (tmp_path / ".state.json.abc.tmp").write_bytes(b"{}")
    removed = store.recover()
    assert "slots/lipsync-r2-bbbb" in removed and ".state.json.abc.tmp" in removed
    assert [p.name for p in store.slots_dir.iterdir()] == ["lipsync-r1-aaaa"]
    assert list(store.staging_dir.iterdir()) == [] == list(store.tmp_dir.iterdir())
    assert store.recover() == []


def test_state_json_is_plain_json_for_people_and_scripts(tmp_path):
    store = StateDir(tmp_path).ensure()
    store.commit(UpdateState(tuf_floors={"root": 1}))
    doc = json.loads((tmp_path / "state.json").read_text())
    assert doc["schema"] == 1 and doc["tuf_floors"] == {"root": 1}
