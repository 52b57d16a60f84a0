"""result.py's finish_face and finish_rows compiled by numba: the same functions, not a copy of them. Each function
result.py's compiled code calls is registered with numba as callable from compiled code, then the two entry points
are compiled (cached on disk, keyed to result.py: every function they run lives there, so an edit of it recompiles
them).

On arrays of 468 points numpy's per-call overhead is much of finish_face's cost: ExpressionEstimator's whole result
took a median 0.22 ms of thread CPU a frame in the pipeline on one EPYC core with numpy, 0.185 ms compiled (its caches
cold between frames at 30 fps; 31 against 16 us warm), and finish_rows runs its loop over a pass's rows in one call.
Imported only where numba is (bridge/compiled.py).
"""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from bridge.compiled import compiled
from bridge.expression import result

for _called in (result.axis_angle, result.eye_axis_angle, result._translation, result.finish_face):
    register_jitable(_called)

finish_face = compiled(result.finish_face)
finish_rows = compiled(result.finish_rows)


def warm() -> None:
    """Compile (or load from numba's cache) before the first frame needs it."""
    n, count = 1, 468
    rng = np.random.default_rng(0)
    points = rng.normal(size=(n, count, 3))
    points[..., 2] += 60.0
    xy = rng.uniform(0.0, 640.0, (n, count, 2))
    region_average = np.full((2, count), 1.0 / count)
    out = (np.empty((n, 3)), np.empty((n, count, 2)), np.empty((n, 2)), np.empty((n, 3, 3)), np.zeros((n, 3), bool))
    finish_rows(np.eye(3)[None].copy(), points, xy, np.full(n, 640.0), np.full((n, 2), 320.0), np.zeros((n, 4)),
                region_average, 0.005, *out)
    for solve in (True, False):
        finish_face(np.eye(3), points[0], xy[0], 640.0, 320.0, 240.0, np.zeros(3), solve, np.zeros(4),
                    region_average, 0.005)
