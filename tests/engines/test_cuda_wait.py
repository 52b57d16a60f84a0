"""How serve's host threads wait for the GPU: the driver's primary-context flag, set before the context exists."""
import subprocess
import sys

import pytest

from bridge.engines.cuda_wait import SCHED_FLAGS, current_cuda_wait, set_cuda_wait


def test_an_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="auto, spin, yield, block"):
        set_cuda_wait("sleep")


@pytest.mark.skipif(current_cuda_wait() is not None, reason="this machine has a CUDA driver (the GPU test runs)")
def test_without_a_cuda_driver_nothing_is_set_and_it_says_so():
    assert set_cuda_wait("block") == "no CUDA driver (libcuda.so.1): nothing to set"


@pytest.mark.gpu
@pytest.mark.skipif(current_cuda_wait() is None, reason="needs an NVIDIA GPU and its driver")
@pytest.mark.parametrize("mode", ["block", "spin"])
def test_the_flag_holds_in_the_context_torch_then_creates(mode):
    """In a fresh process: set, then let torch create the primary context and wait on a copy back; the context
    torch made has the flag (a context made first would keep CUDA's own)."""
    code = f"""
from bridge.engines.cuda_wait import set_cuda_wait, current_cuda_wait
print(set_cuda_wait({mode!r}))
import torch
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
assert float(x.sum().cpu()) == float(sum(range(1 << 20)))
print(current_cuda_wait())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    said, now = out.stdout.split("\n")[:2]
    assert said == f"GPU waits: {mode}" and now == mode
    assert SCHED_FLAGS[mode] != SCHED_FLAGS["auto"]
