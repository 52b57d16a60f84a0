"""MonitorServer: the monitor page, its live WebSocket, /metrics, /healthz and /readyz, served by aiohttp on a
thread and event loop of its own (the stream's threads never wait for it).

Who may connect (bridge/listeners.py): 127.0.0.1 by default; any other address needs a token of at least 128
bits (`--monitor-token auto` makes one) and, unless TLS is configured, says once that it is plain HTTP; the token is
given as
`Authorization: Bearer TOKEN`, as `?token=TOKEN` on the page's first load (which then sets a same-site cookie),
or that cookie. /healthz and /readyz need none (probes carry no secrets). A browser request from another origin
(some web site open in the same browser) is refused, and on a loopback address so is a non-loopback Host (DNS
rebinding), so no web page can watch the camera or press a button. Each page gets at most PAGE_HZ updates and
PREVIEW_HZ preview images a second, always the newest: a slow page gets fewer, never older ones. An image comes
as its landmarks, the state, then the JPEG, so the page repaints once for all three.
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import threading
import time
from pathlib import Path

from aiohttp import WSMsgType, web

from bridge import __version__, ports
from bridge.errors import FaceBridgeError
from bridge.listeners import (
    AUTO_TOKEN,
    bearer_matches,
    is_loopback,
    listener_token,
    split_address,
    token_matches,
    warn_plain_text,
)
from bridge.monitor import tuning_api
from bridge.monitor.feed import PAGE_HZ, PREVIEW_HZ, LiveFeed
from bridge.monitor.health import liveness, readiness
from bridge.monitor.metrics import CONTENT_TYPE, metrics_registry, metrics_text

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "facebridge_monitor"
OPEN_PATHS = ("/healthz", "/readyz")
MAX_MESSAGE = 64 * 1024  # a page only ever sends tiny JSON requests


def _stats_view(s) -> dict:
    return {"fps": round(s.fps, 2), "latency_ms_p50": round(s.latency_ms_p50, 2),
            "latency_ms_p99": round(s.latency_ms_p99, 2),
            "stage_ms": {k: [round(v[0], 2), round(v[1], 2)] for k, v in s.stage_ms.items()},
            "captured": s.captured, "sent": s.sent, "bad_frames": s.bad_frames, "dropped": s.dropped,
            "face_ratio": round(s.face_ratio, 3), "face_lost_ratio": round(s.face_lost_ratio, 3),
            "guarded": s.guarded, "guarded_total": s.guarded_total, "recreated": s.recreated,
            "engine_builds": s.engine_builds, "engine_swaps": s.engine_swaps, "last_guard": s.last_guard,
            "sinks": s.sinks, "releases": s.releases, "rolled_back": s.rolled_back, "swaps_refused": s.swaps_refused,
            "update_status": s.update_status, "models_loaded": s.models_loaded, "uptime_s": round(s.uptime_s, 1)}


class MonitorServer:
    """Serves one RunStats (and, for `facebridge run`, a RunControl and a LiveFeed) on `address`.

    `fallback=True` (the default address, not one the user typed): when that port is taken (a second bridge),
    listen on any free port instead and say so."""

    def __init__(self, address: str, stats, *, control=None, feed: LiveFeed | None = None, token: str | None = None,
                 info: dict[str, str] | None = None, fallback: bool = False, tls_cert: str | None = None,
                 tls_key: str | None = None) -> None:
        host, port = split_address(address, "--monitor", ports.MONITOR)
        self.loopback = is_loopback(host)
        if not self.loopback and not token:
            raise FaceBridgeError(f"the monitor on {address} would show your camera and face data to the network "
                                  "without a token", "pass --monitor-token auto (a random token is made and printed), "
                                  "or bind 127.0.0.1")
        self.generated_token = token == AUTO_TOKEN  # the command prints it once
        token = listener_token("--monitor-token", token, host)
        ssl_context = _tls_context(tls_cert, tls_key)
        if not self.loopback and ssl_context is None:
            warn_plain_text("the monitor", address, "--monitor-tls-cert/--monitor-tls-key")
        self.stats, self.control, self.feed, self.token = stats, control, feed, token
        self.tls = ssl_context is not None
        self.info = {"version": __version__, **(info or {})}
        self.registry = metrics_registry(stats, self.info)
        sock = self._bind(host, port, fallback)
        self.port = sock.getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://{'[' + host + ']' if ':' in host else host}:{self.port}/"
        self._state_cache: tuple[float, str] = (0.0, "")
        self._status_cache: tuple[float, dict] = (0.0, {})
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="facebridge-monitor", daemon=True)
        self._thread.start()
        self._runner = None
        asyncio.run_coroutine_threadsafe(self._start(sock, ssl_context), self._loop).result(15)

    @staticmethod
    def _bind(host: str, port: int, fallback: bool) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            return socket.create_server((host, port), family=family)
        except OSError as e:
            if fallback and port:
                log.warning("monitor port %d is taken (another bridge?); using a free port instead", port)
                return socket.create_server((host, 0), family=family)
            raise FaceBridgeError(f"cannot serve the monitor on {host}:{port} ({e.strerror or e})",
                                  "pick another port with --monitor HOST:PORT, or --monitor off") from None

    async def _start(self, sock: socket.socket, ssl_context) -> None:
        app = web.Application(middlewares=[self._admit], client_max_size=MAX_MESSAGE)
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/api/status", self._status)
        app.router.add_post("/api/calibrate", self._calibrate)
        app.router.add_post("/api/record", self._record)
        tuning_api.add_routes(app, self.control, _json, _refuse)  # the tuning panel (bridge/monitor/tuning_api.py)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, ssl_context=ssl_context).start()

    def set_info(self, **info: str) -> None:
        """Facts shown in facebridge_bridge_info (backend, subject) once they are known."""
        self.info.update({k: str(v) for k, v in info.items()})

    def close(self) -> None:
        if self._runner is None:
            return
        runner, self._runner = self._runner, None
        try:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(5)
        except Exception as e:  # noqa: BLE001 - shutting down: say it, do not hide the run's own outcome
            log.warning("monitor did not stop cleanly: %s", e)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # --- who may connect ----------------------------------------------------------------------------------------
    @web.middleware
    async def _admit(self, request: web.Request, handler):
        origin = request.headers.get("Origin")
        if origin is not None and origin not in (f"http://{request.host}", f"https://{request.host}"):
            return _refuse(403, f"requests from {origin} are refused", "open the monitor page itself")
        if self.loopback and not is_loopback(request.host.rpartition(":")[0] or request.host):
            return _refuse(403, f"host {request.host!r} is not this machine", "open http://127.0.0.1:PORT/")
        if self.token and request.path not in OPEN_PATHS and not self._token_ok(request):
            return _refuse(401, "missing or wrong monitor token",
                           "open the page as /?token=TOKEN or send 'Authorization: Bearer TOKEN'")
        response = await handler(request)
        if self.token and request.query.get("token"):
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", secure=self.tls)
        return response

    def _token_ok(self, request: web.Request) -> bool:
        return (bearer_matches(request.headers.get("Authorization"), self.token)
                or token_matches(request.query.get("token"), self.token)
                or token_matches(request.cookies.get(COOKIE), self.token))

    # --- probes and metrics -------------------------------------------------------------------------------------
    async def _healthz(self, request):
        return web.json_response(liveness(self.stats.snapshot()))

    async def _readyz(self, request):
        ready, body = readiness(self.stats.snapshot())
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, request):
        body = await asyncio.get_running_loop().run_in_executor(None, metrics_text, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    # --- the page -----------------------------------------------------------------------------------------------
    async def _index(self, request):
        """The page with the bridge's last state inside it, so it shows the stream at once (before its WebSocket
        connects, and while the models still load) instead of an empty 'connecting' page."""
        subject = getattr(self.control, "subject", "")
        initial = json.dumps([{**LiveFeed.hello(subject), "version": __version__}, json.loads(self._state())])
        initial = initial.replace("</", "<\\/")  # JSON inside <script>: no '</script>' can end it early
        html = (STATIC / "index.html").read_text(encoding="utf-8").replace(
            "<!-- initial state -->", f'<script id="initial" type="application/json">{initial}</script>')
        return web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})

    def _control_status(self) -> dict:
        now = time.monotonic()
        if self.control is not None and now - self._status_cache[0] > 1.0:  # backends and models change rarely
            self._status_cache = (now, self.control.status())
        return self._status_cache[1]

    def _state(self) -> str:
        """The page state as JSON, made at most once per update period whatever the number of pages."""
        now = time.monotonic()
        if now - self._state_cache[0] < 0.5 / PAGE_HZ:
            return self._state_cache[1]
        status = self._control_status()
        state = {"type": "state", "face": self.feed.face() if self.feed else None,
                 "stats": _stats_view(self.stats.snapshot()),
                 "backends": status.get("backends", []), "models": status.get("model_versions", {}),
                 "sources": status.get("sources", []), "recording": status.get("recording"),
                 "controls": self.control is not None}
        self._state_cache = (now, json.dumps(state))
        return self._state_cache[1]

    async def _status(self, request):
        return web.json_response({**self._control_status(), "stats": _stats_view(self.stats.snapshot())})

    async def _websocket(self, request):
        # no per-message deflate: the JPEGs are compressed already, and the state is small and sent often
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=MAX_MESSAGE, compress=False)
        await ws.prepare(request)
        subject = getattr(self.control, "subject", "")
        await ws.send_json({**LiveFeed.hello(subject), "version": __version__})
        page = {"preview": False}
        pusher = asyncio.create_task(self._push(ws, page))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    wanted = bool(json.loads(msg.data).get("preview"))
                except (ValueError, AttributeError):
                    continue  # not a request we know: ignored
                if self.feed is not None and wanted != page["preview"]:
                    page["preview"] = wanted
                    self.feed.want_preview(wanted)
        finally:
            pusher.cancel()
            if page["preview"] and self.feed is not None:
                self.feed.want_preview(False)
        return ws

    async def _push(self, ws, page: dict) -> None:
        loop = asyncio.get_running_loop()
        next_preview = 0.0
        try:
            while not ws.closed:
                t0 = loop.time()
                got = None
                if page["preview"] and t0 >= next_preview:
                    got = await loop.run_in_executor(None, self.feed.preview)
                # with an image: its landmarks, then the state, then the JPEG, so the page paints all three at once
                if got is not None:
                    await ws.send_str(json.dumps(got[0]))
                    next_preview = t0 + 1.0 / PREVIEW_HZ
                await ws.send_str(self._state())
                if got is not None:
                    await ws.send_bytes(got[1])
                await asyncio.sleep(max(0.0, 1.0 / PAGE_HZ - (loop.time() - t0)))
        except (ConnectionError, RuntimeError):
            pass  # the page went away; the reader side ends the connection

    # --- buttons ------------------------------------------------------------------------------------------------
    async def _calibrate(self, request):
        if self.control is None:
            return _refuse(409, "this bridge has nothing to calibrate", "run `facebridge run` with a camera")
        body = await _json(request)
        subject = str(body.get("subject") or self.control.subject)
        ok, message = await asyncio.get_running_loop().run_in_executor(None, self.control.calibrate, subject)
        return web.json_response({"ok": bool(ok), "message": str(message)})

    async def _record(self, request):
        if self.control is None:
            return _refuse(409, "this bridge cannot record", "run `facebridge run`")
        on = (await _json(request)).get("on")
        if not isinstance(on, bool):  # "false", 0 or a missing field never start a take
            return _refuse(400, f"'on' must be true or false, got {json.dumps(on)}",
                           'send {"on": true} to start recording, {"on": false} to stop')
        ok, message = await asyncio.get_running_loop().run_in_executor(None, self.control.record, on)
        return web.json_response({"ok": bool(ok), "message": str(message),
                                  "recording": self.control.status().get("recording")})


def _tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The server's TLS context from a certificate and its key (PEM), None without them; one line when unusable."""
    if not cert and not key:
        return None
    if not cert or not key:
        raise FaceBridgeError("TLS needs both a certificate and its private key",
                              "pass both --monitor-tls-cert CERT.pem and --monitor-tls-key KEY.pem")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise FaceBridgeError(f"cannot use the monitor's TLS certificate or key ({getattr(e, 'strerror', None) or e})",
                              "check the --monitor-tls-cert/--monitor-tls-key paths (PEM files)") from None
    return context


async def _json(request: web.Request) -> dict:
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        body = {}
    return body if isinstance(body, dict) else {}


def _refuse(status: int, problem: str, fix: str) -> web.Response:
    return web.json_response({"error": problem, "fix": fix}, status=status)
