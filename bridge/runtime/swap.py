"""The live model swap: a replacement model is built, warmed and checked on a builder thread; the thread that owns
the model takes it between two frames and never waits for a build.

A `SwapRequest` carries a loader (build lazily, run later, as Polygraphy's loaders do) and a check. The builder
runs both; a replacement whose check fails is refused, reported and never retried (the old model keeps serving).
The owner (the lip-sync thread for the lip-sync model, the track or describe stage for a face model) calls
`take(model)` at its swap point: a dictionary pop under a lock, so a frame is never delayed by a build.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class SwapRefused(Exception):
    """A replacement failed to build or to reproduce its reference outputs; the old model keeps serving."""


@dataclass(frozen=True)
class SwapRequest:
    """Build `model` anew, to be announced as `version` (release 0 = the shipped model)."""

    model: str  # registry name: "lipsync", "face_landmark", "iris_landmark", "emotion", "expression", ...
    version: str  # what FaceFrame.model_versions says once it serves, e.g. "r3-1a2b3c4d5e6f"
    release: int
    build: Callable[[], object]  # runs on the builder thread: the replacement, built and warmed up
    check: Callable[[object], None] | None = None  # raises SwapRefused when the replacement is not fit to serve
    requested_mono: float = field(default_factory=time.perf_counter)  # when the release became active


@dataclass(frozen=True)
class Ready:
    """A built and checked replacement, waiting for its owner's next swap point."""

    request: SwapRequest
    replacement: object
    build_s: float  # loader + check, seconds on the builder thread
    build_cpu_s: float  # CPU seconds the builder thread spent on it


@dataclass(frozen=True)
class SwapEvent:
    """What happened to one request (status line, logs, metrics, `bench swap`)."""

    model: str
    version: str
    release: int
    ok: bool
    detail: str  # why it was refused, or "" when it swapped in
    requested_mono: float
    build_s: float = 0.0
    build_cpu_s: float = 0.0
    swapped_mono: float | None = None  # when the owner took it (None: refused or not yet taken)


class ModelSwapper:
    """One builder thread for every swappable model of a session. `on_event(SwapEvent)` (optional) hears of every
    swap and refusal, for the run's statistics; `serving` keeps, per model, the request whose replacement serves
    now, so the same loader can build it again (the output guard's session recreation)."""

    def __init__(self, report: Callable[[str], None] | None = None,
                 on_event: Callable[[SwapEvent], None] | None = None) -> None:
        self._report = report or (lambda line: log.warning("%s", line))
        self._on_event = on_event or (lambda event: None)
        self.serving: dict[str, SwapRequest] = {}
        self._requests: queue.Queue[SwapRequest | None] = queue.Queue()
        self._ready: dict[str, Ready] = {}
        self._lock = threading.Lock()
        self._refused: set[tuple[str, str]] = set()
        self.events: list[SwapEvent] = []
        self.active: dict[str, str] = {}  # model -> version now serving (after the owner took it)
        self._thread = threading.Thread(target=self._build_loop, name="facebridge-swap-builder", daemon=True)
        self._thread.start()

    # -- any thread ------------------------------------------------------------------------------------------
    def request(self, request: SwapRequest) -> bool:
        """Queue a build; False (and nothing queued) when this exact version was refused before."""
        with self._lock:
            if (request.model, request.version) in self._refused:
                return False
        self._requests.put(request)
        return True

    def pending(self) -> bool:
        with self._lock:
            return bool(self._ready) or not self._requests.empty()

    def settled(self, model: str) -> bool:
        """Nothing of `model` is still being built: a replacement is ready to take, or one was refused."""
        with self._lock:
            return model in self._ready or any(e.model == model and not e.ok for e in self.events)

    def close(self, timeout: float = 5.0) -> None:
        self._requests.put(None)
        self._thread.join(timeout)

    # -- the owner's thread, between two frames ----------------------------------------------------------------
    def take(self, model: str) -> Ready | None:
        """The ready replacement of `model`, if one is waiting; never blocks on a build."""
        if not self._ready:  # the common case: no lock, no allocation
            return None
        with self._lock:
            ready = self._ready.pop(model, None)
        if ready is not None:
            now = time.perf_counter()
            r = ready.request
            event = SwapEvent(r.model, r.version, r.release, True, "", r.requested_mono, ready.build_s,
                              ready.build_cpu_s, now)
            with self._lock:
                self.active[model] = r.version
                self.serving[model] = r
                self.events.append(event)
            self._on_event(event)
            self._report(f"swap: {model} now runs {r.version} (built and checked in {ready.build_s:.2f} s, "
                         f"{(now - r.requested_mono) * 1000:.0f} ms after the release became active)")
        return ready

    # -- builder thread ---------------------------------------------------------------------------------------
    def _build_loop(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                replacement = request.build()
                if request.check is not None:
                    request.check(replacement)
            except Exception as e:  # a bad release must never take the stream down
                self._refuse(request, f"{type(e).__name__}: {e}" if not isinstance(e, SwapRefused) else str(e))
                continue
            with self._lock:
                self._ready[request.model] = Ready(request, replacement, time.perf_counter() - started,
                                                   time.thread_time() - cpu)

    def _refuse(self, request: SwapRequest, why: str) -> None:
        self.refuse(request.model, request.version, why, request.release, request.requested_mono)

    def retire(self, model: str, version: str) -> None:
        """Never build `version` of `model` again (a release rolled back after it failed in service)."""
        with self._lock:
            self._refused.add((model, version))

    def refuse(self, model: str, version: str, why: str, release: int, requested_mono: float | None = None) -> None:
        """Record a release that must not serve (also for one whose files could not even be read)."""
        event = SwapEvent(model, version, release, False, why,
                          requested_mono if requested_mono is not None else time.perf_counter())
        with self._lock:
            self._refused.add((model, version))
            self.events.append(event)
        self._on_event(event)
        self._report(f"swap: refused {model} {version} ({why}); the current model keeps serving "
                     "and this release will not be tried again")
