"""Flower's own `flower-supernode`, with its fixed idle waits shortened (the fast mode of `fedagent client`).

Flower 1.42's SuperNode sleeps a fixed 3 s whenever the SuperLink has no message for it, and polls every 0.5 s for
its ClientApp's reply and for object contents (flwr/supernode/start_client_internal.py); none of it can be set.
A SecAgg+ round is four messages per device, so those waits, not the work, made most of a round (about 12 s of
idle poll a round with 5 devices). This entry point runs Flower's SuperNode unchanged except that the `time`
module that one file sleeps through caps every sleep at POLL_S. The SuperLink then sees one pull request per
device every POLL_S while idle, which costs it microseconds.

    python -m fedagent.local.supernode_main [flower-supernode arguments]
"""
from __future__ import annotations

import sys
import time

POLL_S = 0.2


class _ShortSleeps:
    """The `time` module, but `sleep` never waits longer than POLL_S."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, POLL_S))


def shorten_waits() -> bool:
    """Give Flower's SuperNode loop the short sleeps; False (and nothing changed) where that loop changed."""
    # optional extra: fed (flwr); the module loads without it
    import flwr.supernode.start_client_internal as node_loop

    if isinstance(node_loop.__dict__.get("time"), _ShortSleeps):
        return True
    if node_loop.__dict__.get("time") is not time:  # a Flower that no longer sleeps there: leave it as it is
        return False
    node_loop.time = _ShortSleeps()
    return True


def main() -> int:
    # optional extra: fed (flwr); the module loads without it
    from flwr.supernode.cli import flower_supernode

    if not shorten_waits():
        print("fedagent: this Flower's SuperNode loop changed; running it without shortened waits", file=sys.stderr)
    sys.argv[0] = "flower-supernode"
    return flower_supernode()


if __name__ == "__main__":
    sys.exit(main())
