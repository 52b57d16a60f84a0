"""`facebridge grpc-check`: check a running bridge's gRPC stream with the package's own client (argument parsing
only: bridge/grpc/check.py)."""
from __future__ import annotations

from bridge import ports
from bridge.argparsing import input_file
from bridge.errors import FaceBridgeError


def add_parser(sub) -> None:
    p = sub.add_parser("grpc-check", help="check a running bridge's gRPC stream (status, header, frames)",
                       description="Connect to `facebridge run --grpc HOST:PORT` as a receiver would: ask its "
                                   "status, subscribe, and read the header and a few frames. Exit 0 when frames "
                                   "arrive, 1 (with the cause) when they do not.")
    p.add_argument("address", nargs="?", default=ports.GRPC, metavar="HOST:PORT",
                   help=f"the bridge's gRPC address (default {ports.GRPC})")
    p.add_argument("--token", metavar="TOKEN", help="the bridge's --grpc-token")
    p.add_argument("--tls-ca", type=input_file, metavar="PEM", help="CA certificate of a bridge that uses TLS")
    p.add_argument("--frames", type=int, default=30, metavar="N", help="frames to read (default 30)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="seconds to wait (default 10)")
    p.set_defaults(func=run)


def run(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.grpc.check import check_stream, report_lines
    from bridge.listeners import split_address

    if args.frames < 1 or not args.timeout > 0:
        raise FaceBridgeError("--frames and --timeout must be positive", "for example --frames 30 --timeout 10")
    split_address(args.address, "grpc-check", ports.GRPC)  # a port out of range is named, not wrapped around
    result = check_stream(args.address, token=args.token, tls_ca=args.tls_ca, frames=args.frames,
                          timeout_s=args.timeout)
    for line in report_lines(args.address, result):
        print(f"grpc-check: {line}")
    if not result.frames:
        raise FaceBridgeError(f"the bridge on {args.address} sent no frame", "is its source running?")
    return 0
