"""Many face streams, one GPU: the batched tracker, its model runners (torch, ORT CUDA, CPU), the ONNX-to-torch
conversion, the deadline batcher and the multi-stream face service."""
