"""`facebridge bench precision`: what each CPU inference precision costs in accuracy and buys in speed.

Configurations: ONNX Runtime f32 (the reference), OpenVINO f32 and OpenVINO bf16 (bf16 runs f32 on a CPU
without native bf16; the JSON records what really ran). Three measurements, all on the bundled sample:
- models: the exact tensors the reference pipeline fed each model on the 300 sample frames, replayed on every
  configuration; landmark and iris errors in pixels at the model's own input scale (192 and 64 px);
- pipeline: every configuration tracks the sample by itself (its own regions, smoothing off and on); landmark
  error in image pixels, blendshape and head-pose error against the reference frame by frame;
- still: one sample frame repeated with seeded sensor noise (and without), smoothing off: the jitter (standard
  deviation over frames, after the first SETTLE frames) of landmarks, blendshapes and head angles.
Speed: per-model run time and the whole pipeline's time per frame, the configurations taking turns (round by
round, every 30 frames) so machine noise hits all alike. Pin it
for one-core figures: `taskset -c 1 facebridge bench precision --json out.json`.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from bridge.bench.common import percentiles
from bridge.frame import ARKIT_NAMES

MODELS = ("face_landmark", "iris_landmark", "emotion", "regressor")


def add_arguments(p) -> None:
    p.add_argument("--frames", type=int, default=300, help="sample frames for the models and pipeline parts")
    p.add_argument("--still-frames", type=int, default=120, help="frames of the still face")
    p.add_argument("--noise", type=float, default=2.0, help="still face: sensor noise std in 8-bit levels")
    p.add_argument("--rounds", type=int, default=5, help="speed: interleaved rounds per configuration")


def configurations() -> list[tuple[str, str]]:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines import check_available

    configs = [("onnxruntime", "f32")]
    if check_available("openvino").ok:
        configs += [("openvino", "f32"), ("openvino", "bf16")]
    return configs


class _Recorder:
    """A real session that also keeps every feed it was given (to replay the same tensors elsewhere)."""

    def __init__(self, session) -> None:
        self.session, self.feeds = session, []
        self.inputs, self.outputs, self.backend_name = session.inputs, session.outputs, session.backend_name

    def run(self, feeds):
        self.feeds.append({k: v.copy() for k, v in feeds.items()})
        return self.session.run(feeds)


def _pipeline(backend: str, precision: str, smoothing: bool = False):
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.pipeline import FacePipeline, PipelineOptions

    return FacePipeline(PipelineOptions(backend=backend, cpu_precision=precision, threads=1, smoothing=smoothing))


def _sessions(pipeline) -> dict:
    return {"face_landmark": pipeline.landmarker, "iris_landmark": pipeline.iris, "emotion": pipeline.emotion,
            "regressor": pipeline.expression}


def _track(pipeline, frames) -> list:
    pipeline.reset()
    pipeline.expression.reset()
    return [pipeline.process(f) for f in frames]


def _stats(values) -> dict:
    a = np.asarray(values, np.float64).reshape(-1)
    return {"max": round(float(a.max()), 4), "p99": percentiles(a, (99,), digits=4)[0],
            "mean": round(float(a.mean()), 5)}


def _point_error(a: np.ndarray, b: np.ndarray, dims: int = 2) -> np.ndarray:
    return np.linalg.norm(a[..., :dims] - b[..., :dims], axis=-1)


def _model_errors(name: str, ref: list[dict], out: list[dict]) -> dict:
    if name == "face_landmark":  # (frames, 468, 3) in the 192 px crop
        a, b = (np.stack([next(v for v in o.values() if v.size == 1404).reshape(468, 3) for o in x])
                for x in (ref, out))
        return {"landmarks_px_at_192": _stats(_point_error(a, b)), "depth_px_at_192": _stats(np.abs(a - b)[..., 2])}
    if name == "iris_landmark":  # two eyes per call, in the 64 px crop
        errs = {}
        for size, key in ((213, "eye_contour_px_at_64"), (15, "iris_px_at_64")):
            a, b = (np.stack([next(v for v in o.values() if v.shape[-1] == size).reshape(2, -1, 3) for o in x])
                    for x in (ref, out))
            errs[key] = _stats(_point_error(a, b))
        return errs
    diffs = [np.abs(np.asarray(o[k], np.float64) - np.asarray(r[k], np.float64)).max()
             for r, o in zip(ref, out) for k in r]
    return {"max_abs_output_difference": _stats(diffs)}


def _frame_errors(ref: list, out: list) -> dict:
    both = [(r, o) for r, o in zip(ref, out) if r.face_found and o.face_found]
    lm = [_point_error(o.landmarks, r.landmarks) for r, o in both]
    bs = [np.abs(o.blendshapes - r.blendshapes) for r, o in both]
    pose = [np.abs(o.head_rotation - r.head_rotation) for r, o in both]
    return {"frames_compared": len(both), "landmarks_image_px": _stats(lm), "blendshapes": _stats(bs),
            "blendshapes_worst_shape": _worst(bs), "head_rotation_deg": _stats(pose)}


def _worst(diffs) -> dict:
    per_shape = np.max(np.stack(diffs), axis=0)
    i = int(np.argmax(per_shape))
    return {"name": ARKIT_NAMES[i], "max": round(float(per_shape[i]), 4)}


SETTLE = 10  # still face: frames left out while the tracked region settles after the first detection


def _jitter(outs: list) -> dict:
    found = [o for o in outs[SETTLE:] if o.face_found]
    lm = np.stack([o.landmarks[:, :2] for o in found])
    bs = np.stack([o.blendshapes for o in found])
    ypr = np.stack([o.head_rotation for o in found])
    return {"frames": len(found), "landmarks_px_std_mean": round(float(lm.std(0).mean()), 4),
            "landmarks_px_std_max": round(float(lm.std(0).max()), 4),
            "blendshapes_std_mean": round(float(bs.std(0).mean()), 5),
            "blendshapes_std_max": round(float(bs.std(0).max()), 5),
            "head_deg_std": [round(float(v), 4) for v in ypr.std(0)]}


def _still_frames(frame, n: int, noise: float) -> list:
    rng = np.random.default_rng(2026)
    out = []
    for i in range(n):
        image = frame.image
        if noise > 0:
            image = np.clip(image + rng.normal(0.0, noise, image.shape), 0, 255).astype(np.uint8)
        out.append(dataclasses.replace(frame, image=image, seq=i, t_media=i / 30.0))
    return out


def _speed(pipelines: dict, feeds: dict, rounds: int) -> dict:
    """Median ms per call of each model, the configurations taking turns every round."""
    times: dict = {c: {m: [] for m in MODELS} for c in pipelines}
    for _ in range(rounds):
        for config, pipeline in pipelines.items():
            stages = _sessions(pipeline)
            for model in MODELS:
                session = stages[model].session
                for feed in feeds[model][:60]:
                    t0 = time.perf_counter()
                    session.run(feed)
                    times[config][model].append((time.perf_counter() - t0) * 1000.0)
    return {c: {m: dict(zip(("median_ms", "p90_ms"), percentiles(v, (50, 90), digits=4))) for m, v in per.items()}
            for c, per in times.items()}


def _pipeline_speed(pipelines: dict, frames: list, chunk: int = 30) -> dict:
    """ms per frame of the whole pipeline (default options), each configuration tracking the sample by itself,
    taking turns every `chunk` frames."""
    times: dict = {c: [] for c in pipelines}
    for p in pipelines.values():
        p.reset()
    for start in range(0, len(frames), chunk):
        for config, pipeline in pipelines.items():
            for frame in frames[start:start + chunk]:
                t0 = time.perf_counter()
                pipeline.process(frame)
                times[config].append((time.perf_counter() - t0) * 1000.0)
    return {c: {"frames": len(v), **dict(zip(("median_ms", "p99_ms"), percentiles(v, (50, 99))))}
            for c, v in times.items()}


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.precision import cpu_has_native_bf16
    from bridge.sources.files import SampleSource

    with SampleSource(realtime=False, loop=True) as src:
        frames = [src.read() for _ in range(args.frames)]
    configs = configurations()
    names = [f"{b}-{p}" for b, p in configs]
    pipelines = {n: _pipeline(b, p) for n, (b, p) in zip(names, configs)}
    running = {n: {m: getattr(s.session, "precision", "?") for m, s in _sessions(pl).items()}
               for n, pl in pipelines.items()}
    reference = names[0]
    # the reference pipeline's own inputs to every model, recorded on the way
    stages = _sessions(pipelines[reference])
    recorders = {m: _Recorder(s.session) for m, s in stages.items()}
    for m, s in stages.items():
        s.session = recorders[m]
    ref_outs = _track(pipelines[reference], frames)
    for m, s in stages.items():
        s.session = recorders[m].session
    feeds = {m: r.feeds for m, r in recorders.items()}
    results: dict = {"reference": reference, "cpu_native_bf16": cpu_has_native_bf16(), "running_precision": running,
                     "models": {}, "pipeline_raw": {}, "pipeline_smoothed": {}, "still": {}}
    ref_model_outs = {m: [stages[m].session.run(f) for f in feeds[m]] for m in MODELS}
    for name, pipeline in pipelines.items():
        per = _sessions(pipeline)
        results["models"][name] = {m: _model_errors(m, ref_model_outs[m], [per[m].session.run(f) for f in feeds[m]])
                                   for m in MODELS}
        outs = ref_outs if name == reference else _track(pipeline, frames)
        results["pipeline_raw"][name] = _frame_errors(ref_outs, outs)
        print(f"{name}: {running[name]['face_landmark']}, landmarks at 192 px max "
              f"{results['models'][name]['face_landmark']['landmarks_px_at_192']['max']}, blendshapes max "
              f"{results['pipeline_raw'][name]['blendshapes']['max']}")
    smoothed = {n: _pipeline(b, p, smoothing=True) for n, (b, p) in zip(names, configs)}
    ref_smoothed = _track(smoothed[reference], frames)
    for name, pipeline in smoothed.items():
        outs = ref_smoothed if name == reference else _track(pipeline, frames)
        results["pipeline_smoothed"][name] = _frame_errors(ref_smoothed, outs)
    for noise in (0.0, args.noise):
        still = _still_frames(frames[0], args.still_frames, noise)
        results["still"][f"noise_{noise:g}"] = {n: _jitter(_track(p, still)) for n, p in pipelines.items()}
    results["speed"] = _speed(pipelines, feeds, args.rounds)
    results["pipeline_speed"] = _pipeline_speed(smoothed, frames * max(1, args.rounds // 2))
    print("per frame, median ms: " + ", ".join(f"{c} {v['median_ms']}" for c, v in results["pipeline_speed"].items()))
    return results
