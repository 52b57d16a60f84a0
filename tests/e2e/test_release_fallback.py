"""Releases reaching a running `facebridge run` with every default, through real processes: `fedagent keys` and
`fedagent publish` sign the releases, `fedagent serve-repo` serves them over loopback HTTP, `fedagent update
install` installs them into the user's store, and the bridge streams the sample clip to a Live Link Face receiver
and a gRPC subscriber on 127.0.0.1 the whole time.

1. The bridge starts before anything is installed (`--updates auto`, the default): the first release (an emotion
   model that reads every face as surprised) is taken live, without a restart and without losing a frame.
2. The second release outputs NaN on real face crops but passes its own smoke test (tests/updates/faulty.py). The
   output guard replaces the frames, its session's recreation does not help, and the bridge rolls it back by itself:
   the first release serves again, the face never freezes for a second, the store marks the release rolled back
   (`fedagent update status`), a new install of it is refused (`rollback`) and the bridge never runs it again.
   The status line, the monitor page's state and /metrics say so."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np

from bridge.formats.livelinkface import decode_llf_packet
from tests.e2e.test_live_swap import Subscriber, UdpCollector, fedagent
from tests.grpc.bridge_process import free_tcp_port
from tests.helpers import facebridge_cmd, subprocess_env, wait_until
from tests.updates.faulty import nan_on_real_faces_emotion_model
from tests.updates.kit import SURPRISE, emotion_model

FREEZE_S = 1.0  # the longest a receiver may see the same face repeated
FPS = 30  # the sample clip's frame rate


class EmotionFrames:
    """(arrival, seq, emotion model version, emotions) of every frame a subscriber received so far, each part read
    once: the waits below ask every 50 ms while thousands arrive, and reading them all again each time held the
    interpreter lock from the subscriber's own thread on a loaded machine, until the bridge dropped it as a client
    fallen behind."""

    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber, self.read, self.versions = subscriber, 0, {}
        self.frames: list[tuple[float, int, str, np.ndarray]] = []

    def __call__(self) -> list[tuple[float, int, str, np.ndarray]]:
        parts = self.subscriber.parts
        end = len(parts)  # the subscriber's thread appends meanwhile: up to here now, the rest next time
        for arrived, part in parts[self.read:end]:
            if part.WhichOneof("part") == "header":
                self.versions[part.header.layout_id] = part.header.model_versions.get("emotion", "")
            elif part.frame.layout_id in self.versions:
                self.frames.append((arrived, part.frame.seq, self.versions[part.frame.layout_id],
                                    np.array(part.frame.emotions)))
        self.read = end
        return list(self.frames)


def _longest_freeze(packets: list[tuple[float, bytes]]) -> tuple[float, int, float]:
    """(seconds, packets, start) of the longest run of Live Link Face packets that carry the very same face (frames
    the output guard replaced by the last good one)."""
    longest, start, count, last = (0.0, 0, 0.0), None, 0, None
    for arrived, data in packets:
        curves = np.array(list(decode_llf_packet(data)["curves"].values()), np.float32)
        if last is not None and np.array_equal(curves, last):
            count += 1
            longest = max(longest, (arrived - start, count, start))
        else:
            start, count = arrived, 1
        last = curves
    return longest


def test_a_bridge_started_before_any_release_takes_it_live_and_rolls_back_one_that_fails_on_real_faces(tmp_path):
    home = tmp_path / "home"
    env = subprocess_env(home)
    keys, repo = tmp_path / "keys", tmp_path / "repo"
    fedagent("keys", "init", "--dir", str(keys), env=env)
    surprised = emotion_model(tmp_path / "surprised.onnx")
    faulty = nan_on_real_faces_emotion_model(tmp_path / "faulty.onnx")
    fedagent("publish", "--keys", str(keys), "--repo", str(repo), f"emotion={surprised}", env=env)
    server = subprocess.Popen([sys.executable, "-m", "fedagent", "serve-repo", str(repo), "--port", "0"], env=env,
                              stderr=subprocess.PIPE, text=True)
    collector, bridge = UdpCollector(), None
    monitor = f"127.0.0.1:{free_tcp_port()}"
    try:
        url = next(word for word in server.stderr.readline().split() if word.startswith("http://"))
        collector.start()
        started = time.monotonic()
        address = f"127.0.0.1:{free_tcp_port()}"
        bridge = subprocess.Popen(facebridge_cmd(  # every default but the outputs: --updates auto, no store yet
            "run", "--source", "sample", "--grpc", address, "--llf", f"127.0.0.1:{collector.port}", "--vmc", "off",
            "--monitor", monitor), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        subscriber = Subscriber(address)
        subscriber.start()
        received = EmotionFrames(subscriber)
        running = lambda: bridge.poll() is None  # noqa: E731
        assert wait_until(lambda: len(received()) >= 30 or not running(), 180, 0.05), "no frames"
        assert running(), bridge.communicate()[1]
        shipped = received()[-1][2]

        # 1. the first release ever installed on this device reaches the running bridge
        fedagent("update", "install", "--from", url, "--trust", str(keys / "trust.json"), env=env)
        assert wait_until(lambda: received()[-1][2].startswith("r1-") or not running(), 120, 0.05)
        first = received()[-1][2]

        # 2. a release that fails on real faces is installed, fails in service and is rolled back by the bridge
        fedagent("publish", "--keys", str(keys), "--repo", str(repo), f"emotion={faulty}", env=env)
        fedagent("update", "install", "--from", url, env=env)
        assert wait_until(lambda: any(v.startswith("r2-") for _, _, v, _ in received()) or not running(),
                          120, 0.05), "the faulty release never served"
        assert wait_until(lambda: received()[-1][2] == first or not running(), 60, 0.05), \
            "the bridge did not go back to the first release"
        back = len(received())
        assert wait_until(lambda: len(received()) >= back + 60 or not running(), 120, 0.05)
        with urllib.request.urlopen(f"http://{monitor}/metrics", timeout=30) as reply:
            metrics = reply.read().decode()
        with urllib.request.urlopen(f"http://{monitor}/api/status", timeout=30) as reply:
            page = json.loads(reply.read())["stats"]  # what the monitor page shows
        status = json.loads(fedagent("update", "status", "--model", "emotion", "--json", env=env).stdout)
        said = fedagent("update", "status", "--model", "emotion", env=env).stdout
        again = subprocess.run([sys.executable, "-m", "fedagent", "update", "install", "--from", url, "--json"],
                               env=env, capture_output=True, text=True, timeout=180)
        time.sleep(1.0)  # the bridge sees the store's state after the refused install too
        bridge.terminate()
        out, err = bridge.communicate(timeout=120)
        subscriber.join(30)
    finally:
        collector.stop.set()
        server.terminate()
        if bridge is not None and bridge.poll() is None:
            bridge.kill()
            print(bridge.communicate()[1][-6000:])  # what the bridge said, for a failure above
    assert bridge.returncode == 0, err
    frames = received()
    versions = [v for _, _, v, _ in frames]
    faulty_version = next(v for v in versions if v.startswith("r2-"))

    # 1. taken live: shipped, then release 1, with no frame lost at the Live Link Face receiver
    assert versions[0] == shipped and not shipped.startswith("r") and first.startswith("r1-")
    numbers = [decode_llf_packet(p)["frame_number"] for _, p in collector.packets]
    dropped = int(re.search(r"(\d+) frames sent, .*?, (\d+) dropped", out).group(2))  # on a busy machine, counted
    skipped = sum(int(n) for n in re.findall(r"livelinkface[^:\n]*: (\d+) frames skipped", out + err))
    gaps = np.diff(numbers) - 1
    assert (gaps >= 0).all() and int(gaps.sum()) <= dropped + skipped, f"a frame went missing at the receiver: {out}"

    # 2. the faulty release served briefly, then release 1 again, and the faulty one never came back
    start, end = versions.index(faulty_version), len(versions) - 1 - versions[::-1].index(faulty_version)
    assert set(versions[start:end + 1]) == {faulty_version}
    assert set(versions[end + 1:]) == {first} and len(versions) - end > 60
    assert frames[end + 1][0] - frames[start][0] < 10.0  # rolled back within seconds, even on a loaded machine
    served_again = np.array([e for _, _, v, e in frames[end + 1:] if len(e)])
    before = np.array([e for _, _, v, e in frames if v == shipped and len(e)])
    assert np.isfinite(served_again).all() and \
        served_again[:, SURPRISE].mean() > before[:, SURPRISE].mean() + 0.2, \
        "release 1 (which reads every face as surprised) does not serve"
    freeze, repeated, since = _longest_freeze(collector.packets)
    # A second; on a machine so loaded that the stream itself runs at a few frames a second (the builds are as slow
    # then), a second's worth of frames of the 30 fps stream.
    assert freeze < FREEZE_S or repeated <= FPS, (
        f"a receiver saw the face frozen for {freeze:.2f} s ({repeated} frames) from {since - started:.2f} s; "
        f"the faulty release served from {frames[start][0] - started:.2f} s to {frames[end + 1][0] - started:.2f} s"
        f"\n{err}")
    assert "failed in service" in err and "rolled back to release 1" in err
    assert err.count(f"emotion now runs {faulty_version}") == 1, "the rolled-back release was run again"
    assert "rolled back emotion r2" in err  # the status line
    assert 'facebridge_release_rolled_back{model="emotion"} 2.0' in metrics
    assert page["rolled_back"] == {"emotion": 2} and page["releases"]["emotion"] == 1
    assert 'facebridge_update_status{facebridge_update_status="rolled_back"} 1.0' in metrics

    # the store: release 1 active, release 2 rolled back and refused when offered again
    assert status["release"] == 1 and status["rolled_back"] == [2]
    assert "rolled back (never installed again): release 2; last: failed in service" in said
    assert any(h.get("action") == "rollback" and "failed in service" in h.get("why", "") for h in status["history"])
    assert again.returncode == 13 and json.loads(again.stdout.splitlines()[-1])["reason"] == "rollback", again.stdout
