"""A front end settles its heap with the describe step already built (serve.warm_describe): its streams' rows add
only their own few objects to what the collector walks, not the kernels and modules a first stream built (90,000
objects, 50-80 ms full collections before). In a fresh interpreter: this process's tests imported them already."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = """
import gc, json
from bridge.expression.refresh import IdentityRefresher
from bridge.runtime.gc_pauses import settle
from bridge.runtime.serve import PassDescriber, ServeConfig, warm_describe

refresher = IdentityRefresher(1)
if WARM:
    warm_describe(ServeConfig(), refresher)
settle()
before = len(gc.get_objects())
describer = PassDescriber(64, True, False, {}, refresher=refresher)
rows = [describer.open(f"subject{i}") for i in range(64)]
print(json.dumps({"walked": len(gc.get_objects()) - before}))
refresher.close()
"""


def _walked_after_64_streams(warm: bool) -> int:
    run = subprocess.run([sys.executable, "-c", f"WARM = {warm}\n" + SCRIPT], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])["walked"]


def test_streams_opened_after_the_warm_up_add_only_their_own_objects_to_the_collectors_walk():
    warm, cold = _walked_after_64_streams(True), _walked_after_64_streams(False)
    assert warm < 64 * 100, warm  # a stream's row: its estimator, contract, state (about 35 objects)
    assert cold > 10 * warm, (cold, warm)  # without it: the kernels and modules the first stream built
