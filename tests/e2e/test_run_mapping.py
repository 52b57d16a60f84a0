"""`facebridge run --mapping` end to end on the sample: Live Link Face, VMC, iFacialMocap and gRPC receivers on real
sockets, the take and its USD export all see the mapped weights (eyeBlinkLeft gain 2, jawOpen gain 0)."""
from __future__ import annotations

import json
import subprocess
import threading

import grpc
import numpy as np
import pytest
from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import BlockingOSCUDPServer

from bridge.frame import ARKIT_INDEX, ARKIT_NAMES
from tests.e2e.test_run import parse_llf
from tests.grpc.bridge_process import free_tcp_port
from tests.helpers import facebridge_cmd, subprocess_env, udp_collector, wait_until

FRAMES = 300  # the whole clip: it blinks four times (peak eyeBlinkLeft 0.78 without a mapping), so a gRPC
# subscriber that connects late and reads the newest frame still sees blinks on a busy machine
BLINK, JAW = ARKIT_INDEX["eyeBlinkLeft"], ARKIT_INDEX["jawOpen"]
MAPPING = {"blendshapes": {"eyeBlinkLeft": {"gain": 2.0}, "jawOpen": {"gain": 0.0}}}


def parse_ifm(text: str) -> tuple[dict[str, float], list[float]]:
    """A receiver written from the iFacialMocap developer page: `name-value|...|=head#X,Y,Z,x,y,z|rightEye#...|`,
    values 0-100, side suffixes _L/_R. Returns ({ARKit name: weight 0-1}, head's six numbers)."""
    shapes_text, _, pose_text = text.partition("=")
    weights = {}
    for item in filter(None, shapes_text.split("|")):
        name, _, value = item.rpartition("-")
        if name.endswith("_L"):
            name = name[:-2] + "Left"
        elif name.endswith("_R"):
            name = name[:-2] + "Right"
        weights[name] = int(value) / 100.0
    pose = {}
    for item in filter(None, pose_text.split("|")):
        key, _, numbers = item.partition("#")
        pose[key] = [float(v) for v in numbers.split(",")]
    assert set(pose) == {"head", "rightEye", "leftEye"} and len(pose["head"]) == 6
    return weights, pose["head"]


def grpc_frames(address: str, out: list, stop: threading.Event) -> None:
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=90)
        for part in pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest(), timeout=120):
            if part.HasField("frame") and part.frame.face_found:
                out.append(np.array(part.frame.curves))
            if stop.is_set():
                break
    except grpc.RpcError:
        pass  # the bridge ended the stream
    finally:
        channel.close()


def test_a_mapping_reaches_every_output(tmp_path, isolated_home):
    mapping = tmp_path / "M.json"
    mapping.write_text(json.dumps(MAPPING))
    take = tmp_path / "take"
    osc: list[tuple[str, float]] = []
    dispatcher = Dispatcher()
    dispatcher.map("/VMC/Ext/Blend/Val", lambda addr, name, value: osc.append((name, value)))
    vmc = BlockingOSCUDPServer(("127.0.0.1", 0), dispatcher)
    threading.Thread(target=vmc.serve_forever, daemon=True).start()
    grpc_address = f"127.0.0.1:{free_tcp_port()}"
    curves: list[np.ndarray] = []
    stop = threading.Event()
    subscriber = threading.Thread(target=grpc_frames, args=(grpc_address, curves, stop), daemon=True)
    subscriber.start()
    try:
        with udp_collector() as (llf_port, llf), udp_collector() as (ifm_port, ifm):
            cmd = facebridge_cmd("run", "--source", "sample", "--max-frames", str(FRAMES), "--quiet",
                                 "--mapping", str(mapping), "--llf", f"127.0.0.1:{llf_port}",
                                 "--vmc", f"127.0.0.1:{vmc.server_address[1]}", "--ifm", f"127.0.0.1:{ifm_port}",
                                 "--grpc", grpc_address, "--record", str(take), "--monitor", "off")
            proc = subprocess.run(cmd, env=subprocess_env(isolated_home), capture_output=True, text=True,
                                  timeout=180)
            assert proc.returncode == 0, proc.stderr[-3000:]
            wait_until(lambda: len(llf) >= FRAMES and len(ifm) >= FRAMES, timeout=10)
            llf_values = np.array([parse_llf(p)[4][:52] for p in llf])
            ifm_frames = [parse_ifm(p.decode("utf-8")) for p in ifm]
    finally:
        stop.set()
        vmc.shutdown()
        vmc.server_close()
        subscriber.join(10)

    # Live Link Face: every frame, the blink reaches 1.0 (0.78 unmapped) and the jaw never opens
    assert len(llf_values) >= FRAMES * 0.9
    assert llf_values[:, BLINK].max() >= 0.999 and np.all(llf_values[:, JAW] == 0.0)
    assert llf_values[:, ARKIT_INDEX["eyeBlinkRight"]].max() < 0.95, "an unmapped shape stays as measured"

    # iFacialMocap: every frame's 52 values (whole percent) and the head's rotation and position
    assert len(ifm_frames) >= FRAMES * 0.9
    assert all(set(w) == set(ARKIT_NAMES) for w, _ in ifm_frames)
    assert max(w["eyeBlinkLeft"] for w, _ in ifm_frames) == 1.0
    assert all(w["jawOpen"] == 0.0 for w, _ in ifm_frames)
    yaws = np.array([head[1] for _, head in ifm_frames])
    assert np.ptp(yaws) > 1.0, "the sample turns its head (degrees)"
    assert np.allclose(np.array([w["eyeBlinkLeft"] for w, _ in ifm_frames[:len(llf_values)]]),
                       np.round(llf_values[:len(ifm_frames), BLINK] * 100) / 100, atol=0.011)

    # VMC
    vmc_blink = [v for n, v in osc if n == "eyeBlinkLeft"]
    assert max(vmc_blink) >= 0.999 and all(v == 0.0 for n, v in osc if n == "jawOpen")

    # gRPC (a subscriber may miss frames while it connects: it reads the newest)
    assert curves, "the gRPC subscriber got frames"
    assert all(c[JAW] == 0.0 for c in curves)
    assert max(c[BLINK] for c in curves) >= 0.999

    # the take and its USD export
    rows = [json.loads(line) for line in (take / "frames.jsonl").read_text().splitlines()]
    blinks = np.array([r["blendshapes"][BLINK] for r in rows])
    assert len(rows) == FRAMES and blinks.max() >= 0.999
    assert all(r["blendshapes"][JAW] == 0.0 for r in rows)
    pytest.importorskip("pxr", reason="usd-core not installed")
    from pxr import Usd, UsdSkel

    usd = tmp_path / "take.usda"
    out = subprocess.run(facebridge_cmd("export-usd", str(take), str(usd)), env=subprocess_env(isolated_home),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stage = Usd.Stage.Open(str(usd))
    anim = next(UsdSkel.Animation(p) for p in stage.Traverse() if p.IsA(UsdSkel.Animation))
    attr = anim.GetBlendShapeWeightsAttr()
    weights = np.array([attr.Get(t) for t in attr.GetTimeSamples()])
    assert weights[:, BLINK].max() >= 0.999 and np.all(weights[:, JAW] == 0.0)


@pytest.mark.parametrize("content, expected", [
    ('{"blendshapes": {"eyeBlinkLeft": {"gian": 2}}}', 'unknown setting "gian"'),
    ('{"blendshapes": {"eyeBlinkLft": {"gain": 2}}}', "did you mean eyeBlinkLeft"),
    ('{"blendshapes": {"jawOpen": {"gain": -1}}}', "blendshapes.jawOpen.gain is -1"),
    ('{"blendshapes": ', "is not JSON"),
    ('[1, 2]', "not an object"),
    ('{"smoothing": {"nose": 1}}', 'unknown setting "nose"'),
])
def test_a_bad_mapping_file_is_one_line(tmp_path, isolated_home, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "2", "--mapping", str(bad),
                                         "--vmc", "off", "--llf", "off", "--monitor", "off"),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if "error" in line or "Traceback" in line]
    assert len(lines) == 1 and lines[0].startswith("facebridge: error:") and expected in lines[0], proc.stderr
