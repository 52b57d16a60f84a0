"""`facebridge bench`: a mistyped argument is refused by argparse before anything runs (never a traceback), a
benchmark says what it does while it runs and ends with a results table, and the GPU section on a CPU says why
it measures nothing."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import facebridge_cmd, subprocess_env


def _run(*args, timeout=300):
    return subprocess.run(facebridge_cmd("bench", *args), env=subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("args, expected", [
    (["pipeline", "--configs", "one_cor"], "unknown configuration 'one_cor'; choose from one_core, two_stage"),
    (["pipeline", "--frames", "0"], "0 is not a positive number"),
    (["pipeline", "--backend", "tensorflow"], "invalid choice: 'tensorflow'"),
    (["engines", "--backends", "onnxrt"], "unknown backend 'onnxrt'"),
    (["engines", "--sections", "model"], "unknown section 'model'"),
    (["grpc", "--fps", "0"], "0 is not a positive number"),
])
def test_a_bad_argument_is_one_error_line(args, expected):
    proc = _run(*args, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and expected in errors[0], proc.stderr


def test_bench_pipeline_reports_progress_and_ends_with_a_table(tmp_path):
    out = tmp_path / "pipeline.json"
    proc = _run("pipeline", "--frames", "8", "--configs", "one_core", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "bench pipeline: one_core: loading the models" in proc.stderr
    assert "bench pipeline: one_core: timing 8 frames on" in proc.stderr
    table = proc.stdout.splitlines()
    assert table[0].split()[:3] == ["configuration", "backend", "cores"] and table[2].startswith("one_core")
    assert table[-1] == f"wrote {out}"
    assert table[-2].startswith("verdict: ") and not out.with_name("pipeline.json.partial").exists()
    assert json.loads(out.read_text())["results"]["configurations"]["one_core"]["frames"] == 8


def test_the_gpu_section_on_a_cpu_says_why_it_measures_nothing(tmp_path):
    from bridge.bench.common import torch_cuda

    if torch_cuda() is not None:
        pytest.skip("this machine has a CUDA GPU")
    out = tmp_path / "ms.json"
    proc = _run("engines", "--sections", "multistream", "--runners", "torch-cuda", "--precisions", "fp16",
                "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "multistream: skipped, it needs an NVIDIA GPU" in proc.stderr and "nothing measured" in proc.stderr
    assert proc.stdout.startswith("multistream: skipped, it needs an NVIDIA GPU")
    assert "needs an NVIDIA GPU" in json.loads(out.read_text())["results"]["multistream"]["skipped"]


def test_bench_grpc_ends_with_a_table_too(tmp_path):
    proc = _run("grpc", "--seconds", "0.5", "--json", str(tmp_path / "grpc.json"))
    assert proc.returncode == 0, proc.stderr
    assert "bench grpc: publishing 30 frames at 60 fps to 2 subscribers" in proc.stderr
    header, _, row = proc.stdout.splitlines()[:3]
    assert header.split()[:4] == ["frames", "fps", "subscribers", "stalled"] and row.split()[0] == "30"


def test_results_tables_line_up_and_show_missing_values():
    from bridge.bench.common import table

    text = table(["name", "ms"], [["a", 1.25], ["longer", None]])
    assert text.splitlines() == ["name      ms", "------  ----", "a       1.25", "longer     -"]


def test_a_bench_table_reads_as_words_and_units_never_reprs_or_negative_costs():
    from bridge.bench.common import cost_text, exit_text, figures_table
    from bridge.bench.engines import summary

    assert cost_text(-4.0) == "none measurable" and cost_text(3.14) == "+3.14%" and cost_text(None) == "not measured"
    assert exit_text(-15) == "killed by SIGTERM" and exit_text(0) == "exit 0 (clean)" and exit_text(None)
    text = figures_table({"fps": 31.5, "stages": {"detect_ms": 2.0, "note": "text"}, "ok": True})
    assert "stages.detect_ms  2" in text.replace("    ", "  ") or "detect_ms" in text
    assert "ms" in text and "fps" in text and "True" not in text and "text" not in text.split("\n", 2)[-1]
    results = {"models": {"face_landmark": {"onnxruntime": {"batch_1": {"median_ms": 1.5}}},
                          "regressor": {"skipped": "takes landmark features, not an image"},
                          "not_run": {"torch-eager-cpu": "needs onnx2torch, which is not installed"}}}
    table = summary(results)
    assert "ModuleNotFoundError" not in table and table.count("onnx2torch") == 1
    assert "torch-eager-cpu: not run, needs onnx2torch" in table and "audio model" not in table
