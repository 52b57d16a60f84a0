"""Publish a release: write the next signed state of a TUF repository folder that any static server can serve.

For each model released: copy the file under its canonical name (adapter.npz or model.onnx), compute the
reference outputs of the smoke test with the very code the device runs (bridge/updates/smoke.py), write the
bundle (release counter = one above anything published before, from the repository and from the keys folder),
then store every file content-addressed (`<sha256>.<name>`, TUF consistent snapshots) and sign, in this order:
targets, snapshot, timestamp. A device reading the repository while this runs sees the old state or the new
one: the only file rewritten in place is timestamp.json, atomically, last. Calling `publish` without releases
re-signs the current state (new expiry, new root after a key change).
"""
from __future__ import annotations

import io
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np
from tuf.api.metadata import Metadata, MetaFile, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_bytes, atomic_write_json, uninterrupted
from bridge.models.registry import ModelRegistry
from bridge.models.verify import sha256_file
from bridge.updates import bundle as bundles
from bridge.updates.bridge_inputs import check_on_bridge_inputs
from bridge.updates.contract import check_contract, check_tolerance, session_contract, shipped_contract
from bridge.updates.reasons import UpdateRefused
from bridge.updates.smoke import ReleaseSession, adapter_weights, open_release, read_npz, reference_inputs
from bridge.updates.store import utc_now
from fedagent.publisher.keys import KeyRing

log = logging.getLogger(__name__)


class PublishError(FaceBridgeError):
    """A release that cannot be published as asked."""


@dataclass(frozen=True)
class ReleaseSpec:
    """One model's release to publish."""

    model: str  # registry name ("lipsync", "face_landmark", ...)
    path: Path  # the adapter .npz or the model .onnx
    reference: Path | None = None  # reference inputs (.npz with input.<name>); None: seeded inputs
    hardware: tuple[str, ...] = ("any",)
    tensorrt_major: int | None = None
    notes: str = ""
    atol: float = 1e-3
    rtol: float = 1e-3
    extra: dict = field(default_factory=dict)  # fields merged into the bundle as written (tests of hostile bundles)

    @property
    def kind(self) -> str:
        suffix = Path(self.path).suffix
        if suffix not in (".npz", ".onnx"):
            raise PublishError(f"{self.path} is neither an adapter (.npz) nor a model (.onnx)",
                               "publish an adapter written by `fedagent export-adapter` or an ONNX file")
        return "adapter" if suffix == ".npz" else "model"


def publish_release(keys_dir, repo_dir, files, *, model: str = "lipsync", reference=None, hardware=("any",),
                    notes: str = "", expires: dict[str, timedelta] | None = None) -> int:
    """Publish `files` (one adapter .npz or one model .onnx) as the next release of `model`. -> its number."""
    files = [Path(f) for f in files]
    if len(files) != 1:
        raise PublishError(f"a release of {model} holds one adapter or model file, got {len(files)}",
                           "publish one file per model")
    spec = ReleaseSpec(model, files[0], Path(reference) if reference else None, tuple(hardware), notes=notes)
    return publish(keys_dir, repo_dir, [spec], expires=expires)[model]


def publish(keys_dir, repo_dir, specs: list[ReleaseSpec] = (), *,
            expires: dict[str, timedelta] | None = None) -> dict[str, int]:
    """Publish every release in `specs` in one new repository state. -> model -> release number."""
    ring = KeyRing(keys_dir)
    repo = Path(repo_dir)
    meta_dir, targets_dir = repo / "metadata", repo / "targets"
    meta_dir.mkdir(parents=True, exist_ok=True)
    targets_dir.mkdir(parents=True, exist_ok=True)
    _copy_roots(ring, meta_dir)
    record = _read_json(ring.dir / "publisher.json") or {"releases": {}, "versions": {}}
    current = _current_targets(meta_dir)
    targets = current.signed if current is not None else Targets(expires=ring.expires("targets"))
    released = {}
    for spec in specs:
        number = 1 + max(record["releases"].get(spec.model, 0), _listed_release(targets, spec.model))
        entries = _build_release(spec, number, targets_dir)
        prefix = f"models/{spec.model}/"
        targets.targets = {k: v for k, v in targets.targets.items() if not k.startswith(prefix)} | entries
        released[spec.model] = record["releases"][spec.model] = number
    log.debug("signing %s: targets, snapshot, timestamp", repo)
    with uninterrupted():  # Ctrl-C meanwhile: the new state is signed and recorded whole, then the command stops
        _sign_state(ring, meta_dir, targets, current, record, expires)
    return released


def _sign_state(ring: KeyRing, meta_dir: Path, targets: Targets, current, record: dict, expires) -> None:
    """Sign and write targets, snapshot and timestamp (timestamp.json last: the one file a device reads first),
    then the publisher's record of the versions."""
    versions = record["versions"]
    root = ring.root().signed
    version = 1 + max(versions.get("targets", 0), targets.version if current is not None else 0)
    targets.version, targets.expires = version, ring.expires("targets", expires)
    targets_md = _signed(Metadata(targets), ring.signers("targets", root))
    _write(meta_dir / f"{version}.targets.json", targets_md)
    snap_version = 1 + max(versions.get("snapshot", 0), _version(meta_dir, "snapshot", root))
    snapshot = Snapshot(version=snap_version, expires=ring.expires("snapshot", expires),
                        meta={"targets.json": MetaFile(version=version)})
    snap_md = _signed(Metadata(snapshot), ring.signers("snapshot", root))
    snap_bytes = _write(meta_dir / f"{snap_version}.snapshot.json", snap_md)
    ts_version = 1 + max(versions.get("timestamp", 0), _version(meta_dir, "timestamp", root))
    timestamp = Timestamp(version=ts_version, expires=ring.expires("timestamp", expires),
                          snapshot_meta=MetaFile.from_data(snap_version, snap_bytes, ["sha256"]))
    _write(meta_dir / "timestamp.json", _signed(Metadata(timestamp), ring.signers("timestamp", root)))
    record["versions"] = {"targets": version, "snapshot": snap_version, "timestamp": ts_version}
    atomic_write_json(ring.dir / "publisher.json", record)


def _signed(md: Metadata, signers) -> Metadata:
    md.signatures.clear()
    for signer in signers:
        md.sign(signer, append=True)
    return md


def _write(path: Path, md: Metadata) -> bytes:
    data = md.to_bytes(JSONSerializer(compact=False))
    atomic_write_bytes(path, data)
    return data


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _copy_roots(ring: KeyRing, meta_dir: Path) -> None:
    """Every root version of the keys folder into the repository (devices walk them one by one)."""
    for version in ring.root_versions():
        data = (ring.dir / "roots" / f"{version}.root.json").read_bytes()
        target = meta_dir / f"{version}.root.json"
        if target.exists() and target.read_bytes() != data:
            raise PublishError(f"{target} was signed by other keys than {ring.dir}",
                               "publish into an empty folder, or with the keys that created this repository")
        if not target.exists():
            atomic_write_bytes(target, data)
    atomic_write_bytes(meta_dir / "root.json", (ring.dir / "trust.json").read_bytes())


def _version(meta_dir: Path, role: str, root: Root) -> int:
    """The newest version of `role` in the repository that the current keys of `role` signed. Metadata signed by
    keys rotated out since (an attacker's inflated version, a fast-forward) does not count: after a rotation
    the publisher goes on from its own record, and devices reset that role's floor (TUF 5.3.11)."""
    if role == "timestamp":
        paths = [meta_dir / "timestamp.json"]
    else:
        found = [(int(p.name.split(".")[0]), p) for p in meta_dir.glob(f"*.{role}.json") if p.name[0].isdigit()]
        paths = [p for _, p in sorted(found, reverse=True)]
    for path in paths:
        try:
            md = Metadata.from_file(str(path))
            root.verify_delegate(role, md.signed_bytes, md.signatures)
        except Exception:  # missing, unreadable or signed by other keys: not ours
            continue
        return md.signed.version
    return 0


def _current_targets(meta_dir: Path) -> Metadata[Targets] | None:
    """The targets the repository's current timestamp -> snapshot point to (None in a new repository)."""
    if not (meta_dir / "timestamp.json").exists():
        return None
    timestamp = Metadata[Timestamp].from_file(str(meta_dir / "timestamp.json")).signed
    snapshot = Metadata[Snapshot].from_file(str(meta_dir / f"{timestamp.snapshot_meta.version}.snapshot.json")).signed
    version = snapshot.meta["targets.json"].version
    return Metadata[Targets].from_file(str(meta_dir / f"{version}.targets.json"))


def _listed_release(targets: Targets, model: str) -> int:
    entry = targets.targets.get(bundles.bundle_target(model))
    custom = entry.custom.get("facebridge", {}) if entry is not None else {}
    return int(custom.get("release", 0))


def _store(targets_dir: Path, target_path: str, data: bytes) -> TargetFile:
    """Write `data` content-addressed for `target_path` and return its TUF entry."""
    info = TargetFile.from_data(target_path, data, ["sha256"])
    folder, _, name = target_path.rpartition("/")
    destination = targets_dir / folder / f"{info.hashes['sha256']}.{name}"
    if not destination.exists():
        atomic_write_bytes(destination, data)
    return info


def _build_release(spec: ReleaseSpec, release: int, targets_dir: Path) -> dict[str, TargetFile]:
    """The files, reference and bundle of one release, stored; -> their TUF entries by target path."""
    registry = ModelRegistry()
    shipped = registry.shipped(spec.model)
    kind = spec.kind
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp)
        shutil.copyfile(spec.path, staged / bundles.KIND_FILES[kind])
        base = registry.shipped_path(spec.model) if kind == "adapter" else None
        shapes = {k: tuple(v) for k, v in shipped.entry.get("adapter_initializers", {}).items()}
        if kind == "adapter" and not shapes:
            raise PublishError(f"{spec.model} has no adapter", "publish a whole model (.onnx) for it instead")
        session = _checked_session(spec, kind, staged, base, shapes, shipped)
        (staged / bundles.REFERENCE_FILE).write_bytes(_reference(session, spec.reference))
        files = {name: bundles.FileEntry(sha256_file(staged / name), (staged / name).stat().st_size)
                 for name in sorted(p.name for p in staged.iterdir())}
        bundle = bundles.Bundle(model=spec.model, kind=kind, release=release, contract=shipped.contract,
                                base_sha256=shipped.sha256 if kind == "adapter" else None,
                                hardware=tuple(spec.hardware), tensorrt_major=spec.tensorrt_major, files=files,
                                atol=spec.atol, rtol=spec.rtol, published_utc=utc_now(), notes=spec.notes)
        doc = bundle.to_dict() | spec.extra
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        entries = {bundle.target_path(n): _store(targets_dir, bundle.target_path(n), (staged / n).read_bytes())
                   for n in files}
    info = _store(targets_dir, bundles.bundle_target(spec.model), data)
    info.unrecognized_fields["custom"] = {"facebridge": {"model": spec.model, "release": release}}
    entries[bundles.bundle_target(spec.model)] = info
    return entries


def _checked_session(spec: ReleaseSpec, kind: str, staged: Path, base, shapes: dict, shipped) -> ReleaseSession:
    """The release's session, refusing to publish what every device would refuse: adapter tensors of the wrong
    shape, a model whose inputs, outputs, types or free dimensions differ from the bridge's, a loose tolerance."""
    try:
        check_tolerance(shipped, spec.atol, spec.rtol)
        if kind == "adapter":
            adapter_weights(staged / "adapter.npz", shapes)
        session = open_release(kind, staged, base, shapes)
        if kind == "model":
            check_contract(spec.model, session_contract(session.session), shipped_contract(shipped))
        check_on_bridge_inputs(spec.model, session)
        return session
    except UpdateRefused as e:
        raise PublishError(f"{spec.path} cannot be published as {spec.model}: {e.problem}", e.fix) from None


def _reference(session: ReleaseSession, inputs_path: Path | None) -> bytes:
    """reference.npz: the inputs (given or seeded) and the outputs this release computes on them."""
    if inputs_path is not None:
        try:
            arrays = read_npz(inputs_path, str(inputs_path))
        except UpdateRefused as e:  # the device's reader, with the publisher's fix
            raise PublishError(f"--reference {e.problem}", "pass an .npz of input.<name> arrays (the model's "
                               "inputs), or leave --reference out (seeded inputs)") from None
        inputs = {k[len("input."):]: v for k, v in arrays.items() if k.startswith("input.")}
        wanted = sorted(i.name for i in session.session.get_inputs())
        if sorted(inputs) != wanted:
            raise PublishError(f"--reference {inputs_path} holds inputs {sorted(inputs)}, the model takes {wanted}",
                               f"name its arrays {', '.join('input.' + n for n in wanted)}")
    else:
        inputs = reference_inputs(session)
    try:
        outputs = session.run(inputs)
    except Exception as e:  # shapes or types the model does not take (ONNX Runtime's own words)
        if inputs_path is None:
            raise
        raise PublishError(f"--reference {inputs_path} does not run through the model ({str(e)[:160]})",
                           "give each input the model's shape and float32 type") from None
    arrays = {f"input.{k}": v for k, v in inputs.items()} | {f"output.{k}": v for k, v in outputs.items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()
