"""`facebridge serve` pins the native pools: every BLAS library loaded (numpy's, OpenCV's), OpenCV's own pool and
torch's intra-op pool to one thread, and the environment for libraries loaded later. In a child process: the pins
are process-wide and would slow the rest of the suite."""
import json
import subprocess
import sys

from tests.helpers import subprocess_env

CHILD = """
import json, os
from bridge.runtime.native_pools import pin_native_pools
pinned = pin_native_pools()
from threadpoolctl import threadpool_info
print(json.dumps({"pinned": pinned, "blas": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"],
                  "env": os.environ["OPENBLAS_NUM_THREADS"]}))
"""


def test_every_pool_is_pinned_to_one_thread(tmp_path):
    env = subprocess_env(tmp_path)
    env.pop("OPENBLAS_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["blas"] and set(got["blas"]) == {1} and got["env"] == "1"
    assert got["pinned"]["opencv"] == 1
    assert got["pinned"].get("torch", 1) == 1
