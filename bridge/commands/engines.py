"""`facebridge engines build|list|verify|clear`: TensorRT engines for the shipped models, and their cache."""
from __future__ import annotations

import sys
import time

from bridge.argparsing import folder_path
from bridge.engines.base import EngineError
from bridge.errors import FaceBridgeError


def add_parser(sub) -> None:
    p = sub.add_parser("engines", help="build, list, verify or clear TensorRT engines",
                       description="TensorRT engines for the shipped models. TensorRT-RTX builds ahead of time "
                                   "without a GPU (for --target); full TensorRT builds on the GPU it runs on.")
    verbs = p.add_subparsers(dest="engines_verb", metavar="VERB")

    def common(q):
        q.add_argument("--backend", choices=("tensorrt-rtx", "tensorrt"), default="tensorrt-rtx")
        q.add_argument("--cache-dir", type=folder_path, metavar="DIR",
                       help="engine cache (default ~/.cache/facebridge/engines)")

    b = verbs.add_parser("build", help="build engines for shipped models (all by default)")
    b.add_argument("models", nargs="*", help="model names or ONNX paths (default: every shipped model)")
    common(b)
    b.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                   help="fp16 converts the ONNX graph and checks it against fp32 on real frames")
    b.add_argument("--target", help="compute capability to build for, e.g. sm86 (default: this GPU, or sm86)")
    b.add_argument("--opt-level", type=int, default=3, help="builder optimization level 0 (fast) .. 5")
    b.add_argument("--max-batch", type=int, default=64, help="largest batch the engine accepts")
    b.set_defaults(func=_build)
    for name, helptext, func in (("list", "show cached engines and which backends work here", _list),
                                 ("verify", "check every cached engine (corrupt, stale, other version/GPU)", _verify),
                                 ("clear", "delete cached engines (all, or of the named models)", _clear)):
        q = verbs.add_parser(name, help=helptext)
        common(q)
        if name == "clear":
            q.add_argument("models", nargs="*")
        q.set_defaults(func=func)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _build(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.engines.cache import EngineCache
    from bridge.engines.shipped import NOT_BUILDABLE, find_model, shipped_models
    from bridge.engines.tensorrt.flavour import load_flavour
    from bridge.engines.tensorrt.prepare import prepare_engine, spec_for

    flavour = load_flavour(args.backend)
    cache = EngineCache(args.cache_dir)
    models = [find_model(m) for m in args.models] if args.models else shipped_models()
    failed = skipped = 0
    started = time.perf_counter()
    for model in models:
        if not args.models and model.name in NOT_BUILDABLE:
            skipped += 1
            print(f"{model.name}: skipped, {NOT_BUILDABLE[model.name]}")
            continue
        try:
            spec = spec_for(model, model.verified_path().read_bytes(), flavour, precision=args.precision,
                            target=args.target, opt_level=args.opt_level, max_batch=args.max_batch)
            prepared = prepare_engine(model, flavour, cache, spec)
        except EngineError as e:
            failed += 1
            print(f"{model.name}: FAILED: {e}", file=sys.stderr)
            continue
        how = "cached" if prepared.cache_hit else f"built in {prepared.seconds:.1f} s"
        print(f"{model.name}: {how}, {len(prepared.plan) / 1e6:.1f} MB, {prepared.entry.plan_path}")
    extra = "".join(f", {n} {what}" for n, what in ((skipped, "skipped (they run on ONNX Runtime)"),
                                                        (failed, "failed")) if n)
    print(f"{len(models) - failed - skipped} of {len(models)} models ready{extra} in "
          f"{time.perf_counter() - started:.1f} s ({flavour.name} {flavour.version}, cache {cache.root})")
    return 1 if failed else 0


def _list(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.engines.cache import EngineCache
    from bridge.engines.select import explain
    from bridge.multistream.runners import runner_availability

    print("backends here (automatic order):")
    for a in explain("auto"):
        print(f"  {'yes' if a.ok else 'no ':3} {a.backend:17} {a.reason}")
    print("multi-stream face runners here (batched tracker, fastest first):")
    for kind, ok, reason in runner_availability():
        print(f"  {'yes' if ok else 'no ':3} {kind:17} {reason}")
    cache = EngineCache(args.cache_dir)
    kernels = [f for f in cache.inductor_dir.rglob("*") if f.is_file()]
    if kernels:
        print(f"compiled torch kernels in {cache.inductor_dir}: {len(kernels)} files, "
              f"{sum(f.stat().st_size for f in kernels) / 1e6:.1f} MB (engines clear removes them)")
    entries = cache.entries()
    print(f"engines in {cache.root}: {len(entries)}")
    for e in entries:
        f = e.fields
        print(f"  {e.model:28} {f.get('flavour', '?')} {f.get('trt_version', '?')} {f.get('compute_capability', '?')} "
              f"{f.get('precision', '?')} {e.meta.get('plan_bytes', 0) / 1e6:.1f} MB "
              f"built {time.strftime('%Y-%m-%d %H:%M', time.localtime(e.meta.get('created', 0)))}")
    return 0


def _verify(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.engines.tensorrt.verify import verify_cache

    problems = 0
    for entry, status in verify_cache(args.cache_dir):
        problems += status != "ok"
        print(f"{entry.model:28} {entry.key}  {status}")
    return 1 if problems else 0


def _clear(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.engines.cache import EngineCache
    from bridge.engines.shipped import shipped_models

    cache = EngineCache(args.cache_dir)
    known = {m.name for m in shipped_models()} | {e.model for e in cache.entries()}
    unknown = [m for m in args.models if m not in known]
    if unknown:
        raise FaceBridgeError(f"no model named {', '.join(unknown)} (nothing cached or shipped by that name)",
                              f"name one of {', '.join(sorted(known))}, or give no name to clear every engine")
    removed = sum(cache.clear(m) for m in args.models) if args.models else cache.clear()
    print(f"removed {removed} files from {cache.root}")
    return 0
