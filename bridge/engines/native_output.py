"""What native inference libraries print to the process's stderr is kept out of the terminal and reported our way.

TensorRT(-RTX) writes some failures straight to file descriptor 2, bypassing its logger (for example
"Internal Error: MyelinCheckException: graph_jit.cpp:278: CHECK(status == CUDA_SUCCESS) failed." when a
refittable engine is built without a GPU); LiteRT says "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
on every run. `native_stderr()` captures descriptor 2 around such a call; the caller logs the lines at DEBUG
(`facebridge -v` shows them) and puts them into its one-line error when the call fails. Python's own
`sys.stderr` (progress lines) keeps going to the terminal meanwhile.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def native_stderr() -> Iterator[list[str]]:
    """Capture what native code writes to fd 2 inside the block; the list holds its lines afterwards."""
    lines: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 (embedded interpreters): nothing to capture
        yield lines
        return
    python_stderr = sys.stderr
    swapped = None
    try:
        uses_fd2 = python_stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a replaced stream (pytest's capture): leave it alone
        uses_fd2 = False
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        if uses_fd2:  # Python-level writes still reach the terminal through a copy of the original fd
            swapped = io.TextIOWrapper(io.FileIO(os.dup(saved), "w"), write_through=True)
            sys.stderr = swapped
        try:
            yield lines
        finally:
            if swapped is not None:
                sys.stderr = python_stderr
                swapped.close()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(line for line in sink.read().decode("utf-8", "replace").splitlines() if line.strip())
