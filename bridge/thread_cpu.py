"""A process's CPU time by thread: where a server's host time goes, the interpreter lock's holders and the rest.

Python threads are named by what started them (the gRPC loop, the JPEG batcher, the face service's pass and
describe threads, a pool's workers with their numbers taken off); threads Python did not start (gRPC core's
pollers, CUDA's and torch's own) are summed as "native". Each is read from /proc/self/task: the scheduler's own
count of the thread's time on a CPU (schedstat, nanoseconds), else user + system time from its stat (whole clock
ticks, 10 ms: too coarse for a thread's share of a few hundred frames). A thread that has ended no longer counts:
compare two readings of long-lived threads. Linux only; elsewhere the reading is empty.
"""
from __future__ import annotations

import os
import re
import threading

NATIVE = "native"
_POOL_SUFFIX = re.compile(r"(?:[_-]\d+)+$")  # serve-decode_3 -> serve-decode, identity-refresh-1 -> identity-refresh
_UNNAMED = re.compile(r"^Thread-\d+")  # "Thread-7 (_poll_wrapper)", a library's unnamed thread -> "Thread (...)"


def stat_cpu_seconds(stat_path: str) -> float:
    """User + system CPU seconds from a /proc stat file (/proc/PID/stat, /proc/self/task/TID/stat); OSError where
    it is gone (its process or thread ended)."""
    with open(stat_path, "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces and ")"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14 and 15)


def task_cpu_seconds(task_path: str) -> float:
    """CPU seconds of one thread (/proc/self/task/TID): its schedstat's time on a CPU where the kernel keeps it (ns),
    else its stat's user + system time; OSError where it is gone."""
    try:
        with open(f"{task_path}/schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return stat_cpu_seconds(f"{task_path}/stat")


def thread_cpu_seconds() -> dict[str, float]:
    """{thread group: CPU seconds so far}; {} where /proc/self/task is not there."""
    task_dir = "/proc/self/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return {}
    named = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    out: dict[str, float] = {}
    for tid in tids:
        try:
            seconds = task_cpu_seconds(f"{task_dir}/{tid}")
        except OSError:
            continue  # ended between the listing and the read
        name = named.get(int(tid))
        group = NATIVE if name is None else (_POOL_SUFFIX.sub("", _UNNAMED.sub("Thread", name)) or name)
        out[group] = out.get(group, 0.0) + seconds
    return out


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each group spent between two readings (a group new in `after` counts from zero)."""
    return {k: round(v - before.get(k, 0.0), 6) for k, v in after.items() if v - before.get(k, 0.0) > 0}
