"""What is installed, as a dict for `fedagent update status --json`: read-only, no lock, nothing changed.

Per model: the active release (0 = shipped) with its files, sha256 and whether they still verify, the previous
release, the floor and rolled-back releases; plus the last check, the last refusal with its reason, the trusted
root version, the TUF version floors, recent history and what a crash left for recover() to remove.
"""
from __future__ import annotations

from pathlib import Path

from tuf.api.metadata import Metadata

from bridge.errors import ModelError
from bridge.models.registry import ModelRegistry
from bridge.updates.store import InstalledRelease, StateDir


def _files(registry: ModelRegistry, release: InstalledRelease | None) -> tuple[dict, bool, str]:
    if release is None:
        return {}, True, ""
    try:
        for name in release.files:
            registry.verified_file(release, name)
        return dict(release.files), True, ""
    except ModelError as e:
        return dict(release.files), False, str(e)


def status(state_dir: str | Path | None = None, model: str = "lipsync") -> dict:
    """The state of `model` at the top level (release, files, previous_release, ...) and of every model."""
    store = StateDir(state_dir)
    store.check(must_exist=state_dir is not None)  # the default folder may be missing: nothing installed yet
    registry = ModelRegistry(store.root)
    registry.shipped(model)  # a model this device has (the list of them otherwise)
    state = store.read()
    models = {}
    for name in sorted(set(state.models) | {model}):
        ms = state.model(name)
        files, ok, problem = _files(registry, ms.active)
        models[name] = {
            "release": ms.active.release if ms.active else 0,
            "kind": ms.active.kind if ms.active else "shipped",
            "files": files, "verified": ok, "problem": problem,
            "installed_utc": ms.active.installed_utc if ms.active else None,
            "previous_release": (ms.previous.release if ms.previous else 0) if ms.active else None,
            "floor": ms.floor, "rolled_back": list(ms.rolled_back)}
    root = store.trusted_root()
    try:
        root_version = Metadata.from_bytes(root).signed.version if root else None
    except Exception:
        root_version = None
    return {"model": model, **models[model], "models": models, "state_dir": str(store.root),
            "trusted_root_version": root_version, "tuf_floors": state.tuf_floors, "checked_utc": state.checked_utc,
            "last_check": state.last_check, "last_refusal": state.last_refusal, "history": list(state.history[-10:]),
            "orphans": _orphans(store, state.slots())}


def _orphans(store: StateDir, keep: set[str]) -> list[str]:
    found = []
    for folder in (store.staging_dir, store.tmp_dir):
        if folder.is_dir():
            found += [str(p.relative_to(store.root)) for p in folder.iterdir()]
    if store.slots_dir.is_dir():
        found += [str(p.relative_to(store.root)) for p in store.slots_dir.iterdir() if p.name not in keep]
    return sorted(found)
