"""Native thread pools pinned in a process whose parallelism is its streams (`facebridge serve`): every loaded BLAS
library (numpy's and OpenCV's, through bridge/blas_threads.py), OpenCV's own pool and torch's intra-op (OpenMP)
pool each get one thread, and the environment says the same to libraries loaded later.

Every stream's describe step runs small BLAS calls (the identity refresh multiplies a 936 x 101 Jacobian by itself);
with a pool per core, each such call from each of many stream threads wakes every pool thread, which then spins: on
the 2-core CI machine one refresh (before its batched Jacobian) cost 42 ms of process CPU with numpy's 2 BLAS
threads and 3.8 ms with one (docs/PERFORMANCE.md), and a 16-core GPU host has 16 per pool. The streams are the
parallelism; a pool inside each of them only burns the cores they need. (FacePipeline limits BLAS alone; `serve`
builds no FacePipeline.)
"""
from __future__ import annotations

import logging
import os

from bridge.blas_threads import single_threaded_blas

log = logging.getLogger(__name__)
ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # for libraries loaded after this


def pin_native_pools(torch_threads: int = 1) -> dict[str, int]:
    """Pin the pools of the libraries loaded now to one thread (and, through the environment, those loaded later);
    torch_threads: torch's intra-op pool (CPU runners: their --threads). Returns what each pool was set to."""
    for var in ENV_VARS:
        os.environ[var] = "1"
    # after the environment above, which pools loaded from here on read
    import cv2
    import numpy  # noqa: F401 - its BLAS must be loaded to be found

    pinned = {}
    if single_threaded_blas():
        # single_threaded_blas() found threadpoolctl installed
        from threadpoolctl import threadpool_info

        pinned.update({f"blas:{info['filepath'].rsplit('/', 1)[-1]}": info["num_threads"]
                       for info in threadpool_info() if info["user_api"] == "blas"})
    else:
        log.warning("threadpoolctl is not installed: the BLAS pools keep one thread per core (pip install "
                    "threadpoolctl)")
    cv2.setNumThreads(1)
    pinned["opencv"] = cv2.getNumThreads()
    try:
        # optional extra: torch (gpu), about 1.5 s to import
        import torch
    except ImportError:
        pass
    else:
        torch.set_num_threads(max(1, int(torch_threads)))
        pinned["torch"] = torch.get_num_threads()
    return pinned
