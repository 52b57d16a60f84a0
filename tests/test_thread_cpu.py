"""A process's CPU by thread (bridge/thread_cpu.py): named threads found by name, pools grouped."""
import sys
import threading
import time

import pytest

from bridge.thread_cpu import cpu_between, thread_cpu_seconds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")


def test_a_named_thread_s_cpu_is_counted_under_its_name_and_pools_under_one():
    names = ("cpu-probe", "probe-pool_0", "probe-pool_1", "Thread-99 (probe)")
    burned, release = threading.Barrier(len(names) + 1), threading.Event()

    def work():
        end = time.thread_time() + 0.15
        while time.thread_time() < end:
            pass
        burned.wait(30)
        release.wait(30)  # alive while the reading is taken: an ended thread is no longer in /proc/self/task

    threads = [threading.Thread(target=work, name=name) for name in names]
    before = thread_cpu_seconds()
    for t in threads:
        t.start()
    burned.wait(30)
    after = thread_cpu_seconds()
    release.set()
    for t in threads:
        t.join()
    spent = cpu_between(before, after)
    assert spent["cpu-probe"] >= 0.1, spent
    assert spent["probe-pool"] >= 0.2, spent  # two numbered workers, one group
    assert spent["Thread (probe)"] >= 0.1, spent  # a library's unnamed thread, its number taken off
    assert not any(k.startswith("probe-pool_") for k in spent), spent
    assert "MainThread" in after and all(v >= 0 for v in after.values())


def test_cpu_between_counts_a_new_group_from_zero_and_leaves_out_the_idle():
    assert cpu_between({"a": 1.0, "b": 2.0}, {"a": 1.5, "b": 2.0, "c": 0.25}) == {"a": 0.5, "c": 0.25}
