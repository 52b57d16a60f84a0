"""`facebridge bench expression`: accuracy, agreement, jitter and speed of the expression engine on held-out
synthetic faces (identities, expressions, poses and cameras drawn with a seed the training never used).

  regressor   per-blendshape MAE and correlation, by region, on --samples independent faces
  fit         the same on --subjects sequences of --frames frames (identity converges over the first
              --warmup frames, which are not scored); the regressor on the same frames; their agreement
  jitter      std of each weight and of head yaw/pitch over --jitter-frames of one static face (noise only)
  pose        median |error| of head yaw, pitch, roll in degrees
  speed       ms per face: the regressor's ONNX run alone and the whole estimate() call; the fit
"""
from __future__ import annotations

import time

import numpy as np

from bridge.expression.features import landmark_features
from bridge.expression.model import VISUAL, load_model
from bridge.expression.stage import REGIONS, ExpressionEstimator
from bridge.expression.synth import render, sample_expressions, sample_identities, sample_poses, synthetic_batch
from bridge.frame import ARKIT_NAMES, BLENDSHAPE_REGIONS

HELD_OUT_SEED = 2026


def add_arguments(p) -> None:
    p.add_argument("--samples", type=int, default=2000, help="independent faces for the regressor (default 2000)")
    p.add_argument("--subjects", type=int, default=12, help="subjects (sequences) for the fit (default 12)")
    p.add_argument("--frames", type=int, default=40, help="frames per subject sequence (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="unscored first frames per sequence (default 10)")
    p.add_argument("--jitter-frames", type=int, default=100, help="frames of the static face (default 100)")
    p.add_argument("--speed-faces", type=int, default=300, help="faces timed for ms per face (default 300)")
    p.add_argument("--seed", type=int, default=HELD_OUT_SEED, help="held-out data seed")
    p.add_argument("--backend", default="onnxruntime", help="inference backend for the regressor")


def _run(est: ExpressionEstimator, batch, i: int):
    iris = np.repeat(batch.iris[i][:, None, :], 5, axis=1) if batch.iris_present[i] else None
    return est.estimate(batch.landmarks[i], tuple(batch.image_size[i]), iris=iris)


def accuracy(pred: np.ndarray, truth: np.ndarray) -> dict:
    """Per-blendshape MAE and correlation (visual shapes), grouped by region."""
    err = np.abs(pred - truth).mean(0)
    corr = np.full(52, np.nan)
    for k in VISUAL:
        if truth[:, k].std() > 1e-6 and pred[:, k].std() > 1e-6:
            corr[k] = float(np.corrcoef(pred[:, k], truth[:, k])[0, 1])
    per = {ARKIT_NAMES[k]: {"mae": round(float(err[k]), 4),
                            "corr": None if np.isnan(corr[k]) else round(float(corr[k]), 3)} for k in VISUAL}
    regions = {}
    for region in REGIONS:
        idx = [ARKIT_NAMES.index(n) for n in BLENDSHAPE_REGIONS[region]]
        c = corr[idx]
        regions[region] = {"mae": round(float(err[idx].mean()), 4),
                           "corr": round(float(np.nanmean(c)), 3) if np.isfinite(c).any() else None}
    return {"mae": round(float(err[VISUAL].mean()), 4), "regions": regions, "per_blendshape": per}


def pose_error(pred: np.ndarray, truth: np.ndarray) -> dict:
    e = np.abs(pred - truth)
    return {f"{k}_median_deg": round(float(np.median(e[:, i])), 3) for i, k in enumerate(("yaw", "pitch", "roll"))}


def evaluate_regressor(model, est, rng, n: int) -> dict:
    batch = synthetic_batch(model, rng, n)
    pred = np.zeros((n, 52))
    rot = np.zeros((n, 3))
    for i in range(n):
        r = _run(est, batch, i)
        pred[i], rot[i] = r.blendshapes, r.head_rotation
    return {"samples": n, **accuracy(pred, batch.weights), "pose": pose_error(rot, batch.head_rotation)}


def sequences(model, rng, subjects: int, frames: int):
    """Per subject: one identity and camera, random expressions and poses per frame."""
    for _ in range(subjects):
        ident = sample_identities(rng, 1, model.num_ict_identity).repeat(frames, 0)
        size = np.array([[1280, 720]] * frames)
        focal = np.full(frames, 1280 * rng.uniform(0.8, 1.25))
        tr = np.tile([rng.uniform(-5, 5), rng.uniform(-3, 3), rng.uniform(45, 90)], (frames, 1))
        yield render(model, rng, ident, sample_expressions(rng, frames), sample_poses(rng, frames),
                     camera=(size, focal, tr))


def evaluate_fit(model, reg, fit, rng, subjects: int, frames: int, warmup: int) -> dict:
    preds_f, preds_r, truth, rot_f, rot_t = [], [], [], [], []
    for batch in sequences(model, rng, subjects, frames):
        fit.reset()
        for i in range(frames):
            rf, rr = _run(fit, batch, i), _run(reg, batch, i)
            if i >= warmup:
                preds_f.append(rf.blendshapes)
                preds_r.append(rr.blendshapes)
                truth.append(batch.weights[i])
                rot_f.append(rf.head_rotation)
                rot_t.append(batch.head_rotation[i])
    pf, pr, tt = np.array(preds_f), np.array(preds_r), np.array(truth)
    agree = np.abs(pf - pr)[:, VISUAL].mean(0)
    return {"frames_scored": len(tt), "fit": {**accuracy(pf, tt), "pose": pose_error(np.array(rot_f), np.array(rot_t))},
            "regressor_same_frames_mae": accuracy(pr, tt)["mae"],
            "agreement_mae": round(float(agree.mean()), 4),
            "agreement_max_blendshape": {ARKIT_NAMES[VISUAL[int(agree.argmax())]]: round(float(agree.max()), 4)}}


def jitter(model, est, rng, frames: int) -> dict:
    """Std over frames of a static face where only the landmark noise changes."""
    ident = sample_identities(rng, 1, model.num_ict_identity).repeat(frames, 0)
    w = sample_expressions(rng, 1).repeat(frames, 0)
    pose = np.array([[10.0, -5.0, 2.0]] * frames)
    cam = (np.array([[1280, 720]] * frames), np.full(frames, 1280.0), np.tile([1.0, 2.0, 60.0], (frames, 1)))
    batch = render(model, rng, ident, w, pose, occlusion=0.0, iris_missing=0.0, camera=cam)
    est.reset()
    results = [_run(est, batch, i) for i in range(frames)]
    out = np.array([r.blendshapes for r in results])
    rot = np.array([r.head_rotation for r in results])
    return {"frames": frames, "blendshape_std_mean": round(float(out[:, VISUAL].std(0).mean()), 5),
            "blendshape_std_max": round(float(out[:, VISUAL].std(0).max()), 5),
            "yaw_std_deg": round(float(rot[:, 0].std()), 4), "pitch_std_deg": round(float(rot[:, 1].std()), 4)}


def speed(model, est, rng, n: int) -> dict:
    batch = synthetic_batch(model, rng, n, occlusion=0.0)
    for i in range(min(n, 10)):
        _run(est, batch, i)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        _run(est, batch, i)
    # wall time, and this process's CPU time (less disturbed by other work on a shared machine)
    out = {"estimate_ms": round((time.perf_counter() - t0) / n * 1000, 4),
           "estimate_cpu_ms": round((time.process_time() - c0) / n * 1000, 4)}
    if est.session is not None:
        x = landmark_features(batch.landmarks[0, :, :2], batch.iris[0], tuple(batch.image_size[0]))[None]
        feed = {est.contract.input_name: x}
        for _ in range(20):
            est.session.run(feed)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n * 5):
            est.session.run(feed)
        out["model_run_ms"] = round((time.perf_counter() - t0) / (n * 5) * 1000, 4)
        out["model_run_cpu_ms"] = round((time.process_time() - c0) / (n * 5) * 1000, 4)
    return out


def run(args) -> dict:
    model = load_model()
    reg = ExpressionEstimator("regressor", backend=args.backend)
    fit = ExpressionEstimator("fit")
    rng = np.random.default_rng(args.seed)
    print(f"regressor on {args.samples} held-out faces ...", flush=True)
    results = {"held_out_seed": args.seed, "threads": 1, "regressor": evaluate_regressor(model, reg, rng, args.samples)}
    print(f"fit and regressor on {args.subjects} subjects x {args.frames} frames ...", flush=True)
    results["fit"] = evaluate_fit(model, reg, fit, rng, args.subjects, args.frames, args.warmup)
    print("jitter and speed ...", flush=True)
    results["jitter"] = {"regressor": jitter(model, reg, np.random.default_rng(args.seed + 1), args.jitter_frames),
                         "fit": jitter(model, fit, np.random.default_rng(args.seed + 1), args.jitter_frames)}
    results["speed"] = {"regressor": speed(model, reg, rng, args.speed_faces),
                        "fit": speed(model, fit, rng, max(1, args.speed_faces // 10))}
    r = results["regressor"]
    print(f"regressor MAE {r['mae']:.4f}  regions " + ", ".join(f"{k} {v['mae']:.3f}" for k, v in r["regions"].items())
          + f"  yaw {r['pose']['yaw_median_deg']:.2f} deg  pitch {r['pose']['pitch_median_deg']:.2f} deg")
    f = results["fit"]
    print(f"fit MAE {f['fit']['mae']:.4f}  agreement {f['agreement_mae']:.4f}  "
          f"regressor {results['speed']['regressor']} fit {results['speed']['fit']['estimate_ms']:.1f} ms")
    return results
