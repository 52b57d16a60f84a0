"""`facebridge models [list|verify]`: show the shipped model zoo and check every file really works."""
from __future__ import annotations

import sys
import time

import numpy as np

from bridge.errors import FaceBridgeError


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list the shipped models, or verify them (sha256, load, one forward pass)",
                       description="Without an action, lists the models.")
    p.set_defaults(func=_list)
    actions = p.add_subparsers(dest="models_action", metavar="ACTION")
    actions.add_parser("list", help="name, file, size, source, license, input/output shapes").set_defaults(func=_list)
    v = actions.add_parser("verify", help="sha256 + load in ONNX Runtime + one forward pass on zeros; "
                                          "exit 1 if any model fails")
    v.add_argument("names", nargs="*", metavar="NAME", help="models to check (default: all)")
    v.set_defaults(func=_verify)


def _tensors(tensors: list[dict]) -> str:
    return "; ".join(f"{t['name']} [{', '.join(str(d) for d in t['shape'])}] {t['dtype']}" for t in tensors)


def _list(args) -> int:
    """One block per model: readable in a narrow terminal and easy to grep."""
    from bridge.models import MANIFEST_PATH, model_entry, model_names

    names = model_names()
    print(f"{len(names)} models in {MANIFEST_PATH.parent} (described by {MANIFEST_PATH.name})")
    for name in names:
        e = model_entry(name)
        src = e["source"]
        print(f"\n{name}  {e['file']}  {e['bytes'] / 1e6:.2f} MB  sha256 {e['sha256'][:12]}")
        print(f"  source   {src['package']} {src['version']}: {src['path']}")
        print(f"  license  {e['license']}")
        print(f"  inputs   {_tensors(e['inputs'])}")
        print(f"  outputs  {_tensors(e['outputs'])}")
    return 0


def verify_model(name: str) -> float:
    """sha256, load, one forward pass on zeros (batch 1). Returns the run time in ms; raises ModelError."""
    from bridge.engines import create_session
    from bridge.errors import ModelError
    from bridge.models import model_entry, model_path

    path = model_path(name)  # sha256 against the manifest
    session = create_session(path, threads=1)
    feeds = {t.name: np.zeros([1 if not isinstance(d, int) else d for d in t.shape], t.dtype)
             for t in session.inputs}
    t0 = time.perf_counter()
    outputs = session.run(feeds)
    ms = (time.perf_counter() - t0) * 1e3
    for spec in model_entry(name)["outputs"]:
        out = outputs.get(spec["name"])
        if out is None or not np.isfinite(out).all():
            raise ModelError(f"model file {path} gives no finite '{spec['name']}' output on zeros",
                             "rebuild it with `python tools/build_models.py`")
    return ms


def _verify(args) -> int:
    from bridge.models import model_entry, model_names

    names = args.names or model_names()
    failed = 0
    for name in names:
        try:
            model_entry(name)  # unknown names fail with the list of valid ones
            ms = verify_model(name)
        except FaceBridgeError as e:
            failed += 1
            print(f"FAIL {name}: {e}", file=sys.stderr)
            continue
        print(f"ok   {name}: sha256 matches, loads, forward pass {ms:.1f} ms")
    if failed:
        print(f"{failed} of {len(names)} models failed verification", file=sys.stderr)
        return 1
    print(f"all {len(names)} models verified")
    return 0
