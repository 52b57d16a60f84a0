"""MPS is seen where an MPS control daemon's pipe is, the pipe CUDA itself looks for (serve's word on
--decode-processes without it)."""
from __future__ import annotations

import os

from bridge.runtime.serve_engine import mps_running


def test_mps_is_seen_by_its_control_pipe_where_cuda_looks(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert not mps_running()
    os.mkfifo(tmp_path / "control")  # what nvidia-cuda-mps-control -d makes
    assert mps_running()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "elsewhere"))
    assert not mps_running()
