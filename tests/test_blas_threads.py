"""The pipeline's numpy BLAS runs on one thread."""
from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from bridge.blas_threads import single_threaded_blas


def test_every_loaded_blas_library_is_limited_to_one_thread():
    np.ones((4, 4)) @ np.ones((4, 4))  # numpy's BLAS is loaded
    with threadpool_limits(limits=None):  # whatever this process had, restored after the test
        assert single_threaded_blas()
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert blas and all(lib["num_threads"] == 1 for lib in blas)
