#!/usr/bin/env python3
"""Regenerate the Python code for proto/facebridge/v1/facebridge.proto into bridge/grpc/gen/.

    python tools/gen_proto.py          # rewrite the generated files
    python tools/gen_proto.py --check  # exit 1 if the committed files differ from a fresh generation

Uses grpcio-tools (the `tools` extra). The generated import of the message module is rewritten to a relative
import so that the code lives inside the `bridge` package; the proto's own name stays
"facebridge/v1/facebridge.proto" so reflection and other languages see the canonical path.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
PROTO = "facebridge/v1/facebridge.proto"
OUT_DIR = ROOT / "bridge" / "grpc" / "gen"
GENERATED = ("facebridge_pb2.py", "facebridge_pb2.pyi", "facebridge_pb2_grpc.py")
ABSOLUTE_IMPORT = "from facebridge.v1 import facebridge_pb2 as"
RELATIVE_IMPORT = "from . import facebridge_pb2 as"


def generate() -> dict[str, str]:
    """Compile the proto with grpcio-tools; return {file name: text} of the Python code."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    with tempfile.TemporaryDirectory() as tmp:
        rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={tmp}",
                          f"--pyi_out={tmp}", f"--grpc_python_out={tmp}", str(PROTO_ROOT / PROTO)])
        if rc != 0:
            raise SystemExit(f"protoc failed on {PROTO} (exit {rc}); fix the errors printed above")
        out = {}
        for name in GENERATED:
            text = (Path(tmp) / "facebridge" / "v1" / name).read_text()
            out[name] = text.replace(ABSOLUTE_IMPORT, RELATIVE_IMPORT)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    fresh = generate()
    if args.check:
        stale = [n for n, text in fresh.items()
                 if not (OUT_DIR / n).exists() or (OUT_DIR / n).read_text() != text]
        if stale:
            print(f"generated code is stale: {', '.join(stale)}; run python tools/gen_proto.py", file=sys.stderr)
            return 1
        print("generated code matches proto/")
        return 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in fresh.items():
        (OUT_DIR / name).write_text(text)
        print(f"wrote {(OUT_DIR / name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
