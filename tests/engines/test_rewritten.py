"""Model bytes rewritten at load come from the engine cache after the first start: the same bytes, the same outputs,
and a damaged, stale or unwritable cache costs only the time of rewriting again."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.engines import create_session, litert_mediapipe_ops, onnxruntime_backend
from bridge.engines.rewritten import cached_rewrite, versions_of
from bridge.engines.shipped import find_model
from bridge.models import model_path
from bridge.stages.attention import MODEL as ATTENTION


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FACEBRIDGE_ENGINE_CACHE", str(tmp_path / "engines"))
    return tmp_path / "engines" / "rewritten"


class Counting:
    def __init__(self, result):
        self.calls, self.result = 0, result

    def __call__(self, source: bytes):
        self.calls += 1
        return self.result(source) if callable(self.result) else self.result


def test_a_rewrite_runs_once_then_comes_from_the_cache(cache):
    rewrite = Counting(lambda source: {"model": source[::-1], "meta": b"{}"})
    first = cached_rewrite("kind", {"v": "1"}, b"shipped bytes", rewrite)
    again = cached_rewrite("kind", {"v": "1"}, b"shipped bytes", rewrite)
    assert first == again == {"model": b"setyb deppihs", "meta": b"{}"} and rewrite.calls == 1
    nothing = Counting(None)  # nothing to rewrite is remembered too
    assert cached_rewrite("kind", {"v": "1"}, b"other", nothing) is None
    assert cached_rewrite("kind", {"v": "1"}, b"other", nothing) is None and nothing.calls == 1


def test_other_source_bytes_or_versions_are_rewritten_anew(cache):
    rewrite = Counting(lambda source: {"model": source + b"!"})
    cached_rewrite("kind", {"v": "1"}, b"a", rewrite)
    assert cached_rewrite("kind", {"v": "1"}, b"b", rewrite) == {"model": b"b!"}
    assert cached_rewrite("kind", {"v": "2"}, b"a", rewrite) == {"model": b"a!"}
    assert rewrite.calls == 3 and len(list(cache.iterdir())) == 3


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty"])
def test_a_damaged_file_is_never_used_and_is_replaced(cache, damage):
    source = bytes(range(256)) * 64
    rewrite = Counting(lambda source: {"model": source[1:]})
    cached_rewrite("kind", {}, source, rewrite)
    (path,) = cache.iterdir()
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        at = data.index(source[1:100]) + 50  # inside the stored model's bytes
        data[at] ^= 0xFF
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert cached_rewrite("kind", {}, source, rewrite) == {"model": source[1:]} and rewrite.calls == 2
    assert cached_rewrite("kind", {}, source, rewrite) == {"model": source[1:]} and rewrite.calls == 2


def test_an_unwritable_cache_still_rewrites(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("FACEBRIDGE_ENGINE_CACHE", str(blocked / "engines"))
    assert cached_rewrite("kind", {}, b"x", lambda source: {"model": b"y"}) == {"model": b"y"}


def test_the_key_names_the_rewriting_code_and_the_packages():
    from bridge.engines import onnx_passes

    fields = versions_of(onnx_passes, packages=("onnxruntime", "no-such-package-here"))
    assert set(fields) == {"bridge.engines.onnx_passes", "onnxruntime", "no-such-package-here"}
    assert fields["no-such-package-here"] == "absent" and len(fields["bridge.engines.onnx_passes"]) == 16


@pytest.mark.parametrize("backend", ["onnxruntime", "litert"])
def test_a_session_from_the_cache_gives_the_outputs_of_one_rewritten_at_load(cache, backend, monkeypatch):
    # onnxruntime: the PRelu rewrite of the landmark model; litert: the attention mesh cut at MediaPipe's ops
    path = find_model("face_landmark").path if backend == "onnxruntime" else model_path(ATTENTION)
    x = np.random.default_rng(5).uniform(0.0, 1.0, (1, 3, 192, 192)).astype(np.float32)
    first = create_session(path, backend)
    stored = sorted(cache.iterdir())
    assert stored, "nothing was stored"
    rewrites = []  # the second session must not rewrite
    if backend == "onnxruntime":
        monkeypatch.setattr(onnxruntime_backend, "_cpu_rewrite", lambda data: rewrites.append(1))
    else:
        monkeypatch.setattr(litert_mediapipe_ops, "_cut", lambda data: rewrites.append(1))
    again = create_session(path, backend)
    assert rewrites == []
    assert sorted(cache.iterdir()) == stored
    feed = {first.inputs[0].name: x}
    want, got = first.run(feed), again.run(feed)
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)


def test_engines_clear_removes_the_rewritten_models(cache):
    from bridge.engines.cache import EngineCache

    rewrite = Counting(lambda source: {"model": source * 2})
    cached_rewrite("kind", {}, b"ab", rewrite)
    assert EngineCache().clear() == 1 and not list(cache.glob("*.npz"))
    assert cached_rewrite("kind", {}, b"ab", rewrite) == {"model": b"abab"} and rewrite.calls == 2
