"""`facebridge` command line. Each subcommand lives in its own module with `add_parser(subparsers)`.

Building the help imports every command module and every bench module (`bench KIND` takes its options from
each), 74 of our modules; so these import what their work needs inside the function that does it, and the
imports at their tops stay among what `--help` loads anyway. With those imports at the top, `--help` loaded 169
of our modules and gRPC, and took 2.7 s instead of 1.2 s (medians of 9, loaded 2-core VM)."""
from __future__ import annotations

from bridge import early_ctrl_c

# ruff: noqa: E402 (the call below comes before the other imports)
early_ctrl_c.remember_from_now()  # first: a Ctrl-C while the imports below load ends in one line, no traceback

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
    """Parse, run, and end in one line with a stable exit code (bridge/console.py)."""
    return console.main("facebridge", build_parser, argv)

if __name__ == "__main__":
    sys.exit(main())
