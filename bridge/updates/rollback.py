"""Roll back: the previous release (or the shipped model) becomes active again, and that is recorded.

The rolled-back release is remembered so that the same release is never installed again (`rollback` reason);
the release floor stays where it was, so only a newer release replaces the one rolled back to. The previous
release's files are re-verified before the switch; a rollback onto a damaged release is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from bridge.errors import ModelError
from bridge.models.registry import ModelRegistry
from bridge.updates import reasons
from bridge.updates.store import ModelState, StateDir, utc_now


@dataclass(frozen=True)
class RollbackResult:
    model: str
    release: int  # active after the rollback (0: the shipped model)
    from_release: int  # the release that was rolled back
    utc: str

    def to_dict(self) -> dict:
        return {"status": "rolled-back", "model": self.model, "release": self.release,
                "from_release": self.from_release, "utc": self.utc}


def rollback(state_dir: str | Path | None = None, model: str = "lipsync", release: int | None = None,
             why: str = "") -> RollbackResult:
    """Roll the active release of `model` back. With `release`, only that release: if it is not active (any more),
    it is marked rolled back and nothing else changes. `why` goes into the history."""
    store = StateDir(state_dir)
    store.check(must_exist=state_dir is not None)  # a folder named by --state: a typo creates nothing
    ModelRegistry(store.root).shipped(model)  # a model this device has (the list of them otherwise)
    with store.lock():
        store.recover()
        state = store.read()
        ms = state.model(model)
        if release is not None and (ms.active is None or ms.active.release != release):
            marked = replace(ms, rolled_back=tuple(sorted({*ms.rolled_back, release})))
            store.commit(state.with_model(model, marked).with_event(
                action="rollback", model=model, release=ms.active.release if ms.active else 0, from_release=release,
                why=why))
            return RollbackResult(model, ms.active.release if ms.active else 0, release, utc_now())
        if ms.active is None:
            raise reasons.NoPrevious(f"{model} already runs the shipped model")
        target = ms.previous
        if target is not None:
            try:
                for name in target.files:
                    ModelRegistry(store.root).verified_file(target, name)
            except ModelError as e:
                raise reasons.HashMismatch(f"the previous release cannot serve: {e.problem}",
                                           "install a newer release instead") from None
        now = utc_now()
        new_ms = ModelState(active=target, previous=None, floor=ms.floor,
                            rolled_back=tuple(sorted({*ms.rolled_back, ms.active.release})))
        event = dict(action="rollback", model=model, release=target.release if target else 0,
                     from_release=ms.active.release)
        state = state.with_model(model, new_ms).with_event(**event, **({"why": why} if why else {}))
        store.commit(state)
        store.remove_slot(ms.active.slot)
        return RollbackResult(model, target.release if target else 0, ms.active.release, now)
