"""serve's MPS note is said where an MPS control daemon's pipe is, the pipe CUDA itself looks for."""
from __future__ import annotations

import os

from bridge.runtime.serve import MPS_NOTE, mps_running


def test_mps_is_seen_by_its_control_pipe_where_cuda_looks(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert not mps_running()
    os.mkfifo(tmp_path / "control")  # what nvidia-cuda-mps-control -d makes
    assert mps_running()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "elsewhere"))
    assert not mps_running()
    assert "nvidia-cuda-mps-control" in MPS_NOTE and "docs/PERFORMANCE.md" in MPS_NOTE
