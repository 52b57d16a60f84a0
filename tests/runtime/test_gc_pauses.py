"""The serving process's garbage collector: the start-up heap frozen out of later walks, every pause counted."""
from __future__ import annotations

import gc

from bridge.runtime.gc_pauses import GcPauses, settle


def test_settle_freezes_what_survives_and_leaves_no_garbage_behind():
    class Node:
        pass

    kept = [Node() for _ in range(1000)]
    cycle = Node()
    cycle.self = cycle  # unreachable once deleted: only the collector frees it
    del cycle
    frozen = gc.get_freeze_count()
    try:
        ms = settle()
        assert ms >= 0.0
        assert gc.get_freeze_count() >= frozen + len(kept)  # the survivors are out of every later walk
        assert not any(type(o) is Node and getattr(o, "self", None) is o for o in gc.get_objects())
        assert gc.get_count()[2] == 0  # the old generation counts again from (about) nothing
    finally:
        gc.unfreeze()  # the rest of the suite's objects back into the collector's reach


def test_every_collection_is_counted_per_generation_until_closed():
    pauses = GcPauses().start()
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
        stats = pauses.stats()
        assert stats["gc_collections"][0] >= 1 and stats["gc_collections"][2] >= 2
        assert 0.0 < stats["gc_pause_ms_max"] <= stats["gc_pause_ms_total"]
    finally:
        pauses.close()
    counted = pauses.stats()["gc_collections"]
    gc.collect(2)
    assert pauses.stats()["gc_collections"] == counted  # closed: no longer called
    assert pauses._callback not in gc.callbacks
