"""The house rules of docs/ARCHITECTURE.md, checked from the imports of every module under bridge/ and fedagent/.

Imports are read with `ast` (module level and inside functions alike), so a lazy import counts as much as one at
the top of a file.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

PACKAGES = ("bridge", "fedagent")
# import nothing of the house
LEAVES = ("bridge.frame", "bridge.mesh", "bridge.errors", "bridge.fsutil", "bridge.compiled", "bridge.ports",
          "bridge.sockets", "bridge.stats", "bridge.thread_cpu", "bridge.child_status")
FACE_DOMAIN = ("bridge.stages", "bridge.expression", "bridge.pipeline")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> set[str]:
    """Every house module `path` imports: `from a.b import c` counts a.b and a.b.c (c may be a submodule)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _graph() -> dict[str, set[str]]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "gen" not in p.parts]
    modules = {_module_name(p): p for p in paths}
    graph = {}
    for name, path in modules.items():
        # keep only names that are modules (drop `from bridge.frame import FaceFrame`'s bridge.frame.FaceFrame)
        graph[name] = {dep for dep in _imports(path, name) if dep in modules and dep != name}
    return graph


GRAPH = _graph()


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _violations(sources: tuple[str, ...], targets: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, deps in GRAPH.items() if any(_within(m, s) for s in sources)
                  for d in deps if any(_within(d, t) for t in targets))


def test_the_import_graph_covers_the_house():
    assert "bridge.runtime.session" in GRAPH and "bridge.multistream.tracker" in GRAPH
    assert "bridge.runtime.runner" in GRAPH["bridge.runtime.session"]


def test_leaf_modules_import_nothing_of_the_house():
    for leaf in LEAVES:
        assert GRAPH[leaf] == set(), f"{leaf} imports {sorted(GRAPH[leaf])}"


def test_engines_and_serving_never_import_the_face_domain():
    assert _violations(("bridge.engines",), FACE_DOMAIN) == []
    assert _violations(("bridge.serving", "bridge.multistream"), ("bridge.stages",)) == []


def test_the_engine_package_knows_no_front_end():
    """bridge/multistream (the batched runners, decode, the passes: the engine process of `serve --front-ends`)
    imports nothing of the front end (bridge/serving: the wire, the streams, the scale-out), of the gRPC code or of
    the composition roots (bridge/runtime), and no face domain; bridge/serving uses it, never the reverse. The
    wiring of the two (engine and front-end processes) is the composition root's (runtime/serve_engine.py)."""
    assert _violations(("bridge.multistream",), ("bridge.serving", "bridge.grpc", "bridge.runtime",
                                                 *FACE_DOMAIN)) == []
    for path in (ROOT / "bridge" / "multistream").glob("*.py"):
        assert "import grpc" not in path.read_text(encoding="utf-8"), path.name
    assert any(_within(d, "bridge.multistream") for d in GRAPH["bridge.serving.engine_link"])


def test_sinks_never_import_each_other_and_formats_open_no_socket():
    sinks = [m for m in GRAPH if m.startswith("bridge.sinks.")]
    shared = {"bridge.sinks.base", "bridge.sinks.udp", "bridge.sinks.vrm_expressions"}  # base classes and helpers
    for sink in sinks:
        others = {d for d in GRAPH[sink] if d.startswith("bridge.sinks.") and d not in shared}
        assert not others, f"{sink} imports {sorted(others)}"
    for fmt in (m for m in GRAPH if m.startswith("bridge.formats")):
        source = (ROOT / (fmt.replace(".", "/") + ".py")).read_text(encoding="utf-8")
        assert "socket.socket(" not in source and "import grpc" not in source, fmt


def test_osc_bytes_are_built_only_in_formats_osc():
    """A new OSC sink fills a plan with formats/osc.py's template instead of encoding of its own: python-osc's
    builders appear nowhere else (its server, dispatcher and client, which the OSC remote control uses, may)."""
    builders = ("pythonosc.osc_message_builder", "pythonosc.osc_bundle_builder")
    users = []
    for module in GRAPH:
        path = ROOT / (module.replace(".", "/") + ".py")
        if path.exists() and any(b in path.read_text(encoding="utf-8") for b in builders):
            users.append(module)
    assert users == ["bridge.formats.osc"]


def test_replay_and_usd_export_import_no_sink_module():
    for module in ("bridge.commands.replay", "bridge.usd_export"):
        sinks = {d for d in GRAPH[module] if d.startswith("bridge.sinks") and d != "bridge.sinks.base"}
        assert not sinks, f"{module} imports {sorted(sinks)}"


def test_only_the_session_knows_every_concrete_sink():
    concrete = {"bridge.sinks.livelinkface", "bridge.sinks.vmc", "bridge.sinks.recorder", "bridge.grpc.server"}
    users = {m for m, deps in GRAPH.items() if len(deps & concrete) == len(concrete)}
    assert users == {"bridge.runtime.session"}


def test_commands_do_not_assemble_the_running_bridge():
    """`run` parses arguments into a RunConfig (with the pipeline's options); the session builds everything."""
    run = GRAPH["bridge.commands.run"]
    assert "bridge.runtime.session" in run
    assert not {d for d in run if d.startswith(("bridge.sinks", "bridge.grpc", "bridge.audio", "bridge.runtime.r"))}


def test_no_lower_floor_imports_the_running_bridge():
    """runtime/ assembles the bridge (sources, pipeline, sinks, monitor, gRPC, serve) and only the floors above it
    (the command line, its commands, the benchmarks) import it; the run's counters that the monitor, gRPC and serve
    read too are leaves below it (bridge/stats.py, bridge/thread_cpu.py)."""
    upper = ("bridge.runtime", "bridge.commands", "bridge.bench", "bridge.cli", "bridge.__main__")
    below = [m for m in GRAPH if _within(m, "bridge") and not any(_within(m, u) for u in upper)]
    assert sorted(f"{m} -> {d}" for m in below for d in GRAPH[m] if _within(d, "bridge.runtime")) == []


def test_bridge_never_imports_fedagent():
    assert _violations(("bridge",), ("fedagent",)) == []


def test_the_flower_app_starts_no_process_and_publishes_only_through_its_publish_step():
    """fedagent.app (what runs inside Flower's processes) imports nothing of fedagent.local (starting and stopping
    Flower processes, simulations), and of fedagent.publisher only fedagent.publisher.release, and only from
    fedagent.app.server_app (the Flower server app's publish step). Every fedagent module lives in a room or is
    the command line."""
    assert _violations(("fedagent.app",), ("fedagent.local",)) == []
    assert _violations(("fedagent.app",), ("fedagent.publisher",)) == [
        "fedagent.app.server_app -> fedagent.publisher.release"]
    rooms = ("fedagent.app", "fedagent.local", "fedagent.publisher", "fedagent.commands")
    loose = {m for m in GRAPH if _within(m, "fedagent") and not any(_within(m, r) for r in rooms)}
    assert loose == {"fedagent", "fedagent.__main__", "fedagent.cli"}


def test_there_is_no_import_circle():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(GRAPH[module]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, " -> ".join(cycle)


def _lazy_house_imports_without_a_reason() -> list[str]:
    """`from bridge... import` / `from fedagent... import` inside a function, with no comment on its line or on the
    line above its block of imports: an import belongs at the top of its module unless something measured (a
    cost at start-up, an optional extra) keeps it in the function, and the comment says what."""
    found = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "gen" not in p.parts):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        functions = [f for f in ast.walk(ast.parse(source)) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        lazy = {node for f in functions for node in ast.walk(f) if isinstance(node, (ast.Import, ast.ImportFrom))}
        import_lines = {n for node in lazy for n in range(node.lineno, node.end_lineno + 1)}
        for node in lazy:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not (getattr(node, "level", 0) or any(n.split(".")[0] in PACKAGES for n in names)):
                continue
            if any("#" in lines[n - 1] for n in range(node.lineno, node.end_lineno + 1)):
                continue
            above = node.lineno - 1
            while above > 0 and (above in import_lines or not lines[above - 1].strip()):
                above -= 1
            if above == 0 or not lines[above - 1].strip().startswith("#"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return sorted(set(found))


def test_imports_sit_at_the_top_of_their_module_unless_a_comment_says_why():
    assert _lazy_house_imports_without_a_reason() == []


def test_only_the_model_registry_reads_a_manifest():
    """A model file reaches a session only through bridge/models/registry.py, which verifies its hash: no other
    module parses a manifest (json.load of a path that names one) or scans a folder for JSON files."""
    readers = []
    for module in GRAPH:
        if _within(module, "bridge.models"):
            continue
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or \
                    node.func.attr not in ("load", "loads", "glob", "rglob"):
                continue  # (get_source_segment splits the whole source each call: only for these)
            args = " ".join(ast.get_source_segment(source, a) or "" for a in node.args)
            parsed = node.func.attr in ("load", "loads") and "manifest" in args.lower()
            scanned = node.func.attr in ("glob", "rglob") and args in ('"*.json"', "'*.json'")  # a folder's JSONs
            if parsed or scanned:
                readers.append(f"{module}:{node.lineno}")
    assert readers == [], f"manifests read outside bridge/models/registry.py: {readers}"


def test_the_runtime_never_asks_a_pipeline_what_it_is():
    """The session, control, the guard's recreation and the runner talk to a pipeline through the members of
    runtime/pipeline_protocol.py's `Pipeline` only, which every kind implements: no module under bridge/runtime/
    probes a pipeline with hasattr, getattr or isinstance, and the session, control and recreation probe nothing they
    hold (the base classes of sources and sinks name their defaults)."""
    probes = []
    for path in sorted((ROOT / "bridge" / "runtime").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        callers = path.name in ("session.py", "control.py", "recreate.py")
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                    and node.func.id in ("hasattr", "getattr", "isinstance")):
                continue
            target = (ast.get_source_segment(source, node.args[0]) or "").lower()
            if "pipeline" in target or (callers and node.func.id != "isinstance"):
                probes.append(f"{path.name}:{node.lineno}: {ast.get_source_segment(source, node)}")
    assert probes == [], probes
