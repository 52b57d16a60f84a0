"""Whether a started child process still runs, asked without Popen's wait lock.

Ctrl-C raises KeyboardInterrupt wherever the main thread is; one that lands inside Popen.poll() can leave Popen's
wait lock held (CPython 3.11: about one interrupt in five of a loop of polls, measured with SIGALRM), and every
wait on that child after it then blocks for ever: a command that watches its children in a loop ignored Ctrl-C (a
`fedagent client`, for 240 s, loaded 2-core VM). `running` asks the kernel with WNOWAIT instead, so the exit status
stays for the wait that collects it.
"""
from __future__ import annotations

import os
import subprocess


def running(popen: subprocess.Popen) -> bool:
    if popen.returncode is not None:
        return False
    try:
        return os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:  # already collected
        return False
