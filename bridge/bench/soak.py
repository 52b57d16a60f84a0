"""`facebridge bench soak --minutes N`: a real `facebridge run` with every output on (Live Link Face and VMC to
UDP receivers here, the gRPC stream with a subscriber that disconnects and reconnects, a take recorder) for N
minutes, sampling the bridge process's memory, threads and open files every interval. No growth is the result
wanted: the JSON gives each sample and the slopes fitted to them after the first sample (warm-up).

The bridge runs as its own process with a temporary FACEBRIDGE_HOME (no profile of the user's is touched) and
records into a temporary take that is checked and removed at the end (--keep-take keeps it). `--slow-fsync-ms N`
runs it under strace with every fsync delayed by N ms (a slow disk, for real): Live Link Face's packet count and
longest gap then show whether the recorder holds the live outputs back. `--stuck-subscribers N` adds gRPC clients
that subscribe and never read, `--monitor-sockets N` WebSocket connections to the monitor page that never read:
neither may cost Live Link Face a frame (its gaps over 200 ms are counted).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from bridge.bench.common import exit_text, positive_float, reporter, table
from bridge.child_status import running
from bridge.errors import FaceBridgeError


def add_arguments(p) -> None:
    p.add_argument("--minutes", type=positive_float, default=5.0, help="how long the bridge runs (default 5)")
    p.add_argument("--interval", type=positive_float, default=60.0, help="seconds between samples (default 60)")
    p.add_argument("--source", default="sample", help="the bridge's --source (default: the bundled sample, looped)")
    p.add_argument("--reconnect-every", type=float, default=10.0, metavar="S",
                   help="the gRPC subscriber disconnects and reconnects every S seconds (default 10)")
    p.add_argument("--keep-take", action="store_true", help="keep the recorded take (its path is in the JSON)")
    p.add_argument("--slow-fsync-ms", type=float, default=0.0, metavar="MS",
                   help="delay every fsync of the bridge by MS milliseconds (needs strace): a slow disk")
    p.add_argument("--stuck-subscribers", type=int, default=0, metavar="N",
                   help="N gRPC clients that subscribe and never read (default 0)")
    p.add_argument("--monitor-sockets", type=int, default=0, metavar="N",
                   help="N WebSocket connections to the monitor page that never read (default 0)")


def _proc_status(pid: int) -> dict:
    """RSS (MB), threads and open file descriptors of a running process, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return {"rss_mb": round(int(fields["VmRSS"].split()[0]) / 1024, 1), "threads": int(fields["Threads"]),
            "open_files": len(os.listdir(f"/proc/{pid}/fd"))}


# Linux's SO_TIMESTAMPNS (asm-generic/socket.h; Python's socket module does not name it): each datagram carries the
# kernel's arrival time, so a receiver thread that this process's own load holds back reads its backlog later but
# measures the gaps as they were on the wire, not as it was scheduled.
_SO_TIMESTAMPNS = 35
_GAP_S = 0.2  # the bound on a Live Link Face gap
_GAPS_KEPT = 100  # gap moments kept in the JSON (the count is exact)


class _UdpCounter:
    """A UDP socket on 127.0.0.1 counting what arrives (a Live Link Face or VMC receiver), with the gaps between
    datagrams by their kernel arrival times."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            self.kernel_times = True
        except OSError:  # not Linux: the time the thread read it
            self.kernel_times = False
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.longest_gap_s = 0.0  # between two datagrams, after the first
        self.gaps_over_200ms = 0
        self.gaps: list[list[float]] = []  # [seconds after the first datagram, gap ms], the first _GAPS_KEPT
        self.first: float | None = None
        self._last: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _arrival(self, ancdata) -> float:
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16:
                sec, nsec = struct.unpack_from("qq", data)
                return sec + nsec / 1e9
        return time.time()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                _, ancdata, _, _ = self.sock.recvmsg(65536, 64)
            except OSError:
                continue
            now = self._arrival(ancdata)
            if self._last is not None:
                gap = now - self._last
                self.longest_gap_s = max(self.longest_gap_s, gap)
                if gap > _GAP_S:
                    self.gaps_over_200ms += 1
                    if len(self.gaps) < _GAPS_KEPT:
                        self.gaps.append([round(self._last - self.first, 3), round(gap * 1000, 1)])
            else:
                self.first = now
            self._last = now
            self.count += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


class _Reconnecting:
    """A gRPC subscriber that reads for `every` seconds, disconnects, and connects again, until stopped."""

    def __init__(self, address: str, every: float) -> None:
        self.address, self.every = address, every
        self.frames = self.connections = self.errors = 0
        self.error_codes: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
        import grpc

        from bridge.grpc.gen import facebridge_pb2 as pb
        from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

        while not self.stop.is_set():
            channel = grpc.insecure_channel(self.address)
            try:
                stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest(), timeout=self.every)
                first = True
                for part in stream:
                    self.connections += first  # connected once the header came
                    first = False
                    self.frames += part.WhichOneof("part") == "frame"
                    if self.stop.is_set():
                        stream.cancel()
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
                    if self.connections:  # before the first connection the bridge is starting
                        self.errors += 1
                        self.error_codes[e.code().name] = self.error_codes.get(e.code().name, 0) + 1
                    self.stop.wait(1.0)
            finally:
                channel.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(self.every + 5)


def _stuck_subscribers(address: str, count: int, deadline_s: float) -> list:
    """`count` gRPC clients that subscribe and never read (each its own channel: a connection of its own)."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import grpc

    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    clients = []
    end = time.monotonic() + deadline_s
    while len(clients) < count and time.monotonic() < end:
        channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])  # its own TCP
        try:
            stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest())
            next(stream)  # connected (the header), then never read again
            clients.append((channel, stream))
        except grpc.RpcError:  # the bridge is still starting
            channel.close()
            time.sleep(1.0)
    return clients


def _idle_websockets(port: int, count: int) -> list[socket.socket]:
    """`count` WebSocket connections to the monitor's /ws that never read what it sends."""
    sockets = []
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                          ).encode())
            sockets.append(sock)
        except OSError:
            break
    return sockets


def _bridge_pid(proc: subprocess.Popen, wrapped: bool) -> int:
    """The bridge's own pid: the process itself, or the descendant of strace that runs bridge.cli (strace may fork
    a helper first)."""
    if not wrapped:
        return proc.pid
    for _ in range(400):
        todo = [proc.pid]
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if pid != proc.pid and b"bridge.cli" in argv and not argv[0].endswith(b"strace"):
                    return pid  # not strace's own fork before it runs the bridge
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        todo += [int(c) for c in f.read().split()]
            except OSError:
                continue
        time.sleep(0.05)
    return proc.pid


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slope_per_hour(samples: list[dict], key: str) -> float | None:
    """Least-squares growth of `key` per hour over the samples after the first (warm-up)."""
    points = samples[1:]
    if len(points) < 2:
        return None
    t = np.array([s["t_s"] for s in points]) / 3600.0
    v = np.array([s[key] for s in points], dtype=float)
    return round(float(np.polyfit(t, v, 1)[0]), 2)


def run(args) -> dict:
    report = reporter("soak")
    work = tempfile.mkdtemp(prefix="facebridge-soak-")
    take = os.path.join(work, "take")
    llf, vmc = _UdpCounter(), _UdpCounter()
    address = f"127.0.0.1:{_free_port()}"
    monitor_port = _free_port()
    cmd = [sys.executable, "-m", "bridge.cli", "run", "--source", args.source, "--quiet",
           "--llf", f"127.0.0.1:{llf.port}", "--vmc", f"127.0.0.1:{vmc.port}", "--grpc", address, "--record", take,
           "--monitor", f"127.0.0.1:{monitor_port}"]
    if args.slow_fsync_ms > 0:
        if shutil.which("strace") is None:
            raise FaceBridgeError("--slow-fsync-ms needs strace", "apt-get install strace, or leave the option out")
        delay_us = int(args.slow_fsync_ms * 1000)
        cmd = ["strace", "--seccomp-bpf", "-f", "-qq", "-o", os.devnull, "-e", "trace=fsync,fdatasync",
               "-e", f"inject=fsync,fdatasync:delay_exit={delay_us}"] + cmd
    env = dict(os.environ, FACEBRIDGE_HOME=os.path.join(work, "home"))
    log_path = os.path.join(work, "bridge.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    subscriber = _Reconnecting(address, args.reconnect_every)
    bridge_pid = _bridge_pid(proc, wrapped=args.slow_fsync_ms > 0)
    stuck = _stuck_subscribers(address, args.stuck_subscribers, 300.0)
    idle_pages = _idle_websockets(monitor_port, args.monitor_sockets)
    if stuck or idle_pages:
        report(f"{len(stuck)} gRPC subscribers that never read, {len(idle_pages)} monitor sockets that never read")
    samples: list[dict] = []
    started = time.monotonic()
    end = started + args.minutes * 60.0
    next_sample = started
    interrupted = False
    try:
        try:
            while time.monotonic() < end and running(proc):
                now = time.monotonic()
                if now >= next_sample:
                    sample = {"t_s": round(now - started, 1), **_proc_status(bridge_pid), "llf_packets": llf.count,
                              "vmc_packets": vmc.count, "grpc_frames": subscriber.frames,
                              "grpc_connections": subscriber.connections,
                              "take_mb": round(_size(take) / 2**20, 1)}
                    samples.append(sample)
                    report(f"{sample['t_s'] / 60:5.1f} min: rss {sample['rss_mb']} MB, {sample['threads']} threads, "
                           f"{sample['open_files']} files, llf {sample['llf_packets']}, grpc {sample['grpc_frames']} "
                           f"frames over {sample['grpc_connections']} connections")
                    next_sample += args.interval
                time.sleep(min(1.0, max(0.05, next_sample - time.monotonic())))
        except KeyboardInterrupt:  # keep every sample taken: the result is written, marked partial
            interrupted = True
    finally:
        # the bridge took the same Ctrl-C (one process group)
        crashed = None if interrupted or running(proc) else proc.wait()
        subscriber.close()  # first, so that the bridge going down is not counted as a subscriber error
        for channel, stream in stuck:
            stream.cancel()
            channel.close()
        for sock in idle_pages:
            sock.close()
        if crashed is None:
            try:
                os.kill(bridge_pid, signal.SIGTERM)
            except ProcessLookupError:  # the bridge itself is gone (strace still ending)
                crashed = -1
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            for pid in {bridge_pid, proc.pid}:  # the bridge too: killing strace alone would leave it running
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            rc = proc.wait()
        llf.close()
        vmc.close()
    with open(log_path, errors="replace") as f:
        tail = f.read()[-2000:]
    frames = _lines(os.path.join(take, "frames.jsonl"))
    result = {
        "command": " ".join(cmd[1:]), "minutes": args.minutes, "interval_s": args.interval,
        "slow_fsync_ms": args.slow_fsync_ms, "stuck_subscribers": len(stuck), "monitor_sockets": len(idle_pages),
        "exit_code": rc, "ended_by": "Ctrl-C" if interrupted else "crash" if crashed is not None else "SIGTERM",
        "interrupted": interrupted, "samples": samples,
        "growth_per_hour": {key: _slope_per_hour(samples, key) for key in ("rss_mb", "threads", "open_files")},
        "range_after_first_sample": {key: [min(s[key] for s in samples[1:]), max(s[key] for s in samples[1:])]
                                     if len(samples) > 1 else None for key in ("rss_mb", "threads", "open_files")},
        "outputs": {"llf_packets": llf.count, "llf_longest_gap_ms": round(llf.longest_gap_s * 1000, 1),
                    "llf_gaps_over_200ms": llf.gaps_over_200ms, "llf_gaps": llf.gaps,
                    "llf_gap_clock": "kernel arrival (SO_TIMESTAMPNS)" if llf.kernel_times else "receiver read",
                    "llf_rate_hz": round((llf.count - 1) / (llf._last - llf.first), 2) if llf.count > 1 else 0.0,
                    "take_metadata": _take_metadata(take),
                    "vmc_packets": vmc.count, "grpc_frames": subscriber.frames,
                    "grpc_connections": subscriber.connections, "grpc_errors": subscriber.errors,
                    "grpc_error_codes": subscriber.error_codes,
                    "take_frames": frames, "take_csv_rows": max(0, _lines(os.path.join(take, "frames.csv")) - 1)},
        "bridge_log_tail": tail,
    }
    if args.keep_take:
        result["take"] = take
    else:
        shutil.rmtree(work, ignore_errors=True)
    report(f"done: the bridge ended with {exit_text(rc)}")
    return result


def _grows(results: dict) -> bool:
    """Memory rising over 10 MB an hour, or threads or files whose fitted rise over the run is two or more (one that
    comes and goes, 38-39 threads, is not a leak)."""
    growth, hours = results["growth_per_hour"], results["minutes"] / 60
    return ((growth["rss_mb"] or 0) > 10 or (growth["threads"] or 0) * hours >= 2
            or (growth["open_files"] or 0) * hours >= 2)


def summary(results: dict) -> str:
    """The growth table (per hour, after the first sample) and a one-line verdict."""
    growth, spread, out = results["growth_per_hour"], results["range_after_first_sample"], results["outputs"]
    units = {"rss_mb": "MB", "threads": "threads", "open_files": "files"}

    def span(key):
        return "-" if spread[key] is None else f"{spread[key][0]}-{spread[key][1]} {units[key]}"

    names = {"rss_mb": "memory (RSS)", "threads": "threads", "open_files": "open files"}
    rows = [[names[key], "-" if growth[key] is None else f"{growth[key]:+.2f} {units[key]}/h", span(key)]
            for key in units]
    lines = [table(["measure", "growth", "range after the first sample"], rows),
             f"outputs: {out['llf_packets']} Live Link Face packets, {out['vmc_packets']} VMC packets, "
             f"{out['grpc_frames']} gRPC frames over {out['grpc_connections']} connections, take {out['take_frames']} "
             "frames"]
    samples = len(results["samples"])
    if samples < 3:
        verdict = f"too short to judge growth ({samples} samples; run --minutes longer)"
    elif _grows(results):
        verdict = "GROWING: memory, threads or open files rise over the run (see the growth column)"
    else:
        verdict = "steady: no growth in memory, threads or open files"
    partial = " (partial: stopped by Ctrl-C)" if results.get("interrupted") else ""
    lines.append(f"verdict: {verdict}{partial}; the bridge ended with {exit_text(results['exit_code'])}, "
                 f"{results['minutes']} min asked, samples every {results['interval_s']:g} s")
    return "\n".join(lines)


def _take_metadata(take: str) -> dict:
    """take.json's counts: frames, complete, frames_dropped (what a slow disk cost the take)."""
    try:
        with open(os.path.join(take, "take.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: meta.get(k) for k in ("frames", "complete", "frames_dropped", "frame_rate")}


def _size(path: str) -> int:
    try:
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    except OSError:
        return 0


def _lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0
