"""`fedagent publish`, `fedagent export-adapter`, `fedagent serve-repo`: the publisher's side of a release."""
from __future__ import annotations

import argparse
import errno
import json
import sys
from dataclasses import replace
from pathlib import Path

from bridge.argparsing import folder_path, output_file, port_number
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_bytes


def adapter_out(text: str) -> str:
    """export-adapter's OUT: a writable .npz (an adapter under a model's extension would be published as a model)."""
    if not text.endswith(".npz"):
        raise argparse.ArgumentTypeError(f"{text} does not end in .npz; an adapter is an .npz file (`publish` reads "
                                         ".onnx as a whole model): name it e.g. adapter.npz")
    return output_file(text)


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="write the next signed release into a repository folder",
                       description="Each FILE is an adapter (.npz, for the lip-sync model unless MODEL=FILE) or a "
                                   "whole model (.onnx, as MODEL=FILE). Without FILE, re-signs the repository "
                                   "(new expiry, and a new root after `fedagent keys rotate|revoke|add`).")
    p.add_argument("--keys", type=folder_path, required=True, help="keys folder from `fedagent keys init`")
    p.add_argument("--repo", type=folder_path, required=True, help="repository folder (created if missing)")
    p.add_argument("files", nargs="*", metavar="[MODEL=]FILE")
    p.add_argument("--reference", help="reference inputs (.npz with input.<name> arrays) for the smoke test")
    p.add_argument("--hardware", default="any", help="comma-separated targets: any, cpu, cuda, sm89, ...")
    p.add_argument("--tensorrt-major", type=int, help="TensorRT major version the release was validated with")
    p.add_argument("--notes", default="", help="release notes (one line)")
    p.add_argument("--json", action="store_true", help="print {model: release} as JSON")
    p.set_defaults(func=_publish)

    e = sub.add_parser("export-adapter", help="write the active (installed, else shipped) lip-sync adapter")
    e.add_argument("out", type=adapter_out, help="output .npz")
    e.add_argument("--state", help="update state folder (default: per user)")
    e.set_defaults(func=_export)

    s = sub.add_parser("serve-repo", help="serve a repository folder on 127.0.0.1 (tests, small setups)")
    s.add_argument("repo")
    s.add_argument("--port", type=port_number, default=8700, help="TCP port on 127.0.0.1 (0: any free port)")
    s.add_argument("--max-connections", type=int, default=32, help="connections served at once; more are closed")
    s.add_argument("--timeout", type=float, default=10.0, help="seconds one socket read or write may wait")
    s.set_defaults(func=_serve)


def _specs(args):
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.publish import ReleaseSpec

    hardware = tuple(h.strip() for h in args.hardware.split(",") if h.strip())
    if not hardware:
        raise FaceBridgeError(f"--hardware {args.hardware!r} names no target", "for example --hardware any")
    if args.reference and not Path(args.reference).is_file():
        raise FaceBridgeError(f"--reference {args.reference} is not a file",
                              "pass an .npz of input.<name> arrays, or leave --reference out (seeded inputs)")
    specs = []
    for item in args.files:
        model, sep, path = item.partition("=")
        if not sep:
            model, path = None, item
        if not Path(path).is_file():
            raise FaceBridgeError(f"{path} is not a file", "pass the adapter .npz or model .onnx to publish")
        spec = ReleaseSpec(model or "", Path(path), Path(args.reference) if args.reference else None, hardware,
                           args.tensorrt_major, args.notes)
        kind = spec.kind  # an .npz or an .onnx, checked before the model it would be named
        spec = replace(spec, model=model or ("lipsync" if kind == "adapter" else Path(path).stem))
        if spec.model in (s.model for s in specs):
            raise FaceBridgeError(f"{spec.model} is given twice", "publish one file per model")
        specs.append(spec)
    return specs


def _publish(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.publish import publish

    released = publish(args.keys, args.repo, _specs(args))
    if args.json:
        print(json.dumps(released))
    elif released:
        for model, number in released.items():
            print(f"published {model} release {number} to {args.repo}")
    else:
        print(f"re-signed {args.repo}")
    return 0


def _export(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.models.registry import ModelRegistry

    registry = ModelRegistry(args.state)
    active = registry.active("lipsync")
    source = active.adapter_path or registry.default_adapter_path("lipsync")
    atomic_write_bytes(args.out, Path(source).read_bytes())
    what = f"release {active.release}" if active.adapter_path else "the shipped default"
    print(f"wrote {args.out} (lip-sync adapter, {what})")
    return 0


def _serve(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.repo_server import RepoServer

    if not (Path(args.repo) / "metadata").is_dir():
        raise FaceBridgeError(f"{args.repo} is not a repository (no metadata/)", "publish into it first")
    if args.max_connections < 1 or args.timeout <= 0:
        raise FaceBridgeError("--max-connections and --timeout must be positive", "for example --max-connections 32 "
                              "--timeout 10")
    try:
        server = RepoServer(args.repo, args.port, max_connections=args.max_connections, timeout_s=args.timeout)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise FaceBridgeError(f"port {args.port} on 127.0.0.1 is already in use",
                                  "stop the program using it or choose another --port (0: any free port)") from None
        raise
    print(f"serving {server.folder} at {server.url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.httpd.serve_forever()
    finally:
        server.httpd.server_close()
    return 0
