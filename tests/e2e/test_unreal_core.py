"""The Unreal plugin's C++ core: CMake build, then its GoogleTest suite (ctest) against a running bridge."""
from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.grpc.bridge_process import running_bridge

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "unreal_plugin" / "core"
BUILD = CORE / "build"  # kept between runs (git-ignored) so that local reruns only rebuild what changed


def _missing_tools() -> str:
    need = {"cmake": "cmake", "c++": "g++", "protoc": "protobuf-compiler", "grpc_cpp_plugin": "protobuf-compiler-grpc"}
    missing = [pkg for tool, pkg in need.items() if shutil.which(tool) is None]
    grpc_dirs = ("/usr/lib/x86_64-linux-gnu/cmake/grpc", "/usr/lib/aarch64-linux-gnu/cmake/grpc",
                 "/usr/local/lib/cmake/grpc")
    if not any(Path(p).exists() for p in grpc_dirs):
        missing.append("libgrpc++-dev")
    if not any(Path(p).exists() for p in ("/usr/src/googletest", "/usr/lib/x86_64-linux-gnu/cmake/GTest",
                                          "/usr/lib/aarch64-linux-gnu/cmake/GTest")):
        missing.append("libgtest-dev")
    return " ".join(missing)


MISSING = _missing_tools()


@pytest.fixture(scope="module")
def core_build():
    if MISSING:
        pytest.skip(f"C++ toolchain missing: apt-get install {MISSING} libprotobuf-dev (`make test` installs them)")
    subprocess.run(["cmake", "-S", str(CORE), "-B", str(BUILD)], check=True, capture_output=True, text=True)
    build = subprocess.run(["cmake", "--build", str(BUILD), "-j", "2"], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    return BUILD


def _ctest(build: Path, tmp_path: Path, env: dict) -> dict[str, str]:
    """Runs ctest; returns {test name: status} from the gtest XML each test writes."""
    reports = tmp_path / "gtest"
    reports.mkdir(exist_ok=True)
    env = dict(os.environ, **env, GTEST_OUTPUT=f"xml:{reports}/")
    run = subprocess.run(["ctest", "--test-dir", str(build), "--output-on-failure", "--timeout", "90"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    results = {}
    for xml in reports.glob("*.xml"):
        for case in ET.parse(xml).getroot().iter("testcase"):
            skipped = case.find("skipped") is not None or case.get("result") == "skipped"
            results[f"{case.get('classname')}.{case.get('name')}"] = "skipped" if skipped else "passed"
    return results


def test_core_unit_and_live_tests_pass_against_the_bridge(core_build, tmp_path):
    from bridge.calibration import CalibrationProfile
    from tests.helpers import face_frame

    # The live tests calibrate the bridge's subject: a profile stored before must come through untouched.
    profile = CalibrationProfile.from_frames("FaceBridge", [face_frame(i) for i in range(10)])
    stored = profile.save(tmp_path / "home" / "profiles")
    before = stored.read_bytes()
    with running_bridge(tmp_path / "home", token="ctest-token") as (address, bridge):
        results = _ctest(core_build, tmp_path, {"FACEBRIDGE_TEST_ADDRESS": address,
                                                "FACEBRIDGE_TEST_TOKEN": "ctest-token"})
        assert bridge.poll() is None, "the bridge must survive every client the C++ tests threw at it"
    live = {k: v for k, v in results.items() if k.startswith("StreamClientLive.")}
    assert len(live) >= 5, results
    assert set(live.values()) == {"passed"}, live  # none skipped: they really talked to the bridge
    assert results.get("StreamDecoder.TruncatedAndCorruptedBytesNeverCrash") == "passed"
    assert len(results) >= 15
    assert stored.read_bytes() == before, "the C++ live tests overwrote the stored calibration profile"
