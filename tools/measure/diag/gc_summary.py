"""Summarise tools/measure/diag/sitecustomize.py's GC events per process within each bench serve count's measured
window."""
import glob
import json
import sys

import numpy as np

gc_dir, bench_jsons = sys.argv[1], sys.argv[2:]
windows = []
for path in bench_jsons:
    try:
        d = json.load(open(path))
    except Exception:
        continue
    for r in d.get("results", {}).get("trials", []):
        if r.get("measured_unix"):
            windows.append((path.split("/")[-1] + f":{r.get('streams')}", *r["measured_unix"]))
out = {}
for f in sorted(glob.glob(gc_dir + "/gc-*.json")):
    d = json.load(open(f))
    ev = d["ev"]
    per = {"argv": d["argv"][:160], "frozen": d.get("frozen"), "all": len(ev),
           "startup_max_ms": max((e[2] for e in ev), default=0)}
    for name, a, b in windows:
        inside = [e for e in ev if a <= e[0] <= b]
        if not inside:
            continue
        w = {}
        for g in range(3):
            v = np.array([e[2] for e in inside if e[1] == g])
            if len(v):
                w[f"gen{g}"] = {"n": int(len(v)), "per_s": round(len(v) / (b - a), 2),
                                "median_ms": round(float(np.median(v)), 3),
                                "max_ms": round(float(v.max()), 2), "sum_ms": round(float(v.sum()), 1),
                                "over_2ms": int((v > 2).sum())}
        per[name] = w
    out[f.split("/")[-1]] = per
json.dump(out, sys.stdout, indent=1)
