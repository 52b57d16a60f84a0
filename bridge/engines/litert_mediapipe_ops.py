"""LiteRT session for MediaPipe's attention mesh: the .tflite cut at MediaPipe's custom ops, those done in numba.

face_landmark_with_attention.tflite (the model of MediaPipe FaceMesh with refine_landmarks) has 11 ops of
MediaPipe's own that stock LiteRT refuses: 3 Landmarks2TransformMatrix, 3 TransformTensorBilinear, 5
TransformLandmarks (mediapipe/util/tflite/operations, v2). At load the graph is cut, in memory, into two LiteRT
models: part A (the image to the 468-point mesh and a 48x48x32 feature map) and part B (three 16x16x32 feature crops
to the lip, eye and iris points and the face flag); the three ops run between and after them as compiled loops
following MediaPipe's definitions (litert_mediapipe_kernels.py). The session has the whole model's interface: NCHW
input like the ONNX sessions (transposed to the .tflite's NHWC, free for the stages' NHWC views), its seven outputs
by their graph names, flattened to (batch, K) as the graph's own are; a batch runs item by item. LiteRT only
(tflite2onnx cannot convert the custom ops), XNNPACK f32 (the weights are stored fp16 and dequantised at load).
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import flatbuffers
import numpy as np
from flatbuffers import flexbuffers

import bridge.engines.litert_mediapipe_kernels as kernels
from bridge.engines.base import EngineUnavailable
from bridge.engines.litert_loading import litert_available, loaded_interpreters, manifest_specs
from bridge.engines.rewritten import cached_rewrite, versions_of

CUSTOM = ("Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks")
CROP = 16  # TransformTensorBilinear's output side


def _cut(data: bytes):
    """(part A bytes, part B bytes, the three matrix ops' options, wiring by tensor name, final outputs)."""
    # optional extra: litert
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    graph, codes = model.subgraphs[0], model.operatorCodes
    custom = [i for i, op in enumerate(graph.operators) if codes[op.opcodeIndex].customCode]
    names = [codes[graph.operators[i].opcodeIndex].customCode.decode() for i in custom]
    if names != [CUSTOM[0]] * 3 + [CUSTOM[1]] * 3 + [CUSTOM[2]] * 5:
        raise EngineUnavailable(f"not the attention mesh this session knows (custom ops {names})",
                                "use the shipped face_landmark_with_attention.tflite")
    ops = graph.operators
    tensor = lambda t: graph.tensors[t].name.decode()  # noqa: E731
    options = [flexbuffers.Loads(bytes(ops[i].customOptions)) for i in custom[:3]]
    ranges = {"A": range(0, custom[0]), "B": range(custom[5] + 1, custom[6])}
    where = {i: name for name, r in ranges.items() for i in r}
    consumers: dict[int, set] = {}
    for i, op in enumerate(ops):
        for t in op.inputs:
            consumers.setdefault(t, set()).add(i)

    def constant(t: int) -> bool:
        buffer = model.buffers[graph.tensors[t].buffer].data
        return buffer is not None and len(buffer) > 0

    parts = {}
    for name, r in ranges.items():
        produced = {t for i in r for t in ops[i].outputs}
        inputs = sorted({t for i in r for t in ops[i].inputs if t >= 0 and t not in produced and not constant(t)})
        outputs = sorted({t for t in produced if t in graph.outputs
                          or any(where.get(c) != name for c in consumers.get(t, ()))})
        part = copy.deepcopy(model)
        sub = part.subgraphs[0]
        sub.operators, sub.inputs, sub.outputs = [sub.operators[i] for i in r], inputs, outputs
        builder = flatbuffers.Builder(1 << 20)
        builder.Finish(part.Pack(builder), file_identifier=b"TFL3")
        parts[name] = bytes(builder.Output())
    # after the last custom op only reshapes remain: each graph output is one op's input, flattened
    final = {tensor(ops[i].inputs[0]): tensor(ops[i].outputs[0]) for i in range(custom[-1] + 1, len(ops))}
    final.update({tensor(t): tensor(t) for t in graph.outputs if any(t in ops[i].outputs for i in where)})
    wiring = {"matrix_in": [tensor(ops[i].inputs[0]) for i in custom[:3]],
              "matrix_out": [tensor(ops[i].outputs[0]) for i in custom[:3]],
              "feature": tensor(ops[custom[3]].inputs[0]),
              "crops": [tensor(ops[i].outputs[0]) for i in custom[3:6]],
              "points": [(tensor(ops[i].inputs[0]), tensor(ops[i].inputs[1]), tensor(ops[i].outputs[0]))
                         for i in custom[6:]]}
    return parts["A"], parts["B"], options, wiring, final


def _cut_blobs(data: bytes) -> dict[str, bytes]:
    """_cut as the rewritten-model cache keeps it: the two parts and the rest as JSON."""
    part_a, part_b, options, wiring, final = _cut(data)
    return {"a": part_a, "b": part_b, "meta": json.dumps([options, wiring, final]).encode()}


def cut(data: bytes):
    """_cut's result, from the rewritten-model cache after the first time (1.1 s of a bridge's start)."""
    versions = versions_of(sys.modules[__name__], packages=("ai-edge-litert", "flatbuffers"))
    blobs = cached_rewrite("attention-cut", versions, data, _cut_blobs)
    options, wiring, final = json.loads(blobs["meta"])
    return blobs["a"], blobs["b"], options, wiring, final


class MediaPipeAttentionSession:
    """An InferenceSession (engines/base.py) for face_landmark_with_attention.tflite on stock LiteRT."""

    backend_name = "litert"
    precision = "f32"

    def __init__(self, tflite: Path, entry: dict, threads: int = 1) -> None:
        if not litert_available():
            raise EngineUnavailable("LiteRT is not installed", "pip install ai-edge-litert")
        part_a, part_b, self.options, self.wiring, self.final = cut(Path(tflite).read_bytes())
        self.a, self.b = loaded_interpreters([{"model_content": part_a}, {"model_content": part_b}], threads,
                                             f"the cut {Path(tflite).name}", "use --landmarks mesh+iris")
        self.inputs, self.outputs = manifest_specs(entry, "inputs"), manifest_specs(entry, "outputs")
        self.a_in = self.a.get_input_details()[0]["index"]
        self.a_out = {d["name"]: d["index"] for d in self.a.get_output_details()}
        self.b_in = {d["name"]: d["index"] for d in self.b.get_input_details()}
        self.b_out = {d["name"]: d["index"] for d in self.b.get_output_details()}
        self.shared = [(self.a_out[n], self.b_in[n]) for n in self.b_in if n in self.a_out]  # backbone -> part B
        subsets = [np.array(o["subset_idxs"], np.intp) for o in self.options]
        self.subsets = np.concatenate(subsets)
        self.starts = np.cumsum([0] + [len(s) for s in subsets]).astype(np.intp)
        self.params = np.array([[o["left_rotation_idx"], o["right_rotation_idx"], o.get("target_rotation_radians", 0.0),
                                 o["output_width"], o["output_height"], o["scale_x"], o["scale_y"]]
                                for o in self.options], np.float64)
        feature = next(d for d in self.a.get_output_details() if d["name"] == self.wiring["feature"])
        self.matrices = np.empty((3, 4, 4), np.float32)
        self.crops = np.empty((3, CROP, CROP, int(feature["shape"][3])), np.float32)
        self.matrix_in = [self.a_out[n] for n in self.wiring["matrix_in"]]
        self.feature = self.a_out[self.wiring["feature"]]
        self.b_matrices = [self.b_in[n] for n in self.wiring["matrix_out"]]
        self.b_crops = [self.b_in[n] for n in self.wiring["crops"]]
        self.points = [(self.b_out[p], self.b_out[m], self.final[out]) for p, m, out in self.wiring["points"]]
        kernels.warm()
        transformed = {out for _, _, out in self.wiring["points"]}
        self.direct = [(self.final[n], self.a if n in self.a_out else self.b, {**self.b_out, **self.a_out}[n])
                       for n in self.final if n not in transformed]  # outputs the two parts give as they are
        known = set(self.final.values())
        missing = [o.name for o in self.outputs if o.name not in known]
        if missing:
            raise EngineUnavailable(f"{Path(tflite).name} has no output {missing[0]}",
                                    "restore bridge/models with `git checkout bridge/models`")

    def _one(self, nhwc: np.ndarray | None) -> dict[str, np.ndarray]:
        """One item; nhwc None: part A's input is written already (`run_rgb`)."""
        a, b = self.a, self.b
        if nhwc is not None:
            a.set_tensor(self.a_in, nhwc)
        a.invoke()
        # part A's outputs read through views (interpreter.tensor), not copies, and only until the next invoke
        for src, dst in self.shared:
            b.set_tensor(dst, a.tensor(src)())
        l0, l1, l2 = (a.tensor(i)()[0] for i in self.matrix_in)
        mats, crops = self.matrices, self.crops
        kernels.region_crops(l0, l1, l2, self.subsets, self.starts, self.params, a.tensor(self.feature)()[0], mats,
                             crops)
        del l0, l1, l2
        for i in range(3):
            b.set_tensor(self.b_matrices[i], mats[i:i + 1])
            b.set_tensor(self.b_crops[i], crops[i:i + 1])
        b.invoke()
        found = {name: interp.get_tensor(index).reshape(1, -1) for name, interp, index in self.direct}
        for pts, mat, name in self.points:  # TransformLandmarks v2, 2-D
            p = b.get_tensor(pts)[0]
            out = np.empty(p.shape, np.float32)
            kernels.transform_points(p, b.get_tensor(mat)[0], out)
            found[name] = out.reshape(1, -1)
        return found

    def run_rgb(self, rgb: np.ndarray, scale: np.float32) -> dict[str, np.ndarray]:
        """`run` of one (S, S, 3) uint8 RGB crop, `rgb * scale` written straight into part A's input (the same
        float32 product as converting, scaling and copying it in: no NCHW tensor, no set_tensor copy)."""
        view = self.a.tensor(self.a_in)()
        np.multiply(rgb[None], scale, out=view)
        del view  # the interpreter refuses to invoke while a view of its tensors is held
        return self._one(None)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = next(iter(feeds.values()))
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1), dtype=np.float32)
        items = [self._one(nhwc[i:i + 1]) for i in range(len(nhwc))]
        return {o.name: np.concatenate([it[o.name] for it in items]) for o in self.outputs}
