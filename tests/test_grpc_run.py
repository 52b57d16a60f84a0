"""`facebridge run --source sample --grpc` end to end, read by a client generated from proto/ alone."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bridge.frame import ARKIT_NAMES
from tests.grpc_bridge import running_bridge

CLIENT = Path(__file__).resolve().parent / "grpc_standalone_client.py"


def test_run_serves_header_then_frames_to_a_proto_only_client(tmp_path):
    with running_bridge(tmp_path / "home", token="run-token") as address:
        out = subprocess.run([sys.executable, str(CLIENT), address, "--frames", "15", "--token", "run-token"],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not result["bridge_imported"]
    assert "facebridge.v1.FaceBridgeService" in result["services"]
    assert result["first_part"] == "header"
    assert result["header"]["curve_names"] == list(ARKIT_NAMES)
    assert result["header"]["model_versions"], "the header names the active models"
    assert result["frame_count"] == 15
    assert all(f["curves"] == 52 and f["layout_id"] == result["header"]["layout_id"] for f in result["frames"])
    assert any(f["face_found"] for f in result["frames"]), "the sample clip shows a face"
