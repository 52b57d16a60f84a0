"""`facebridge serve --front-ends N`: this process becomes the engine (multistream/engine.py: the batched runners and so
the CUDA context, every image's decode, every batched pass) and starts N front-end processes
(runtime/serve_front_end.py: the gRPC streams, their state and the describe step), which reach it only through a
shared-memory ring and a control socket each.

Ports: front end i listens on PORT+i of --grpc (each on a free port of its own with port 0), as Ray Serve replicas
do: a stream is one connection to one front end and never moves, and clients spread themselves over the addresses
the ready line names (`bench serve` does, round-robin; one HAProxy in front gives one address). The streams a
server takes (--max-streams) are split evenly over the front ends, each holding at most its share.

A front end that dies loses only its streams (their clients see the connection drop and may reconnect): the engine
drops whatever of it is still in a pass, and a new front end takes its place on the same ring and port; the others
serve on. If the engine dies, every front end sees its control socket close and stops with one line.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict

from bridge.console import exit_text
from bridge.errors import FaceBridgeError
from bridge.grpc import access
from bridge.multistream.decode import ImageDecoder
from bridge.multistream.engine import Engine
from bridge.multistream.rings import RingShape, shm_room
from bridge.runtime.gc_pauses import settle as settle_heap
from bridge.runtime.serve import ServeConfig, _report, batched_models, check_config
from bridge.runtime.serve_front_end import CONFIG
from bridge.runtime.stopping import say_stopped, serve_until_stopped, stop_not_cut_short
from bridge.thread_cpu import cpu_between, thread_cpu_seconds

log = logging.getLogger(__name__)

START_TIMEOUT_S = 240.0  # every front end listening (a loaded machine imports slowly)
RESTART_AFTER_S = 1.0  # a front end that died is started again after this
QUICK_END_S, MAX_QUICK_ENDS = 10.0, 5  # one that ends this soon after its start this many times in a row stays down
STOP_WAIT_S = 15.0
# --decode-processes: the largest frame (pixels) a decode process decodes (the largest --prewarm size if larger); a
# larger one is decoded in the engine process. Its pool holds one such frame a stream: 2.8 MB, 2.8 GB at 1,000 streams
DECODED_FRAME_PIXELS = 1280 * 720


def mps_running() -> bool:
    """Whether an MPS control daemon answers where this process's CUDA contexts would look for it (its pipe)."""
    pipes = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipes, "control"))


def front_end_addresses(address: str, count: int) -> list[str]:
    """Where each front end listens: PORT+i of HOST:PORT (a free port each with port 0)."""
    host, port = access.split_address(address)
    return [f"{host}:{port + i if port else 0}" for i in range(count)]


class FrontEnds:
    """The front-end processes of one engine: started, restarted when one dies, stopped."""

    def __init__(self, engine, config: ServeConfig, verbose: bool = False) -> None:
        self.engine, self.config, self.verbose = engine, config, verbose
        self.count = config.front_ends
        self.addresses = front_end_addresses(config.grpc, self.count)
        self.procs: list[subprocess.Popen | None] = [None] * self.count
        self.started_at = [0.0] * self.count
        self.quick_ends = [0] * self.count  # ends within QUICK_END_S of the start, in a row
        self.restarts = 0
        self.stopping = False
        self.failed: str | None = None  # a front end that ended before they all listened
        self.ready = False  # every front end listened once
        self._listening = threading.Condition()
        engine.on_listening = self._on_listening

    def start(self, index: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ring = self.engine.rings[index]
        spec = {"index": index, "config": asdict(self.config), "ring": ring.name, "slots": ring.slots,
                "slot_bytes": ring.slot_bytes, "address": self.addresses[index], "verbose": self.verbose}
        ours.send(CONFIG + json.dumps(spec).encode())  # before the engine's first message
        self.procs[index] = subprocess.Popen([sys.executable, "-m", "bridge.runtime.serve_front_end",
                                              str(theirs.fileno())], pass_fds=[theirs.fileno()])
        theirs.close()
        self.started_at[index] = time.monotonic()
        self.engine.attach(index, ours)

    def _on_listening(self, index: int, hello: dict) -> None:
        self.addresses[index] = hello["address"]  # a restart listens on the same port
        if self.ready:
            _report(f"front end {index} serves again on {hello['address']} (pid {hello['pid']})")
        with self._listening:
            self._listening.notify_all()

    def wait_listening(self) -> None:
        """Until every front end listens; FaceBridgeError when one ended first or they take too long."""
        end = time.monotonic() + START_TIMEOUT_S
        with self._listening:
            while not all(self.engine.listening) and self.failed is None and time.monotonic() < end:
                self._listening.wait(0.5)
        if self.failed is not None:
            raise FaceBridgeError(self.failed, "see the front end's line above")
        if not all(self.engine.listening):
            raise FaceBridgeError(f"the front ends did not start within {START_TIMEOUT_S:.0f} s",
                                  "run with fewer --front-ends, or on a less loaded machine")
        self.ready = True

    def lost(self, index: int) -> None:
        """Front end `index`'s socket closed (the engine's reader thread): it died, or stopped."""
        proc = self.procs[index]
        if self.stopping or proc is None:
            return
        try:
            rc = proc.wait(5)
        except subprocess.TimeoutExpired:  # alive but cut off (hung): it goes
            proc.kill()
            rc = proc.wait(10)
        if not self.ready:  # it never served: the command fails with it
            self.failed = f"front end {index} (pid {proc.pid}) ended before it listened ({exit_text(rc)})"
            with self._listening:
                self._listening.notify_all()
            return
        quick = time.monotonic() - self.started_at[index] < QUICK_END_S
        self.quick_ends[index] = self.quick_ends[index] + 1 if quick else 0
        if self.quick_ends[index] >= MAX_QUICK_ENDS:
            _report(f"front end {index} (pid {proc.pid}) ended ({exit_text(rc)}) within {QUICK_END_S:.0f} s of its "
                    f"start {MAX_QUICK_ENDS} times in a row: not starting it again ({self.addresses[index]} stays "
                    "closed; the other front ends serve on)")
            return
        line = (f"front end {index} (pid {proc.pid}, {self.addresses[index]}) ended ({exit_text(rc)}): its streams "
                "are lost, the other front ends serve on; starting another in its place")
        if rc != 0:
            _report(line)
            line = None
        # else it was told to stop (SIGTERM): by whoever signalled the whole process group (`timeout`, a service
        # manager), the engine's stop follows at once, and the line is said only if it does not
        pause = 5.0 if quick else RESTART_AFTER_S  # one that keeps ending waits longer
        threading.Timer(pause, self._restart, args=(index, line)).start()

    def _restart(self, index: int, line: str | None = None) -> None:
        if self.stopping:
            return
        if line is not None:
            _report(line)
        self.restarts += 1
        try:
            self.start(index)
        except OSError as e:
            _report(f"front end {index} could not be started again ({e}); its port stays closed")

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def stop(self) -> None:
        self.stopping = True
        procs = [p for p in self.procs if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        end = time.monotonic() + STOP_WAIT_S
        for proc in procs:
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def build_engine(config: ServeConfig, verbose: bool = False):
    """The engine and its running front ends (listening when this returns): (engine, front ends, models)."""
    check_config(config)
    if config.front_ends < 1:
        raise FaceBridgeError(f"--front-ends {config.front_ends} starts no front end", "pass 1 or more")
    each = -(-config.max_streams // config.front_ends)
    slot_bytes = config.frame_slot_kib * 1024
    decoded_frame_bytes = max([DECODED_FRAME_PIXELS] + [h * w for h, w in config.prewarm]) * 3
    pool_bytes = config.front_ends * each * decoded_frame_bytes if config.decode_processes else 0
    on_gpu = config.runners != "cpu"  # the decode processes' frames in GPU memory, not in /dev/shm
    room = shm_room(config.front_ends * RingShape(each, slot_bytes).nbytes + (0 if on_gpu else pool_bytes))
    if room is not None:
        raise FaceBridgeError(room, "lower --max-streams or --frame-slot-kib" + (", or --decode-processes (the "
                                    "CPU decode processes' frames are there too)" if pool_bytes and not on_gpu else "")
                              + ", or give /dev/shm more room (e.g. docker run --shm-size 2g)")
    if config.decode_processes and config.runners != "cpu":
        if not mps_running():
            _report(f"--decode-processes {config.decode_processes} without MPS: their CUDA contexts take turns with "
                    "the engine's on the GPU, which made a decode slower than in one process (H100: "
                    "docs/PERFORMANCE.md); start `nvidia-cuda-mps-control -d` before facebridge serve")
    engine = None
    took, marks = [], [time.monotonic()]  # the start-up's steps, on one line: at 1,000 streams it takes minutes

    def step(name: str) -> None:
        marks.append(time.monotonic())
        took.append(f"{name} {marks[-1] - marks[-2]:.0f} s")

    models = batched_models(config, lambda: engine.services() if engine is not None else [],
                            max_batch=config.front_ends * each)
    step("models")
    decoder = ImageDecoder(models.device, allow_raw=True, library=config.jpeg_decoder)
    batched = decoder.gpu_jpeg if config.jpeg_batches is None else config.jpeg_batches
    releases = models.releases
    fronts = None
    try:
        engine = Engine(models.make_service, front_ends=config.front_ends, slots_each=each,
                        slot_bytes=slot_bytes, decoder=decoder, jpeg_batches=batched,
                        decode_workers=config.decode_workers or max(1, min(8, os.cpu_count() or 1)),
                        max_frame_sizes=config.max_frame_sizes, versions=lambda: models.gate.versions,
                        on_pass=releases.check_pass if releases is not None else None, jpeg_batch=models.max_batch,
                        decode_processes=config.decode_processes, decoded_frame_bytes=decoded_frame_bytes,
                        jpeg_library=config.jpeg_decoder)
        if releases is not None:
            releases.start()  # releases installed before now serve from the first frame
        for frame_hw in config.prewarm:
            engine.prepare(frame_hw)
        step("prewarm")
        if config.decode_processes:
            engine.wait_decode_processes()  # they started with the engine, beside the prewarm
            step("decode processes")
        log.info("heap settled after start-up in %.0f ms", settle_heap())
        fronts = FrontEnds(engine, config, verbose)
        engine.on_lost = fronts.lost
        for index in range(config.front_ends):
            fronts.start(index)
        fronts.wait_listening()
        step("front ends")
        _report(f"started in {marks[-1] - marks[0]:.0f} s ({', '.join(took)})")
    except BaseException:
        if fronts is not None:
            fronts.stop()
        if engine is not None:
            engine.close()
        models.close()
        raise
    return engine, fronts, models


def status_line(engine, fronts: FrontEnds, cpu: dict[str, float] | None = None) -> str:
    """The engine's 5-second line; cpu: its threads' CPU seconds since the last line (the busiest first)."""
    s = engine.stats()
    busiest = ", ".join(f"{k} {v:.2f}" for k, v in sorted((cpu or {}).items(), key=lambda kv: -kv[1])[:4])
    return (f"engine: {s['front_ends']}/{fronts.count} front ends (restarted {fronts.restarts}) | passes "
            f"{s['passes']} | batch {s['mean_batch']:.1f} | images refused {s['refused']} | failed {s['failed']}"
            + (f" | decode processes {s['decode_processes']}/{engine.decode_process_count} (restarted "
               f"{s['decode_process_restarts']})" if engine.decode_process_count else "")
            + (f" | non-finite {s['non_finite']}" if s["non_finite"] else "")
            + (f" | cpu s {busiest}" if busiest else ""))


def serve_front_ends(config: ServeConfig, status: bool = True, ready=lambda line: print(line, flush=True),
                     verbose: bool = False) -> int:
    """Serve until Ctrl-C or SIGTERM; `ready(line)` is told every front end's address once all listen."""
    engine, fronts, models = build_engine(config, verbose)
    cpu = [thread_cpu_seconds()]

    def line() -> str:  # with the engine's CPU by thread since the last line
        now = thread_cpu_seconds()
        text, cpu[0] = status_line(engine, fronts, cpu_between(cpu[0], now)), now
        return text

    try:  # Ctrl-C: the front ends and the engine end cleanly, then the command's Ctrl-C status (130)
        each = engine.slots_each
        pids = ", ".join(f"pid {p}" for p in fronts.pids())
        processes = "front-end process" if fronts.count == 1 else "front-end processes"
        ready(f"facebridge serve: listening on {', '.join(fronts.addresses)} ({fronts.count} {processes}: {pids}; "
              f"engine pid {os.getpid()}: {config.runners} runners, decode {engine.decoder_name}, up to "
              f"{config.max_streams} streams, {each} a front end)")
        serve_until_stopped(line if status else None)
    finally:
        with stop_not_cut_short():  # a second Ctrl-C left the rings in /dev/shm
            fronts.stop()
            engine.close()
            models.close()
    say_stopped("facebridge serve")  # returned: SIGTERM (Ctrl-C passes through as KeyboardInterrupt)
    return 0
