"""`facebridge bench engines --sections multistream`: every trial is checkpointed as it ends."""
from __future__ import annotations

import subprocess

import pytest


def test_bench_multistream_search_writes_every_trial_as_it_ends(tmp_path):
    """The multi-stream search through the real CLI, on the CPU runners (the GPU runs use the same code): the
    JSON holds the trials and the answer. Each trial is also on disk as it ends (`.partial`), so a run cut short
    by a wall-clock limit keeps what it measured: checked by running the section alone, as a cut run leaves it."""
    pytest.importorskip("torch")
    import argparse
    import json
    import sys

    from bridge.bench import engines as bench
    from bridge.bench.multistream import multistream_section

    flags = ["--sections", "multistream", "--multistream", "on", "--runners", "onnxruntime", "--first-streams", "1",
             "--max-streams", "2", "--stream-seconds", "0.3", "--frames-from", "gpu,host-async", "--threads", "1"]
    out = tmp_path / "ms.json"
    proc = subprocess.run([sys.executable, "-m", "bridge", "bench", "engines", *flags, "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    section = json.loads(out.read_text())["results"]["multistream"]["onnxruntime-fp32"]
    trials = section["frames_on_gpu"]["trials"]
    assert trials[0]["streams"] == 1 and all(t["frames"] > 0 and t["seconds"] >= 0.3 for t in trials)
    # uploads on arrival: results come back, one per stream and pass, and never more than the frames that arrived
    # by the trial's end, warm-up (0.5 s) included (none counted twice); a busy machine only makes fewer
    uploaded = section["frames_from_host_uploaded_on_arrival"]["trials"][0]
    assert uploaded["streams"] == 1 and 0 < uploaded["frames"] == uploaded["passes"]
    assert uploaded["frames"] <= (0.5 + uploaded["seconds"]) * 30 + 1
    assert section["compiled_models"] == [] and section["frames_on_gpu"]["max_streams_at_p99_limit"] in (0, 1, 2)

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    parser.add_argument("--json")  # `facebridge bench` adds it to every benchmark
    args = parser.parse_args([*flags, "--json", str(tmp_path / "cut.json")])
    from torch._dynamo.utils import counters

    counters.clear()  # process-wide: other tests compile
    multistream_section(args, "onnxruntime", "fp32")
    partial = json.loads((tmp_path / "cut.json.partial").read_text())
    kept = partial["multistream_in_progress"]["onnxruntime-fp32"]["frames_on_gpu"]["trials"]
    assert kept and kept[0]["streams"] == 1 and kept[0]["frames"] > 0
    assert partial["multistream_in_progress"]["onnxruntime-fp32"]["compiled_graphs"] == 0  # nothing compiled on CPU
