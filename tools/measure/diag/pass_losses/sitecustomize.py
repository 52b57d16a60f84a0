# diagnostic (not shipped): with this folder first on PYTHONPATH, every batched pass of `facebridge serve` (engine or
# one process) says on stderr when 3 or more of its streams lost their face at once (tracked before, not now), with
# what the pass and its frames looked like, and each second in which streams were reset to detection. Issue 43: a
# run under MPS with the describe step built cold served 2,042 faceless frames in 338 of 400 streams from one instant
# on; with this, no pass lost a tracked face and 300+ streams were reset within 70 ms: their first frames.
# COLD_DESCRIBE=1 also applies ../cold_describe, whose after_import this uses.
import os
import runpy
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# its own hook only with COLD_DESCRIBE=1
after_import = runpy.run_path(os.path.join(HERE, "..", "cold_describe", "sitecustomize.py"))["after_import"]


def _install(service_module) -> None:
    import numpy as np

    cls = service_module.MultiStreamFaceService
    passes, resets = cls._pass, cls.reset_stream
    state = {"tracked": {}, "pass": 0, "last_at": None, "resets": {}}

    def _pass(self, streams, frames):
        at = time.time()
        rows, gpu_ms = passes(self, streams, frames)
        state["pass"] += 1
        tracked = rows[:, 0] > 0.5
        before = np.array([state["tracked"].get((id(self), s), False) for s in streams])
        lost = np.flatnonzero(before & ~tracked)
        for s, t in zip(streams, tracked.tolist()):
            state["tracked"][(id(self), s)] = t
        if len(lost) >= 3:
            means = [float(frames[i].float().mean()) for i in lost[:8]]
            kept = [float(frames[i].float().mean()) for i in np.flatnonzero(tracked)[:4]]
            gap = (at - state["last_at"]) * 1000 if state["last_at"] else -1
            sys.stderr.write(
                f"pass-losses {at:.3f} pid {os.getpid()} pass {state['pass']}: {len(lost)} of {len(streams)} lost "
                f"(tracked now {int(tracked.sum())}, before {int(before.sum())}), gpu {gpu_ms:.1f} ms, gap "
                f"{gap:.1f} ms, graphs {sorted(self.tracker._graphs)[-3:] if self.tracker._graphs else None}, "
                f"presence lost {np.round(rows[lost[:8], 1], 3).tolist()}, frame means lost {np.round(means, 1)} "
                f"kept {np.round(kept, 1)}, streams {np.asarray(streams)[lost[:12]].tolist()}\n")
        state["last_at"] = at
        return rows, gpu_ms

    def reset_stream(self, stream):
        second = int(time.time())
        state["resets"][second] = state["resets"].get(second, 0) + 1
        if state["resets"][second] in (1, 10, 100, 300):
            count = state["resets"][second]
            sys.stderr.write(f"pass-losses {time.time():.3f} pid {os.getpid()}: reset_stream #{count} in {second}\n")
        return resets(self, stream)

    cls._pass, cls.reset_stream = _pass, reset_stream
    sys.stderr.write(f"pass-losses {os.getpid()}: watching passes\n")


after_import("bridge.multistream.service", _install)
