"""Serve a repository folder over HTTP on 127.0.0.1 (tests and small setups; any static server will do).

Only GET and HEAD of files under the folder; listings are refused. The repository is public, signed data, but
the server still binds loopback only: serving wider is a job for a real web server in front of the folder.
"""
from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"


class RepoHandler(SimpleHTTPRequestHandler):
    """Static files of the repository, no directory listings, no request log on stderr."""

    def list_directory(self, path):
        self.send_error(404, "no listings")
        return None

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


class RepoServer:
    """A running server: `with RepoServer(folder) as server: server.url`."""

    def __init__(self, folder: str | Path, port: int = 0, handler: type[RepoHandler] = RepoHandler):
        self.folder = Path(folder).resolve()
        self.httpd = ThreadingHTTPServer((HOST, port), functools.partial(handler, directory=str(self.folder)))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{HOST}:{self.port}/"
        self._thread: threading.Thread | None = None

    def start(self) -> "RepoServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="repo-server",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "RepoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
