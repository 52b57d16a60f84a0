"""Ctrl-C while a command line is still loading: Python's own handler would end the import that was running with a
traceback. The command lines (bridge/cli.py, fedagent/cli.py) call `remember_from_now()` before their other
imports; `console.catch_ctrl_c` takes over once the command runs and answers a Ctrl-C that came meanwhile as any
other: one line, exit 130. Nothing but the standard library here: it must load in no time."""
from __future__ import annotations

import os
import signal
import sys
import time

PROGRAMS = ("facebridge", "fedagent")
typed_at: list[float] = []  # when Ctrl-C came before the command ran (monotonic seconds)


def remember(signum, frame) -> None:
    typed_at.append(time.monotonic())


def remember_from_now() -> None:
    """Remember Ctrl-C instead of raising it, only in a `facebridge` or `fedagent` process (a program that imports
    the command line, such as a test run, keeps its own Ctrl-C), in its main thread, and where Python's default
    handler is in place (a Ctrl-C the shell made the command ignore stays ignored)."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    started_as_module = program == "cli.py" and os.path.basename(os.path.dirname(sys.argv[0])) in ("bridge", "fedagent")
    if not (program in PROGRAMS or started_as_module):
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        try:
            signal.signal(signal.SIGINT, remember)
        except ValueError:  # not the main thread: its Ctrl-C is not ours to handle
            pass
