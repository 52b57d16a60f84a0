"""`fedagent` command line. Each subcommand group lives in its own module under fedagent/commands/ with
`add_parser(subparsers)`, as `facebridge`'s commands do, and, as theirs, imports its work inside the function
that does it: with even the small ones at the top (the repository server, the process helpers), `fedagent --help`
took 0.76 s instead of 0.36 s (http.server, email, asyncio; medians of 9, loaded 2-core VM)."""
from __future__ import annotations

from bridge import early_ctrl_c

# ruff: noqa: E402 (the call below comes before the other imports)
early_ctrl_c.remember_from_now()  # first: a Ctrl-C while the imports below load ends in one line, no traceback

import argparse
import importlib
import sys

from bridge import console
from bridge.argparsing import Parser

# module path -> registers one or more subcommands
COMMAND_MODULES = (
    "fedagent.commands.keys",      # keys init / add / revoke / rotate
    "fedagent.commands.publish",   # publish, export-adapter, serve-repo
    "fedagent.commands.update",    # update install / status / rollback (device side)
    "fedagent.commands.server",    # server (SuperLink + ServerApp)
    "fedagent.commands.client",    # client (SuperNode + ClientApp)
    "fedagent.commands.simulate",  # simulate --clients N --rounds R
    "fedagent.commands.data",      # data stats / clear / export
    "fedagent.commands.bench",     # bench --json OUT
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="fedagent",
        description="FaceBridge's federated update agent: personalise the lip-sync adapter on this device with "
                    "Flower under secure aggregation, and publish, verify and install signed model releases.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and end in one line with a stable exit code (bridge/console.py), as `facebridge` does."""
    return console.main("fedagent", build_parser, argv)

if __name__ == "__main__":
    sys.exit(main())
