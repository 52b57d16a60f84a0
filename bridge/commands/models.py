"""`facebridge models [list|verify]`: show the shipped model zoo and check that every shipped model really works
(the face zoo and the lip-sync, voice-activity and expression models beside it; bridge/models/check.py)."""
from __future__ import annotations

import sys

from bridge.errors import FaceBridgeError
from bridge.models import MANIFEST_PATH, model_entry, model_names


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
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.models.check import shipped_checks

    names = model_names()
    others = [c for c in shipped_checks() if not c.in_zoo]
    print(f"{len(names) + len(others)} models: {len(names)} in {MANIFEST_PATH.parent} (described by "
          f"{MANIFEST_PATH.name}), {len(others)} beside the code that uses them, each with its own manifest")
    for name in names:
        e = model_entry(name)
        src = e["source"]
        print(f"\n{name}  {e['file']}  {e['bytes'] / 1e6:.2f} MB  sha256 {e['sha256'][:12]}")
        print(f"  source   {src['package']} {src['version']}: {src['path']}")
        print(f"  license  {e['license']}")
        print(f"  inputs   {_tensors(e['inputs'])}")
        print(f"  outputs  {_tensors(e['outputs'])}")
    for check in others:
        e = check.entry
        size = check.path.stat().st_size / 1e6 if check.path.exists() else 0.0
        print(f"\n{check.name}  {check.path.relative_to(check.path.parents[1])}  {size:.2f} MB  "
              f"sha256 {(check.sha256 or '?')[:12]}")
        print(f"  source   {str(e.get('source', '?'))[:100]}")
        print(f"  license  {str(e.get('license', '?'))[:100]}")
    return 0


def _verify(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.models.check import find_checks, verify

    checks = find_checks(args.names)  # unknown names fail with the list of valid ones
    failed = 0
    for check in checks:
        try:
            ms = verify(check)
        except FaceBridgeError as e:
            failed += 1
            print(f"FAIL {check.name}: {e}", file=sys.stderr)
            continue
        print(f"ok   {check.name}: sha256 matches, loads, forward pass {ms:.1f} ms")
    if failed:
        print(f"{failed} of {len(checks)} models failed verification", file=sys.stderr)
        return 1
    print(f"all {len(checks)} models verified")
    return 0
