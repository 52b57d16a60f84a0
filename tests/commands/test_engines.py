"""`facebridge engines build|list|verify|clear` on real TensorRT-RTX builds."""
from __future__ import annotations

import pytest

from tests.helpers import onnx_model_with

trt_rtx = pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX is in the test extra")

def test_engines_command_build_list_verify_clear(tmp_path, capsys):
    from bridge.cli import main

    args = ["--cache-dir", str(tmp_path), "--backend", "tensorrt-rtx"]
    assert main(["engines", "build", "emotion", "--opt-level", "0", *args]) == 0
    assert "emotion: built in" in capsys.readouterr().out
    assert main(["engines", "build", "emotion", "--opt-level", "0", *args]) == 0
    assert "emotion: cached" in capsys.readouterr().out
    kernel = tmp_path / "torch-inductor" / "fxgraph" / "ab" / "kernel"  # what torch.compile leaves there
    kernel.parent.mkdir(parents=True)
    kernel.write_text("{}")
    (tmp_path / "torch-inductor" / "index.json").write_text("{}")  # not an engine's metadata, though it looks so
    assert main(["engines", "list", *args]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "emotion" in out and "sm86" in out
    assert "compiled torch kernels in" in out and "2 files" in out  # reported, not listed as an engine
    runners = out.split("multi-stream face runners here")[1].split("engines in")[0]
    torch_cuda_line = next(line for line in runners.splitlines() if " torch-cuda " in line)
    assert "onnxruntime" in runners and torch_cuda_line.split()[0] in ("yes", "no")
    if torch_cuda_line.startswith("  no"):  # this machine has no CUDA torch: the line says why
        assert "torch" in torch_cuda_line and ("CUDA" in torch_cuda_line or "not installed" in torch_cuda_line)
    assert main(["engines", "verify", *args]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")
    assert main(["engines", "clear", *args]) == 0
    assert not list(tmp_path.rglob("*.engine")) and not (tmp_path / "torch-inductor").exists()


def test_engines_build_of_an_unparsable_model_fails_with_the_node(tmp_path, capsys):
    from bridge.cli import main

    path = onnx_model_with("Det", tmp_path)
    assert main(["engines", "build", str(path), "--cache-dir", str(tmp_path / "c"), "--opt-level", "0"]) == 1
    assert "det_1" in capsys.readouterr().err


def test_engines_build_keeps_tensorrt_native_output_out_and_counts_skipped_models(tmp_path):
    """Building the lip-sync model without a GPU: TensorRT-RTX's refittable attempt fails with its own raw text
    on stderr (MyelinCheckException); the user sees one line of ours instead. Every shipped model built: the
    known unbuildable one is counted as skipped, not as ready."""
    import subprocess

    from tests.helpers import facebridge_cmd, subprocess_env

    proc = subprocess.run(facebridge_cmd("engines", "build", "--cache-dir", str(tmp_path), "--opt-level", "0"),
                          env=subprocess_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    assert "MyelinCheckException" not in proc.stderr and "Internal Error" not in proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("7 of 8 models ready, 1 skipped (they run on ONNX Runtime)"), last
    assert "silero_vad: skipped" in proc.stdout
