"""fedagent.local.supernode_main: the hook it patches still exists in the installed Flower, and only there."""
from __future__ import annotations

import time

from fedagent.local import supernode_main


def test_the_supernode_loop_still_sleeps_through_time_and_gets_the_short_sleeps():
    import flwr.supernode.start_client_internal as node_loop

    assert node_loop.__dict__.get("time") is time  # a Flower upgrade that moves the sleeps fails here
    try:
        assert supernode_main.shorten_waits() and isinstance(node_loop.time, supernode_main._ShortSleeps)
        assert node_loop.time.monotonic is time.monotonic  # everything but sleep is the real module
        assert supernode_main.shorten_waits()  # twice is harmless
        assert time.sleep is not supernode_main._ShortSleeps.sleep  # the process's own time module is untouched
    finally:
        node_loop.time = time
