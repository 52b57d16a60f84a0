"""`fedagent bench-update`: time each install step of signed releases served over loopback HTTP.

Two releases are measured, each published `repeats` + 1 times into a fresh repository and installed in order on
one device (the first install, which also bootstraps trust, is not counted): the lip-sync adapter (5.7 KB, the
update federated learning produces) and the whole lip-sync model as a "model" release (0.91 MB, the 1 MB case).
Every step is the installer's own timing (InstallResult.steps); `total` is the wall time of `install()`.
Results are medians and maxima in milliseconds, as JSON (the `facebridge bench` convention).
"""
from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import tuf

from bridge.models.registry import ModelRegistry
from bridge.updates.install import install
from fedagent.publisher.keys import KeyRing
from fedagent.publisher.publish import ReleaseSpec, publish
from fedagent.publisher.repo_server import RepoServer


def _case(root: Path, name: str, spec: ReleaseSpec, repeats: int) -> dict:
    keys, repo, state = root / name / "keys", root / name / "repo", root / name / "state"
    ring = KeyRing.init(keys)
    samples: dict[str, list[float]] = {}
    size = 0
    with RepoServer(repo) as server:
        for i in range(repeats + 1):
            publish(keys, repo, [spec])
            t0 = time.perf_counter()
            result = install(server.url, state, trust=(ring.dir / "trust.json").read_bytes(), models=[spec.model])[0]
            total = time.perf_counter() - t0
            assert result.status == "installed", result
            size = sum(f["length"] for f in result.files.values())
            if i == 0:
                continue  # the first install bootstraps trust
            for step, seconds in {**result.steps, "total": total}.items():
                samples.setdefault(step, []).append(seconds * 1e3)
    return {"release_bytes": size, "main_file_bytes": Path(spec.path).stat().st_size, "installs": repeats,
            "median_ms": {k: round(statistics.median(v), 2) for k, v in samples.items()},
            "max_ms": {k: round(max(v), 2) for k, v in samples.items()}}


def run(repeats: int = 5) -> dict:
    registry = ModelRegistry(tempfile.mkdtemp(prefix="fb-bench-registry-"))
    cases = {"adapter": ReleaseSpec("lipsync", registry.default_adapter_path("lipsync")),
             "model_1mb": ReleaseSpec("lipsync", registry.shipped_path("lipsync"))}
    with tempfile.TemporaryDirectory(prefix="fb-bench-update-") as tmp:
        results = {name: _case(Path(tmp), name, spec, repeats) for name, spec in cases.items()}

    return {"bench": "update", "machine": {"cpu": platform.processor() or platform.machine(),
                                           "cores": os.cpu_count(), "python": platform.python_version(),
                                           "tuf": tuf.__version__},
            "source": "loopback HTTP (fedagent serve-repo's server, 127.0.0.1)", "cases": results}
