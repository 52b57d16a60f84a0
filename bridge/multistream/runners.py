"""The models of the batched face tracker, one runner per role: `make_runners(kind, ...)`.

A runner is `runner(x) -> outputs in the ONNX output order` over torch tensors. Kinds, fastest first:
torch-cuda (`TorchRunner`: fp16, compiled kernels, CUDA graphs), onnxruntime-cuda (`OrtCudaRunner`: IOBinding over
device tensors, CUDA graphs for small buckets), and the CPU kinds torch and onnxruntime (tests, machines without a
GPU). `runner_availability` says which work on this machine and why not.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from bridge.engines.base import EngineUnavailable
from bridge.engines.gpu import probe_gpu
from bridge.engines.onnxruntime_backend import OrtSession, cuda_provider_available
from bridge.engines.shipped import find_model
from bridge.engines.tensorrt.fp16 import convert_to_fp16
from bridge.multistream.torch_runner import TorchRunner, batch_buckets, bucket_for


class OrtCpuRunner:
    """ONNX Runtime CPU over torch CPU tensors."""

    def __init__(self, path: Path, threads: int = 1):
        self._session = OrtSession(path, threads=threads)
        self._input = self._session.inputs[0].name

    def __call__(self, x):
        # optional extra: torch (gpu), about 1.5 s to import
        import torch

        out = self._session.run({self._input: x.contiguous().numpy()})
        return [torch.from_numpy(v) for v in out.values()]


class OrtCudaRunner:
    """ONNX Runtime CUDA over device tensors (IOBinding: no host copies, no per-call allocation).

    The batch is padded up to the next bucket size so only a few shapes ever reach cuDNN. Small buckets
    (<= graph_limit, where launch overhead dominates) each get their own session with CUDA-graph capture;
    larger ones share one session bound per call to the front of one buffer sized for the largest bucket.
    """

    def __init__(self, path: Path, max_batch: int, cuda_graphs: bool = True, fp16: bool = False,
                 buckets: list[int] | None = None, conv_search: str = "HEURISTIC", graph_limit: int = 32):
        # optional extra: torch (gpu), about 1.5 s to import
        import torch

        self._torch = torch
        model_bytes = Path(path).read_bytes()
        if fp16:
            model_bytes = convert_to_fp16(model_bytes)
        probe = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        self._input = probe.get_inputs()[0]
        self._outputs = probe.get_outputs()
        self.item_shape = tuple(self._input.shape[1:])
        self.buckets = sorted(set(buckets or batch_buckets(max_batch)))
        stream = str(torch.cuda.current_stream().cuda_stream)

        def session(graph: bool):
            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            provider = ("CUDAExecutionProvider", {"enable_cuda_graph": "1" if graph else "0",
                                                  "user_compute_stream": stream,
                                                  "cudnn_conv_algo_search": conv_search})
            return ort.InferenceSession(model_bytes, sess_options=opts, providers=[provider])

        self._graphed = {}  # bucket -> (session, binding, input buffer, output buffers)
        for bucket in (b for b in self.buckets if cuda_graphs and b <= graph_limit):
            sess = session(True)
            x, outs = self._buffers(bucket)
            binding = self._bind(sess, x, outs, bucket)
            sess.run_with_iobinding(binding)  # first run captures the graph
            self._graphed[bucket] = (sess, binding, x, outs)
        rest = [b for b in self.buckets if b not in self._graphed]
        self._dynamic = None
        if rest:
            sess = session(False)
            x, outs = self._buffers(max(rest))
            self._dynamic = (sess, x, outs)
            for bucket in rest:  # pick cuDNN algorithms for every shape now, not in the first live frame
                sess.run_with_iobinding(self._bind(sess, x, outs, bucket))
        torch.cuda.synchronize()

    def _buffers(self, batch: int):
        t = self._torch
        x = t.zeros((batch, *self.item_shape), device="cuda", dtype=t.float32)
        outs = [t.empty((batch, *o.shape[1:]), device="cuda", dtype=t.float32) for o in self._outputs]
        return x, outs

    def _bind(self, sess, x, outs, batch: int):
        binding = sess.io_binding()
        binding.bind_input(self._input.name, "cuda", 0, np.float32, [batch, *self.item_shape], x.data_ptr())
        for o, t in zip(self._outputs, outs):
            binding.bind_output(o.name, "cuda", 0, np.float32, [batch, *t.shape[1:]], t.data_ptr())
        return binding

    def __call__(self, x):
        n = x.shape[0]
        bucket = bucket_for(self.buckets, n)
        if bucket in self._graphed:
            sess, binding, buf, outs = self._graphed[bucket]
        else:
            sess, buf, outs = self._dynamic
            binding = self._bind(sess, buf, outs, bucket)
        buf[:n].copy_(x)
        # ORT may replay its graph on another stream than torch's: make the input copy land first
        self._torch.cuda.current_stream().synchronize()
        sess.run_with_iobinding(binding)
        return [o[:n] for o in outs]


RUNNER_KINDS = ("torch-cuda", "onnxruntime-cuda", "torch", "onnxruntime")


def runner_availability() -> list[tuple[str, bool, str]]:
    """(kind, usable here, why) for every RUNNER_KINDS entry, fastest first: what `facebridge engines list` shows."""
    try:
        # optional extra: torch (gpu), about 1.5 s to import
        import torch
    except ImportError:
        torch = None
    gpu = probe_gpu()
    if torch is None:
        torch_cuda = (False, "torch is not installed (pip install torch, a CUDA build, for the fastest GPU path)")
    elif not torch.cuda.is_available():
        torch_cuda = (False, f"torch {torch.__version__} sees no CUDA GPU here (a CPU build of torch, or no NVIDIA "
                             "GPU and driver)")
    else:
        torch_cuda = (True, f"torch {torch.__version__} on {torch.cuda.get_device_name()}; fp16, models compiled by "
                            "torch.compile at start, whole passes as CUDA graphs")
    if gpu.gpu is None:
        ort_cuda = (False, f"no usable NVIDIA GPU ({gpu.reason})")
    elif not cuda_provider_available():
        ort_cuda = (False, "onnxruntime-gpu is not installed")
    else:
        ort_cuda = (True, f"ONNX Runtime CUDA on {gpu.gpu.describe()}")
    return [("torch-cuda", *torch_cuda), ("onnxruntime-cuda", *ort_cuda),
            ("torch", torch is not None, "torch on the CPU" if torch is not None else "torch is not installed"),
            ("onnxruntime", True, "ONNX Runtime on the CPU, always available")]


def make_runners(kind: str, max_batch: int, fp16: bool = False, cuda_graphs: bool = True, threads: int = 1,
                 detector: str = "face_detection_short_range", conv_search: str = "HEURISTIC",
                 buckets: list[int] | None = None, graph_limit: int = 32, tracked_pass_graphs: bool = False,
                 compile: bool = True, report=None) -> dict:
    """One runner per role. kind: torch-cuda (fp16 means half precision, channels_last; compile: Inductor-fused
    kernels, see torch_runner), onnxruntime-cuda, or the CPU runners torch / onnxruntime (tests, machines
    without a GPU).
    tracked_pass_graphs: the tracker will capture its whole tracked pass (`capture_cuda_graphs`), so the
    torch-cuda runners of the tracked models need no graphs of their own (the detector keeps its own)."""
    if kind not in RUNNER_KINDS:
        raise ValueError(f"unknown runner kind {kind!r}; choose one of {', '.join(RUNNER_KINDS)}")
    if kind.endswith("-cuda"):  # say why before loading anything, instead of torch's or ORT's deep errors

        availability = runner_availability()
        _kind, usable, reason = next(row for row in availability if row[0] == kind)
        if not usable:
            fallbacks = " or ".join(k for k, ok, _ in availability if ok)
            raise EngineUnavailable(f"the {kind} runners cannot run on this machine: {reason}",
                                    f"Use the {fallbacks} runners instead (`facebridge engines list` shows what "
                                    "works here)")
    options = dict(fp16=fp16, cuda_graphs=cuda_graphs, threads=threads, conv_search=conv_search, buckets=buckets,
                   graph_limit=graph_limit, tracked_pass_graphs=tracked_pass_graphs, compile=compile, report=report)
    runners = {}
    for role, name in role_models(detector).items():
        try:
            path = find_model(name).verified_path()
        except Exception:
            if role == "expression":  # optional: an install without the expression engine still tracks
                continue
            raise
        runners[role] = make_runner(kind, role, path, max_batch, **options)
    return runners


def role_models(detector: str = "face_detection_short_range") -> dict[str, str]:
    """role -> the registry name of its model (what a signed release of it is called)."""
    return {"detector": detector, "landmarks": "face_landmark", "iris": "iris_landmark", "emotion": "emotion",
            "expression": "regressor"}


def make_runner(kind: str, role: str, path: Path, max_batch: int, fp16: bool = False, cuda_graphs: bool = True,
                threads: int = 1, conv_search: str = "HEURISTIC", buckets: list[int] | None = None,
                graph_limit: int = 32, tracked_pass_graphs: bool = False, compile: bool = True, report=None):
    """The runner of one role over the model file at `path` (verified by the caller), as `make_runners` builds it:
    also what a signed release of that role's model is built into (bridge/runtime/serve_releases.py)."""
    batch = max_batch * 2 if role == "iris" else max_batch  # two eyes per face
    sizes = None
    if buckets is not None:
        sizes = sorted({b for b in (*buckets, *(2 * b for b in buckets)) if b <= batch} if role == "iris"
                       else {b for b in buckets if b <= batch})
    if kind == "torch-cuda":
        own_graphs = cuda_graphs and (role == "detector" or not tracked_pass_graphs)
        return TorchRunner(path, batch, "cuda", fp16=fp16, channels_last=fp16, cuda_graphs=own_graphs,
                           buckets=sizes, compile=compile and role != "expression", report=report)
    if kind == "onnxruntime-cuda":
        return OrtCudaRunner(path, batch, cuda_graphs=cuda_graphs, fp16=fp16, conv_search=conv_search,
                             buckets=sizes, graph_limit=graph_limit * (2 if role == "iris" else 1))
    if kind == "torch":
        return TorchRunner(path, batch, "cpu")
    return OrtCpuRunner(path, threads=threads)
