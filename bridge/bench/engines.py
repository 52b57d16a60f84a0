"""`facebridge bench engines`: every shipped model and the face pipeline on every available backend, side by side.

Sections of the JSON:
  environment  what ran where: GPU, libraries, which backends were usable and why not
  models       per model x backend: batch 1 and batched latency (median, p99) and throughput; PyTorch eager
               (onnx2torch) where torch is installed, the baseline the TensorRT literature compares against
  pipeline     the coordinator's FacePipeline per backend, one stream, frames from the bundled sample clip
  multistream  (GPU) how many concurrent 30-fps streams of the batched face pipeline are served at p99 <= 20 ms
  trt_builds   TensorRT(-RTX) engine build time per model and whether a second build hits the cache
"""
from __future__ import annotations

import os
import tempfile
import time

import cv2
import numpy as np

from bridge.bench.common import comma_list, measure, positive_float, reporter, table, torch_cuda
from bridge.engines.select import AUTO_ORDER, check_available
from bridge.engines.shipped import NOT_BUILDABLE, frames_as_input, sample_frames, shipped_models, value_range_of
from bridge.fsutil import atomic_write_json


def add_arguments(p) -> None:
    backends = comma_list(AUTO_ORDER, "backend")
    p.add_argument("--backends", default="all", type=lambda t: t if t == "all" else backends(t),
                   help="comma list of backends, or 'all' available (default)")
    p.add_argument("--models", default="all", help="comma list of shipped model names (default: all)")
    p.add_argument("--batch", type=int, default=0, help="batched size (default 32 on CPU, 256 on GPU)")
    p.add_argument("--seconds", type=positive_float, default=0.6, help="time per measurement")
    p.add_argument("--threads", type=int, default=0, help="CPU inference threads (default: all cores)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch eager baseline")
    p.add_argument("--torch-devices", default="cpu,cuda", help="where to run the PyTorch eager baseline")
    p.add_argument("--sections", default=list(SECTIONS), type=comma_list(SECTIONS, "section"),
                   help="which sections to run, in this order (results are saved after each); multistream needs "
                        "an NVIDIA GPU with torch or onnxruntime-gpu, and says so and measures nothing without one")
    p.add_argument("--precisions", default="fp32", help="multi-stream precisions, e.g. fp32,fp16")
    p.add_argument("--runners", default="auto",
                   help="multi-stream model runners, e.g. torch-cuda,onnxruntime-cuda (auto: every one usable here)")
    p.add_argument("--no-pipeline", action="store_true", help="skip the whole-pipeline section")
    p.add_argument("--no-builds", action="store_true", help="skip the TensorRT-RTX build section")
    p.add_argument("--multistream", choices=("auto", "on", "off"), default="auto",
                   help="run the multi-stream search (auto: when a CUDA GPU and onnxruntime-gpu are present)")
    p.add_argument("--max-streams", type=int, default=2048)
    p.add_argument("--first-streams", type=int, default=256, help="first stream count tried (then doubled)")
    p.add_argument("--graph-limit", type=int, default=4096, help="largest batch bucket captured as a CUDA graph")
    p.add_argument("--stream-seconds", type=float, default=2.0, help="measured seconds per stream count")
    p.add_argument("--torch-compile", choices=("on", "off"), default="on",
                   help="torch-cuda runners: Inductor-fused kernels (on, the product default) or eager kernels")
    p.add_argument("--frames-from", default="gpu,host,host-async",
                   help="multi-stream frame sources: gpu (decoded on the GPU), host (uploaded from pinned memory "
                        "when the pass starts), host-async (uploaded on a copy stream as each frame arrives)")


SECTIONS = ("models", "pipeline", "multistream", "builds")


def environment() -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.gpu import probe_gpu

    probe = probe_gpu()
    env = {"gpu": probe.gpu.describe() if probe.gpu else None, "gpu_reason": probe.reason or None,
           "cpu_count": os.cpu_count(), "backends": {}}
    for name in AUTO_ORDER:
        a = check_available(name)
        env["backends"][name] = {"usable": a.ok, "reason": a.reason}
    for module in ("onnxruntime", "openvino", "torch", "tensorrt", "tensorrt_rtx_bindings"):
        try:
            env[module] = __import__(module).__version__
        except Exception:
            env[module] = None
    return env


# --- per-model section ------------------------------------------------------------------------------------
def _model_input(model, batch: int) -> tuple[str, np.ndarray]:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.onnxruntime_backend import OrtSession

    spec = OrtSession(model.path).inputs[0]
    item = tuple(spec.shape[1:])
    frames = frames_as_input(item, value_range_of(model.entry))
    reps = -(-batch // len(frames))
    return spec.name, np.concatenate([frames] * reps)[:batch]


def _is_image_model(model) -> bool:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.onnxruntime_backend import OrtSession

    inputs = OrtSession(model.path).inputs
    return len(inputs) == 1 and len(inputs[0].shape) == 4 and inputs[0].shape[1] in (1, 3)


def bench_model_host(model, backend: str, batches: list[int], seconds: float, threads: int) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines import create_session

    session = create_session(model.path, backend, threads=threads, strict=True)
    name, _ = _model_input(model, 1)
    out = {}
    for batch in batches:
        _, x = _model_input(model, batch)
        out[f"batch_{batch}"] = measure(lambda: session.run({name: x}), batch, seconds)
    return out


def bench_model_cuda_device(model, batches: list[int], seconds: float) -> dict:
    """ORT CUDA with device-resident input/output (IOBinding); batch 1 also with a CUDA graph."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import torch

    from bridge.multistream.runners import OrtCudaRunner

    out = {}
    for graphs in (False, True):
        runner = OrtCudaRunner(model.path, max(batches), cuda_graphs=graphs, buckets=batches, graph_limit=1)
        for batch in batches if not graphs else [1]:
            _, x = _model_input(model, batch)
            xd = torch.from_numpy(x).cuda()

            def call():
                runner(xd)
                torch.cuda.synchronize()

            out[f"batch_{batch}{'_cuda_graph' if graphs else ''}"] = measure(call, batch, seconds)
    return out


def bench_model_torch(model, batches: list[int], seconds: float, device: str, threads: int) -> dict:
    # optional extras: torch (gpu), onnx and onnx2torch (the eager torch runners)
    import onnx
    import torch
    from onnx2torch import convert

    torch.set_num_threads(threads)
    net = convert(onnx.load(str(model.path))).eval().to(device)
    out = {}
    for batch in batches:
        _, x = _model_input(model, batch)
        xt = torch.from_numpy(x).to(device)

        def call():
            with torch.inference_mode():
                net(xt)
            if device == "cuda":
                torch.cuda.synchronize()

        out[f"batch_{batch}"] = measure(call, batch, seconds)
    return out


def models_section(args, backends: list[str], on_gpu: bool) -> dict:
    threads = args.threads or os.cpu_count() or 1
    wanted = None if args.models == "all" else set(args.models.split(","))
    results, not_installed = {}, {}
    for model in shipped_models():
        if wanted and model.name not in wanted:
            continue
        if not _is_image_model(model):
            audio = model.name in ("lipsync", "silero_vad")
            results[model.name] = {"skipped": "audio model: timed by `facebridge bench lipsync`" if audio else
                                   "takes landmark features, not an image: timed inside `facebridge bench pipeline`"}
            continue
        row = results.setdefault(model.name, {})
        for backend in backends:
            cpu_batch = args.batch or 32
            batches = [1, args.batch or 256] if backend.startswith(("onnxruntime-cuda", "tensorrt")) else [1, cpu_batch]
            _say(f"{model.name}: {backend}")
            try:
                row[backend] = bench_model_host(model, backend, batches, args.seconds, threads)
                if backend == "onnxruntime-cuda":
                    row["onnxruntime-cuda-iobinding"] = bench_model_cuda_device(model, batches, args.seconds)
            except Exception as e:  # one backend failing one model is a result, not a crash
                row[backend] = {"error": str(e)[:300]}
        if not args.no_torch:
            devices = [d for d in args.torch_devices.split(",") if d == "cpu" or (d == "cuda" and on_gpu)]
            for device in devices:
                if device in not_installed:  # said once, not as every model's error
                    continue
                batches = [1, (args.batch or 256) if device == "cuda" else (args.batch or 32)]
                _say(f"{model.name}: torch eager {device}")
                try:
                    row[f"torch-eager-{device}"] = bench_model_torch(model, batches, args.seconds, device, threads)
                except ImportError as e:
                    not_installed[device] = f"needs {e.name or 'a module'}, which is not installed"
                    _say(f"torch eager {device}: not run, {not_installed[device]}")
                except Exception as e:
                    row[f"torch-eager-{device}"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    if not_installed:
        results["not_run"] = {f"torch-eager-{d}": why for d, why in not_installed.items()}
    return results


# --- whole pipeline, one stream -----------------------------------------------------------------------------
def pipeline_section(backends: list[str], seconds: float, threads: int) -> dict:
    try:
        # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
        from bridge.frame import Frame
        from bridge.pipeline import FacePipeline, PipelineOptions
    except ImportError as e:
        return {"error": f"pipeline not available ({e})"}

    frames = [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in sample_frames(16)]
    results = {}
    for backend in backends:
        _say(f"pipeline: {backend}")
        try:
            pipeline = FacePipeline(PipelineOptions(backend=backend, threads=threads))
        except Exception as e:
            results[backend] = {"error": str(e)[:300]}
            continue
        counter = iter(range(10 ** 9))

        def one():
            i = next(counter)
            pipeline.process(Frame(frames[i % len(frames)], i, time.time(), time.perf_counter()))

        results[backend] = measure(one, 1, seconds * 2, warmup=5)
    return results


# --- TensorRT-RTX builds ----------------------------------------------------------------------------------------
def builds_section() -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.cache import EngineCache
    from bridge.engines.tensorrt.flavour import load_flavour
    from bridge.engines.tensorrt.prepare import prepare_engine, spec_for

    out = {}
    for flavour_name in ("tensorrt-rtx", "tensorrt"):
        try:
            flavour = load_flavour(flavour_name)
        except Exception as e:
            out[flavour_name] = {"error": str(e)}
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cache = EngineCache(tmp)
            rows = {}
            for model in shipped_models():
                if model.name in NOT_BUILDABLE:
                    rows[model.name] = {"skipped": NOT_BUILDABLE[model.name]}
                    continue
                try:
                    spec = spec_for(model, model.path.read_bytes(), flavour, opt_level=3, max_batch=64)
                    first = prepare_engine(model, flavour, cache, spec, report=lambda line: None)
                    t0 = time.perf_counter()
                    second = prepare_engine(model, flavour, cache, spec, report=lambda line: None)
                    rows[model.name] = {"target": spec.target, "build_s": round(first.seconds, 2),
                                        "engine_mb": round(len(first.plan) / 1e6, 2),
                                        "second_build_cache_hit": second.cache_hit,
                                        "cache_hit_s": round(time.perf_counter() - t0, 3)}
                except Exception as e:
                    rows[model.name] = {"error": str(e)[:300]}
            out[flavour_name] = {"version": flavour.version, "models": rows}
    return out


_say = reporter("engines")


def run(args) -> dict:
    env = environment()
    usable = [b for b, a in env["backends"].items() if a["usable"]]
    asked = list(AUTO_ORDER) if args.backends == "all" else args.backends
    asked = asked.split(",") if isinstance(asked, str) else asked
    backends = [b for b in asked if b in usable]
    for b in asked:
        if b not in usable and args.backends != "all":
            _say(f"{b}: skipped, not usable here ({env['backends'][b]['reason']})")
    _say(f"backends: {', '.join(backends)}; sections: {', '.join(_sections(args))}")
    on_gpu = torch_cuda() is not None
    threads = args.threads or os.cpu_count() or 1
    gpu_ort = on_gpu and env["backends"]["onnxruntime-cuda"]["usable"]
    results = {"environment": env, "threads": threads}
    for section in _sections(args):
        started = time.perf_counter()
        if section == "models":
            results["models"] = models_section(args, backends, on_gpu)
        elif section == "pipeline" and not args.no_pipeline:
            results["pipeline"] = pipeline_section(backends, args.seconds, threads)
        elif section == "multistream" and not (args.multistream == "on" or (args.multistream == "auto" and on_gpu)):
            why = "--multistream off" if args.multistream == "off" else f"it needs an NVIDIA GPU ({_no_gpu(env)})"
            results["multistream"] = {"skipped": why}
            _say(f"multistream: skipped, {why}; nothing measured")
            continue
        elif section == "multistream":
            # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
            from bridge.bench.multistream import multistream_runners, multistream_section

            results["multistream"] = {f"{r}-{p}": multistream_section(args, r, p)
                                      for r in multistream_runners(args, gpu_ort) for p in args.precisions.split(",")}
        elif section == "builds" and not args.no_builds:
            results["trt_builds"] = builds_section()
        else:
            continue
        _say(f"{section} done in {time.perf_counter() - started:.0f} s")
        if getattr(args, "json", None):  # keep what is done if a later section is cut short
            atomic_write_json(args.json + ".partial", {"results": results})
    return results


def _sections(args) -> list[str]:
    return args.sections.split(",") if isinstance(args.sections, str) else list(args.sections)


def _no_gpu(env: dict) -> str:
    try:
        import torch  # noqa: F401
    except ImportError:
        return f"torch is not installed, and {env.get('gpu_reason') or 'no CUDA GPU is usable'}"
    return env.get("gpu_reason") or "torch sees no CUDA GPU"


def summary(results: dict) -> str:
    """Tables for people: per model and backend, the pipeline per backend, multi-stream capacity, engine builds."""
    parts = []
    rows = []
    models = {k: v for k, v in results.get("models", {}).items() if k != "not_run"}
    for model, per_backend in models.items():
        for backend, r in per_backend.items():
            if "skipped" == backend or not isinstance(r, dict):
                continue
            if "error" in r:
                rows.append([model, backend, None, None, None, r["error"][:60]])
                continue
            one, big = r.get("batch_1", {}), next((v for k, v in r.items() if k != "batch_1" and "graph" not in k), {})
            rows.append([model, backend, one.get("median_ms"), big.get("batch"), big.get("items_per_s"), ""])
        if "skipped" in per_backend:
            rows.append([model, "-", None, None, None, per_backend["skipped"][:60]])
    if rows:
        parts.append(table(["model", "backend", "batch 1 ms", "batch", "items/s", "note"], rows))
    for what, why in results.get("models", {}).get("not_run", {}).items():
        parts.append(f"{what}: not run, {why}")
    pipeline = results.get("pipeline", {})
    if pipeline:
        parts.append(table(["pipeline on", "median ms", "p99 ms", "frames/s", "note"],
                           [[b, r.get("median_ms"), r.get("p99_ms"), r.get("items_per_s"), r.get("error", "")[:60]]
                            for b, r in pipeline.items()]))
    multistream = results.get("multistream", {})
    if "skipped" in multistream:
        parts.append(f"multistream: skipped, {multistream['skipped']}")
    elif multistream:
        parts.append(table(["multistream", "frames from", f"streams at p99 <= {20} ms"],
                           [[name, mode.removeprefix("frames_"), r["max_streams_at_p99_limit"]]
                            for name, m in multistream.items() for mode, r in m.items()
                            if isinstance(r, dict) and "max_streams_at_p99_limit" in r]))
    builds = results.get("trt_builds", {})
    build_rows = [[flavour, model, r.get("build_s"), r.get("engine_mb"),
                   (r.get("skipped") or r.get("error") or "")[:60]]
                  for flavour, f in builds.items() for model, r in f.get("models", {}).items()]
    build_rows += [[flavour, "-", None, None, f["error"][:60]] for flavour, f in builds.items() if "error" in f]
    if build_rows:
        parts.append(table(["engine build", "model", "build s", "MB", "note"], build_rows))
    return "\n\n".join(parts)
