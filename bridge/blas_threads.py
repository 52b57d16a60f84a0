"""numpy's BLAS runs on the calling thread only: the face pipeline's matrices are small and its stages are its threads.

OpenBLAS (numpy's and scipy's wheels) starts one worker per core and, for products past a size threshold such as
the expression stage's identity update (a 936 x 101 Jacobian), splits them across those workers, whose caller then
spin-waits for them. On one core, or on two cores whose other one runs the tracking stage, that wait is pure loss:
the identity update took 8.4 ms of CPU time with OpenBLAS's two threads on one core against 2.6 ms with one
(docs/PERFORMANCE.md). The limit is process-wide and covers the BLAS libraries loaded when it is set (through
threadpoolctl); every FacePipeline sets it when it is built, after its models are loaded.
"""
from __future__ import annotations


def single_threaded_blas() -> bool:
    """Limit every loaded BLAS library to one thread; False when threadpoolctl is not installed."""
    try:
        # guarded: without threadpoolctl the BLAS keeps its pools (said, never fatal)
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    threadpool_limits(limits=1, user_api="blas")
    return True
