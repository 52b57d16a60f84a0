"""`facebridge run --faces 2` on a clip with two faces: two Live Link Face subjects and two VMC targets, received
by real sockets on 127.0.0.1; the second face enters after the first and leaves before the end."""
import subprocess
import threading
import time

import pytest
from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import BlockingOSCUDPServer

from bridge.formats.livelinkface import decode_llf_packet
from tests.helpers import facebridge_cmd, subprocess_env, two_face_clip, udp_collector

FRAMES = 60
SECOND = (10, 45)  # frames the second face is in view


def vmc_receiver():
    got = {"apply": 0, "jaw": []}
    dispatcher = Dispatcher()
    dispatcher.map("/VMC/Ext/Blend/Apply", lambda addr: got.__setitem__("apply", got["apply"] + 1))
    dispatcher.map("/VMC/Ext/Blend/Val", lambda addr, name, value: got["jaw"].append(value) if name == "jawOpen"
                   else None)
    server = BlockingOSCUDPServer(("127.0.0.1", 0), dispatcher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, got


@pytest.fixture
def two_vmc():
    pair = [vmc_receiver(), vmc_receiver()]
    yield pair
    for server, _ in pair:
        server.shutdown()
        server.server_close()


def test_two_faces_stream_as_two_subjects_to_live_link_face_and_vmc(tmp_path, two_vmc, isolated_home):
    clip = two_face_clip(tmp_path / "two.mp4", frames=FRAMES, second=SECOND)
    vmc = ",".join(f"127.0.0.1:{server.server_address[1]}" for server, _ in two_vmc)
    with udp_collector() as (llf_port, packets):
        proc = subprocess.run(facebridge_cmd("run", "--source", str(clip), "--fast", "--faces", "2",
                                             "--subject", "Alice,Bob", "--llf", f"127.0.0.1:{llf_port}",
                                             "--vmc", vmc, "--monitor", "off", "--updates", "off"),
                              env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
        time.sleep(0.3)  # let the last datagrams land
    assert f"{FRAMES} frames sent" in proc.stdout
    assert "up to 2 faces as Alice, Bob" in proc.stdout
    decoded = [decode_llf_packet(p) for p in packets]
    alice = [d for d in decoded if d["subject"] == "Alice"]
    bob = [d for d in decoded if d["subject"] == "Bob"]
    assert {d["subject"] for d in decoded} == {"Alice", "Bob"}
    assert len({d["device_id"] for d in alice}) == 1 and alice[0]["device_id"] != bob[0]["device_id"]
    assert len(alice) >= FRAMES * 0.9  # the first face from the first frame
    # the second face from its first detection after entering (a scan every 10 frames) to the end (as lost)
    assert FRAMES - SECOND[0] - 10 <= len(bob) <= FRAMES - SECOND[0]
    (_, first), (_, second) = two_vmc
    assert first["apply"] >= FRAMES * 0.9
    assert second["apply"] == pytest.approx(len(bob), abs=3)  # each face's VMC target gets that face alone
