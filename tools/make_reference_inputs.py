"""Write the bridge's own reference inputs (bridge/data/reference_inputs/): what the bridge itself feeds each
model on real data, which a device runs every new release of that model on (bridge/updates/bridge_inputs.py).

The inputs are recorded, not synthesised: the real pipeline (onnxruntime backend) runs on frames of
bridge/data/sample.mp4 and the lip-sync model and the voice-activity model run on the loudest second of
bridge/data/sample_speech.wav, and every feed a model session receives is captured. Up to ITEMS feeds a model are
kept (float16 to keep the files small: real face crops and speech features, not exact values). Each output gets
the range its consumers accept (RANGES, from what the outputs mean); the shipped model's outputs on these inputs
must lie inside, or this tool refuses to write. index.json records each file's sha256 and the ranges.

    python tools/make_reference_inputs.py [--check]   # --check: rebuild in memory, compare with what is shipped
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bridge" / "data" / "reference_inputs"
ITEMS = 2
FRAMES = 12  # sample.mp4 frames run through the pipeline (every 10th frame: varied poses)
BIG = 1e4  # a logit or raw score: any finite value up to this is accepted
# model -> output -> [low, high] its consumers accept (coordinates in the model's input pixels, probabilities,
# logits, degrees); anything outside, or not finite, is a model the stream cannot use
RANGES = {
    "face_detection_short_range": {"regressors": [-10 * BIG, 10 * BIG], "classificators": [-10 * BIG, 10 * BIG]},
    "face_detection_full_range": {"reshaped_regressor_face_4": [-10 * BIG, 10 * BIG],
                                  "reshaped_classifier_face_4": [-10 * BIG, 10 * BIG]},
    "face_landmark": {"conv2d_20": [-192, 384], "conv2d_30": [-BIG, BIG]},
    "iris_landmark": {"output_eyes_contours_and_brows": [-64, 128], "output_iris": [-64, 128]},
    "emotion": {"emotion_probs": [0, 1]},
    "regressor": {"blendshapes": [-0.5, 1.5], "head_rotation": [-180, 180]},
    "lipsync": {"visemes": [0, 1], "mouth": [-2, 2], "state_out": [-BIG, BIG]},
    "silero_vad": {"output": [0, 1], "stateN": [-BIG, BIG]},
}


def _record() -> dict[str, list[dict[str, np.ndarray]]]:
    """model name -> the feeds its sessions received while the bridge ran on the sample video and speech."""
    from bridge.audio import lipsync
    from bridge.engines import onnxruntime_backend

    seen: dict[str, list[dict[str, np.ndarray]]] = {}

    def recording(cls):
        init, run = cls.__init__, cls.run

        def __init__(self, model_path, *args, **kw):
            init(self, model_path, *args, **kw)
            self._recorded_as = Path(str(model_path)).stem

        def record(self, feeds):
            items = seen.setdefault(getattr(self, "_recorded_as", "?"), [])
            if len(items) < 64:
                items.append({k: np.array(v) for k, v in feeds.items()})
            return run(self, feeds)
        cls.__init__, cls.run = __init__, record

    recording(onnxruntime_backend.OrtSession)
    recording(lipsync._AdapterSession)
    _run_video()
    _run_speech()
    return seen


def _run_video() -> None:
    import time

    from bridge.engines.shipped import sample_frames
    from bridge.frame import Frame
    from bridge.pipeline import FacePipeline, PipelineOptions

    pipeline = FacePipeline(PipelineOptions(backend="onnxruntime", emotion_every=1))
    for seq, rgb in enumerate(sample_frames(FRAMES, step=10)):
        now = time.time()
        pipeline.process(Frame(np.ascontiguousarray(rgb[:, :, ::-1]), seq, now, time.perf_counter(), seq / 3.0))
    pipeline.run_deferred()


def _run_speech() -> None:
    import wave

    from bridge.audio.lipsync import analyze

    with wave.open(str(ROOT / "bridge" / "data" / "sample_speech.wav")) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0
        rate = w.getframerate()
    assert rate == 16000, rate
    starts = range(0, max(1, len(pcm) - rate), rate // 4)
    loudest = max(starts, key=lambda i: float(np.square(pcm[i:i + rate]).mean()))  # a second of speech, not silence
    analyze(pcm[loudest:loudest + rate])


def _pick(feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """ITEMS feeds spread over what was recorded, leaving out warm-up feeds (a constant image or signal)."""
    real = [f for f in feeds if any(np.ptp(v) > 0 for v in f.values() if v.dtype == np.float32 and v.size > 1)]
    if not real:
        return []
    index = np.linspace(0, len(real) - 1, min(ITEMS, len(real))).round().astype(int)
    return [real[i] for i in sorted(set(index))]


def _npz(items: list[dict[str, np.ndarray]]) -> bytes:
    arrays = {}
    for i, feeds in enumerate(items):
        for name, value in feeds.items():
            arrays[f"item{i}.{name}"] = value.astype(np.float16) if value.dtype == np.float32 else value
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def build() -> tuple[dict[str, bytes], dict]:
    from bridge.models.registry import default_registry
    from bridge.updates.bridge_inputs import load_items, run_checked
    from bridge.updates.smoke import ReleaseSession

    recorded = _record()
    registry = default_registry()
    files, index = {}, {"schema": 1, "models": {}}
    for model, ranges in RANGES.items():
        picked = _pick(recorded.get(model, []))
        if not picked:
            print(f"{model}: not run by the bridge on the sample's real data (no reference inputs)", file=sys.stderr)
            continue
        data = _npz(picked)
        name = f"{model}.npz"
        files[name] = data
        index["models"][model] = {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "ranges": ranges}
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / name).write_bytes(data)
            items = load_items(Path(tmp) / name, name)
        session = ReleaseSession(registry.shipped_path(model))
        run_checked(model, session, items, ranges)  # the shipped model must pass its own check
        print(f"{model}: {len(items)} items, {len(data)} bytes", file=sys.stderr)
    return files, index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare a rebuild's inputs with the shipped ones")
    args = parser.parse_args()
    files, index = build()
    if args.check:
        shipped = json.loads((OUT / "index.json").read_text())
        same = {m: shipped["models"].get(m, {}).get("ranges") == index["models"].get(m, {}).get("ranges")
                for m in set(shipped["models"]) | set(index["models"])}
        print(json.dumps(same))
        return 0 if all(same.values()) else 1
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (OUT / name).write_bytes(data)
    (OUT / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(files)} files to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
