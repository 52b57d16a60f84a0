"""LiteRT session for MediaPipe's attention mesh: the .tflite cut at MediaPipe's custom ops, those done in numpy.

face_landmark_with_attention.tflite (the model of MediaPipe FaceMesh with refine_landmarks) has 11 ops of
MediaPipe's own that stock LiteRT refuses: 3 Landmarks2TransformMatrix, 3 TransformTensorBilinear, 5
TransformLandmarks (mediapipe/util/tflite/operations, v2). At load the graph is cut, in memory, into two LiteRT
models: part A (the image to the 468-point mesh and a 48x48x32 feature map) and part B (three 16x16x32 feature crops
to the lip, eye and iris points and the face flag); the three ops run in numpy between and after them, following
MediaPipe's definitions. The session has the whole model's interface: NCHW input like the ONNX sessions (transposed
to the .tflite's NHWC, free for the stages' NHWC views), its seven outputs by their graph names, flattened to
(batch, K) as the graph's own are; a batch runs item by item. LiteRT only (tflite2onnx cannot convert the custom
ops), XNNPACK f32 (the weights are stored fp16 and dequantised at load).
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import cv2
import numpy as np

from bridge.engines.base import EngineUnavailable
from bridge.engines.litert_loading import litert_available, loaded_interpreters, manifest_specs

CUSTOM = ("Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks")
CROP = 16  # TransformTensorBilinear's output side


def _cut(data: bytes):
    """(part A bytes, part B bytes, the three matrix ops' options, wiring by tensor name, final outputs)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema
    from flatbuffers import flexbuffers

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


def transform_matrix(landmarks: np.ndarray, o: dict, subset: np.ndarray | None = None) -> np.ndarray:
    """Landmarks2TransformMatrix v2: the 4x4 matrix from output-crop pixels to feature-map pixels of a region
    (`subset`: o["subset_idxs"] as an index array, kept by the caller)."""
    left, right = landmarks[o["left_rotation_idx"]], landmarks[o["right_rotation_idx"]]
    rot = o.get("target_rotation_radians", 0.0) - math.atan2(float(right[1] - left[1]), float(right[0] - left[0]))
    c, s = math.cos(rot), math.sin(rot)
    p = landmarks[o["subset_idxs"] if subset is None else subset, :2].astype(np.float64)
    uv = (p @ np.array([[c, s], [-s, c]])).T.copy()  # rows (u, v) = (x c - y s, x s + y c), each contiguous
    u_lo, u_hi = cv2.minMaxLoc(uv[0])[:2]
    v_lo, v_hi = cv2.minMaxLoc(uv[1])[:2]
    mu, mv = (u_hi + u_lo) / 2, (v_hi + v_lo) / 2
    cx, cy = mu * c + mv * s, -mu * s + mv * c  # the centre rotated back
    ow, oh = o["output_width"], o["output_height"]
    sx, sy = o["scale_x"] * (u_hi - u_lo) / ow, o["scale_y"] * (v_hi - v_lo) / oh
    # shift(centre) @ rotation(-rot) @ scale @ shift(-output centre), multiplied out (floats, rounded once)
    return np.array([[c * sx, s * sy, 0.0, cx - (c * sx * ow + s * sy * oh) / 2],
                     [-s * sx, c * sy, 0.0, cy - (-s * sx * ow + c * sy * oh) / 2],
                     [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]], np.float32)


class FeatureCrops:
    """TransformTensorBilinear v2 on one (H, W, C) feature map: `size` x `size` bilinear crops, 0 where a sample
    falls outside the map (the op's half-pixel shift), several crops in one gather. x and y are computed as the two
    rows of one array, the blend in place on full-width weights (a (K, 1) weight broadcast over C costs numpy
    several times a contiguous product): the same float operations as the op's definition, in the same order."""

    def __init__(self, h: int, w: int, size: int = CROP) -> None:
        self.h, self.w, self.size = h, w, size
        ys, xs = np.mgrid[0:size, 0:size]
        self.xs, self.ys = xs.reshape(-1).astype(np.float64), ys.reshape(-1).astype(np.float64)
        self.last = np.array([[w - 1], [h - 1]], np.float64)  # the last sample position: x row, y row
        self.last_i = self.last.astype(np.intp)
        self.stride = np.array([[1], [w]], np.intp)

    def crops(self, feature: np.ndarray, matrices: list[np.ndarray]) -> np.ndarray:
        """(len(matrices), size, size, C) crops of `feature` (H, W, C)."""
        h, w, n, k = self.h, self.w, len(matrices), self.size * self.size
        m = np.array(matrices, np.float64)[:, :2].transpose(1, 0, 2)  # (x row / y row, n, 4)
        t = (m[:, :, :1] * self.xs + m[:, :, 1:2] * self.ys
             + (m[:, :, 3:] + m[:, :, :1] * 0.5 + m[:, :, 1:2] * 0.5 - 0.5)).reshape(2, n * k)
        x_lo, x_hi = cv2.minMaxLoc(t[0])[:2]  # the per-sample mask only when some sample falls outside
        y_lo, y_hi = cv2.minMaxLoc(t[1])[:2]
        outside = not (x_lo >= 0 and y_lo >= 0 and x_hi <= w - 1 and y_hi <= h - 1)
        lo = np.floor(t)
        frac = (t - lo).astype(np.float32)
        # a sample on the last row or column has weight 0 on the next one: reading it clipped changes nothing
        lo = np.minimum(np.maximum(lo, 0), self.last).astype(np.intp)  # np.clip, without its wrapper's cost
        hi = np.minimum(lo + 1, self.last_i)
        lo *= self.stride
        hi *= self.stride
        f = feature.reshape(h * w, -1)
        c = f.shape[1]
        corners = f.take(np.concatenate([lo[1] + lo[0], lo[1] + hi[0], hi[1] + lo[0], hi[1] + hi[0]]),
                         axis=0).reshape(4, n * k, c)
        fx = np.repeat(frac[0][:, None], c, axis=1)
        fy = np.repeat(frac[1][:, None], c, axis=1)
        c0, c1, c2, c3 = corners
        top = np.subtract(c1, c0)  # top = c0 + fx (c1 - c0), bottom likewise, out = top + fy (bottom - top)
        top *= fx
        top += c0
        out = np.subtract(c3, c2, out=c3)
        out *= fx
        out += c2
        out -= top
        out *= fy
        out += top
        if outside:
            out[~((t >= 0) & (t <= self.last)).all(axis=0)] = 0.0
        return out.reshape(n, self.size, self.size, c)


class MediaPipeAttentionSession:
    """An InferenceSession (engines/base.py) for face_landmark_with_attention.tflite on stock LiteRT."""

    backend_name = "litert"
    precision = "f32"

    def __init__(self, tflite: Path, entry: dict, threads: int = 1) -> None:
        if not litert_available():
            raise EngineUnavailable("LiteRT is not installed", "pip install ai-edge-litert")
        part_a, part_b, self.options, self.wiring, self.final = _cut(Path(tflite).read_bytes())
        self.a, self.b = loaded_interpreters([{"model_content": part_a}, {"model_content": part_b}], threads,
                                             f"the cut {Path(tflite).name}", "use --landmarks mesh+iris")
        self.inputs, self.outputs = manifest_specs(entry, "inputs"), manifest_specs(entry, "outputs")
        self.a_in = self.a.get_input_details()[0]["index"]
        self.a_out = {d["name"]: d["index"] for d in self.a.get_output_details()}
        self.b_in = {d["name"]: d["index"] for d in self.b.get_input_details()}
        self.b_out = {d["name"]: d["index"] for d in self.b.get_output_details()}
        self.shared = [(self.a_out[n], self.b_in[n]) for n in self.b_in if n in self.a_out]  # backbone -> part B
        self.subsets = [np.array(o["subset_idxs"], np.intp) for o in self.options]
        feature = next(d for d in self.a.get_output_details() if d["name"] == self.wiring["feature"])
        h, w = (int(d) for d in feature["shape"][1:3])
        self.feature_crops = FeatureCrops(h, w)
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
        a, b, w = self.a, self.b, self.wiring
        if nhwc is not None:
            a.set_tensor(self.a_in, nhwc)
        a.invoke()
        # part A's outputs read through views (interpreter.tensor), not copies, and only until the next invoke
        for src, dst in self.shared:
            b.set_tensor(dst, a.tensor(src)())
        matrices = [transform_matrix(a.tensor(self.a_out[src])()[0], o, subset)
                    for src, o, subset in zip(w["matrix_in"], self.options, self.subsets)]
        crops = self.feature_crops.crops(a.tensor(self.a_out[w["feature"]])()[0], matrices)
        for dst, crop, m, values in zip(w["matrix_out"], w["crops"], matrices, crops):
            b.set_tensor(self.b_in[dst], m[None])
            b.set_tensor(self.b_in[crop], values[None])
        b.invoke()
        found = {name: interp.get_tensor(index).reshape(1, -1) for name, interp, index in self.direct}
        for pts, mat, out in w["points"]:  # TransformLandmarks v2, 2-D
            p, m = b.get_tensor(self.b_out[pts])[0], b.get_tensor(self.b_out[mat])[0]
            found[self.final[out]] = (p @ m[:2, :2].T + m[:2, 3]).reshape(1, -1)
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
