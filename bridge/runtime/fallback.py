"""ReleaseFallback: a signed release that fails in service is rolled back by the running bridge itself.

A release passes its own smoke test and still misbehaves on what the device really feeds it (real face crops):
the output guard replaces every frame, recreating its session changes nothing, and the face is frozen. The caller
(runtime/recreate.py in `facebridge run`, runtime/serve_releases.py in `facebridge serve`) decides that a release
failed; this module undoes it through the machinery every release already takes:
- the failed version is retired in the run's ModelSwapper, so this process never builds it again;
- the model the store is about to make active again (the previous release, or the shipped model; its files
  verified as ever) is asked of the swapper at once, so it is built and swapped in between two frames as any
  release is, without waiting for the store's lock or disk (well within a second for the face models on a CPU);
- the update store rolls it back (bridge/updates/rollback.py): that model becomes active again and the failed
  release is marked rolled back, so the watch never activates it and a later install of it is refused
  (`rollback`); `fedagent update status` shows it.
The work runs on its own short thread (it may wait for an installer's lock), never on a frame thread. If the store
cannot be written (another installer holds it for long, a read-only store), the model before stays swapped in and
the failed release stays retired in this process; one line says so.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bridge.models.registry import ActiveModel, ModelRegistry
from bridge.updates.reasons import Busy, UpdateRefused
from bridge.updates.rollback import rollback

log = logging.getLogger(__name__)

STORE_WAIT_S = 2.0  # how long the rollback waits for an installer holding the store's lock


class ReleaseFallback:
    """`fallback(model, release, version, why)` rolls the failed `release` of `model` (announced as `version`) back.
    `watch` is the run's ReleaseWatch (its swapper and store); `on_rolled_back(model, release, why)` (optional)
    tells the run's statistics; `report(line)` is where the one line about it goes."""

    def __init__(self, watch, on_rolled_back: Callable[[str, int, str], None] | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        self.watch = watch
        self.on_rolled_back = on_rolled_back or (lambda model, release, why: None)
        self._report = report or (lambda line: log.warning("%s", line))
        self._done: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    @property
    def state_dir(self) -> Path:
        return self.watch.state_dir

    def __call__(self, model: str, release: int, version: str, why: str) -> bool:
        """Start rolling `version` back; False when it was already (or it is no release: nothing to go back from)."""
        if release <= 0:
            return False
        with self._lock:
            if (model, version) in self._done:
                return False
            self._done.add((model, version))
        self.watch.swapper.retire(model, version)
        self.on_rolled_back(model, release, why)
        thread = threading.Thread(target=self._roll_back, args=(model, release, version, why),
                                  name="facebridge-fallback", daemon=True)
        self.threads.append(thread)
        thread.start()
        return True

    def _roll_back(self, model: str, release: int, version: str, why: str) -> None:
        swapped = self._swap_previous(model, release)
        deadline = time.monotonic() + STORE_WAIT_S
        while True:
            try:
                result = rollback(self.state_dir, model, release=release, why=f"failed in service: {why}")
                break
            except Busy:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                problem = "another installer holds the update store"
            except (UpdateRefused, OSError) as e:
                problem = str(e).splitlines()[0]
            if not swapped:
                swapped = self._swap(model, self._shipped(model))
            back_to = "the model before it" if swapped else "nothing (the model in use serves on)"
            self._report(f"{model} {version} failed in service ({why}); swapped back to {back_to}, but the update "
                         f"store could not record the rollback ({problem}); {version} is not run again by this "
                         "process: run `fedagent update rollback` once the store can be written")
            return
        back_to = f"release {result.release}" if result.release else "the shipped model"
        self._report(f"{model} {version} failed in service ({why}); rolled back to {back_to}, and release {release} "
                     "will not be installed again")
        self.watch.poll_now()  # the store's new active release: asked for already, unless another install came first

    def _swap_previous(self, model: str, release: int) -> bool:
        """Ask for what the store will make active (the previous release, or the shipped model) at once, before the
        store's lock and writes: the stream waits for a build, never for the disk. False when the store's active
        release is no longer the failed one (another install came first: the watch swaps that in)."""
        registry = ModelRegistry(self.state_dir)
        try:
            installed = registry.installed(model)
            if installed is None or installed.release != release:
                return False
            target = registry.previous(model)
        except Exception as e:  # noqa: BLE001 - damaged files of the previous release: the shipped model instead
            log.warning("the release before %s r%d cannot serve (%s); the shipped model is swapped in", model,
                        release, e)
            target = self._shipped(model)
        return self._swap(model, target)

    def _shipped(self, model: str):
        try:
            return ActiveModel(model, 0, "shipped", ModelRegistry(self.state_dir).shipped_path(model), None, None)
        except Exception as e:  # noqa: BLE001 - the model in use serves on; the line says why
            self._report(f"the shipped {model} model cannot be loaded ({e}); the model in use serves on")
            return None

    def _swap(self, model: str, target) -> bool:
        if target is None:
            return False
        self.watch.on_release(model, target.release)
        self.watch.request(target)
        return True
