"""Evaluate MediaPipe's attention mesh (face_landmark_with_attention.tflite) on stock LiteRT: not shipped, measured.

MediaPipe FaceMesh with refine_landmarks runs this one model where FaceBridge runs face_landmark and iris_landmark
(docs/PERFORMANCE.md, "One core against MediaPipe"). Stock LiteRT refuses it: 11 of its 712 ops are MediaPipe's
own (3 Landmarks2TransformMatrix, 3 TransformTensorBilinear, 5 TransformLandmarks). Here the graph is cut in memory
at those ops into two LiteRT models (part A: the image to the mesh and a 48x48x32 feature map; part B: three 16x16x32
feature crops to the lip, eye and iris points; the 6 reshapes after the last custom op are done in numpy) and the
three ops run in numpy between them, following MediaPipe's definitions (mediapipe/util/tflite/operations, v2).

    python tools/attention_mesh.py MODEL.tflite --time
        CPU time per face, interleaved on one core, against FaceBridge's landmark + two-eye iris models
    python tools/attention_mesh.py MODEL.tflite --check LANDMARKS.npy
        points on the sample clip against MediaPipe's own output for the same frames: LANDMARKS.npy holds
        (300, 478, 3) pixels from FaceMesh(refine_landmarks=True) in tracking mode over SampleSource's 300 frames
        (make them in .venv-mediapipe); each frame is cropped from MediaPipe's previous-frame points

MODEL.tflite: mediapipe/modules/face_landmark/face_landmark_with_attention.tflite from the mediapipe 0.10.21 wheel
(Apache-2.0). Nothing here reaches a FacePipeline: shipping it would go through models/registry.py (see the docs).
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import time

import numpy as np

CUSTOM = ("Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks")
REGION = ("lips", "left_eye", "right_eye")  # the three Landmarks2TransformMatrix ops, in graph order


def _parts(path: str):
    """(bytes of part A, bytes of part B, the three matrix ops' options, tensor names) cut from the model."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema
    from flatbuffers import flexbuffers

    model = schema.ModelT.InitFromPackedBuf(bytearray(open(path, "rb").read()), 0)
    graph = model.subgraphs[0]
    codes = model.operatorCodes
    custom = [i for i, op in enumerate(graph.operators) if codes[op.opcodeIndex].customCode]
    names = [codes[graph.operators[i].opcodeIndex].customCode.decode() for i in custom]
    if sorted(set(names)) != sorted(CUSTOM) or len(custom) != 11:
        raise SystemExit(f"{path} is not the attention mesh this tool knows (custom ops {names})")
    matrix_ops = custom[:3]
    options = [flexbuffers.Loads(bytes(graph.operators[i].customOptions)) for i in matrix_ops]
    middle = (custom[5] + 1, custom[6])  # between the feature crops and the landmark transforms
    ranges = {"A": range(0, custom[0]), "B": range(*middle)}
    where = {i: name for name, r in ranges.items() for i in r}
    consumers: dict[int, set] = {}
    for i, op in enumerate(graph.operators):
        for t in op.inputs:
            consumers.setdefault(t, set()).add(i)

    def constant(t: int) -> bool:
        data = model.buffers[graph.tensors[t].buffer].data
        return data is not None and len(data) > 0

    out = {}
    for name, r in ranges.items():
        produced = {t for i in r for t in graph.operators[i].outputs}
        inputs = sorted({t for i in r for t in graph.operators[i].inputs if t >= 0 and t not in produced
                         and not constant(t)})
        outputs = sorted({t for t in produced if t in graph.outputs
                          or any(where.get(c) != name for c in consumers.get(t, ()))})
        part = copy.deepcopy(model)
        sub = part.subgraphs[0]
        sub.operators = [sub.operators[i] for i in r]
        sub.inputs, sub.outputs = inputs, outputs
        builder = flatbuffers.Builder(1 << 20)
        builder.Finish(part.Pack(builder), file_identifier=b"TFL3")
        out[name] = bytes(builder.Output())
    ops = graph.operators
    tensor = lambda t: graph.tensors[t].name.decode()  # noqa: E731
    wiring = {"matrix_in": [tensor(ops[i].inputs[0]) for i in matrix_ops],
              "matrix_out": [tensor(ops[i].outputs[0]) for i in matrix_ops],
              "feature": tensor(ops[custom[3]].inputs[0]),
              "crops": [tensor(ops[i].outputs[0]) for i in custom[3:6]],
              "points": [(tensor(ops[i].inputs[0]), tensor(ops[i].inputs[1])) for i in custom[6:]]}
    return out["A"], out["B"], options, wiring


def transform_matrix(landmarks: np.ndarray, o: dict) -> np.ndarray:
    """Landmarks2TransformMatrix v2: the 4x4 matrix from output-crop pixels to feature-map pixels of a region."""
    left, right = landmarks[o["left_rotation_idx"]], landmarks[o["right_rotation_idx"]]
    rot = o.get("target_rotation_radians", 0.0) - math.atan2(right[1] - left[1], right[0] - left[0])
    c, s = math.cos(rot), math.sin(rot)
    p = landmarks[o["subset_idxs"], :2].astype(np.float64)
    u, v = p[:, 0] * c - p[:, 1] * s, p[:, 0] * s + p[:, 1] * c
    mu, mv = (u.max() + u.min()) / 2, (v.max() + v.min()) / 2
    cx, cy = mu * c + mv * s, -mu * s + mv * c  # the centre rotated back
    ow, oh = o["output_width"], o["output_height"]
    sx, sy = o["scale_x"] * (u.max() - u.min()) / ow, o["scale_y"] * (v.max() - v.min()) / oh
    shift = np.array([[1, 0, 0, cx], [0, 1, 0, cy], [0, 0, 1, 0], [0, 0, 0, 1.0]])
    turn = np.array([[c, s, 0, 0], [-s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])  # rotation by -rot
    back = np.array([[1, 0, 0, -ow / 2], [0, 1, 0, -oh / 2], [0, 0, 1, 0], [0, 0, 0, 1.0]])
    return (shift @ turn @ np.diag([sx, sy, 1.0, 1.0]) @ back).astype(np.float32)


class FeatureCrops:
    """TransformTensorBilinear v2 for one feature map: 16x16 bilinear crops, 0 outside (align-corners shift)."""

    def __init__(self, feature: np.ndarray, size: int = 16) -> None:
        h, w, ch = feature.shape
        self.h, self.w, self.size = h, w, size
        self.flat = np.zeros(((h + 1) * (w + 1), ch), np.float32)  # one row and column of zeros past the edge
        self.flat.reshape(h + 1, w + 1, ch)[:h, :w] = feature
        ys, xs = np.mgrid[0:size, 0:size]
        self.xs, self.ys = xs.reshape(-1).astype(np.float64), ys.reshape(-1).astype(np.float64)

    def crop(self, m: np.ndarray) -> np.ndarray:
        xt, yt = m[0].astype(np.float64), m[1].astype(np.float64)
        tx = xt[0] * self.xs + xt[1] * self.ys + xt[3] + xt[0] * 0.5 + xt[1] * 0.5 - 0.5
        ty = yt[0] * self.xs + yt[1] * self.ys + yt[3] + yt[0] * 0.5 + yt[1] * 0.5 - 0.5
        inside = (tx >= 0) & (tx <= self.w - 1) & (ty >= 0) & (ty <= self.h - 1)
        x0, y0 = np.floor(tx), np.floor(ty)
        fx, fy = (tx - x0).astype(np.float32)[:, None], (ty - y0).astype(np.float32)[:, None]
        i = np.clip(y0, 0, self.h - 1).astype(np.intp) * (self.w + 1) + np.clip(x0, 0, self.w - 1).astype(np.intp)
        f = self.flat
        top = (1 - fx) * f[i] + fx * f[i + 1]
        bottom = (1 - fx) * f[i + self.w + 1] + fx * f[i + self.w + 2]
        out = fy * bottom + (1 - fy) * top
        out[~inside] = 0.0
        return out.reshape(1, self.size, self.size, -1)


class AttentionMesh:
    """The whole model on one 192x192 RGB crop in [0, 1] (1, 192, 192, 3): crop pixels out."""

    def __init__(self, path: str) -> None:
        from ai_edge_litert.interpreter import Interpreter

        part_a, part_b, self.options, self.wiring = _parts(path)
        self.a = Interpreter(model_content=part_a, num_threads=1)
        self.b = Interpreter(model_content=part_b, num_threads=1)
        for it in (self.a, self.b):
            it.allocate_tensors()
        self.a_in = self.a.get_input_details()[0]["index"]
        self.a_out = {d["name"]: d["index"] for d in self.a.get_output_details()}
        self.b_in = {d["name"]: d["index"] for d in self.b.get_input_details()}
        self.b_out = {d["name"]: d["index"] for d in self.b.get_output_details()}

    def run(self, x: np.ndarray) -> dict[str, np.ndarray]:
        a, b, w = self.a, self.b, self.wiring
        a.set_tensor(self.a_in, x)
        a.invoke()
        crops = FeatureCrops(a.get_tensor(self.a_out[w["feature"]])[0])
        for name in self.b_in:
            if name in self.a_out:  # the backbone's own tensors part B reads
                b.set_tensor(self.b_in[name], a.get_tensor(self.a_out[name]))
        for src, dst, crop, o in zip(w["matrix_in"], w["matrix_out"], w["crops"], self.options):
            m = transform_matrix(a.get_tensor(self.a_out[src])[0], o)
            b.set_tensor(self.b_in[dst], m[None])
            b.set_tensor(self.b_in[crop], crops.crop(m))
        b.invoke()
        points = []
        for pts, mat in w["points"]:  # TransformLandmarks v2, 2-D
            p, m = b.get_tensor(self.b_out[pts])[0], b.get_tensor(self.b_out[mat])[0]
            points.append(p @ m[:2, :2].T + m[:2, 3])
        mesh_name = next(n for n in self.a_out if n.startswith("output_mesh"))
        lips, left_eye, left_iris, right_eye, right_iris = points
        return {"mesh": a.get_tensor(self.a_out[mesh_name]).reshape(468, 3), "lips": lips, "left_eye": left_eye,
                "left_iris": left_iris, "right_eye": right_eye, "right_iris": right_iris}


def _time(mesh: AttentionMesh) -> None:
    from ai_edge_litert.interpreter import Interpreter

    from bridge.models import model_path

    rng = np.random.default_rng(0)
    face = rng.uniform(0, 1, (1, 192, 192, 3)).astype(np.float32)
    eyes = rng.uniform(0, 1, (2, 64, 64, 3)).astype(np.float32)
    ours = []
    for name, x in (("face_landmark", face), ("iris_landmark", eyes)):
        it = Interpreter(model_path=str(model_path(name).with_suffix(".tflite")), num_threads=1)
        it.resize_tensor_input(it.get_input_details()[0]["index"], list(x.shape), strict=False)
        it.allocate_tensors()
        ours.append((it, x))

    def both() -> None:
        for it, x in ours:
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()

    sides = {"attention mesh (2 LiteRT parts + numpy ops)": lambda: mesh.run(face),
             "FaceBridge (face_landmark + iris_landmark, 2 eyes)": both}
    times: dict[str, list] = {k: [] for k in sides}
    for f in sides.values():
        for _ in range(5):
            f()
    for _ in range(30):  # taking turns
        for k, f in sides.items():
            for _ in range(5):
                c = time.process_time()
                f()
                times[k].append((time.process_time() - c) * 1000.0)
    load = os.getloadavg()[0]
    for k, v in times.items():
        print(f"{k}: {np.median(v):.3f} ms CPU median ({len(v)} calls, load {load:.1f})")


def _check(mesh: AttentionMesh, landmarks_path: str) -> None:
    from bridge.sources.files import SampleSource
    from bridge.stages.landmarks import LANDMARK_SIZE, _to_tensor, roi_from_landmarks

    theirs = np.load(landmarks_path)
    with SampleSource(realtime=False, loop=False) as src:
        frames = [src.read().image for _ in range(len(theirs))]
    refined = sorted({i for o in mesh.options for i in o["subset_idxs"]})
    plain = np.setdiff1d(np.arange(468), refined)
    err = {"mesh (points lips/eyes do not refine)": [], "irises (10 points)": []}
    for k in range(1, len(frames)):
        patch, back = roi_from_landmarks(theirs[k - 1, :468]).crop_rgba(frames[k], LANDMARK_SIZE)
        out = mesh.run(np.ascontiguousarray(_to_tensor([patch]).transpose(0, 2, 3, 1)))
        to_image = lambda p: p[:, :2] @ back[:, :2].T + back[:, 2]  # noqa: E731
        err["mesh (points lips/eyes do not refine)"].append(
            np.linalg.norm(to_image(out["mesh"])[plain] - theirs[k, plain, :2], axis=1))
        irises = np.vstack([to_image(out["left_iris"]), to_image(out["right_iris"])])
        err["irises (10 points)"].append(np.linalg.norm(irises - theirs[k, 468:, :2], axis=1))
    for k, v in err.items():
        v = np.concatenate(v)
        print(f"{k}: px from MediaPipe's median {np.median(v):.3f}, p95 {np.percentile(v, 95):.3f}, max {v.max():.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="face_landmark_with_attention.tflite (from the mediapipe wheel)")
    p.add_argument("--time", action="store_true", help="CPU time per face against FaceBridge's two models")
    p.add_argument("--check", metavar="LANDMARKS.npy", help="MediaPipe's points on the sample to compare with")
    p.add_argument("--core", type=int, default=1, help="the core to run on (default 1)")
    args = p.parse_args()
    os.sched_setaffinity(0, {args.core})
    mesh = AttentionMesh(args.model)
    if args.time:
        _time(mesh)
    if args.check:
        _check(mesh, args.check)


if __name__ == "__main__":
    main()
