# diagnostic (not shipped): every garbage collection of every Python process started with this on PYTHONPATH,
# with its unix time, generation, pause and objects collected, written to $GCDIAG_DIR/gc-PID.json every 2 s
import gc
import json
import os
import sys
import threading
import time

_dir = os.environ.get("GCDIAG_DIR")
if _dir:
    _ev, _t = [], [0.0]
    def _cb(phase, info):
        if phase == "start":
            _t[0] = time.perf_counter()
        else:
            _ev.append((round(time.time(), 4), info["generation"], round((time.perf_counter() - _t[0]) * 1e3, 4),
                        info["collected"]))
    gc.callbacks.append(_cb)
    def _dump():
        while True:
            time.sleep(2)
            try:
                tmp = os.path.join(_dir, f".gc-{os.getpid()}.tmp")
                with open(tmp, "w") as f:
                    json.dump({"argv": " ".join(sys.argv)[:300], "ev": _ev, "frozen": gc.get_freeze_count()}, f)
                os.replace(tmp, os.path.join(_dir, f"gc-{os.getpid()}.json"))
            except Exception:
                pass
    threading.Thread(target=_dump, daemon=True).start()
