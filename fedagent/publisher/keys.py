"""The publisher's keys: Ed25519 keys for the four TUF roles with thresholds, and every root version they signed.

Layout of a keys folder (private keys 0600 in a 0700 folder; everything else is public):
  keys.json        which key belongs to which role and whether it is active, retired (rotated out) or revoked
  private/ID.pem   one Ed25519 private key per file (PKCS#8); a holder of only some keys can still sign with them
  roots/N.root.json  every root version, each signed by a threshold of the previous root's keys and its own
  trust.json       the newest root: what a device is bootstrapped with (`fedagent update install --trust`)
  publisher.json   the release counter per model and the metadata versions, so they never go back

A root change (rotate, revoke, add) writes root version N+1 here; the next `fedagent publish` copies it into the
repository, where devices walk the chain 1 -> 2 -> ... N+1 one signed step at a time.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import Metadata, Root
from tuf.api.serialization.json import JSONSerializer

from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_bytes, atomic_write_json, uninterrupted
from bridge.updates import signing

log = logging.getLogger(__name__)

ROLES = ("root", "targets", "snapshot", "timestamp")
DEFAULT_EXPIRES_DAYS = {"root": 365, "targets": 90, "snapshot": 30, "timestamp": 7}


class KeysError(FaceBridgeError):
    """A keys folder that cannot do what was asked."""


def _utc_in(days: float) -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=days)


def _whole(change):
    """A root change writes new keys, keys.json, the new root and trust.json: all of them, even when Ctrl-C
    comes meanwhile (it takes effect once they are written)."""
    @functools.wraps(change)
    def whole(self, *args, **kwargs):
        with uninterrupted():
            return change(self, *args, **kwargs)
    return whole


class KeyRing:
    """One keys folder. Every method that changes the root writes a new root version and trust.json."""

    def __init__(self, folder: str | Path):
        self.dir = Path(folder)
        try:
            self.config = json.loads((self.dir / "keys.json").read_text())
        except FileNotFoundError:
            raise KeysError(f"{self.dir} holds no publisher keys (no keys.json)",
                            f"create them with `fedagent keys init --dir {self.dir}`") from None

    # -- creation ----------------------------------------------------------------------------------------------
    @classmethod
    def init(cls, folder: str | Path, thresholds: dict[str, tuple[int, int]] | None = None,
             expires_days: dict[str, float] | None = None) -> KeyRing:
        """New keys: `thresholds` role -> (m, n) = m of n keys must sign (default 1 of 1 for every role)."""
        folder = Path(folder)
        if (folder / "keys.json").exists():
            raise KeysError(f"{folder} already holds publisher keys", "use another --dir, or rotate keys there")
        wanted = {role: (1, 1) for role in ROLES} | dict(thresholds or {})
        for role, (m, n) in wanted.items():
            if role not in ROLES or not 1 <= m <= n <= 16:
                raise KeysError(f"threshold {role}={m}/{n} is not valid", "use ROLE=M/N with 1 <= M <= N <= 16 "
                                "for root, targets, snapshot or timestamp")
        log.debug("writing new keys and root version 1 to %s", folder)
        with uninterrupted():  # Ctrl-C leaves no keys folder that holds keys.json but no root
            (folder / "private").mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(folder / "private", 0o700)
            config = {"schema": 1, "expires_days": DEFAULT_EXPIRES_DAYS | dict(expires_days or {}), "keys": {}}
            atomic_write_json(folder / "keys.json", config)
            ring = cls(folder)
            root = Root(version=1, expires=_utc_in(ring.expires_days("root")), consistent_snapshot=True)
            for role, (m, n) in wanted.items():
                for _ in range(n):
                    root.add_key(ring._new_key(role).public_key, role)
                root.roles[role].threshold = m
            ring._write_root(Metadata(root), previous=None)
        return ring

    def _new_key(self, role: str) -> CryptoSigner:
        signer = signing.generate()
        keyid = signer.public_key.keyid
        atomic_write_bytes(self.dir / "private" / f"{keyid}.pem", signing.private_pem(signer), mode=0o600)
        self.config["keys"][keyid] = {"role": role, "status": "active", "file": f"private/{keyid}.pem",
                                      "created_utc": _utc_in(0).strftime("%Y-%m-%dT%H:%M:%SZ")}
        return signer  # keys.json is saved by _write_root, once per change

    # -- reading -----------------------------------------------------------------------------------------------
    def expires_days(self, role: str) -> float:
        return float(self.config["expires_days"][role])

    def expires(self, role: str, override: dict[str, timedelta] | None = None) -> datetime:
        if override and role in override:
            return datetime.now(timezone.utc).replace(microsecond=0) + override[role]
        return _utc_in(self.expires_days(role))

    def root_versions(self) -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in (self.dir / "roots").glob("*.root.json"))

    def root(self, version: int | None = None) -> Metadata[Root]:
        version = version or self.root_versions()[-1]
        return Metadata[Root].from_file(str(self.dir / "roots" / f"{version}.root.json"))

    def signer(self, keyid: str) -> CryptoSigner | None:
        """The private key `keyid` if this folder holds it (and it is not revoked)."""
        entry = self.config["keys"].get(keyid)
        path = self.dir / "private" / f"{keyid}.pem"
        if entry is None or entry["status"] == "revoked" or not path.exists():
            return None
        return signing.load_signer(path.read_bytes())

    def signers(self, role: str, root: Root | None = None) -> list[CryptoSigner]:
        """The private keys held here for `role` as `root` (default: the newest) lists it; refuses when fewer
        than its threshold are held."""
        root = root or self.root().signed
        found = [s for s in (self.signer(k) for k in root.roles[role].keyids) if s is not None]
        if len(found) < root.roles[role].threshold:
            raise KeysError(f"this keys folder holds {len(found)} of the {root.roles[role].threshold} {role} keys "
                            "needed to sign", "sign where the other key holders' keys are, or lower the threshold "
                            "with a root change signed by the current root keys")
        return found

    # -- root changes ------------------------------------------------------------------------------------------
    def _write_root(self, md: Metadata[Root], previous: Root | None, exclude: frozenset = frozenset()) -> int:
        """Sign root version N+1 with the old root's keys (a threshold of them) and its own, and save it
        (keys in `exclude` do not sign)."""
        keyids = set(md.signed.roles["root"].keyids) | (set(previous.roles["root"].keyids) if previous else set())
        keyids -= set(exclude)
        signers = [s for s in (self.signer(k) for k in sorted(keyids)) if s is not None]
        signing.sign(md, signers)
        for who in filter(None, (previous, md.signed)):
            if not who.get_verification_result("root", md.signed_bytes, md.signatures).verified:
                raise KeysError(f"root version {md.signed.version} cannot be signed by enough root keys held here",
                                "bring the other root key holders' keys, then retry")
        data = md.to_bytes(JSONSerializer(compact=False))
        atomic_write_json(self.dir / "keys.json", self.config)
        atomic_write_bytes(self.dir / "roots" / f"{md.signed.version}.root.json", data)
        atomic_write_bytes(self.dir / "trust.json", data)
        return md.signed.version

    def _next_root(self) -> tuple[Metadata[Root], Root]:
        current = self.root()
        md = Metadata[Root].from_bytes(current.to_bytes())
        md.signed.version += 1
        md.signed.expires = _utc_in(self.expires_days("root"))
        return md, current.signed

    def _set_status(self, keyid: str, status: str) -> None:
        self.config["keys"][keyid]["status"] = status
        atomic_write_json(self.dir / "keys.json", self.config)
        if status == "revoked":
            (self.dir / "private" / f"{keyid}.pem").unlink(missing_ok=True)

    @_whole
    def rotate(self, role: str) -> int:
        """Replace every key of `role` with a new one (same threshold); old keys are retired. -> root version."""
        md, previous = self._next_root()
        old = list(md.signed.roles[role].keyids)
        for keyid in old:
            md.signed.revoke_key(keyid, role)
        for _ in old:
            md.signed.add_key(self._new_key(role).public_key, role)
        version = self._write_root(md, previous)
        for keyid in old:
            self._set_status(keyid, "retired")
        return version

    @_whole
    def revoke(self, keyid: str) -> int:
        """Remove `keyid` from its role (a lost or compromised key); a new key takes its place when the role
        would fall below its threshold. The revoked key signs nothing, not even this root. -> root version."""
        entry = self.config["keys"].get(keyid) or next(
            (v for k, v in self.config["keys"].items() if k.startswith(keyid) and len(keyid) >= 8), None)
        if entry is None:
            raise KeysError(f"no key {keyid} in {self.dir}", "see keys.json for the key ids")
        keyid = next(k for k, v in self.config["keys"].items() if v is entry)
        role = entry["role"]
        md, previous = self._next_root()
        if keyid not in md.signed.roles[role].keyids:
            raise KeysError(f"key {keyid[:12]} is no longer part of the {role} role", "nothing to revoke")
        if role == "root" and len(set(previous.roles["root"].keyids) - {keyid}) < previous.roles["root"].threshold:
            raise KeysError(f"revoking root key {keyid[:12]} leaves fewer root keys than the threshold of "
                            f"{previous.roles['root'].threshold} that must sign the next root",
                            "rotate the root key instead (`fedagent keys rotate --role root`), or keep 2/3 root keys")
        md.signed.revoke_key(keyid, role)
        while len(md.signed.roles[role].keyids) < md.signed.roles[role].threshold:
            md.signed.add_key(self._new_key(role).public_key, role)
        version = self._write_root(md, previous, exclude=frozenset({keyid}))  # the revoked key signs nothing
        self._set_status(keyid, "revoked")
        return version

    @_whole
    def add(self, role: str, threshold: int | None = None) -> int:
        """Add one key to `role`, optionally setting a new threshold (e.g. targets 2 of 2). -> root version."""
        md, previous = self._next_root()
        md.signed.add_key(self._new_key(role).public_key, role)
        if threshold is not None:
            if not 1 <= threshold <= len(md.signed.roles[role].keyids):
                raise KeysError(f"threshold {threshold} is not possible with {len(md.signed.roles[role].keyids)} keys",
                                "choose a threshold between 1 and the number of keys")
            md.signed.roles[role].threshold = threshold
        return self._write_root(md, previous)

    def describe(self) -> dict:
        root = self.root().signed
        return {"dir": str(self.dir), "root_version": root.version, "trust": str(self.dir / "trust.json"),
                "roles": {role: {"threshold": root.roles[role].threshold,
                                 "keys": [{"keyid": k, "held_here": self.signer(k) is not None}
                                          for k in root.roles[role].keyids]} for role in ROLES},
                "retired_or_revoked": {k: v["status"] for k, v in self.config["keys"].items()
                                       if v["status"] != "active"}}
