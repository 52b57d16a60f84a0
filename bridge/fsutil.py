"""Crash-safe file writes: write a temporary file, fsync, rename. Nothing is ever half-written, a new file gets
the permissions any new file of the user's gets (the umask decides), and a temporary file left by a killed writer
is removed by the next write to the same path.

Files that belong together (a keys folder, a release's signed metadata, a promoted release and the state naming
it) are written inside `uninterrupted()`: a Ctrl-C typed meanwhile takes effect right after the block (they take
milliseconds), so Ctrl-C never leaves half of such a set.

Also here, because every layer needs it and it needs nothing: `printable`, a file name as text that can always
be printed (Linux names are bytes; one that is not UTF-8 would otherwise break a print or crash a C library).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

TEMP_MARK = ".tmp-"  # temporary files are named .<name>.tmp-<pid>-<random><suffix>


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc/self/status, kernel 4.7+)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once (the only portable way to read it)
    os.umask(mask)
    return mask


def default_mode() -> int:
    """The mode a new file of this process gets: 0666 less the umask (0644 under umask 022, 0600 under 077)."""
    return 0o666 & ~current_umask()


def printable(path: str | os.PathLike | bytes) -> str:
    """`path` as text that prints and encodes everywhere: bytes that are not UTF-8 become \\xNN escapes."""
    raw = os.fsencode(path)
    return raw.decode("utf-8", errors="backslashreplace")


def escaped(text: str) -> str:
    """`text` (a subject name, anything read from a file) safe to print: control and other unprintable characters
    as Python escapes (\\n, \\x00, \\x1b), so nothing read from a take moves the cursor or recolours a terminal."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def is_utf8(path: str | os.PathLike | bytes) -> bool:
    """True when the file name is valid UTF-8 (what OpenCV and USD need; others crash or refuse)."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def remove_stale_temporaries(path: str | Path) -> int:
    """Delete temporary files beside `path` that a killed writer of `path` left (their process is gone).
    Returns how many went. A writer still running keeps its file."""
    path = Path(path)
    prefix = f".{path.name}{TEMP_MARK}"
    removed = 0
    try:
        candidates = [p for p in path.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return 0
    for candidate in candidates:
        pid_text = candidate.name[len(prefix):].split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            candidate.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def atomic_write_with(path: str | Path, write: Callable[[Path], None], suffix: str = ".tmp",
                      mode: int | None = None) -> Path:
    """Have `write(tmp)` fill a temporary file beside `path`, then fsync it and rename it over `path`, so
    readers see the old file or the new one, never a part. `suffix` is for writers that choose the format by
    the file name (USD). `mode` defaults to what the umask gives a new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}{TEMP_MARK}{os.getpid()}-", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, default_mode() if mode is None else mode)  # mkstemp makes 0600 files
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> Path:
    return atomic_write_with(path, lambda tmp: tmp.write_bytes(data), mode=mode)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj, strict: bool = False) -> Path:
    """`obj` as indented JSON. With `strict`, NaN and infinity are refused (ValueError): they are not JSON, and
    files other programs read (takes, profiles) must not hold them."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=not strict) + "\n")


@contextlib.contextmanager
def uninterrupted():
    """Run a short block that writes files belonging together to its end: a Ctrl-C (SIGINT) that comes meanwhile
    is delivered again right after the block, to the handler that was there before (so the command stops as it
    would have, with the set whole). Outside the main thread, or where SIGINT is ignored, it changes nothing."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
        yield
        return
    pending = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            signal.raise_signal(signal.SIGINT)
