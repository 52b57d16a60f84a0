"""Device data: the base's outputs are cached beside the windows and rebuilt when the windows change."""
import os
import stat

import pytest

from bridge.audio.learn_store import LearnStore
from bridge.errors import FaceBridgeError
from fedagent.app import data_store
from tests.helpers import learn_window


def test_features_are_cached_owner_only_and_rebuilt_when_windows_change(tmp_path):
    store = LearnStore(tmp_path / "learn")
    for seed in range(5):
        store.add(learn_window(seed=seed))
    first = data_store.load_device_data(store)
    cache = list(store.root.glob(".features-*.npz"))
    assert len(cache) == 1 and stat.S_IMODE(os.stat(cache[0]).st_mode) == 0o600
    assert (first.train_windows, first.held_out_windows) == (4, 1) and len(first.train) == 480
    stamp = cache[0].stat().st_mtime_ns
    again = data_store.load_device_data(store)
    assert cache[0].stat().st_mtime_ns == stamp and (again.train.h == first.train.h).all()
    store.add(learn_window(seed=9))
    grown = data_store.load_device_data(store)
    assert len(grown.train) + len(grown.held_out) == 720
    assert data_store.clear(store) == 6 and not list(store.root.glob(".features-*"))


def test_an_empty_store_gets_a_clear_message(tmp_path):
    with pytest.raises(FaceBridgeError, match="holds 0 window.*facebridge run --audio mic --learn"):
        data_store.load_device_data(LearnStore(tmp_path / "nothing"))
