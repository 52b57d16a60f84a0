"""The Omniverse extension's logic outside Kit: a real gRPC subscription applying frames to a usd-core stage."""
from __future__ import annotations

import ast
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pxr", reason="usd-core not installed (pip install 'facebridge[usd]')")
from pxr import Usd, UsdSkel  # noqa: E402

from bridge.frame import ARKIT_NAMES, FaceFrame  # noqa: E402
from bridge.grpc.server import GrpcSink  # noqa: E402
from bridge.omniverse.live_stream import StageApplier, StreamSubscription  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "bridge" / "omniverse" / "facebridge.livelink"


def frame(seq: int, subject: str = "Anna", value: float = 0.5) -> FaceFrame:
    f = FaceFrame(seq=seq, t_capture=time.time(), t_capture_mono=time.perf_counter(), subject=subject,
                  face_found=True, confidence=0.75)
    f.blendshapes = np.full(52, value, dtype=np.float32)
    f.blendshapes[17] = 0.9  # jawOpen
    f.head_rotation = np.array([15.0, 0.0, 0.0], dtype=np.float32)
    return f


def pump(sub: StreamSubscription, applier: StageApplier, until, timeout: float = 10.0) -> None:
    """What Kit's update loop does: drain on the stage's thread, apply, until `until()` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in sub.drain():
            applier.apply(message)
        if until():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out; subscription status: {sub.status}")


def test_live_frames_land_on_the_stage():
    sink = GrpcSink("127.0.0.1:0", token="omni")
    sub = StreamSubscription(sink.address, token="omni")
    stage = Usd.Stage.CreateInMemory()
    applier = StageApplier(stage)
    try:
        sub.start()
        for i in range(30):
            sink.send(frame(i, value=i / 100))
            sink.send(frame(i, subject="Ben", value=0.25))
            time.sleep(0.01)
        anim_path = "/FaceBridge/Anna/Skeleton/Animation"
        pump(sub, applier, lambda: applier.rig("Anna") is not None and applier.rig("Ben") is not None
             and applier.applied >= 2)
        sink.send(frame(99, value=0.33))
        pump(sub, applier, lambda: stage.GetPrimAtPath(anim_path).GetAttribute("facebridge:captureTime").Get()
             and abs(UsdSkel.Animation(stage.GetPrimAtPath(anim_path)).GetBlendShapeWeightsAttr().Get()[0] - 0.33)
             < 1e-6)
        anim = UsdSkel.Animation(stage.GetPrimAtPath(anim_path))
        assert list(anim.GetBlendShapesAttr().Get()) == list(ARKIT_NAMES)
        weights = np.array(anim.GetBlendShapeWeightsAttr().Get())
        assert weights[17] == pytest.approx(0.9, abs=1e-6)
        head = anim.GetRotationsAttr().Get()[0]
        assert 2 * np.degrees(np.arcsin(head.GetImaginary()[1])) == pytest.approx(15.0, abs=1e-3)
        assert not anim.GetBlendShapeWeightsAttr().GetTimeSamples()  # live values, not a growing animation
        cache = UsdSkel.Cache()
        cache.Populate(UsdSkel.Root(stage.GetPrimAtPath("/FaceBridge/Ben")), Usd.TraverseInstanceProxies())
        query = cache.GetSkelQuery(UsdSkel.Skeleton(stage.GetPrimAtPath("/FaceBridge/Ben/Skeleton")))
        assert np.array(query.GetAnimQuery().ComputeBlendShapeWeights(Usd.TimeCode.Default()))[0] == \
            pytest.approx(0.25)
    finally:
        sub.stop()
        sink.close()
    assert sub.status == "stopped"


def test_subscription_reconnects_when_the_bridge_restarts():
    sink = GrpcSink("127.0.0.1:0")
    address = sink.address
    sub = StreamSubscription(address, backoff_initial_s=0.1, backoff_max_s=0.3)
    stage = Usd.Stage.CreateInMemory()
    applier = StageApplier(stage)
    try:
        sub.start()
        sink.send(frame(0))
        pump(sub, applier, lambda: applier.applied >= 1)
        sink.close()
        time.sleep(0.5)
        assert "reconnecting" in sub.status or "connecting" in sub.status
        sink = GrpcSink(address)  # the bridge is back on the same port
        before = applier.applied
        deadline = time.monotonic() + 10
        while applier.applied == before and time.monotonic() < deadline:
            sink.send(frame(1, value=0.6))
            for message in sub.drain():
                applier.apply(message)
            time.sleep(0.05)
        assert applier.applied > before and sub.reconnects >= 1
    finally:
        sub.stop()
        sink.close()


def test_frames_without_their_header_are_ignored():
    from bridge.grpc.convert import build_frame, build_header
    from bridge.grpc.gen import facebridge_pb2 as pb

    stage = Usd.Stage.CreateInMemory()
    applier = StageApplier(stage)
    f = frame(0)
    applier.apply(pb.SubscribeResponse(frame=build_frame(f, 1)))
    assert applier.ignored == 1 and applier.rig("Anna") is None
    applier.apply(pb.SubscribeResponse(header=build_header(f, 1)))
    applier.apply(pb.SubscribeResponse(frame=build_frame(f, 2)))  # follows a header not seen
    applier.apply(pb.SubscribeResponse(frame=build_frame(f, 1)))
    assert (applier.ignored, applier.applied) == (2, 1)


def test_kit_extension_manifest_points_at_the_module():
    tomllib = pytest.importorskip("tomllib", reason="needs Python 3.11+ to read TOML")
    manifest = tomllib.loads((EXT / "config" / "extension.toml").read_text())
    module = manifest["python"]["module"][0]
    module_file = (EXT / module["path"]).resolve() / (module["name"].replace(".", "/") + ".py")
    assert module_file.is_file(), module_file
    tree = ast.parse(module_file.read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert any(ast.unparse(b) == "omni.ext.IExt" for c in classes for b in c.bases)
    assert manifest["settings"]["exts"]["facebridge.livelink"]["address"].startswith("127.0.0.1:")
    assert (EXT / manifest["package"]["readme"]).is_file()
