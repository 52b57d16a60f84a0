"""The updates tests' toolkit: a real publisher (keys + repository folder), a device (state folder), a loopback
HTTP server that can also misbehave on chosen paths, and an attacker's forge that writes signed metadata with
whatever keys it is given, and whole-model releases of a deliberately different emotion model (`emotion_model`).
Nothing here stands in for python-tuf, the repository or the installer."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from tuf.api.metadata import Metadata, MetaFile, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

from bridge.frame import EMOTION_NAMES
from bridge.models.registry import ModelRegistry, default_registry
from bridge.updates import install as installer
from bridge.updates.reasons import UpdateRefused
from bridge.updates.store import StateDir
from fedagent.publisher.keys import KeyRing
from fedagent.publisher.publish import ReleaseSpec, _store, publish
from fedagent.publisher.repo_server import RepoHandler, RepoServer
from tests.helpers import ROOT

DEFAULT_ADAPTER = Path(__file__).resolve().parents[2] / "bridge" / "audio" / "lipsync_adapter_default.npz"
SURPRISE = EMOTION_NAMES.index("surprise")


def adapter_bytes(seed: int = 0, scale: float = 0.01, **replace) -> bytes:
    """The shipped adapter nudged by seeded noise (seed 0: unchanged), as .npz bytes."""
    with np.load(DEFAULT_ADAPTER) as z:
        arrays = {k: z[k].astype(np.float32) for k in z.files}
    rng = np.random.default_rng(seed)
    if seed:
        arrays = {k: (v + scale * rng.standard_normal(v.shape)).astype(np.float32) for k, v in arrays.items()}
    arrays.update(replace)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def emotion_model(path, fixed_batch: bool = False):
    """The shipped emotion model with its surprise logit raised: a model that reads every face as surprised; with
    `fixed_batch`, its batch dimension is fixed at one item."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(default_registry().shipped_path("emotion")))
    for init in model.graph.initializer:
        if init.name == "conv2d_7/bias":
            bias = numpy_helper.to_array(init).copy()
            bias[SURPRISE] += 8.0
            init.CopyFrom(numpy_helper.from_array(bias, init.name))
    if fixed_batch:
        for value in (*model.graph.input, *model.graph.output):
            value.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(model, str(path))
    return path


class HostileServer(RepoServer):
    """The repository over loopback HTTP; `rules[path]` = callable(handler) replaces the normal answer."""

    def __init__(self, folder: Path):
        rules, requests = {}, []

        class Handler(RepoHandler):
            def do_GET(self):
                path = self.path.split("?", 1)[0]
                requests.append(path)
                rule = rules.get(path)
                if rule is None:
                    return super().do_GET()
                return rule(self)

        super().__init__(folder, 0, Handler)
        self.rules, self.requests = rules, requests

    def serve(self, path: str, data: bytes) -> None:
        def answer(handler):
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        self.rules[path] = answer

    def serve_endless(self, path: str, limit: int = 64 << 20) -> None:
        """Bytes without end (bounded at `limit` so the server stops by itself)."""
        def answer(handler):
            handler.send_response(200)
            handler.end_headers()
            sent = 0
            try:
                while sent < limit:
                    handler.wfile.write(b"\0" * 65536)
                    sent += 65536
            except OSError:
                pass
        self.rules[path] = answer

    def serve_drip(self, path: str, data: bytes, every_s: float = 0.1) -> None:
        """The right bytes, one at a time, slowly (a slow-retrieval attack; stops after 20 s)."""
        def answer(handler):
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            end = time.monotonic() + 20
            try:
                for i in range(len(data)):
                    if time.monotonic() > end:
                        break
                    handler.wfile.write(data[i:i + 1])
                    handler.wfile.flush()
                    time.sleep(every_s)
            except OSError:
                pass
        self.rules[path] = answer


@dataclass
class Publisher:
    """A keys folder and a repository folder, published into with the real `fedagent.publisher.publish`."""

    root: Path
    thresholds: dict = field(default_factory=dict)
    expires_days: dict = field(default_factory=dict)

    def __post_init__(self):
        self.keys = self.root / "keys"
        self.repo = self.root / "repo"
        self.ring = KeyRing.init(self.keys, self.thresholds, self.expires_days)
        self._n = 0

    @property
    def trust(self) -> bytes:
        return (self.keys / "trust.json").read_bytes()

    def adapter(self, seed: int | None = None, **replace) -> Path:
        self._n += 1
        path = self.root / f"adapter-{self._n}.npz"
        path.write_bytes(adapter_bytes(self._n if seed is None else seed, **replace))
        return path

    def publish(self, path: Path | None = None, model: str = "lipsync", expires=None, **spec) -> int:
        path = path or self.adapter()
        return publish(self.keys, self.repo, [ReleaseSpec(model, path, **spec)], expires=expires)[model]

    # -- reading and forging metadata ----------------------------------------------------------------------------
    def md(self, role: str) -> Metadata:
        meta = self.repo / "metadata"
        if role == "timestamp":
            return Metadata.from_file(str(meta / "timestamp.json"))
        versions = sorted(int(p.name.split(".")[0]) for p in meta.glob(f"*.{role}.json"))
        return Metadata.from_file(str(meta / f"{versions[-1]}.{role}.json"))

    def signers(self, role: str):
        return self.ring.signers(role)

    def forge(self, mutate=None, *, targets_signers=None, snapshot_signers=None, timestamp_signers=None,
              targets_bytes=None, expires=None, snapshot_version=None, to: HostileServer | None = None) -> dict:
        """Write a new repository state (targets, snapshot, timestamp) from the current one: `mutate(targets)`
        edits the targets before signing, each role is signed by the given signers (default: the publisher's),
        `targets_bytes(bytes) -> bytes` edits the signed targets file after signing; with `to`, the files are
        served by that server instead of written into the repository. -> {role: bytes} written."""
        meta = self.repo / "metadata"

        def put(name: str, data: bytes) -> None:
            if to is not None:
                to.serve(f"/metadata/{name}", data)
            else:
                (meta / name).write_bytes(data)
        targets = self.md("targets")
        if mutate:
            mutate(targets.signed)
        targets.signed.version += 1
        if expires:
            targets.signed.expires = expires.get("targets", targets.signed.expires)
        _sign(targets, targets_signers if targets_signers is not None else self.signers("targets"))
        t_bytes = targets.to_bytes(JSONSerializer(compact=False))
        if targets_bytes:
            t_bytes = targets_bytes(t_bytes)
        put(f"{targets.signed.version}.targets.json", t_bytes)
        old_snap = self.md("snapshot").signed  # the repository's own (a served forgery is not read back)
        snap = Metadata(Snapshot(version=old_snap.version + 1, expires=old_snap.expires,
                                 meta={"targets.json": MetaFile(version=snapshot_version or targets.signed.version)}))
        _sign(snap, snapshot_signers if snapshot_signers is not None else self.signers("snapshot"))
        s_bytes = snap.to_bytes(JSONSerializer(compact=False))
        put(f"{snap.signed.version}.snapshot.json", s_bytes)
        old_ts = self.md("timestamp").signed
        ts = Metadata(Timestamp(version=old_ts.version + 1,
                                expires=(expires or {}).get("timestamp", old_ts.expires),
                                snapshot_meta=MetaFile.from_data(snap.signed.version, s_bytes, ["sha256"])))
        _sign(ts, timestamp_signers if timestamp_signers is not None else self.signers("timestamp"))
        ts_bytes = ts.to_bytes(JSONSerializer(compact=False))
        put("timestamp.json", ts_bytes)
        _bump_record(self.keys, targets.signed.version, snap.signed.version, ts.signed.version)
        return {"targets": t_bytes, "snapshot": s_bytes, "timestamp": ts_bytes}

    def forge_release(self, files: dict[str, bytes], bundle: dict | bytes, listed: dict[str, bytes] | None = None,
                      release: int = 2, model: str = "lipsync", **forge) -> dict:
        """A release signed with the publisher's keys but built by hand: `files` (or `listed`) are stored as
        signed targets of `model`'s release bundle['release'] (or `release` when the bundle is raw bytes), and the
        bundle is written as given (json.dumps of a dict, bytes as they are)."""
        if isinstance(bundle, bytes):
            data = bundle
        else:
            release = bundle.get("release", release)
            data = (json.dumps(bundle, indent=1) + "\n").encode()
        targets_dir = self.repo / "targets"
        entries = {f"models/{model}/r{release}/{n}": _store(targets_dir, f"models/{model}/r{release}/{n}", b)
                   for n, b in (listed if listed is not None else files).items()}
        info = _store(targets_dir, f"models/{model}/bundle.json", data)
        info.unrecognized_fields["custom"] = {"facebridge": {"model": model, "release": release}}

        def mutate(targets: Targets):
            targets.targets = {k: v for k, v in targets.targets.items() if not k.startswith(f"models/{model}/")}
            targets.targets.update(entries)
            targets.targets[f"models/{model}/bundle.json"] = info
        return self.forge(mutate, **forge)

    def release_files(self, model: str = "lipsync") -> tuple[dict, dict[str, bytes]]:
        """(bundle dict, {name: bytes}) of the current release, read back from the repository."""
        targets = self.md("targets").signed
        info = targets.targets[f"models/{model}/bundle.json"]
        bundle = json.loads(self.target_bytes(info))
        files = {n: self.target_bytes(targets.targets[f"models/{model}/r{bundle['release']}/{n}"])
                 for n in bundle["files"]}
        return bundle, files

    def target_path(self, info: TargetFile) -> Path:
        folder, _, name = info.path.rpartition("/")
        return self.repo / "targets" / folder / f"{info.hashes['sha256']}.{name}"

    def target_bytes(self, info: TargetFile) -> bytes:
        return self.target_path(info).read_bytes()

    def url_of(self, model: str = "lipsync", name: str = "adapter.npz") -> str:
        """The URL path a device fetches for one file of the current release."""
        targets = self.md("targets").signed
        bundle = json.loads(self.target_bytes(targets.targets[f"models/{model}/bundle.json"]))
        info = targets.targets[f"models/{model}/r{bundle['release']}/{name}"]
        return "/" + str(self.target_path(info).relative_to(self.repo))


def _sign(md: Metadata, signers) -> None:
    md.signatures.clear()
    for signer in signers:
        md.sign(signer, append=True)


def _bump_record(keys: Path, targets: int, snapshot: int, timestamp: int) -> None:
    """Keep the real publisher's version record above what the forge wrote (so it publishes on top)."""
    path = keys / "publisher.json"
    record = json.loads(path.read_text()) if path.exists() else {"releases": {}, "versions": {}}
    for role, v in (("targets", targets), ("snapshot", snapshot), ("timestamp", timestamp)):
        record["versions"][role] = max(record["versions"].get(role, 0), v)
    path.write_text(json.dumps(record))


@dataclass
class Device:
    """A device's update state folder, installing with the real installer."""

    state: Path
    trust: bytes

    def install(self, source, **kw) -> list:
        return installer.install(str(source), self.state, trust=self.trust, models=["lipsync"], **kw)

    def refused(self, source, reason: str, **kw) -> UpdateRefused:
        """Install must be refused with `reason`; the refusal is recorded in the state."""
        with pytest.raises(UpdateRefused) as info:
            self.install(source, **kw)
        assert info.value.reason == reason, f"expected {reason}, got {info.value.reason}: {info.value}"
        assert "\n" not in str(info.value)
        if reason != "busy":
            assert StateDir(self.state).read().last_refusal["reason"] == reason
        return info.value

    @property
    def release(self) -> int:
        return ModelRegistry(self.state).active("lipsync").release  # verifies every file

    def assert_intact(self, release: int) -> None:
        """`release` serves, its files verify, and nothing half-installed is left behind."""
        store = StateDir(self.state)
        assert self.release == release
        assert list(store.staging_dir.iterdir()) == [] and list(store.tmp_dir.iterdir()) == []
        assert {p.name for p in store.slots_dir.iterdir()} == store.read().slots()
        leftovers = [p.name for p in store.root.iterdir() if p.name.startswith(".")]
        assert leftovers == []


def clear_tuf_cache(state: Path, how: str) -> None:
    """Lose ('delete') or damage ('truncate') the device's python-tuf metadata cache."""
    tuf_dir = Path(state) / "tuf"
    if how == "delete-all":
        for p in sorted(tuf_dir.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
        return
    for role in ("timestamp", "snapshot", "targets"):
        path = tuf_dir / f"{role}.json"
        if how == "delete":
            path.unlink(missing_ok=True)
        else:
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 3])


def env_for(home: Path) -> dict:
    env = dict(os.environ)
    env["FACEBRIDGE_HOME"] = str(home)
    return env


def fedagent(*args, home: Path, timeout: float = 120, python_prefix: str | None = None) -> subprocess.CompletedProcess:
    """Run the real `fedagent` CLI of this tree in a subprocess (with `python_prefix`: Python code run first in
    that process, e.g. to set its clock, then the CLI)."""
    env = env_for(home)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    code = (python_prefix or "") + "\nimport sys\nfrom fedagent.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def cli_install(source, state: Path, home: Path, *extra, trust: Path | None = None, **kw) -> tuple[int, dict]:
    """`fedagent update install --json` in a subprocess -> (exit code, its JSON)."""
    args = ["update", "install", "--from", source, "--state", state, "--json", *extra]
    if trust is not None:
        args += ["--trust", trust]
    proc = fedagent(*args, home=home, **kw)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no JSON from fedagent (exit {proc.returncode}): {proc.stderr[-2000:]}"
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    return proc.returncode, doc
