"""Each sink sends from its own thread (bridge/runtime/sink_worker.py): a sink that stalls (a slow disk) never
stalls Live Link Face on 127.0.0.1, its missed frames are counted for it alone and reported in the summary."""
from __future__ import annotations

import threading
import time

from bridge.formats.livelinkface import decode_llf_packet
from bridge.runtime.runner import BridgeRunner, sink_labels
from bridge.runtime.summary import summarise
from bridge.sinks.base import Sink
from bridge.sinks.livelinkface import LiveLinkFaceSink
from bridge.sources.base import SourceMode
from tests.helpers import udp_collector, wait_until
from tests.runtime.test_runner import CountingSource, ListSink, describe


class StalledDisk(ListSink):
    """A sink whose every send waits until the disk comes back (`release`), as fsync on a stalled disk does."""

    name = "recorder"
    queue_depth = 5

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.waiting = threading.Event()

    def send(self, frame) -> None:
        self.waiting.set()
        self.release.wait(60)
        super().send(frame)


def test_a_stalled_sink_never_stalls_live_link_face_and_its_drops_are_its_own():
    disk = StalledDisk()
    with udp_collector() as (port, packets):
        llf = LiveLinkFaceSink(f"127.0.0.1:{port}")
        llf.queue_depth = 64  # room for every frame: what it misses can then only come from the stalled disk,
        # never from a CPU too busy (other jobs) to run its thread for a while
        source = CountingSource(60, SourceMode.LIVE, interval_s=0.002)
        runner = BridgeRunner(source, [describe], [disk, llf], status=False)
        done = threading.Thread(target=runner.run)
        done.start()
        # every frame reaches Unreal while the disk has not finished one write
        assert wait_until(lambda: len(packets) >= 60 - runner.stats.snapshot().dropped_total and
                          runner.stats.snapshot().sent + runner.stats.snapshot().dropped_total == 60, 60)
        assert disk.sent == 0 and disk.waiting.is_set()
        disk.release.set()
        done.join(60)
    snap = runner.stats.snapshot()
    seqs = [decode_llf_packet(p)["frame_number"] for p in packets]
    assert len(seqs) == snap.sent and llf.errors == 0
    dropped = runner.sink_dropped()
    assert dropped["livelinkface"] == 0 and dropped["recorder"] == snap.sent - disk.sent > 0
    assert snap.sink_dropped == dropped and "slow sinks: recorder" in runner.stats.status_line()
    assert disk.seqs == sorted(disk.seqs) and disk.seqs[-1] == 59  # the newest frames reach the slow sink
    summary = summarise(snap, [disk, llf], sink_labels([disk, llf]))
    assert any(n.startswith(f"recorder: {dropped['recorder']} frames skipped for this output alone")
               for n in summary.notes)
    assert summary.sinks["livelinkface"]["queue_dropped"] == 0


def test_a_lossless_run_keeps_every_frame_for_a_slow_sink():
    class Slow(ListSink):
        queue_depth = 1

        def send(self, frame):
            time.sleep(0.001)
            super().send(frame)

    slow, fast = Slow(), ListSink()
    BridgeRunner(CountingSource(40, SourceMode.FAST), [describe], [slow, fast], status=False).run()
    assert slow.seqs == fast.seqs == list(range(40))


def test_sinks_sharing_a_name_are_counted_apart():
    a, b, c = ListSink(), ListSink(), Sink()
    assert sink_labels([a, b, c]) == ["list#1", "list#2", "sink"]
