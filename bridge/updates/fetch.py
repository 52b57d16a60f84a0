"""Where releases come from: a repository over HTTP(S) or a local folder, read through python-tuf's ngclient.

`ReleaseFetcher` is the one ngclient fetcher: it buffers downloads in the state directory's tmp/ (so a full
disk shows where the state lives, not in /tmp), reports progress per chunk, stops a download that exceeds its
signed or capped length (endless data) or the whole check's deadline (slow drip: a watchdog shuts the check's
sockets at the deadline, so a server dripping its status line or headers is cut too), and, for a folder, refuses
links and anything but regular files instead of following them. `refusal()` maps every TUF and fetch error to
one stable reason (bridge/updates/reasons.py), diagnosing a failed signature check from the bytes that failed.
"""
from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from tuf.api import exceptions
from tuf.api.metadata import Metadata, Root
from tuf.ngclient import Updater, UpdaterConfig
from tuf.ngclient.fetcher import FetcherInterface

from bridge.sockets import shut_down
from bridge.updates import reasons
from bridge.updates.signing import diagnose

CHUNK = 64 * 1024
MAX_METADATA_KEPT = 5_000_000  # bytes of the last metadata document kept for diagnosing a failed signature


@dataclass(frozen=True)
class Progress:
    """One progress event of an install (the CLI draws a line from these; --json stays quiet)."""

    step: str  # "refresh", "bundle", "download", "verify", "smoke-test", "switch", "done"
    name: str = ""  # the file or model concerned
    done: int = 0  # bytes received so far (downloads)
    total: int = 0  # bytes expected (0: not known)


Reporter = Callable[[Progress], None]


class UnsafeSource(exceptions.DownloadError):
    """A folder repository entry that is a link or not a regular file."""


@dataclass(frozen=True)
class Source:
    """A repository: `url` ends with '/', `folder` is set for a local one."""

    url: str
    folder: Path | None = None

    @classmethod
    def parse(cls, text: str) -> Source:
        if text.startswith(("http://", "https://")):
            return cls(text.rstrip("/") + "/")
        folder = Path(text).expanduser().resolve()
        if not (folder / "metadata").is_dir():
            raise reasons.NotFound(f"{text} is not a repository folder (it has no metadata/ folder)")
        return cls("file://" + quote(str(folder)) + "/", folder)

    def __str__(self) -> str:
        """As the user named it: the folder, or the URL (state.json's last check and refusal say this)."""
        return str(self.folder) if self.folder is not None else self.url

    @property
    def metadata_url(self) -> str:
        return self.url + "metadata/"

    @property
    def targets_url(self) -> str:
        return self.url + "targets/"


class ReleaseFetcher(FetcherInterface):
    """ngclient fetcher for one check: HTTP through urllib3, folders read without following links."""

    def __init__(self, source: Source, tmp_dir: Path, report: Reporter | None = None, deadline_s: float = 600.0):
        self.source = source
        self.tmp_dir = tmp_dir
        self.report = report or (lambda event: None)
        self.deadline = time.monotonic() + deadline_s
        self.watchdog = Watchdog(deadline_s)
        self.last_metadata: bytes | None = None  # the newest metadata document downloaded (for diagnosis)
        self.last_name = ""  # the file name of the newest metadata download begun (for messages)
        self._pool = None

    def close(self) -> None:
        """End of the check: stop the watchdog and close the connections."""
        self.watchdog.cancel()
        if self._pool is not None:
            self._pool.clear()

    def _fetch(self, url: str) -> Iterator[bytes]:
        if self.source.folder is None:
            return self._read_http(url)
        return self._read_folder(url)

    def _late(self, url: str, error: Exception) -> exceptions.DownloadError:
        """The error a broken request becomes: past the deadline (the watchdog cut it) or broken off."""
        name = url.rsplit("/", 1)[-1]
        if self.watchdog.expired or time.monotonic() > self.deadline:
            return exceptions.SlowRetrievalError(f"{name}: the check ran past its deadline")
        return exceptions.DownloadError(f"the download of {name} broke off ({str(error)[:100]})")

    def _read_http(self, url: str) -> Iterator[bytes]:
        """GET `url`; chunks are whatever arrived (read1). The watchdog shuts the socket at the deadline, so no
        read (the response headers included) outlives the check."""
        # import cost: urllib3 (about 0.19 s), only when a release is fetched over HTTP
        import urllib3

        if self._pool is None:
            self._pool = urllib3.PoolManager(headers={"User-Agent": "facebridge-updates"}, retries=False,
                                             timeout=urllib3.Timeout(connect=10.0, read=30.0))
            self._pool.pool_classes_by_scheme = self.watchdog.pool_classes()
        if self.watchdog.expired:
            raise exceptions.SlowRetrievalError(f"{url.rsplit('/', 1)[-1]}: the check ran past its deadline")
        try:
            response = self._pool.request("GET", url, preload_content=False)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self._late(url, e) from e
        if self.watchdog.expired:  # the cut may leave a response that merely looks complete
            response.release_conn()
            raise exceptions.SlowRetrievalError(f"{url.rsplit('/', 1)[-1]}: the check ran past its deadline")
        if response.status >= 400:
            response.release_conn()
            raise exceptions.DownloadHTTPError(f"HTTP {response.status} for {url.rsplit('/', 1)[-1]}", response.status)

        def chunks():
            try:
                while block := response.read1(CHUNK):
                    yield block
                if self.watchdog.expired:
                    raise exceptions.SlowRetrievalError(f"{url.rsplit('/', 1)[-1]}: the check ran past its deadline")
            except urllib3.exceptions.ReadTimeoutError as e:
                raise exceptions.SlowRetrievalError(f"no data for 30 s from {url}") from e
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise self._late(url, e) from e
            finally:
                response.release_conn()
        return chunks()

    def _read_folder(self, url: str) -> Iterator[bytes]:
        root = self.source.folder
        relative = unquote(urlparse(url).path)[len(unquote(urlparse(self.source.url).path)):]
        path = root
        for part in relative.split("/"):
            if part in ("", ".", ".."):
                raise UnsafeSource(f"repository path {relative!r} is not a plain path")
            path = path / part
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                raise exceptions.DownloadHTTPError(f"{relative} is not in the repository", 404) from None
            if stat.S_ISLNK(info.st_mode):
                raise UnsafeSource(f"repository entry {relative} is a link ({part})")
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeSource(f"repository entry {relative} is not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)

        def chunks():
            with os.fdopen(fd, "rb") as f:
                while block := f.read(CHUNK):
                    yield block
        return chunks()

    @contextlib.contextmanager
    def download_file(self, url: str, max_length: int):
        """ngclient's download, buffered in our tmp/, with progress, a length cap and the check's deadline."""
        name = url.rsplit("/", 1)[-1]
        if len(name) > 65 and name[64] == "." and all(c in "0123456789abcdef" for c in name[:64]):
            name = name[65:]  # consistent snapshots store files as <sha256>.<name>
        received = 0
        is_metadata = url.startswith(self.source.metadata_url)
        if is_metadata:
            self.last_name = name
        with tempfile.TemporaryFile(dir=self.tmp_dir) as buffer:
            for chunk in self.fetch(url):
                received += len(chunk)
                if received > max_length:
                    raise exceptions.DownloadLengthMismatchError(
                        f"{name}: received more than the allowed {max_length} bytes")
                if time.monotonic() > self.deadline:
                    raise exceptions.SlowRetrievalError(f"{name}: the check ran past its deadline")
                buffer.write(chunk)
                if not is_metadata:
                    self.report(Progress("download", name, received, max_length))
            buffer.seek(0)
            if is_metadata and received <= MAX_METADATA_KEPT:
                self.last_metadata = buffer.read()
                buffer.seek(0)
            yield buffer


class Watchdog:
    """Shuts every socket of one check at its deadline: a server dripping its status line or headers one byte at
    a time cannot keep a read (and the install lock) alive past the deadline."""

    def __init__(self, deadline_s: float):
        self.expired = False
        self._sockets: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline_s), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
            if self.expired:
                shut_down(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in list(self._sockets):
                shut_down(sock)

    def cancel(self) -> None:
        self._timer.cancel()

    def pool_classes(self) -> dict:
        """urllib3 pool classes whose connections hand their socket (before TLS) to this watchdog."""
        # import cost: urllib3 (about 0.19 s), only when a release is fetched over HTTP
        import urllib3.connection
        import urllib3.connectionpool

        watch = self.watch

        def watched(base):
            class Connection(base):
                def _new_conn(self):
                    sock = super()._new_conn()
                    watch(sock)
                    return sock
            return Connection

        class Pool(urllib3.connectionpool.HTTPConnectionPool):
            ConnectionCls = watched(urllib3.connection.HTTPConnection)

        class TLSPool(urllib3.connectionpool.HTTPSConnectionPool):
            ConnectionCls = watched(urllib3.connection.HTTPSConnection)

        return {"http": Pool, "https": TLSPool}


def open_updater(source: Source, tuf_dir: Path, tmp_dir: Path, trusted_root: bytes, report: Reporter | None,
                 deadline_s: float) -> tuple[Updater, ReleaseFetcher]:
    """An ngclient Updater bootstrapped from `trusted_root` (the newest root this device verified)."""
    fetcher = ReleaseFetcher(source, tmp_dir, report, deadline_s)
    config = UpdaterConfig(max_root_rotations=64, timestamp_max_length=16_384, snapshot_max_length=1_000_000,
                           targets_max_length=2_000_000, root_max_length=512_000)
    try:
        updater = Updater(str(tuf_dir), source.metadata_url, None, source.targets_url, fetcher, config,
                          bootstrap=trusted_root)
    except Exception as e:
        fetcher.close()
        raise refusal(e, fetcher, tuf_dir, "the trusted root") from None
    return updater, fetcher


def refusal(error: BaseException, fetcher: ReleaseFetcher | None, tuf_dir: Path, doing: str) -> reasons.UpdateRefused:
    """The stable reason for `error`, raised by ngclient or a fetcher while `doing`."""
    if isinstance(error, reasons.UpdateRefused):
        return error
    if fetcher is not None and fetcher.last_name and doing.startswith("checking"):
        doing = f"{doing} ({fetcher.last_name})"
    chain = _causes(error)
    for e in chain:
        if isinstance(e, UnsafeSource):
            return reasons.BadPath(f"{doing}: {e}")
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return reasons.NoSpace(f"the disk is full while {doing}")
    detail = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
    if isinstance(error, exceptions.UnsignedMetadataError):
        return _diagnosed(fetcher, tuf_dir) or reasons.ThresholdNotMet(f"{doing}: {detail}")
    if isinstance(error, exceptions.BadVersionNumberError):
        role = (fetcher.last_name if fetcher else "").split(".")[-2:-1] or ["timestamp"]
        return reasons.Rollback(f"{doing}: the repository offers older metadata than this device has seen ({detail})",
                                "install from your publisher's current repository; if a signing key was stolen, "
                                f"the publisher rotates it (`fedagent keys rotate --role {role[0]}`) and publishes")
    if isinstance(error, exceptions.ExpiredMetadataError):
        return reasons.Expired(f"{doing}: {detail}")
    if isinstance(error, exceptions.LengthOrHashMismatchError):
        return reasons.HashMismatch(f"{doing}: {detail}")
    if isinstance(error, exceptions.DownloadLengthMismatchError):
        return reasons.TooLarge(f"{doing}: {detail}")
    if isinstance(error, exceptions.SlowRetrievalError):
        return reasons.Network(f"{doing}: the download was too slow or stalled ({detail})")
    if isinstance(error, exceptions.DownloadHTTPError):
        if error.status_code == 404:
            return reasons.NotFound(f"{doing}: the repository has no such file ({detail})")
        return reasons.Network(f"{doing}: HTTP {error.status_code}")
    if isinstance(error, exceptions.DownloadError):
        root = chain[-1]
        text = str(root).splitlines()[0][:120] if str(root) else ""
        return reasons.Network(f"{doing}: {type(root).__name__}: {text}")
    if isinstance(error, (exceptions.RepositoryError, ValueError, KeyError, TypeError)):
        return reasons.Malformed(f"{doing}: {detail}")
    if isinstance(error, OSError):
        return reasons.StateCorrupt(f"{doing}: cannot write the update state ({detail})",
                                    "check the permissions of the state directory (--state)")
    return reasons.Malformed(f"{doing}: {type(error).__name__}: {detail}")


def _causes(error: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        chain.append(error)
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return chain


def _diagnosed(fetcher: ReleaseFetcher | None, tuf_dir: Path) -> reasons.UpdateRefused | None:
    """Signature-invalid, untrusted-key or threshold, from the metadata that failed and the trusted root."""
    if fetcher is None or fetcher.last_metadata is None:
        return None
    try:
        failed = Metadata.from_bytes(fetcher.last_metadata)
        trusted = Metadata[Root].from_file(str(tuf_dir / "root.json")).signed
        return diagnose(trusted, failed)
    except Exception:  # the diagnosis is a courtesy; TUF has already refused
        return None
