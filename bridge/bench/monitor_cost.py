"""`facebridge bench pipeline --monitor`: what the monitor costs the stream, in frames a second.

The real session (`BridgeSession`: runner threads, output guard, sinks off) reads the bundled sample as fast as it
goes (every frame kept) in three modes: `off` (no monitor), `idle` (the monitor listening, nobody watching) and
`watched` (a page open with the preview on). The page is headless Chromium (Debian's, driven by Playwright) in
its own process on this machine, so its rendering competes for the same cores, as it would on a performer's
laptop; `--watch ws` uses a bare WebSocket client in its own process instead (what the bridge itself pays, without
the browser's drawing). The machine may be shared and noisy: the modes are interleaved (a different order each
round), each round repeated, and the JSON reports every run, the median and the spread of each mode, and each
mode's cost against `off`'s median.

Figures per run: `fps` (frames over wall time: the throughput the budget is about, but on a shared machine it
mostly measures how much CPU the neighbours left), `cpu_ms_per_frame` (the bridge process' CPU time, all its
threads, over the frames sent: what the monitor costs the bridge itself, whoever else runs) and
`watcher_cpu_ms_per_frame` (the watcher's whole process tree: the browser's drawing). On a noisy box the CPU
figures are the ones to trust; `total_cpu_cost_pct` adds both against `off`. `monitor_cores` (the bridge's CPU
beyond what `off` spends on the same frames, a second) and `watcher_cores` (the watcher's, a second) are what the
monitor and the page take from the machine; `projected_cost_pct` divides their sum by the cores: the throughput
cost on this machine with the bridge CPU-bound and nothing else running.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bridge.bench.common import cost_text, reporter, table

MODES = ("off", "idle", "watched")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def add_arguments(p) -> None:
    p.add_argument("--monitor", action="store_true",
                   help="measure the monitor's cost instead: throughput with it off, idle and watched (page open, "
                        "preview on), interleaved and repeated")
    p.add_argument("--repeats", type=int, default=3, help="--monitor: rounds of the three modes (default 3)")
    p.add_argument("--watch", choices=("auto", "chromium", "ws"), default="auto",
                   help="--monitor: who watches: headless Chromium with the page (auto: when installed) or a bare "
                        "WebSocket client")


def _watcher(url: str, client: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]) + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "bridge.bench.monitor_cost", client, url], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of `pid` and every process below it, read from /proc (0 where there is none)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    stats = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, total, grew = {pid}, 0.0, True
    while grew:
        grew = False
        for p, (parent, _) in stats.items():
            if parent in tree and p not in tree:
                tree.add(p)
                grew = True
    for p in tree:
        total += stats.get(p, (0, 0.0))[1]
    return total


def _one(mode: str, args, client: str) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.pipeline import PipelineOptions
    from bridge.runtime.session import BridgeSession, OutputConfig, RunConfig

    with tempfile.TemporaryDirectory() as takes:
        config = RunConfig(source="sample", fast=True, max_frames=args.frames, status_line=False, calibration=False,
                           monitor=None if mode == "off" else "127.0.0.1:0", takes_dir=takes,
                           outputs=OutputConfig(llf=None, vmc=None),
                           pipeline=PipelineOptions(backend=args.backend, cpu_precision=args.cpu_precision))
        session = BridgeSession(config).open()
        watcher, watcher_cpu = None, 0.0
        try:
            if mode == "watched":
                watcher = _watcher(session.monitor.url, client)
                deadline = time.monotonic() + 60
                while not session.feed._preview_pages:  # the page is open and asked for the preview
                    if watcher.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the {client} watcher did not connect: {watcher.stderr.read()[-500:]}")
                    time.sleep(0.05)
                watcher_cpu = _tree_cpu_s(watcher.pid)
            t0, cpu0 = time.perf_counter(), time.process_time()
            summary = session.run()
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            watcher_cpu = _tree_cpu_s(watcher.pid) - watcher_cpu if watcher is not None else 0.0
        finally:
            session.close()
            if watcher is not None:
                watcher.terminate()
                watcher.wait(30)
    frames = summary.stats.sent
    return {"mode": mode, "fps": round(frames / wall, 2), "cpu_ms_per_frame": round(cpu * 1000 / frames, 3),
            "watcher_cpu_ms_per_frame": round(watcher_cpu * 1000 / frames, 3), "frames": frames,
            "seconds": round(wall, 2)}


def run(args) -> dict:
    report = reporter("pipeline --monitor")
    client = args.watch
    if client == "auto":
        client = "chromium" if Path(CHROMIUM).exists() and _has_playwright() else "ws"
    runs = []
    for r in range(args.repeats):
        order = MODES[r % 3:] + MODES[:r % 3]  # interleaved: each mode takes each place in turn
        for mode in order:
            runs.append(_one(mode, args, client) | {"round": r})
            report(f"round {r + 1}/{args.repeats} {mode}: {runs[-1]['fps']} fps")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    modes = {mode: _summary([x for x in runs if x["mode"] == mode]) for mode in MODES}
    base = modes["off"]
    for mode in ("idle", "watched"):
        m = modes[mode]
        m["cost_pct"] = round((1 - m["fps"]["median"] / base["fps"]["median"]) * 100, 1)
        m["cpu_cost_pct"] = round((m["cpu_ms_per_frame"]["median"] / base["cpu_ms_per_frame"]["median"] - 1) * 100, 1)
        total = m["cpu_ms_per_frame"]["median"] + m["watcher_cpu_ms_per_frame"]["median"]
        m["total_cpu_cost_pct"] = round((total / base["cpu_ms_per_frame"]["median"] - 1) * 100, 1)
        mine = [x for x in runs if x["mode"] == mode]
        extra = [(x["cpu_ms_per_frame"] - base["cpu_ms_per_frame"]["median"]) * x["frames"] / 1000 / x["seconds"]
                 for x in mine]
        m["monitor_cores"] = round(float(np.median(extra)), 4)
        m["watcher_cores"] = round(float(np.median([x["watcher_cpu_ms_per_frame"] * x["frames"] / 1000 / x["seconds"]
                                                    for x in mine])), 4)
        m["projected_cost_pct"] = round(100 * max(0.0, m["monitor_cores"] + m["watcher_cores"]) / cores, 1)
    w = modes["watched"]
    idle = modes["idle"]
    print(table(["monitor", "throughput cost", "bridge CPU per frame", "with the watcher", f"on {cores} free cores"],
                [[mode, cost_text(modes[mode]["cost_pct"]), cost_text(modes[mode]["cpu_cost_pct"]),
                  cost_text(modes[mode]["total_cpu_cost_pct"]) if mode == "watched" else "-",
                  cost_text(modes[mode]["projected_cost_pct"])] for mode in ("idle", "watched")]))
    within = idle["projected_cost_pct"] <= 3 and w["projected_cost_pct"] <= 10
    print(f"verdict: the monitor costs {cost_text(idle['projected_cost_pct'])} idle and "
          f"{cost_text(w['projected_cost_pct'])} watched on {cores} free cores ({'within' if within else 'over'} the "
          f"3% / 10% budget; off: {base['fps']['median']} fps, {base['cpu_ms_per_frame']['median']} ms CPU a frame, "
          f"median of {args.repeats} rounds, spread {base['fps']['spread_pct']}%)")
    return {"source": "sample", "frames_per_run": args.frames, "watcher": client, "backend": args.backend,
            "cores": cores,
            "budget_pct": {"idle": 3, "watched": 10}, "modes": modes, "runs": runs}


def _summary(runs: list[dict]) -> dict:
    """Median, min, max and spread (max - min over the median, %) of each figure over a mode's runs."""
    out = {}
    for key in ("fps", "cpu_ms_per_frame", "watcher_cpu_ms_per_frame"):
        v = np.array([r[key] for r in runs], dtype=np.float64)
        median = float(np.median(v))
        out[key] = {"median": round(median, 3), "min": float(v.min()), "max": float(v.max()),
                    "spread_pct": round(float(np.ptp(v) / median * 100), 1) if median else 0.0}
    return out


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


# --- the watchers, each run as its own process: `python -m bridge.bench.monitor_cost chromium|ws URL` ---------------
def _watch_chromium(url: str) -> None:
    # optional: playwright and its browser (the test extra)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 960})
        page.goto(url)
        page.wait_for_function("document.getElementById('connection').textContent === 'live'", timeout=60000)
        page.click("#preview-toggle")
        while True:  # watched until terminated
            page.wait_for_timeout(1000)


def _watch_ws(url: str) -> None:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import aiohttp

    async def watch():
        async with aiohttp.ClientSession() as client, client.ws_connect(url.replace("http", "ws") + "ws") as ws:
            await ws.send_str(json.dumps({"preview": True}))
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    json.loads(msg.data)  # a page parses every state

    asyncio.run(watch())


if __name__ == "__main__":
    {"chromium": _watch_chromium, "ws": _watch_ws}[sys.argv[1]](sys.argv[2])
