# diagnostic (not shipped): with COLD_DESCRIBE=1 and this folder first on PYTHONPATH, `facebridge serve` skips
# serve.warm_describe, so each front end builds its describe step at its first stream, as before b3abb5c. Issue 43:
# runs before it seemed to lose faces under MPS, runs after it none. Answered (2507a66, with ../pass_losses): no face
# was lost; built cold (7.5-9 s), the streams' first frames reached the engine inside the measured window.
import importlib.abc
import importlib.util
import os
import sys


class _SkipWarmDescribe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "bridge.runtime.serve":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.warm_describe = lambda config, refresher: None
            sys.stderr.write(f"cold describe {os.getpid()}: warm_describe skipped\n")

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("COLD_DESCRIBE") == "1":
    sys.meta_path.insert(0, _SkipWarmDescribe())
