# diagnostic (not shipped): with COLD_DESCRIBE=1 and this folder first on PYTHONPATH, `facebridge serve` skips
# serve.warm_describe, so each front end builds its describe step at its first stream, as before b3abb5c. Issue 43:
# runs before it seemed to lose faces under MPS, runs after it none. Answered (2507a66, with ../pass_losses): no face
# was lost; built cold (7.5-9 s), the streams' first frames reached the engine inside the measured window.
# `after_import` is also ../pass_losses' way in.
import importlib.abc
import importlib.util
import os
import sys


def after_import(name: str, then) -> None:
    """then(module) right after module `name` is first imported, before anything else uses it."""

    class _After(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)  # once, and not for the find_spec below
            spec = importlib.util.find_spec(fullname)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                then(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _After())


def _skip_warm_describe(module) -> None:
    module.warm_describe = lambda config, refresher: None
    sys.stderr.write(f"cold describe {os.getpid()}: warm_describe skipped\n")


if os.environ.get("COLD_DESCRIBE") == "1":
    after_import("bridge.runtime.serve", _skip_warm_describe)
