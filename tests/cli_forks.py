"""A fork server for command-line tests: one Python imports `facebridge`'s and `fedagent`'s command line once,
then runs each command in its own forked process (its own pid, exit status, stdout and stderr, as the console
scripts would), so a sweep of a hundred wrong inputs costs a fork each instead of an interpreter start and its
imports.

Run as `python -m tests.cli_forks` (from the repository root): it reads one JSON request a line on stdin
({"argv": [...], "prog": "facebridge"|"fedagent", "env": {...}, "cwd": ..., "timeout": s, "no_dac_override":
bool}) and answers one JSON line ({"rc", "stdout", "stderr"}). `no_dac_override` drops root's power to read and
write any file (the CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH capabilities), so a chmod 000 file refuses root as it
refuses a user.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import tempfile
import time

CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def drop_dac_override() -> None:
    """Clear CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from this process (capget/capset through libc)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(_LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    mask = ~((1 << CAP_DAC_OVERRIDE) | (1 << CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    data[0].effective &= mask
    data[0].permitted &= mask
    data[0].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _child(request: dict, out_path: str, err_path: str) -> None:
    """In the forked process: become the command and exit with its status (never returns)."""
    code = 99
    try:
        for fd, path in ((1, out_path), (2, err_path)):
            target = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.update(request.get("env", {}))
        if request.get("cwd"):
            os.chdir(request["cwd"])
        if request.get("no_dac_override"):
            drop_dac_override()
        sys.stdin = open(0)
        sys.stdout = open(1, "w", buffering=1)
        sys.stderr = open(2, "w", buffering=1)
        prog = request.get("prog", "facebridge")
        sys.argv = [prog, *request["argv"]]
        if prog == "fedagent":
            from fedagent.cli import main
        else:
            from bridge.cli import main
        try:
            code = main(request["argv"])
        except SystemExit as e:  # argparse's exit 2 and --help's 0
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # what the interpreter would print: the sweep looks for it
        import traceback

        traceback.print_exc()
        code = 98
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        os._exit(code if isinstance(code, int) else 1)


def serve() -> None:
    import bridge.cli  # noqa: F401 - imported once, before the forks
    import bridge.runtime.session  # noqa: F401
    import fedagent.cli  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.NamedTemporaryFile(delete=False) as out, tempfile.NamedTemporaryFile(delete=False) as err:
            pass
        pid = os.fork()
        if pid == 0:
            _child(request, out.name, err.name)
        deadline = time.monotonic() + request.get("timeout", 60)
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -1
                break
            time.sleep(0.005)
        rc = os.waitstatus_to_exitcode(status) if status != -1 else "timeout"
        answer = {"rc": rc}
        for key, path in (("stdout", out.name), ("stderr", err.name)):
            with open(path, encoding="utf-8", errors="replace") as f:
                answer[key] = f.read()
            os.unlink(path)
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
