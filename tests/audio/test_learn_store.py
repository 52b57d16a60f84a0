"""The learning store: bounded, owner-only, atomic, and it never returns a broken window."""
import os
import stat

import numpy as np
import pytest

from bridge.audio.learn_store import LearnStore, LearnWindow, decode_window, encode_window
from bridge.errors import FaceBridgeError
from tests.helpers import learn_window


def test_a_window_round_trips_through_the_file_format():
    w = learn_window(90, seed=3)
    back = decode_window(encode_window(w))
    assert back.frames == 90 and back.source == "simulated" and "tongueOut" not in back.channels
    assert np.allclose(back.mel, w.mel, atol=0.02 * np.abs(w.mel).max())  # float16 on disk
    assert np.allclose(back.mouth, w.mouth, atol=1e-3)
    assert back.pcm is None  # raw audio only when asked for


def test_the_store_is_owner_only(tmp_path):
    store = LearnStore(tmp_path / "learn")
    path = store.add(learn_window())
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(store.root, 0o755)  # loosened by someone: the next write tightens it again
    store.add(learn_window(seed=1))
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700


def test_when_full_the_oldest_windows_go_first(tmp_path):
    one = len(encode_window(learn_window()))
    store = LearnStore(tmp_path / "learn", max_bytes=int(one * 3.5))
    for seed in range(6):
        store.add(learn_window(seed=seed))
    assert store.bytes_used() <= store.max_bytes
    kept = [w.t_start for w in store.windows()]
    assert kept == sorted(kept) and kept[-1] == 1.7e9 + 5 and len(kept) == 3


def test_stats_clear_and_export(tmp_path):
    store = LearnStore(tmp_path / "learn")
    for seed in range(3):
        store.add(learn_window(seed=seed))
    info = store.stats()
    assert info["windows"] == 3 and info["frames"] == 360 and info["mode"] == "0o700"
    assert store.export(tmp_path / "copy") == 3
    assert stat.S_IMODE(os.stat(tmp_path / "copy").st_mode) == 0o700
    assert store.clear() == 3 and store.paths() == []
    assert len(LearnStore(tmp_path / "copy").windows()) == 3


def test_bad_windows_are_refused_with_a_clear_message(tmp_path):
    bad = learn_window()
    bad.mouth[3, 2] = np.nan
    with pytest.raises(FaceBridgeError, match="NaN"):
        LearnStore(tmp_path / "learn").add(bad)
    with pytest.raises(FaceBridgeError, match="expected"):
        LearnWindow(mel=np.zeros((5, 40)), mouth=np.zeros((4, 19)), trust=np.ones(5)).check()
    broken = tmp_path / "learn" / "w-00000000000001-1-000001.npz"
    broken.parent.mkdir(exist_ok=True)
    broken.write_bytes(b"not a window")
    with pytest.raises(FaceBridgeError, match="unreadable.*fedagent data clear"):
        LearnStore(tmp_path / "learn").windows()
