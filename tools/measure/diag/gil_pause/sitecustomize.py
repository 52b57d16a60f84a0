# diagnostic (not shipped): with GIL_PAUSE_MS set and this folder first on PYTHONPATH, every `facebridge serve` front
# end holds its interpreter lock for about that long every GIL_PAUSE_EVERY_S (2) seconds, as a generation-2 garbage
# collection does (sorting a list: one C call that never lets the lock go), from 10 s after its start; each pause
# is written to stderr ("gil pause PID: N ms"), which bench serve's log stamps with the time. Issue 43: every H100
# run that lost faces had front ends pausing 50-144 ms for collections, none that kept them all.
import os
import random
import sys
import threading
import time

if os.environ.get("GIL_PAUSE_MS"):
    def _pause() -> None:
        time.sleep(10.0)
        if "serve_front_end" not in " ".join(sys.argv):  # argv is not set yet when this module loads
            return
        sample = [random.random() for _ in range(100_000)]
        t0 = time.perf_counter()
        sorted(sample)
        each_ms = (time.perf_counter() - t0) * 1000.0
        held = sample * max(1, int(float(os.environ["GIL_PAUSE_MS"]) / each_ms))
        while True:
            t0 = time.perf_counter()
            sorted(held)
            sys.stderr.write(f"gil pause {os.getpid()}: {(time.perf_counter() - t0) * 1000.0:.0f} ms\n")
            sys.stderr.flush()
            time.sleep(float(os.environ.get("GIL_PAUSE_EVERY_S", "2")))

    threading.Thread(target=_pause, name="gil-pause", daemon=True).start()
