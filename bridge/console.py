"""How a command's outcome reaches its user, the same for every `facebridge` and `fedagent` command.

A user never sees a Python traceback. Every ending has one line and a stable exit code:

    0    done
    1    a problem the user can act on: one line naming it and the fix (FaceBridgeError, or a file or address
         the system refused: a permission, a missing file, a folder where a file belongs, a full disk)
    2    the command line itself is wrong (argparse's usage line and one error line)
    70   a bug: one line saying what failed and where the log with the traceback is (EX_SOFTWARE)
    130  Ctrl-C (or SIGTERM where a command turns it into Ctrl-C): the command stops within a second, keeps what
         is done (partial results are written and named as partial) and says so in one line

Warnings on stderr read `facebridge: warning: ...` without logger names (those, and debug detail, come with
`-v`); everything logged also goes to the log file named on an unexpected error, as do tracebacks of background
threads. gRPC's C core, which writes to stderr past Python's logging, speaks only with `-v`.
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from bridge.errors import FaceBridgeError
from bridge.paths import user_dir

EXIT_ERROR, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 1, 2, 70, 130
LOG_ONLY = {"console": False}  # logging `extra=`: to the log file, not to stderr
LOG_BYTES = 1 << 20  # the log is started again past this size (it is for the last failure, not an archive)


_handlers: list[logging.Handler] = []  # what setup() added to the root logger
_ctrl_c_at: list[float] = []  # when Ctrl-C came (monotonic seconds), once it has


def catch_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt as ever, and is remembered: an error it causes on the way out (a C
    extension interrupted while it loads raises ImportError, a thread meets a closed queue) is Ctrl-C's ending,
    not a bug. A SIGINT that the shell made the command ignore stays ignored. A Ctrl-C that came while the command
    line loaded (bridge/early_ctrl_c.py) is raised now."""
    from bridge import early_ctrl_c  # loaded with the command line already: no cost

    if signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, early_ctrl_c.remember):
        return

    def handler(signum, frame):
        _ctrl_c_at.append(time.monotonic())
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    if early_ctrl_c.typed_at:
        _ctrl_c_at.extend(early_ctrl_c.typed_at)
        raise KeyboardInterrupt


def was_interrupted() -> bool:
    return bool(_ctrl_c_at)


def log_path(prog: str) -> Path:
    """Where `prog` writes its log: $FACEBRIDGE_HOME/logs (or the per-user data folder), else the temp folder."""
    return user_dir("logs") / f"{prog}.log"


class _UserFormatter(logging.Formatter):
    """`facebridge: warning: message` (no logger name, no level in capitals) for what a user reads."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prog}: {record.levelname.lower()}: {record.getMessage()}"


def setup(prog: str, verbose: bool) -> Path | None:
    """Logging for a command: warnings to stderr in the user's words (everything with -v, with logger names),
    everything to the log file; gRPC's C core into the log too. Returns the log file (None when none can be
    written: the command still runs)."""
    # gRPC's C core writes to the process's stderr itself, past Python's logging: its lines show only with -v
    # (with the rest of the debug detail); without, a gRPC failure reaches the user as the command's one line
    os.environ.setdefault("GRPC_VERBOSITY", "INFO" if verbose else "NONE")  # before grpc loads
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for old in _handlers:  # a second command in one process (tests call main() in turn) replaces the first's
        root.removeHandler(old)
        old.close()
    _handlers.clear()
    console = logging.StreamHandler(sys.stderr)
    if verbose:
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        console.setLevel(logging.WARNING)
        console.setFormatter(_UserFormatter(prog))
    console.addFilter(lambda record: getattr(record, "console", True))  # LOG_ONLY records skip stderr
    root.addHandler(console)
    _handlers.append(console)
    path = _open_log(prog)
    if path is not None:
        handler = logging.FileHandler(path, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        _handlers.append(handler)
    _route_thread_failures(prog, path)
    return path


def _open_log(prog: str) -> Path | None:
    try:
        path = log_path(prog)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > LOG_BYTES:
            path.unlink()
        with open(path, "a", encoding="utf-8"):
            pass
        return path
    except OSError:
        return None


def _route_thread_failures(prog: str, path: Path | None) -> None:
    """A background thread that dies prints one line (the traceback goes to the log), never a traceback."""

    def thread_hook(hook_args) -> None:
        if issubclass(hook_args.exc_type, (SystemExit, KeyboardInterrupt)) or was_interrupted():
            return
        name = hook_args.thread.name if hook_args.thread is not None else "a thread"
        logging.getLogger(prog).error("thread %s failed", name, extra=LOG_ONLY,
                                      exc_info=(hook_args.exc_type, hook_args.exc_value, hook_args.exc_traceback))
        if not isinstance(hook_args.exc_value, FaceBridgeError):
            print(f"{prog}: error: background thread {name} failed: {_describe(hook_args.exc_value)}"
                  f"{_where(path)}", file=sys.stderr, flush=True)

    def unraisable_hook(unraisable) -> None:
        logging.getLogger(prog).debug("ignored in %r: %s", unraisable.object, unraisable.exc_value)

    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook


def _describe(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def _where(path: Path | None) -> str:
    return f" (details in {path})" if path is not None else " (run again with -v for details)"


def os_error(e: OSError) -> FaceBridgeError:
    """A refused file or address as one line naming the cause the system gave (a permission is never taken for
    a bad format, a folder never for a missing file)."""
    name = e.filename if e.filename is not None else ""
    if isinstance(e, PermissionError):
        return FaceBridgeError(f"permission denied: {name}",
                               "give this user access to it (`ls -l` shows owner and mode) or choose another path")
    if isinstance(e, FileNotFoundError):
        return FaceBridgeError(f"{name} does not exist", "check the path (and that its folder exists)")
    if isinstance(e, IsADirectoryError):
        return FaceBridgeError(f"{name} is a folder, where a file is expected", "give a file path")
    if isinstance(e, NotADirectoryError):
        return FaceBridgeError(f"{name}: part of this path is a file, where a folder is expected",
                               "check the path")
    if e.errno == errno.ENOSPC:
        return FaceBridgeError(f"no space left on the disk writing {name}", "free some space or write elsewhere")
    if e.errno == errno.EADDRINUSE:
        return FaceBridgeError(f"the address is already in use{': ' + name if name else ''}",
                               "stop the other program or choose another port")
    return FaceBridgeError(f"{e.strerror or _describe(e)}{': ' + str(name) if name else ''}",
                           "check the path or address")


def main(prog: str, build_parser, argv: list[str] | None = None) -> int:
    """A command line's whole run: parse with `build_parser()`, run the command, end in one line with a stable
    exit code; Ctrl-C anywhere, even while the commands load, ends with 130 and no traceback."""
    try:
        catch_ctrl_c()
        for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints as \xNN, never a traceback
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="backslashreplace")
        parser = build_parser()
        args = parser.parse_args(argv)
        log = setup(prog, args.verbose)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        return run_command(prog, args.func, args, log)
    except KeyboardInterrupt:
        return interrupted(prog)


def run_command(prog: str, func, args, log: Path | None) -> int:
    """Run one parsed command and turn its ending into one line and an exit code (see the module docstring)."""
    try:
        return int(func(args) or 0)
    except FaceBridgeError as e:
        if was_interrupted():  # a failure Ctrl-C caused (a load it cut short, read as a bad file) is Ctrl-C's
            logging.getLogger(prog).debug("after Ctrl-C: %s", e, extra=LOG_ONLY)
            return interrupted(prog)
        print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return getattr(e, "exit_code", EXIT_ERROR)
    except KeyboardInterrupt:
        return interrupted(prog)
    except OSError as e:
        if was_interrupted():
            return interrupted(prog)
        logging.getLogger(prog).debug("refused by the system", exc_info=True)
        print(f"{prog}: error: {os_error(e)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except Exception as e:  # a bug: one line, the traceback in the log; or what Ctrl-C broke on the way out
        if was_interrupted():
            logging.getLogger(prog).debug("after Ctrl-C", exc_info=True, extra=LOG_ONLY)
            return interrupted(prog)
        return bug(prog, e, log)


def interrupted(prog: str) -> int:
    print(f"{prog}: stopped (Ctrl-C)", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def bug(prog: str, e: BaseException, log: Path | None) -> int:
    """An error nobody foresaw: its traceback to the log, one line to the user."""
    logging.getLogger(prog).error("unexpected error", exc_info=e, extra=LOG_ONLY)
    print(f"{prog}: error: unexpected {_describe(e)}; this is a bug{_where(log)}, please report it with that file",
          file=sys.stderr, flush=True)
    return EXIT_BUG


def exit_text(rc: int | None) -> str:
    """A child process's ending in words: 'exit 0', 'killed by SIGTERM' (not 'exit -15'), 'still running'."""
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return {0: "exit 0 (clean)", 130: "exit 130 (Ctrl-C)"}.get(rc, f"exit {rc}")
