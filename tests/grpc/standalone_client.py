"""A facebridge.v1 client that knows only proto/: it compiles the proto itself and imports nothing of bridge.

    python tests/grpc/standalone_client.py ADDRESS --frames N [--token T] [--stall-after K]

Prints one JSON line: the services reflection lists, the header, how many frames arrived and a few of them.
Used by tests/test_grpc_*.py as a real, separate client process (a subprocess it can also kill mid-stream).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"


def compile_proto(out_dir: str):
    include = Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", str(PROTO_ROOT / "facebridge/v1/facebridge.proto")])
    if rc:
        raise SystemExit(f"protoc failed ({rc})")
    sys.path.insert(0, out_dir)
    return (importlib.import_module("facebridge.v1.facebridge_pb2"),
            importlib.import_module("facebridge.v1.facebridge_pb2_grpc"))


def reflected_services(channel, metadata) -> list[str]:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    for response in stub.ServerReflectionInfo(iter([request]), metadata=metadata, timeout=10):
        return sorted(s.name for s in response.list_services_response.service)
    return []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--token")
    ap.add_argument("--stall-after", type=int, default=-1, help="stop reading (but stay connected) after K frames")
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as gen:
        pb, pb_grpc = compile_proto(gen)
        metadata = [("authorization", f"Bearer {args.token}")] if args.token else None
        channel = grpc.insecure_channel(args.address)
        grpc.channel_ready_future(channel).result(timeout=args.timeout)
        out = {"services": reflected_services(channel, metadata), "header": None, "frames": [], "headers_total": 0}
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        status = stub.GetStatus(pb.GetStatusRequest(), metadata=metadata, timeout=10)
        out["status_fps"] = status.fps
        stream = stub.Subscribe(pb.SubscribeRequest(), metadata=metadata, timeout=args.timeout)
        count = 0
        for response in stream:
            part = response.WhichOneof("part")
            if part == "header":
                out["headers_total"] += 1
                if out["header"] is None:
                    h = response.header
                    out["header"] = {"subject": h.subject, "layout_id": h.layout_id,
                                     "curve_names": list(h.curve_names), "frame_rate": h.frame_rate,
                                     "model_versions": dict(h.model_versions),
                                     "blocks": [(b.name, b.size) for b in h.parameters.blocks]}
                    out["first_part"] = out.get("first_part", "header")
                continue
            out.setdefault("first_part", "frame")
            f = response.frame
            count += 1
            if len(out["frames"]) < 5:
                out["frames"].append({"seq": f.seq, "layout_id": f.layout_id, "curves": len(f.curves),
                                      "capture_time": f.capture_time, "timecode_rate": f.timecode.rate_numerator,
                                      "face_found": f.face_found, "parameters": len(f.parameters)})
            if count == args.stall_after:
                print(json.dumps({"stalled": True}), flush=True)
                time.sleep(3600)
            if count >= args.frames:
                break
        stream.cancel()
        out["frame_count"] = count
        out["bridge_imported"] = any(m == "bridge" or m.startswith("bridge.") for m in sys.modules)
        channel.close()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
