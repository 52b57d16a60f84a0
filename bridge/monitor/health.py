"""Health answers for probes: `/healthz` says the process answers at all; `/readyz` says it does its job: every
model is loaded and a frame reached the sinks within the last READY_WITHIN_S seconds. Both read only a
`StatsSnapshot`, so a `facebridge serve` box answers them the same way."""
from __future__ import annotations

from bridge.stats import StatsSnapshot

READY_WITHIN_S = 3.0  # a frame older than this: the source stalled, or the pipeline did


def liveness(snapshot: StatsSnapshot) -> dict:
    return {"alive": True, "uptime_s": round(snapshot.uptime_s, 1)}


def readiness(snapshot: StatsSnapshot, within_s: float = READY_WITHIN_S) -> tuple[bool, dict]:
    """(ready, the reasons in words) for /readyz."""
    age = snapshot.since_last_sent_s
    problems = []
    if not snapshot.models_loaded:
        problems.append("models are still loading")
    if age is None:
        problems.append("no frame produced yet")
    elif age > within_s:
        problems.append(f"no frame produced for {age:.1f} s (is the source running?)")
    return not problems, {"ready": not problems, "models_loaded": snapshot.models_loaded,
                          "last_frame_age_s": None if age is None else round(age, 3), "problems": problems}
