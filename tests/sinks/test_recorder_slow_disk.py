"""A slow disk costs only the recorder: a real bridge runner (a paced source, the take recorder, Live Link Face to a
UDP receiver on 127.0.0.1) runs in its own process under strace, which delays every fsync (or every write) of it
for real. Live Link Face keeps the source's pace; the take keeps every frame it was asked to keep, or says in
take.json and the run's summary exactly how many it lacks."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time

import pytest

from bridge.formats.livelinkface import decode_llf_packet
from tests.helpers import subprocess_env

pytestmark = pytest.mark.skipif(shutil.which("strace") is None,
                                reason="needs strace (tools/system_packages.sh test installs it)")

FRAMES = 90  # three seconds at 30 fps

RUN = """
import json, sys
from bridge.runtime.runner import BridgeRunner, sink_labels
from bridge.runtime.summary import summarise
from bridge.sinks.livelinkface import LiveLinkFaceSink
from bridge.sinks.recorder import TakeRecorder
from bridge.sources.base import SourceMode
from tests.runtime.test_runner import CountingSource, describe

take, port, mode, depth = sys.argv[1], int(sys.argv[2]), SourceMode[sys.argv[3]], int(sys.argv[4])
TakeRecorder.queue_depth = depth  # a short queue: the disk outlasts it within seconds, not minutes
recorder, llf = TakeRecorder(take), LiveLinkFaceSink(f"127.0.0.1:{port}")
llf.queue_depth = 64  # what Live Link Face misses can only come from waiting for the disk, not from a busy CPU
source = CountingSource(int(sys.argv[5]), mode, interval_s=1 / 30)
runner = BridgeRunner(source, [describe], [recorder, llf], status=False, lossless=mode is SourceMode.PACED)
snap = runner.run().snapshot()
recorder.close()  # the runner closes only what it opened: the take is finalised by its owner
llf.close()
summary = summarise(snap, [recorder, llf], sink_labels([recorder, llf]))
print(json.dumps({"sent": snap.sent, "recorder_dropped": runner.sink_dropped()["recorder"],
                  "syncs": recorder.syncs, "notes": summary.notes, "failed": summary.failed}))
"""


def run_under_strace(tmp_path, inject: str, mode: str, depth: int) -> tuple[dict, list[float], list[int]]:
    """Runs RUN with strace injecting `inject`; returns its result, the packets' arrival times and frame numbers."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.2)
    syscall = inject.split(":")[0]
    cmd = ["strace", "--seccomp-bpf", "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
           "-e", f"inject={inject}", sys.executable, "-c", RUN, str(tmp_path / "take"),
           str(receiver.getsockname()[1]), mode, str(depth), str(FRAMES)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    arrivals, numbers = [], []
    try:
        while proc.poll() is None:
            try:
                packet = receiver.recv(65536)
            except TimeoutError:
                continue
            arrivals.append(time.monotonic())
            numbers.append(decode_llf_packet(packet)["frame_number"])
        out, err = proc.communicate(timeout=120)
    finally:
        receiver.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1]), arrivals, numbers


def test_a_file_recorded_on_a_disk_whose_fsync_takes_two_seconds_keeps_live_link_face_at_the_source_pace(tmp_path):
    """Every fsync takes 2 s: the recorder syncs on its own thread and clock, so Live Link Face gets every frame
    at the file's pace (a gap of 2 s would mean a frame waited for an fsync; 1.5 s leaves room for a machine too
    busy to run the send thread for a while), and the take holds every frame."""
    result, arrivals, numbers = run_under_strace(tmp_path, "fsync:delay_exit=2000000", "PACED", depth=30)
    assert result["sent"] == FRAMES and len(numbers) == FRAMES
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert max(gaps) < 1.5, f"a Live Link Face packet waited {max(gaps):.2f} s (an fsync takes 2 s)"
    meta = json.loads((tmp_path / "take" / "take.json").read_text())
    assert meta["complete"] is True and meta["frames"] == FRAMES and "frames_dropped" not in meta
    assert len((tmp_path / "take" / "frames.jsonl").read_text().splitlines()) == FRAMES
    assert result["syncs"] >= 1 and not result["failed"] and result["recorder_dropped"] == 0


def test_a_disk_too_slow_for_a_live_stream_costs_only_the_recorder_which_says_exactly_what_it_lost(tmp_path):
    """Every write takes 60 ms (two per frame, a frame every 33 ms): a live source drops the oldest frames from
    the recorder's queue only; Live Link Face gets every frame, and take.json and the summary count exactly the
    frames the take lacks."""
    result, arrivals, numbers = run_under_strace(tmp_path, "write:delay_exit=60000", "LIVE", depth=5)
    sent = result["sent"]  # a live source may also lose a frame to a busy CPU before the outputs: not counted here
    assert sent >= FRAMES // 2 and len(set(numbers)) == len(numbers) == sent
    meta = json.loads((tmp_path / "take" / "take.json").read_text())
    held = len((tmp_path / "take" / "frames.jsonl").read_text().splitlines())
    dropped = result["recorder_dropped"]
    assert dropped > 0 and meta["frames"] == held and meta["frames_dropped"] == dropped
    assert held + dropped == sent and meta["complete"] is True
    assert result["failed"] and any(n.startswith(f"recorder: {dropped} of {sent} frames were NOT recorded")
                                    for n in result["notes"])
