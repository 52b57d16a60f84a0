"""The update state directory: one committed state file is the only truth; slots are never changed in place.

Layout (all on one filesystem, created 0700):
  state.json      committed state: active and previous release per model, release floors, TUF version
                  floors, last check, last refusal, history. Written atomically (temp, fsync, rename, fsync dir):
                  switching the active release and raising the floor is that one rename.
  trust/root.json the newest TUF root this device verified (the bootstrap for the next check)
  tuf/            python-tuf's metadata cache (may be lost or truncated: the floors above do not depend on it)
  slots/NAME/     one installed release's files, immutable once promoted
  staging/        releases being downloaded and smoke-tested; wiped by recover()
  tmp/            download buffers (so a full disk is seen where the state lives)
  lock            flock: one installer at a time (others get `busy`)

Before anything in it is read, followed or removed, `check_safe` refuses a folder that is not the installing
user's alone (another user's, writable by group or others, or a link anywhere inside: recovery would empty
what a link points at). After a crash at any instant, `recover()` removes staging, buffers and every slot the
committed state does not name, so exactly one consistent active release remains. Readers (the running bridge)
only read state.json and the slots it names; they never need the lock.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from bridge.fsutil import atomic_write_bytes, atomic_write_json
from bridge.paths import user_dir
from bridge.updates import reasons

HISTORY_KEPT = 50
STATE_SCHEMA = 1


def default_state_dir() -> Path:
    """$FACEBRIDGE_HOME/updates if set, else $XDG_DATA_HOME/facebridge/updates (~/.local/share/...)."""
    return user_dir("updates")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class InstalledRelease:
    """One release in a slot. `files` maps name -> {"sha256", "length"} as the signed bundle declared them."""

    model: str
    release: int
    kind: str  # "adapter" | "model" (see bundle.py)
    slot: str  # directory name under slots/
    bundle_sha256: str  # sha256 of the signed bundle.json: same release + other bundle = equivocation
    files: dict = field(default_factory=dict)
    installed_utc: str = ""

    def to_dict(self) -> dict:
        return {"model": self.model, "release": self.release, "kind": self.kind, "slot": self.slot,
                "bundle_sha256": self.bundle_sha256, "files": self.files, "installed_utc": self.installed_utc}

    @classmethod
    def from_dict(cls, d: dict | None) -> InstalledRelease | None:
        return None if d is None else cls(**d)


@dataclass(frozen=True)
class ModelState:
    active: InstalledRelease | None = None  # None: the shipped model (release 0) serves
    previous: InstalledRelease | None = None  # what rollback returns to (None: the shipped model)
    floor: int = 0  # highest release ever committed here; only a higher one installs
    rolled_back: tuple[int, ...] = ()  # releases that were rolled back (never installed again)

    def to_dict(self) -> dict:
        return {"active": self.active and self.active.to_dict(), "previous": self.previous and self.previous.to_dict(),
                "floor": self.floor, "rolled_back": list(self.rolled_back)}

    @classmethod
    def from_dict(cls, d: dict) -> ModelState:
        return cls(InstalledRelease.from_dict(d.get("active")), InstalledRelease.from_dict(d.get("previous")),
                   int(d.get("floor", 0)), tuple(d.get("rolled_back", ())))


@dataclass(frozen=True)
class UpdateState:
    models: dict[str, ModelState] = field(default_factory=dict)
    tuf_floors: dict[str, int] = field(default_factory=dict)  # role -> highest verified metadata version
    tuf_keys: dict[str, list] = field(default_factory=dict)  # role -> its keyids when its floor was last raised
    checked_utc: str | None = None  # the latest successful check (the device clock never goes back before it)
    last_check: dict | None = None  # {"utc", "source", "result"}
    last_refusal: dict | None = None  # {"utc", "source", "reason", "exit_code", "message", "model"}
    history: tuple[dict, ...] = ()  # newest last: {"utc", "action", "model", "release", "from_release"}

    def model(self, name: str) -> ModelState:
        return self.models.get(name, ModelState())

    def with_model(self, name: str, state: ModelState) -> UpdateState:
        return replace(self, models={**self.models, name: state})

    def with_event(self, **event) -> UpdateState:
        return replace(self, history=(*self.history, {"utc": utc_now(), **event})[-HISTORY_KEPT:])

    def slots(self) -> set[str]:
        """Slot names the committed state refers to (everything else under slots/ is an orphan)."""
        return {r.slot for m in self.models.values() for r in (m.active, m.previous) if r is not None}

    def to_dict(self) -> dict:
        return {"schema": STATE_SCHEMA, "models": {k: v.to_dict() for k, v in sorted(self.models.items())},
                "tuf_floors": self.tuf_floors, "tuf_keys": self.tuf_keys, "checked_utc": self.checked_utc,
                "last_check": self.last_check, "last_refusal": self.last_refusal,
                "history": list(self.history)}

    @classmethod
    def from_dict(cls, d: dict) -> UpdateState:
        return cls({k: ModelState.from_dict(v) for k, v in d.get("models", {}).items()},
                   {k: int(v) for k, v in d.get("tuf_floors", {}).items()},
                   {k: list(v) for k, v in d.get("tuf_keys", {}).items()}, d.get("checked_utc"), d.get("last_check"),
                   d.get("last_refusal"), tuple(d.get("history", ())))


def read_state(root: Path) -> UpdateState:
    """The committed state under `root` (empty when nothing was ever installed); StateCorrupt if unreadable."""
    path = Path(root) / "state.json"
    try:
        doc = json.loads(path.read_bytes())
        if not isinstance(doc, dict) or doc.get("schema") != STATE_SCHEMA:
            raise ValueError(f"schema {doc.get('schema') if isinstance(doc, dict) else None!r}")
        return UpdateState.from_dict(doc)
    except FileNotFoundError:
        return UpdateState()
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise reasons.StateCorrupt(f"update state {path} is unreadable ({str(e)[:80]})") from None


class StateDir:
    """The on-disk store. Methods that change anything must run inside `lock()`."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_state_dir()
        self.state_file = self.root / "state.json"
        self.trust_file = self.root / "trust" / "root.json"
        self.tuf_dir = self.root / "tuf"
        self.slots_dir = self.root / "slots"
        self.staging_dir = self.root / "staging"
        self.tmp_dir = self.root / "tmp"

    def check(self, must_exist: bool = False) -> bool:
        """The one check of the state folder's path, made before anything in it is read or created (by install,
        rollback, status, the model registry and `facebridge run --updates`), causes first: a file where the
        folder belongs, a path through a file, a folder this user may not read (`state-folder`). Returns whether
        it exists; a missing one is refused only with `must_exist` (a folder named by --state: a typo must not
        read as "nothing installed"). Writers then run `check_safe` (`ensure`); readers verify each file."""
        root = self.root
        try:
            info = os.stat(root)
        except FileNotFoundError:
            info = None
        except NotADirectoryError:
            raise reasons.StateFolder(f"update state folder {root}: part of this path is a file, where a folder is "
                                      "expected") from None
        except PermissionError:
            raise reasons.StateFolder(f"update state folder {root} cannot be reached (permission denied on a folder "
                                      "above it)", "give this user access (`ls -ld` each folder above it), or pass "
                                      "--state a folder of your own") from None
        if info is None:
            if must_exist:
                raise reasons.StateFolder(f"update state folder {root} does not exist",
                                          f"check the path; `fedagent update install --state {root}` creates it")
            return False
        if not stat.S_ISDIR(info.st_mode):
            raise reasons.StateFolder(f"update state {root} is a file, where a folder is expected",
                                      "pass --state a folder (the first `fedagent update install --state DIR` "
                                      "creates it), or move the file away")
        try:
            os.listdir(root)
            os.stat(self.state_file)
        except PermissionError:
            raise reasons.StateFolder(f"update state folder {root} cannot be read (permission denied)",
                                      f"give this user access to it (`ls -ld {root}` shows owner and mode), or "
                                      "pass --state a folder of your own") from None
        except FileNotFoundError:
            pass
        return True

    def ensure(self) -> StateDir:
        """Check the folder, create what is missing (0700), then refuse a folder this user does not solely own
        (`check_safe`)."""
        if not self.check() and not os.path.lexists(self.root):  # a link to nowhere: check_safe names it
            self.root.mkdir(parents=True, mode=0o700)
        check_safe(self.root)  # before anything inside is created, followed or removed
        for d in (self.trust_file.parent, self.tuf_dir, self.slots_dir, self.staging_dir, self.tmp_dir):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, 0o700)
        check_safe(self.root)
        return self

    @contextlib.contextmanager
    def lock(self):
        """Hold the installer lock for the block; Busy at once if another process holds it."""
        self.ensure()
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise reasons.Busy(f"another installer holds {self.root / 'lock'}") from None
            yield self
        finally:
            os.close(fd)  # closing releases the flock, also when the process dies

    # -- committed state -------------------------------------------------------------------------------------
    def read(self) -> UpdateState:
        return read_state(self.root)

    def commit(self, state: UpdateState) -> None:
        """Make `state` the committed state (one atomic rename)."""
        with no_space_is_refusal("committing the update state"):
            atomic_write_json(self.state_file, state.to_dict())

    def trusted_root(self) -> bytes | None:
        try:
            return self.trust_file.read_bytes()
        except FileNotFoundError:
            return None

    def save_trusted_root(self, data: bytes) -> None:
        with no_space_is_refusal("saving the trusted root"):
            atomic_write_bytes(self.trust_file, data, mode=0o600)

    # -- slots -----------------------------------------------------------------------------------------------
    def slot_path(self, slot: str) -> Path:
        return self.slots_dir / slot

    def new_staging(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="release-", dir=self.staging_dir))

    def promote(self, staging: Path, slot: str) -> Path:
        """Move a verified staging folder to slots/`slot` (rename, then fsync the slots folder)."""
        target = self.slot_path(slot)
        if target.exists():  # an orphan of an interrupted install of this very release
            shutil.rmtree(target)
        os.rename(staging, target)
        _fsync_dir(self.slots_dir)
        return target

    def remove_slot(self, slot: str) -> None:
        shutil.rmtree(self.slot_path(slot), ignore_errors=True)

    def recover(self) -> list[str]:
        """Remove what a crash may have left: staging folders, download buffers, temporary files and every
        slot the committed state does not name. Returns what was removed (relative paths)."""
        self.ensure()
        state = self.read()
        removed = []
        for folder in (self.staging_dir, self.tmp_dir):
            for child in folder.iterdir():
                _remove(child)
                removed.append(str(child.relative_to(self.root)))
        keep = state.slots()
        for child in self.slots_dir.iterdir():
            if child.name not in keep:
                _remove(child)
                removed.append(str(child.relative_to(self.root)))
        for folder, pattern in ((self.root, ".state.json.*"), (self.trust_file.parent, ".root.json.*"),
                                (self.tuf_dir, "tmp*")):
            for child in folder.glob(pattern):
                _remove(child)
                removed.append(str(child.relative_to(self.root)))
        if removed:
            _fsync_dir(self.slots_dir)
        return removed

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.root).free


# python-tuf keeps tuf/root.json as a link to tuf/root_history/N.root.json: the one link allowed inside
_TUF_ROOT_LINK = re.compile(r"root_history/[0-9]{1,20}\.root\.json")


def check_safe(root: Path) -> None:
    """UnsafeState unless `root` and everything in it is this user's, not writable by group or others, and no
    link (lstat: nothing is followed). Another user's folder would hand them this device's trust root and
    releases; a link would make recovery empty whatever it points at."""
    me = os.geteuid()
    fix_link = f"remove the link (and pass --state the real folder), or remove {root} to start afresh"
    for path in _walk(root):
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            if path.parent.name == "tuf" and path.name == "root.json" and path.parent.parent == root \
                    and _TUF_ROOT_LINK.fullmatch(os.readlink(path)):
                continue
            raise reasons.UnsafeState(f"update state entry {path} is a link", fix_link)
        if info.st_uid != me:
            raise reasons.UnsafeState(f"update state entry {path} belongs to uid {info.st_uid}, not to this user "
                                      f"(uid {me})", f"remove {root} (`rm -r {root}`), or pass --state a folder "
                                      "of your own")
        if info.st_mode & 0o022:
            raise reasons.UnsafeState(f"update state entry {path} is writable by group or others "
                                      f"(mode {stat.S_IMODE(info.st_mode):o})", f"`chmod -R go-w {root}`")
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            raise reasons.UnsafeState(f"update state entry {path} is not a file or folder", fix_link)


def _walk(root: Path):
    """`root` and every entry below it, parents first, never descending through a link."""
    yield root
    if not stat.S_ISDIR(os.lstat(root).st_mode):
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in (*dirnames, *filenames):
            yield Path(dirpath) / name


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def no_space_is_refusal(doing: str):
    """Turn ENOSPC / EDQUOT while `doing` into the `no-space` refusal."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise reasons.NoSpace(f"the disk is full while {doing}") from None
        raise
