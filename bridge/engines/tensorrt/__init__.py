"""TensorRT and TensorRT-RTX behind one code path: flavour, ONNX parse and build, FP16 conversion, the engine key
(prepare), verification of cached engines, the runtime session and its CUDA buffers."""
