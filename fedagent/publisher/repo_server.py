"""Serve a repository folder over HTTP on 127.0.0.1 (tests and small setups; any static server will do).

Only GET and HEAD of regular files inside the folder: each path is opened one component at a time under the
folder's own descriptor without following links (O_NOFOLLOW, dir_fd), so a link in the repository, `..` or
an absolute path never reaches a file outside it, and listings are refused. Connections are bounded: at most
`max_connections` at once (more are closed on arrival), each socket read or write waits at most `timeout_s`,
and one reaper thread ends any connection open past `connection_s`, so half-open or dripping clients cannot pile
up threads. The
repository is public, signed data, but the server still binds loopback only: serving wider is a job for a real
web server in front of the folder.
"""
from __future__ import annotations

import contextlib
import email.utils
import functools
import os
import socket
import stat
import threading
import time
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bridge.sockets import shut_down

HOST = "127.0.0.1"
MAX_CONNECTIONS = 32
TIMEOUT_S = 10.0  # one socket read or write
CONNECTION_S = 300.0  # one whole connection


class RepoHandler(SimpleHTTPRequestHandler):
    """Regular files of the repository only, no listings, no request log on stderr."""

    timeout = TIMEOUT_S  # StreamRequestHandler sets it on the socket: an idle or half-open connection ends
    connection_s = CONNECTION_S

    def setup(self):
        super().setup()
        self.server.reaper.watch(self.connection, self.connection_s)

    def finish(self):
        self.server.reaper.forget(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def send_head(self):
        """Open the requested file without following links, then send its headers (None: an error was sent)."""
        fd = self._open_regular()
        if fd is None:
            self.send_error(HTTPStatus.NOT_FOUND, "no such file in the repository")
            return None
        f = os.fdopen(fd, "rb")
        info = os.fstat(fd)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(info.st_size))
        self.send_header("Last-Modified", email.utils.formatdate(info.st_mtime, usegmt=True))
        self.end_headers()
        return f

    def _open_regular(self) -> int | None:
        """A descriptor of the regular file the request names inside the repository, else None."""
        parts = unquote(urlsplit(self.path).path).split("/")[1:]
        if not parts or any(p in ("", ".", "..") or "\0" in p for p in parts):
            return None
        folder = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
                os.close(folder)
                folder = inner
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        except OSError:  # missing, a link (ELOOP), not a folder (ENOTDIR)
            return None
        finally:
            os.close(folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def list_directory(self, path):
        self.send_error(HTTPStatus.NOT_FOUND, "no listings")
        return None

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


class Reaper:
    """One thread that shuts every connection still open past its deadline."""

    def __init__(self):
        self._due: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="repo-reaper", daemon=True).start()

    def watch(self, sock: socket.socket, seconds: float) -> None:
        with self._lock:
            self._due[sock] = time.monotonic() + seconds

    def forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._due.pop(sock, None)

    def _run(self) -> None:
        while True:
            time.sleep(1.0)
            now = time.monotonic()
            with self._lock:
                late = [sock for sock, due in self._due.items() if due < now]
            for sock in late:
                shut_down(sock)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them; the rest are closed on arrival."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 makes a burst of clients wait on SYN retries)

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self.reaper = Reaper()

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class RepoServer:
    """A running server: `with RepoServer(folder) as server: server.url`."""

    def __init__(self, folder: str | Path, port: int = 0, handler: type[RepoHandler] = RepoHandler, *,
                 max_connections: int = MAX_CONNECTIONS, timeout_s: float = TIMEOUT_S,
                 connection_s: float = CONNECTION_S):
        self.folder = Path(folder).resolve()
        limited = type("LimitedHandler", (handler,), {"timeout": timeout_s, "connection_s": connection_s})
        self.httpd = BoundedHTTPServer((HOST, port), functools.partial(limited, directory=str(self.folder)),
                                       max_connections)
        self.port = self.httpd.server_address[1]
        self.url = f"http://{HOST}:{self.port}/"
        self._thread: threading.Thread | None = None

    def start(self) -> RepoServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="repo-server",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> RepoServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
