"""`facebridge` command line. Each subcommand lives in its own module with `add_parser(subparsers)`."""
from __future__ import annotations

import argparse
import importlib
import sys

from bridge import __version__, console
from bridge.argparsing import Parser

# module path -> registers one or more subcommands. Keep sorted by how often users need them.
COMMAND_MODULES = (
    "bridge.commands.run",
    "bridge.commands.serve",
    "bridge.commands.devices",
    "bridge.commands.models",
    "bridge.commands.calibrate",
    "bridge.commands.replay",
    "bridge.commands.export_usd",
    "bridge.commands.bench",
    "bridge.commands.engines",
    "bridge.commands.grpc_check",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="facebridge",
        description="Real-time facial animation from a webcam and microphone, streamed to Unreal Engine "
                    "(Live Link Face, VMC, gRPC) and Omniverse (USD). Everything runs on this machine.",
    )
    parser.add_argument("--version", action="version", version=f"facebridge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and end in one line with a stable exit code (bridge/console.py); Ctrl-C anywhere, even while
    the commands load, ends with 130 and no traceback."""
    console.catch_ctrl_c()
    try:
        for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints as \xNN, never a traceback
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="backslashreplace")
        parser = build_parser()
        args = parser.parse_args(argv)
        log = console.setup("facebridge", args.verbose)
        if not getattr(args, "func", None):
            parser.print_help()
            return console.EXIT_USAGE
        return console.run_command("facebridge", args.func, args, log)
    except KeyboardInterrupt:
        return console.interrupted("facebridge")

if __name__ == "__main__":
    sys.exit(main())
