"""Install a signed release, roll back, report status. Every refusal leaves the active release serving.

Install, under the state directory's lock, after `recover()`:
  refresh   the clock must not be set back before the last successful check; ngclient walks root -> timestamp
            -> snapshot -> targets (signatures, thresholds, expiry, versions), then the versions it trusted must
            not be below the durable floors (which survive a lost or truncated TUF cache, and drop for a role whose
            keys the root replaced); the floors rise and the newest root is kept as the next bootstrap (floors.py)
  bundle    the model's signed bundle: release counter above the model's floor (an older model re-listed in
            newer metadata is a rollback), compatible contract/base/hardware, every file a signed target whose
            length and sha256 equal the bundle's, sizes within the cap and the free disk
  download  into a fresh staging folder, each length capped while streaming
  verify    the staging folder holds exactly the file set, regular files, re-hashed
  smoke     a whole model must keep the shipped model's contract (contract.py); the release's reference inputs
            through ONNX Runtime must give its declared outputs, and the bridge's own inputs for that model
            finite, in-range outputs (bridge_inputs.py)
  promote   staging -> slots/<model>-r<N>-<hash>; commit   state.json names it active, the old active becomes
            previous, the floor rises (one atomic rename: the switch); cleanup   the slot before previous goes
A crash between any two steps leaves the committed state as it was before (or after) the switch; the next
start's recover() removes the rest. Each model installs on its own: one model's refusal is reported in its result
and never blocks another's release.
"""
from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tuf.api.metadata import Metadata

from bridge.fsutil import uninterrupted
from bridge.models.registry import ModelRegistry
from bridge.models.verify import sha256_file
from bridge.updates import floors, reasons
from bridge.updates.bridge_inputs import check_on_bridge_inputs
from bridge.updates.bundle import MAX_BUNDLE_BYTES, Bundle, bundle_target, parse
from bridge.updates.compat import check_compatible
from bridge.updates.contract import check_contract, check_tolerance, session_contract, shipped_contract
from bridge.updates.fetch import Progress, Reporter, Source, open_updater, refusal
from bridge.updates.smoke import open_release, smoke_test
from bridge.updates.store import InstalledRelease, ModelState, StateDir, no_space_is_refusal, utc_now

SPACE_MARGIN = 1 << 20  # bytes kept free beyond two copies of the release (staging + download buffer)


@dataclass(frozen=True)
class Limits:
    max_release_bytes: int = 512 * 1024 * 1024  # all files of one release together
    deadline_s: float = 600.0  # the whole check, all downloads included


@dataclass(frozen=True)
class InstallResult:
    status: str  # "installed", "up-to-date", "no-release" (the repository has none for it) or "refused"
    model: str
    release: int  # the active release after this call (0: the shipped model)
    previous_release: int | None  # what rollback would return to (0: shipped; None: nothing installed)
    files: dict = field(default_factory=dict)  # name -> {"sha256", "length"} of the active release
    steps: dict = field(default_factory=dict)  # step -> seconds, in order
    recovered: tuple[str, ...] = ()  # what recover() removed before this install (a crash's leftovers)
    refusal: reasons.UpdateRefused | None = None  # why this model's release was refused (status "refused")

    def to_dict(self) -> dict:
        return {"status": self.status, "model": self.model, "release": self.release,
                "previous_release": self.previous_release, "files": self.files,
                "steps": {k: round(v, 6) for k, v in self.steps.items()}, "recovered": list(self.recovered),
                **({"refusal": self.refusal.as_dict()} if self.refusal else {})}


class _Steps:
    def __init__(self, report: Reporter):
        self.report, self.times, self._t = report, {}, time.perf_counter()

    def start(self, step: str, name: str = "") -> None:
        self.report(Progress(step, name))
        self._t = time.perf_counter()

    def done(self, step: str) -> None:
        self.times[step] = self.times.get(step, 0.0) + time.perf_counter() - self._t
        self._t = time.perf_counter()


def install(source: str, state_dir: str | Path | None = None, *, trust: bytes | None = None,
            models: list[str] | None = None, report: Reporter | None = None, limits: Limits = Limits(),
            registry: ModelRegistry | None = None) -> list[InstallResult]:
    """Install the newest signed release of each model (default: every model this device knows) from `source`
    (a repository folder or http(s) URL). `trust` is root metadata bytes for the first install only.

    Each model installs on its own: a refused release is reported in its result (status "refused") and the
    other models' releases still install. Only when the one model that had a release was refused is that
    refusal raised (a refusal of the metadata itself is always raised: no model can install then)."""
    store = StateDir(state_dir)
    report = report or (lambda event: None)
    registry = registry or ModelRegistry(store.root)
    with store.lock():
        recovered = tuple(store.recover())
        try:
            return _install_locked(store, Source.parse(source), trust, models, report, limits, registry, recovered)
        except reasons.UpdateRefused as refused:
            _record_refusal(store, source, refused)
            raise


def _install_locked(store, source, trust, models, report, limits, registry, recovered) -> list[InstallResult]:
    steps = _Steps(report)
    steps.start("refresh")
    now = floors.now_utc()
    floors.check_clock(store.read(), now)  # before ngclient judges expiry by this clock
    root = store.trusted_root() or _first_trust(trust)
    updater, fetcher = open_updater(source, store.tuf_dir, store.tmp_dir, root, report, limits.deadline_s)
    try:
        return _install_models(store, source, updater, fetcher, now, models, steps, limits, registry, recovered)
    finally:
        fetcher.close()


def _install_models(store, source, updater, fetcher, now, models, steps, limits, registry, recovered):
    try:
        updater.refresh()
    except Exception as e:
        raise refusal(e, fetcher, store.tuf_dir, "checking the repository metadata") from None
    state = floors.raise_floors(store, store.read(), now)
    steps.done("refresh")
    refresh_s = steps.times["refresh"]
    results = []
    for model in models or registry.names():
        steps.times = {"refresh": refresh_s}
        try:
            result = _install_model(store, updater, fetcher, state, model, steps, limits, registry)
        except reasons.UpdateRefused as refused:
            refused.model = model
            _record_refusal(store, source, refused)
            result = replace(_result("refused", model, store.read().model(model)), refusal=refused)
        state = store.read()
        if result.status != "no-release" or models:  # a model asked for by name is always reported
            results.append(replace(result, steps=dict(steps.times), recovered=recovered))
    offered = [r for r in results if r.status != "no-release"]
    if len(offered) == 1 and offered[0].refusal is not None:
        raise offered[0].refusal
    _record(store, source, "; ".join(f"{r.model}: {r.status} r{r.release}" for r in offered)
            or "no release for this device's models")
    steps.report(Progress("done"))
    return results


def _first_trust(trust: bytes | None) -> bytes:
    if trust is None:
        raise reasons.NoTrustRoot("this device trusts no update publisher yet")
    try:
        Metadata.from_bytes(trust)
    except Exception as e:
        raise reasons.Malformed(f"the trust file is not TUF root metadata ({str(e)[:80]})",
                                "pass the trust.json written by `fedagent keys init`") from None
    return trust


def _decide(ms: ModelState, bundle: Bundle, bundle_sha: str) -> bool:
    """True: install; False: this exact release is already active. Refuses rollback and equivocation."""
    active = ms.active
    if active is not None and bundle.release == active.release:
        if bundle_sha == active.bundle_sha256:
            return False
        raise reasons.Equivocation(f"release {bundle.release} of {bundle.model} in the repository differs from the "
                                   "installed release with the same number")
    if bundle.release in ms.rolled_back:
        raise reasons.Rollback(f"release {bundle.release} of {bundle.model} was rolled back on this device",
                               "publish a newer release with the fix")
    if bundle.release <= ms.floor:
        raise reasons.Rollback(f"the repository offers release {bundle.release} of {bundle.model}, not newer than "
                               f"release {ms.floor} this device already installed")
    return True


def _install_model(store, updater, fetcher, state, model, steps, limits, registry) -> InstallResult:
    ms = state.model(model)
    shipped = registry.shipped(model)
    steps.start("bundle", model)
    try:
        info = updater.get_targetinfo(bundle_target(model))
    except Exception as e:
        raise refusal(e, fetcher, store.tuf_dir, f"looking up {model}'s release") from None
    if info is None:
        steps.done("bundle")
        return _result("no-release", model, ms)
    if info.length > MAX_BUNDLE_BYTES:
        raise reasons.TooLarge(f"{model}'s release bundle is signed as {info.length} bytes, more than "
                               f"{MAX_BUNDLE_BYTES}")
    staging = store.new_staging()
    try:
        bundle, bundle_sha = _fetch_bundle(store, updater, fetcher, info, staging, model)
        if not _decide(ms, bundle, bundle_sha):
            steps.done("bundle")
            return _result("up-to-date", model, ms)
        check_compatible(bundle, shipped)
        check_tolerance(shipped, bundle.atol, bundle.rtol)
        wanted = shipped_contract(shipped) if bundle.kind == "model" else None
        targets = _signed_files(store, updater, fetcher, bundle)
        _check_space(store, bundle, limits)
        steps.done("bundle")
        steps.start("download", model)
        for name, target in targets.items():
            try:
                updater.download_target(target, str(staging / name))
            except Exception as e:
                raise refusal(e, fetcher, store.tuf_dir, f"downloading {name}") from None
        steps.done("download")
        steps.start("verify", model)
        _verify_staged(staging, bundle)
        steps.done("verify")
        steps.start("smoke-test", model)
        shapes = {k: tuple(v) for k, v in shipped.entry.get("adapter_initializers", {}).items()}
        base = registry.shipped_path(model) if bundle.kind == "adapter" else None
        session = open_release(bundle.kind, staging, base, shapes)
        if wanted is not None:
            check_contract(model, session_contract(session.session), wanted)
        smoke_test(session, staging / "reference.npz", bundle.atol, bundle.rtol)
        check_on_bridge_inputs(model, session)  # and on what the bridge itself feeds this model
        steps.done("smoke-test")
        return _switch(store, state, ms, bundle, bundle_sha, staging, steps)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fetch_bundle(store, updater, fetcher, info, staging: Path, model: str) -> tuple[Bundle, str]:
    try:
        updater.download_target(info, str(staging / "bundle.json"))
    except Exception as e:
        raise refusal(e, fetcher, store.tuf_dir, f"downloading {model}'s release bundle") from None
    bundle = parse((staging / "bundle.json").read_bytes())
    custom = info.custom.get("facebridge") if isinstance(info.custom, dict) else None
    if bundle.model != model or custom != {"model": model, "release": bundle.release}:
        raise reasons.Malformed(f"{model}'s signed bundle says model {bundle.model!r} release {bundle.release}, its "
                                f"targets entry says {custom!r:.80}")
    return bundle, info.hashes["sha256"]


def _signed_files(store, updater, fetcher, bundle: Bundle) -> dict:
    """Each file of the bundle as the TUF target it must be, with the same length and sha256."""
    targets = {}
    for name, entry in sorted(bundle.files.items()):
        try:
            target = updater.get_targetinfo(bundle.target_path(name))
        except Exception as e:
            raise refusal(e, fetcher, store.tuf_dir, f"looking up {name}") from None
        if target is None:
            raise reasons.FileSetMismatch(f"release {bundle.release} of {bundle.model} lists {name}, which the signed "
                                          "targets do not")
        if target.length != entry.length or target.hashes.get("sha256") != entry.sha256:
            raise reasons.HashMismatch(f"{name}: the bundle and the signed targets disagree on its length or sha256 "
                                       "(files mixed from two releases)")
        targets[name] = target
    return targets


def _check_space(store: StateDir, bundle: Bundle, limits: Limits) -> None:
    total = sum(f.length for f in bundle.files.values())
    if total > limits.max_release_bytes:
        raise reasons.TooLarge(f"release {bundle.release} of {bundle.model} is {total} bytes, more than the "
                               f"{limits.max_release_bytes} allowed")
    needed = 2 * total + SPACE_MARGIN
    free = store.free_bytes()
    if free < needed:
        raise reasons.NoSpace(f"release {bundle.release} of {bundle.model} needs {needed} bytes free in "
                              f"{store.root}, there are {free}")


def _verify_staged(staging: Path, bundle: Bundle) -> None:
    """Exactly the file set (plus bundle.json), regular files only, each re-hashed after download."""
    present = set(os.listdir(staging))
    expected = set(bundle.files) | {"bundle.json"}
    if present != expected:
        raise reasons.FileSetMismatch(f"staged release holds {sorted(present)}, expected {sorted(expected)}")
    for name, entry in bundle.files.items():
        info = os.lstat(staging / name)
        if not stat.S_ISREG(info.st_mode):
            raise reasons.BadPath(f"staged file {name} is not a regular file")
        if info.st_size != entry.length or sha256_file(staging / name) != entry.sha256:
            raise reasons.HashMismatch(f"staged file {name} changed after download")


def _switch(store, state, ms, bundle, bundle_sha, staging, steps) -> InstallResult:
    with uninterrupted():  # a verified release is promoted and committed whole (Ctrl-C takes effect after)
        return _promote_and_commit(store, ms, bundle, bundle_sha, staging, steps)


def _promote_and_commit(store, ms, bundle, bundle_sha, staging, steps) -> InstallResult:
    steps.start("promote", bundle.model)
    slot = f"{bundle.model}-r{bundle.release}-{bundle_sha[:8]}"
    with no_space_is_refusal("promoting the release"):
        store.promote(staging, slot)
    new = InstalledRelease(bundle.model, bundle.release, bundle.kind, slot, bundle_sha,
                           {n: {"sha256": f.sha256, "length": f.length} for n, f in sorted(bundle.files.items())},
                           utc_now())
    steps.done("promote")
    steps.start("commit", bundle.model)
    gone = ms.previous
    new_ms = ModelState(active=new, previous=ms.active, floor=bundle.release, rolled_back=ms.rolled_back)
    state = store.read().with_model(bundle.model, new_ms).with_event(
        action="install", model=bundle.model, release=bundle.release,
        from_release=ms.active.release if ms.active else 0)
    store.commit(state)  # the switch
    steps.done("commit")
    steps.start("cleanup", bundle.model)
    if gone is not None and gone.slot not in state.slots():
        store.remove_slot(gone.slot)
    steps.done("cleanup")
    return _result("installed", bundle.model, new_ms)


def _result(status: str, model: str, ms: ModelState) -> InstallResult:
    active = ms.active
    previous = None if active is None else (ms.previous.release if ms.previous else 0)
    return InstallResult(status, model, active.release if active else 0, previous, dict(active.files) if active else {})


def _record(store: StateDir, source: str, result: str) -> None:
    state = store.read()
    store.commit(replace(state, last_check={"utc": utc_now(), "source": str(source), "result": result}))


def _record_refusal(store: StateDir, source, refused: reasons.UpdateRefused) -> None:
    """Note the refusal in the state (best effort: a full disk may refuse this too)."""
    try:
        state = store.read()
        entry = {"utc": utc_now(), "source": str(source), "model": getattr(refused, "model", None),
                 **refused.as_dict()}
        check = {"utc": entry["utc"], "source": str(source), "result": f"refused: {refused.reason}"}
        store.commit(replace(state, last_refusal=entry, last_check=check))
    except (OSError, reasons.UpdateRefused):
        pass
