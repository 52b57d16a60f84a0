"""Two passes of the same weights as one batch of two: an exact rewrite in memory for ONNX Runtime's CPU provider.

A graph that runs one chain of row-wise ops twice with the same constants, on two inputs of the same rows (the
expression regressor's face and its mirror image: bridge/expression/regressor.json, exported as two passes so that
serve's torch path needs no Shape/Slice), reads every weight matrix twice a frame. Here the second chain is dropped:
the two inputs are concatenated on the batch axis, the first chain runs once on 2n rows, and each tensor that leaves
the chains is split back into its two halves (Concat and Split need no Shape op). Only ops that treat rows alone
qualify (elementwise with constants of rank <= 1, Gemm and MatMul on constant weights), and the rewrite is kept only
when ONNX Runtime gives bit-identical outputs to the original graph on seeded inputs of 1 and 3 rows; otherwise,
or without a twin chain, the model loads unchanged. The shipped file stays as it is.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

ROW_WISE = {"Add", "Sub", "Mul", "Div", "Erf", "Sigmoid", "Relu", "Tanh", "Neg", "Gemm", "MatMul"}


def _constants(graph, numpy_helper) -> tuple[dict, dict]:
    """({constant tensor: its rank}, {constant tensor: its key}): an initializer is known by its name, a Constant
    node's output by its value (the two passes' exports each have their own Constant nodes of equal values)."""
    ranks = {init.name: len(init.dims) for init in graph.initializer}
    same = {init.name: ("initializer", init.name) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            v = numpy_helper.to_array(node.attribute[0].t)
            ranks[node.output[0]] = v.ndim
            same[node.output[0]] = ("value", v.dtype.str, v.shape, v.tobytes())
    return ranks, same


def _row_wise(node, consts: dict) -> bool:
    """Whether `node` computes each row of its non-constant inputs alone (`consts`: constant tensor -> rank)."""
    if node.op_type not in ROW_WISE:
        return False
    if node.op_type == "Gemm":
        attrs = {a.name: a.i for a in node.attribute if a.name in ("transA",)}
        return attrs.get("transA", 0) == 0 and all(t in consts for t in node.input[1:])
    if node.op_type == "MatMul":
        return node.input[1] in consts and consts[node.input[1]] == 2
    return all(consts[t] <= 1 for t in node.input if t in consts)


def _twin(n1, n2, same: dict, pairs: dict) -> bool:
    """n2 is n1 on the twin inputs: same op and attributes, chain inputs paired, equal constants (`same`: a
    constant's key, its initializer's name or a Constant node's value)."""
    if n1.op_type != n2.op_type or n1 is n2 or len(n1.input) != len(n2.input):
        return False
    if not any(t in pairs for t in n1.input) or list(n1.attribute) != list(n2.attribute):
        return False
    for a, b in zip(n1.input, n2.input):
        if a in pairs:
            if pairs[a] != b:
                return False
        elif a != b and (a not in same or same.get(a) != same.get(b)):
            return False
    return True


def _chains(graph, consts: dict, same: dict) -> dict | None:
    """{tensor of the first chain: its twin in the second}: the first twin pair of row-wise nodes grown as far as
    the two chains go, if they multiply by weights (Gemm, MatMul); or None."""
    consumers: dict[str, list] = {}
    for node in graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    nodes = [n for n in graph.node if _row_wise(n, consts)]
    seeds: dict[tuple, list] = {}  # nodes of one moving input, by op and constants: where a twin pair can start
    for n in nodes:
        moving = [k for k, t in enumerate(n.input) if t not in consts]
        if len(moving) == 1:
            key = (n.op_type, moving[0], tuple(same.get(t) for t in n.input if t in consts))
            seeds.setdefault(key, []).append(n)
    moving = {id(n): next(t for t in n.input if t not in consts) for g in seeds.values() for n in g}
    for group in seeds.values():
        n1 = group[0]
        n2 = next((m for m in group[1:] if _twin(n1, m, same, {moving[id(n1)]: moving[id(m)]})), None)
        if n2 is None:
            continue
        pairs, used, weights = {moving[id(n1)]: moving[id(n2)]}, set(), False
        grown = True
        while grown:  # pair every row-wise node whose chain inputs all have twins
            grown = False
            for m1 in nodes:
                if id(m1) in used or not all(t in pairs or t in consts for t in m1.input):
                    continue
                if not any(t in pairs for t in m1.input):
                    continue
                twin = next((m2 for t in m1.input if t in pairs for m2 in consumers.get(pairs[t], ())
                             if id(m2) not in used and _twin(m1, m2, same, pairs)), None)
                if twin is not None:
                    used |= {id(m1), id(twin)}
                    pairs.update(zip(m1.output, twin.output))
                    weights |= m1.op_type in ("Gemm", "MatMul")
                    grown = True
        if weights and not set(pairs) & set(pairs.values()):  # worth it only where weights are read twice
            return pairs
    return None


def _rewritten(model, pairs: dict, onnx, helper) -> bytes | None:
    graph = model.graph
    first, second = set(pairs), set(pairs.values())
    x1, x2 = next(iter(pairs.items()))
    chain1 = [n for n in graph.node if any(t in first for t in n.input) and all(o in first for o in n.output)]
    chain2 = [n for n in graph.node if any(t in second for t in n.input) and all(o in second for o in n.output)]
    inside = {id(n) for n in chain1 + chain2}
    outside = [n for n in graph.node if id(n) not in inside]
    needed = {t for n in outside for t in n.input} | {o.name for o in graph.output}
    batched = {t: f"{t}__twins" for t in first}
    nodes = [helper.make_node("Concat", [x1, x2], [batched[x1]], axis=0)]
    for n in chain1:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [batched.get(t, t) for t in n.input]
        copy.output[:] = [batched[t] for t in n.output]
        nodes.append(copy)
    exits = [t for t in pairs if t != x1 and (t in needed or pairs[t] in needed)]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    halves = {"num_outputs": 2} if opset >= 18 else {}  # before opset 18, Split without sizes splits equally
    nodes += [helper.make_node("Split", [batched[t]], [t, pairs[t]], axis=0, **halves) for t in exits]
    made = {o for n in outside + nodes for o in n.output}
    if any(t not in made and t not in (x1, x2) for t in needed & (first | second)):
        return None
    ordered, ready = [], {i.name for i in graph.input} | {i.name for i in graph.initializer}
    pending = outside + nodes
    while pending:  # topological order (ONNX requires it)
        ready_now = [n for n in pending if all(not t or t in ready for t in n.input)]
        if not ready_now:
            return None  # the second input depends on the first chain: no batch
        for n in ready_now:
            ordered.append(n)
            ready.update(n.output)
        pending = [n for n in pending if n not in ready_now]
    used = {t for n in ordered for t in n.input}
    ordered = [n for n in ordered if n.op_type != "Constant" or n.output[0] in used]
    del graph.node[:]
    graph.node.extend(ordered)
    return model.SerializeToString()


def _same_outputs(original: bytes, rewritten: bytes) -> bool:
    """ONNX Runtime's outputs of both graphs are bit-identical on seeded inputs of 1 and 3 rows."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    a, b = (ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]) for m in (original, rewritten))
    rng = np.random.default_rng(0)
    for rows in (1, 3):
        feeds = {}
        for i in a.get_inputs():
            if i.type != "tensor(float)":
                return False
            shape = [rows if k == 0 else (d if isinstance(d, int) else 1) for k, d in enumerate(i.shape)]
            feeds[i.name] = rng.normal(0.0, 1.0, shape).astype(np.float32)
        try:
            want, got = a.run(None, feeds), b.run(None, feeds)
        except Exception:  # noqa: BLE001 - e.g. a fixed batch of 1: not a model to batch
            return False
        if not all(np.array_equal(x, y) for x, y in zip(want, got)):
            return False
    return True


def twin_passes_as_batch(model_bytes: bytes) -> bytes | None:
    """The model with its twin chains run as one batch of two, or None (no twins, not exact, or no onnx)."""
    try:
        # optional extra: onnx (fed, tools), about 1.1 s to import
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        return None
    model = onnx.load_from_string(model_bytes)
    consts, same = _constants(model.graph, numpy_helper)
    pairs = _chains(model.graph, consts, same)
    if pairs is None:
        return None
    rewritten = _rewritten(model, pairs, onnx, helper)
    if rewritten is None or not _same_outputs(model_bytes, rewritten):
        return None
    return rewritten
