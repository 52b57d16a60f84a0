"""A shipped model as a torch module on the GPU: fp16 and channels_last on request, compiled kernels, one CUDA
graph per batch bucket.

The batched face tracker's fastest path where TensorRT cannot run: cuDNN picks its kernels for each bucket once
(`cudnn.benchmark`), every bucket is captured as a CUDA graph, so a call is one input copy and one graph launch,
and nothing in a call waits for the host (unlike ONNX Runtime, whose `run` synchronises its stream each time, so
the host cannot queue the next stage while the GPU works). The same class runs on the CPU without graphs, which
keeps the tracker testable on machines without a GPU.

`compile=True` is what TensorRT's layer fusion would do, done by torch.compile (Inductor): eager torch runs each
convolution's bias, each PReLU, residual add and channel pad as its own broadcast kernel, and on the H200 those
took 60 % of the landmark model's time; compiled, they fuse into one kernel after each convolution. The batch
dimension stays dynamic, so one compile serves every bucket (1.7x for the landmark model, 2.2x for the iris model
at batch 256; a fixed batch would give 2.1x and 2.3x but compile once per bucket). Compiling takes 22-27 s per
model on the H200 at every start: Inductor keeps its kernels on disk, but a start with that cache warm still took
16-27 s per model. Part of that was ours: the converted modules registered their constants in a set's order, which
changes with each process's string hashing, so the compiled graph's arguments changed too and Inductor's and
AOTAutograd's on-disk caches missed in every process (onnx_torch.py keeps first-use order now; on the CPU the second
process's compile of the emotion model went from 28.9 s to 14.6 s, both caches hitting). What is left is dynamo's
tracing of the converted graph in each process; saving compiled artifacts (AOTInductor) would skip that too.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from bridge.engines.cache import EngineCache
from bridge.multistream.onnx_torch import load_torch_module


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to max_batch (which is always the last bucket)."""
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return sizes + [max_batch]


def bucket_for(buckets: list[int], n: int) -> int:
    """The smallest of the sorted `buckets` that holds a batch of n (a runner pads the batch up to it)."""
    bucket = next((b for b in buckets if b >= n), None)
    if bucket is None:
        raise ValueError(f"batch {n} is larger than the largest bucket {buckets[-1]}")
    return bucket


def capture_graphs(buckets: list[int], run) -> dict:
    """CUDA graphs of `run(bucket)` for each bucket: {bucket: (graph, what run returned)}.

    Every bucket first runs twice on a side stream, so cuDNN benchmarks its algorithms outside any capture. The
    graphs share one memory pool (captured largest first): callers replay one at a time and every graph's outputs
    stay allocated, so they can share their intermediates. Every tensor `run` reads must outlive the graphs: a freed
    one's memory would be reused under them.
    """
    # optional extras: torch (gpu) and onnx, about 1.5 s and 1.1 s to import
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(side):
        for bucket in buckets:
            for _ in range(2):
                run(bucket)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the benchmarks' workspaces: cached memory a graph pool cannot reuse
    pool = torch.cuda.graph_pool_handle()
    graphs = {}
    for bucket in sorted(buckets, reverse=True):
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph, pool=pool):
            out = run(bucket)
        graphs[bucket] = (graph, out)
    return graphs


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def inductor_cache_dir() -> Path:
    """Where Inductor keeps compiled kernels: beside the TensorRT engines (FACEBRIDGE_ENGINE_CACHE moves both)."""
    return EngineCache().inductor_dir


def compile_module(module, item_shape: tuple[int, ...], dtype, memory_format, label: str, report=None,
                   batch: int = 64, backend: str = "inductor"):
    """`module` compiled by torch.compile for inputs (batch, *item_shape), the batch dimension dynamic: one
    compile serves every batch of 2 and up (a batch of 1 would compile again, so callers run it eagerly).
    Compiles now, on a zero batch, and reports how long it took."""
    # optional extras: torch (gpu) and onnx, about 1.5 s and 1.1 s to import
    import torch

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache_dir()))
    # every converted model shares one `forward` code object, and dynamo stops compiling a code object after
    # `recompile_limit` variants (8), silently running the rest eagerly: allow one per model and precision
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 64))
    logging.getLogger("torch.utils._sympy.interp").setLevel(logging.ERROR)  # symbolic-range noise, not errors
    report = report or _to_stderr
    device = next(iter(module.state_dict().values())).device
    report(f"compiling {label} for {device} (torch.compile, about half a minute per model at every start; "
           f"Inductor caches kernels in {os.environ['TORCHINDUCTOR_CACHE_DIR']})")
    started = time.perf_counter()
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    # made in inference mode, like every later input: an ordinary tensor has other dispatch keys, and dynamo's
    # guards would compile everything a second time on the first real call
    with torch.inference_mode():
        example = torch.zeros((batch, *item_shape), device=device, dtype=dtype).contiguous(memory_format=memory_format)
        torch._dynamo.maybe_mark_dynamic(example, 0)  # a backend that must specialise recompiles, not fails
        compiled(example)
    if device.type == "cuda":
        torch.cuda.synchronize()
    report(f"compiled {label} in {time.perf_counter() - started:.1f} s")
    return compiled


class TorchRunner:
    """`runner(x)` -> outputs in the ONNX output order, float32, first `len(x)` rows.

    fp16: weights and activations in half precision (inputs and outputs stay float32 for the caller);
    channels_last: NHWC activations, which is what cuDNN's fast fp16 convolutions want;
    compile: Inductor-fused kernels on a GPU (see the module docstring; batches of 1 stay eager).
    """
    def __init__(self, path: Path, max_batch: int, device: str = "cuda", fp16: bool = False,
                 channels_last: bool = False, cuda_graphs: bool = True, buckets: list[int] | None = None,
                 item_shape: tuple[int, ...] | None = None, compile: bool = False, report=None):
        # optional extras: torch (gpu) and onnx, about 1.5 s and 1.1 s to import
        import onnx
        import torch

        self._torch = torch
        self.device = torch.device(device)
        on_gpu = self.device.type == "cuda"
        if item_shape is None:
            dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
            item_shape = tuple(d.dim_value for d in dims[1:])
        self.item_shape = item_shape
        module = load_torch_module(path, (1, *item_shape)).eval()
        self.dtype = torch.float16 if fp16 and on_gpu else torch.float32
        self._format = torch.channels_last if channels_last and len(item_shape) == 3 else torch.contiguous_format
        self.module = module.to(self.device, self.dtype).to(memory_format=self._format)
        self.buckets = sorted(set(buckets or batch_buckets(max_batch)))
        self.precision = "fp16" if self.dtype == torch.float16 else "fp32"
        self._graphs = {}  # bucket -> (graph, static input, static outputs)
        self._compiled = None
        self._report = report or _to_stderr
        self.label = Path(path).stem
        if on_gpu and compile and max(self.buckets) >= 2:
            try:
                self._compiled = compile_module(self.module, item_shape, self.dtype, self._format, self.label,
                                                self._report, batch=max(self.buckets))
            except Exception as e:  # no Triton, no C compiler, an Inductor bug: slower, but serving
                self._give_up_compiling(e)
        if on_gpu:
            torch.backends.cudnn.benchmark = True
            if cuda_graphs:
                self._capture_all()
            torch.cuda.synchronize()

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def _give_up_compiling(self, error: Exception) -> None:
        self._compiled = None
        first_line = (str(error).strip().splitlines() or ["no message"])[0][:200]
        self._report(f"warning: torch.compile failed for {self.label} ({type(error).__name__}: {first_line}); "
                     "running its eager kernels instead: same results, about half the speed. To compile, the GPU "
                     "machine needs Triton and a C compiler (pip install triton; apt-get install gcc).")

    def _forward(self, x):
        x = x.to(self.dtype).contiguous(memory_format=self._format)
        if self._compiled is not None and x.shape[0] >= 2:
            try:
                return [o.float() for o in self._compiled(x)]
            except Exception as e:
                # a failure inside a CUDA-graph capture has spoilt the capture: the capturing caller handles it
                if self.device.type == "cuda" and self._torch.cuda.is_current_stream_capturing():
                    raise
                self._give_up_compiling(e)
        return [o.float() for o in self.module(x)]

    def _capture_all(self) -> None:
        torch = self._torch
        inputs = {b: torch.zeros((b, *self.item_shape), device=self.device) for b in self.buckets}
        graphs = capture_graphs(self.buckets, lambda b: self._forward(inputs[b]))
        self._graphs = {b: (graph, inputs[b], outputs) for b, (graph, outputs) in graphs.items()}

    def eager(self, x):
        """The model without this runner's CUDA graphs: for a caller that captures its own, larger graph around it."""
        return self._forward(x)

    def __call__(self, x):
        n = x.shape[0]
        bucket = bucket_for(self.buckets, n)
        if bucket not in self._graphs:
            with self._torch.inference_mode():
                return self._forward(x)
        graph, static_in, static_out = self._graphs[bucket]
        static_in[:n].copy_(x)
        graph.replay()
        return [o[:n] for o in static_out]
