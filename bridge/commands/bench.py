"""`facebridge bench KIND`: benchmarks that write JSON results, so runs can be compared.

Each kind lives in a module of bridge.bench with `add_arguments(parser)`, `run(args) -> dict` and, for people,
`summary(results) -> str` (the table printed at the end). Argument parsing only: the work is in bridge.bench.
"""
from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from bridge import console
from bridge.argparsing import output_file
from bridge.bench.common import figures_table
from bridge.fsutil import atomic_write_json

BENCHES = {
    "pipeline": ("bridge.bench.pipeline", "per-stage and end-to-end speed of the face pipeline on the sample"),
    "precision": ("bridge.bench.precision", "CPU inference precision (f32, bf16): accuracy, jitter and speed"),
    "expression": ("bridge.bench.expression", "blendshape accuracy, jitter and speed of the expression engine"),
    "engines": ("bridge.bench.engines", "every model and the pipeline on every available inference backend"),
    "faces": ("bridge.bench.faces", "smiles, closed eyes and emotion on real faces labelled by hand"),
    "detectors": ("bridge.bench.detectors", "faces found and CPU a frame of each face detector way, small faces too"),
    "lipsync": ("bridge.bench.lipsync", "lip-sync accuracy and latency on held-out speech"),
    "swap": ("bridge.bench.swap", "live model swap: release active to first new frame, drops and gaps at a sink"),
    "grpc": ("bridge.bench.grpc_stream", "gRPC stream: send cost and capture-to-client latency, slow subscribers"),
    "soak": ("bridge.bench.soak", "a long run with every output on: memory, threads and open files over time"),
    "describe": ("bridge.bench.describe", "serve's host CPU a frame beside inference: passes described, replies built"),
    "serve": ("bridge.bench.serve", "facebridge serve end to end over gRPC: streams within p99 20 ms, drops, CPU"),
}


def machine_info() -> dict:
    # imported here: `facebridge --help` loads this module, and bridge.engines costs 0.25 s to import
    from bridge.engines.fastest import cpu_name  # hosts of one GPU kind differ in CPU: the name says which

    return {"machine": platform.machine(), "processor": cpu_name(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and write JSON results",
                       description="Run a benchmark. Results are printed and, with --json, written to a file.")
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    for kind, (module_name, help_text) in BENCHES.items():
        kp = kinds.add_parser(kind, help=help_text, description=help_text)
        kp.add_argument("--json", metavar="OUT", type=output_file, help="write the results to this JSON file")
        module = importlib.import_module(module_name)
        module.add_arguments(kp)
        kp.set_defaults(func=lambda args, m=module, k=kind: _run(k, m, args))
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _run(kind: str, module, args) -> int:
    """Run one benchmark; end with its results table (modules with `summary(results) -> str`) and the JSON,
    written to --json or printed (then the table goes to stderr, so stdout stays JSON).

    Ctrl-C: a benchmark that keeps what it measured returns it marked {"interrupted": true}; it is written as a
    partial result ("partial": true in the JSON) and the command exits 130. One that cannot stops at once, and
    keeps only a `.partial` file it wrote as it went (named as such); a finished run removes that file."""
    started = time.time()
    partial = Path(args.json + ".partial") if args.json else None
    try:
        results = module.run(args)
    except KeyboardInterrupt:
        if partial is not None and partial.exists():
            print(f"bench {kind}: stopped (Ctrl-C); what was measured is in {partial}", file=sys.stderr)
        raise
    interrupted = isinstance(results, dict) and bool(results.get("interrupted"))
    doc = {"benchmark": kind, "started": started, "seconds": round(time.time() - started, 2),
           "machine": machine_info(), "results": results}
    if interrupted:
        doc["partial"] = True
    if hasattr(module, "summary"):
        text = module.summary(results)
    else:  # a table of the figures measured (units from the keys) and what the run was

        text = figures_table(results)
    if not any(line.startswith("verdict:") for line in (text or "").splitlines()):
        verdict = module.verdict(results) if hasattr(module, "verdict") else (
            f"{kind} measured in {doc['seconds']:g} s on {doc['machine']['cpu_count']} cores; no budget to judge "
            "against: compare the JSON with an earlier run")
        text = f"{text}\nverdict: {verdict}" if text else f"verdict: {verdict}"
    if args.json:
        atomic_write_json(args.json, doc)
        if partial.exists():
            partial.unlink()
        if text:
            print(text)
        print(f"wrote {args.json}{' (partial: stopped by Ctrl-C)' if interrupted else ''}")
    else:
        print(json.dumps(doc, indent=2))
        if text:
            print(text, file=sys.stderr)
    if interrupted:
        return console.interrupted("facebridge")
    return 0
