"""A shipped model as a torch module on the GPU: fp16 and channels_last on request, one CUDA graph per batch bucket.

The batched face tracker's fastest path where TensorRT cannot run: cuDNN picks its kernels for each bucket once
(`cudnn.benchmark`), every bucket is captured as a CUDA graph, so a call is one input copy and one graph launch,
and nothing in a call waits for the host (unlike ONNX Runtime, whose `run` synchronises its stream each time, so
the host cannot queue the next stage while the GPU works). The same class runs on the CPU without graphs, which
keeps the tracker testable on machines without a GPU.
"""
from __future__ import annotations

from pathlib import Path

from bridge.engines.onnx_torch import load_torch_module


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to max_batch (which is always the last bucket)."""
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return sizes + [max_batch]


def capture_graphs(buckets: list[int], run) -> dict:
    """CUDA graphs of `run(bucket)` for each bucket: {bucket: (graph, what run returned)}.

    Every bucket first runs twice on a side stream, so cuDNN benchmarks its algorithms outside any capture. The
    graphs share one memory pool (captured largest first): callers replay one at a time and every graph's outputs
    stay allocated, so they can share their intermediates. Every tensor `run` reads must outlive the graphs: a freed
    one's memory would be reused under them.
    """
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


class TorchRunner:
    """`runner(x)` -> outputs in the ONNX output order, float32, first `len(x)` rows.

    fp16: weights and activations in half precision (inputs and outputs stay float32 for the caller);
    channels_last: NHWC activations, which is what cuDNN's fast fp16 convolutions want.
    """

    def __init__(self, path: Path, max_batch: int, device: str = "cuda", fp16: bool = False,
                 channels_last: bool = False, cuda_graphs: bool = True, buckets: list[int] | None = None,
                 item_shape: tuple[int, ...] | None = None):
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
        if on_gpu:
            torch.backends.cudnn.benchmark = True
            if cuda_graphs:
                self._capture_all()
            torch.cuda.synchronize()

    def _forward(self, x):
        return [o.float() for o in self.module(x.to(self.dtype).contiguous(memory_format=self._format))]

    def _capture_all(self) -> None:
        torch = self._torch
        inputs = {b: torch.zeros((b, *self.item_shape), device=self.device) for b in self.buckets}
        graphs = capture_graphs(self.buckets, lambda b: self._forward(inputs[b]))
        self._graphs = {b: (graph, inputs[b], outputs) for b, (graph, outputs) in graphs.items()}

    def eager(self, x):
        """The model as plain kernels: for a caller that captures its own, larger graph around it."""
        return self._forward(x)

    def __call__(self, x):
        n = x.shape[0]
        bucket = next((b for b in self.buckets if b >= n), None)
        if bucket is None:
            raise ValueError(f"batch {n} is larger than the largest bucket {self.buckets[-1]}")
        if bucket not in self._graphs:
            with self._torch.inference_mode():
                return self._forward(x)
        graph, static_in, static_out = self._graphs[bucket]
        static_in[:n].copy_(x)
        graph.replay()
        return [o[:n] for o in static_out]
