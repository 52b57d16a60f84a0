"""Whole-host CPU and GPU load beside a benchmark: sample while it runs, then summarise per measured window.

    python tools/measure/host_load.py sample OUT.jsonl [--interval 1]        # /proc/stat (every cpu line) until killed
    python tools/measure/host_load.py summarise --host OUT.jsonl [--dmon DMON.txt ...] (--log BENCH.log [--secs 20]
        [--warmup 3] | --bench-json BENCH.json) [--json OUT.json]

`sample` appends one JSON line a sample: unix time and the jiffies of the host ('cpu') and of each core ('cpuN'),
as /proc/stat gives them (user nice system idle iowait irq softirq steal). `summarise` takes the windows a
`facebridge bench serve` measured from its log, each line prefixed by the unix time it was printed (as
tools/measure/gpu_serve_bench.sh writes it): a count's line "N streams x F fps for S s ..." is printed just before its
client processes start, which begin 3 s later and are measured from `warmup` s after that to the count's end
(bridge/bench/serve.py `_trial`), trimmed by a second each side here; or from the bench's JSON, whose counts carry
the window they measured (`measured_unix`). Per window: busy cores of the whole host
(user, system, irq + softirq, the rest), the busiest core, and the means of every `nvidia-smi dmon -o DT` column
(sm, mem, power, clocks; GPM metrics when dmon was asked for them).
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from datetime import datetime

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
START_LINE = re.compile(r"^(\d+(?:\.\d+)?) .*bench serve: (\d+) streams x ([\d.]+) fps for ([\d.]+) s \.\.\.")


def read_stat() -> dict[str, list[int]]:
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu"):
                name, *values = line.split()
                out[name] = [int(v) for v in values[:len(FIELDS)]]
    return out


def sample(path: str, interval: float) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(path, "a") as f:
        while not stop:
            f.write(json.dumps({"t": round(time.time(), 3), "stat": read_stat()}) + "\n")
            f.flush()
            time.sleep(interval)


def windows_from_log(path: str, secs: float, warmup: float, trim: float = 1.0) -> list[dict]:
    out = []
    for line in open(path, errors="replace"):
        m = START_LINE.match(line)
        if m:
            t = float(m.group(1))
            seconds = float(m.group(4)) if m.group(4) else secs
            out.append({"streams": int(m.group(2)), "from": t + 3.0 + warmup + trim, "to": t + 3.0 + seconds - trim})
    return out


def windows_from_json(path: str, trim: float = 1.0) -> list[dict]:
    """The windows a `bench serve` JSON (or its .partial) says each count measured (`measured_unix`)."""
    data = json.load(open(path))
    trials = data.get("results", data).get("trials", [])
    return [{"streams": t["streams"], "from": t["measured_unix"][0] + trim, "to": t["measured_unix"][1] - trim}
            for t in trials if t.get("measured_unix")]


def host_in(samples: list[dict], t0: float, t1: float) -> dict | None:
    inside = [s for s in samples if t0 <= s["t"] <= t1]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    cores = [k for k in b["stat"] if k != "cpu"]

    def delta(name):
        return [y - x for x, y in zip(a["stat"][name], b["stat"][name])]

    d = dict(zip(FIELDS, delta("cpu")))
    total = sum(d.values()) or 1
    n = len(cores)
    busy = total - d["idle"] - d["iowait"]

    def share(v):
        return round(v / total * n, 2)

    per_core = []
    for c in cores:
        dc = dict(zip(FIELDS, delta(c)))
        tc = sum(dc.values()) or 1
        per_core.append((tc - dc["idle"] - dc["iowait"]) / tc)
    return {"seconds": round(b["t"] - a["t"], 1), "cores": n, "busy_cores": share(busy),
            "user_cores": share(d["user"] + d["nice"]), "system_cores": share(d["system"]),
            "irq_softirq_cores": share(d["irq"] + d["softirq"]), "steal_cores": share(d["steal"]),
            "idle_cores": share(d["idle"] + d["iowait"]),
            "busiest_core": round(max(per_core), 3), "cores_over_90pct": sum(1 for x in per_core if x > 0.9)}


def read_dmon(path: str) -> list[dict]:
    """Rows of `nvidia-smi dmon -o DT` as {t, column: value}; '-' and non-numbers dropped."""
    header, rows = None, []
    for line in open(path, errors="replace"):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "#Date":
            header = parts  # #Date Time gpu pwr ...: a name for each column of a row
            continue
        if line.startswith("#") or header is None or len(parts) < len(header):
            continue
        try:
            t = datetime.strptime(parts[0] + " " + parts[1], "%Y%m%d %H:%M:%S").timestamp()
        except ValueError:
            continue
        row = {"t": t}
        for name, value in zip(header[2:], parts[2:]):
            try:
                row[name] = float(value)
            except ValueError:
                pass
        rows.append(row)
    return rows


def dmon_in(rows: list[dict], t0: float, t1: float) -> dict | None:
    inside = [r for r in rows if t0 <= r["t"] <= t1]
    if not inside:
        return None
    cols = sorted({k for r in inside for k in r if k not in ("t", "gpu", "Idx")})
    out = {"samples": len(inside)}
    for c in cols:
        vals = [r[c] for r in inside if c in r]
        if vals:
            out[c] = {"mean": round(sum(vals) / len(vals), 1), "max": max(vals)}
    return out


def summarise(args) -> dict:
    samples = [json.loads(x) for x in open(args.host) if x.strip()]
    dmons = {p: read_dmon(p) for p in (args.dmon or [])}
    result = {"windows": []}
    windows = windows_from_json(args.bench_json) if args.bench_json else \
        windows_from_log(args.log, args.secs, args.warmup)
    for w in windows:
        entry = {"streams": w["streams"], "from_unix": round(w["from"], 1), "to_unix": round(w["to"], 1),
                 "host_cpu": host_in(samples, w["from"], w["to"])}
        for p, rows in dmons.items():
            entry[f"dmon:{p.rsplit('/', 1)[-1]}"] = dmon_in(rows, w["from"], w["to"])
        result["windows"].append(entry)
    if samples:  # the quietest stretch too: what the host does with nothing measured (start-up aside)
        result["first_sample_unix"], result["last_sample_unix"] = samples[0]["t"], samples[-1]["t"]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("out")
    s.add_argument("--interval", type=float, default=1.0)
    m = sub.add_parser("summarise")
    m.add_argument("--host", required=True)
    m.add_argument("--dmon", action="append")
    where = m.add_mutually_exclusive_group(required=True)
    where.add_argument("--log", help="a bench serve log, each line prefixed by its unix time")
    where.add_argument("--bench-json", help="a bench serve JSON whose trials carry measured_unix")
    m.add_argument("--secs", type=float, default=20.0)
    m.add_argument("--warmup", type=float, default=3.0)
    m.add_argument("--json")
    args = p.parse_args()
    if args.cmd == "sample":
        sample(args.out, args.interval)
        return
    result = summarise(args)
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    for w in result["windows"]:
        h = w["host_cpu"] or {}
        line = (f"{w['streams']} streams: host busy {h.get('busy_cores')} of {h.get('cores')} cores (user "
                f"{h.get('user_cores')}, system {h.get('system_cores')}, irq+softirq {h.get('irq_softirq_cores')}), "
                f"busiest core {h.get('busiest_core')}")
        for k, v in w.items():
            if k.startswith("dmon:") and v:
                line += f"; {k[5:]}: " + ", ".join(f"{c} {d['mean']}" for c, d in v.items() if c != "samples")
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
