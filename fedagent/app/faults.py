"""Test-only fault injection for the device side, so tests can make a real device fail at a chosen SecAgg+ stage.

Policy: off unless FEDAGENT_TEST_FAULTS is set in the environment of the device's own processes, or
FEDAGENT_TEST_FAULTS_FILE names a file holding the same text (read at every message, so a test can change the
faults between runs); the server cannot switch either on. The text is a comma-separated list of
`stage:round:action[:occurrence]`:
    stage       setup | share_keys | collect_masked_vectors | unmask
    round       the server round (1, 2, ...)
    action      raise (the device fails this stage), stall (it hangs for 10 minutes, to be killed),
                nan / range (its trained update gets a NaN / a value of 1e3: the update guard must refuse it)
    occurrence  which time this stage of this round is seen (1 = first attempt, default)
Occurrences are counted in FEDAGENT_TEST_FAULTS_DIR (a folder the test owns), one file per node.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

ENV, FILE_ENV, DIR_ENV = "FEDAGENT_TEST_FAULTS", "FEDAGENT_TEST_FAULTS_FILE", "FEDAGENT_TEST_FAULTS_DIR"


def _rules() -> list[tuple[str, int, str, int]]:
    text = os.environ.get(ENV, "")
    path = os.environ.get(FILE_ENV)
    if path and Path(path).exists():
        text += "," + Path(path).read_text()
    rules = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.split(":")
        rules.append((parts[0], int(parts[1]), parts[2], int(parts[3]) if len(parts) > 3 else 1))
    return rules


def _seen(node_id: int, stage: str, rnd: int) -> int:
    """Count this (stage, round) for this node and return how many times it has been seen, this one included."""
    folder = Path(os.environ.get(DIR_ENV) or "/tmp")
    path = folder / f"fedagent-faults-{node_id}.json"
    counts = json.loads(path.read_text()) if path.exists() else {}
    key = f"{stage}:{rnd}"
    counts[key] = counts.get(key, 0) + 1
    path.write_text(json.dumps(counts))
    return counts[key]


def fault_mod(msg, ctxt, call_next):
    """Outermost mod: raise or stall at the configured stage; nan/range are applied later by `corrupt`."""
    rules = _rules()
    if not rules:
        return call_next(msg, ctxt)
    # optional extra: fed (flwr); the module loads without it
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

    configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
    stage = str(configs[Key.STAGE]) if configs is not None and Key.STAGE in configs else "?"
    rnd = int(msg.metadata.group_id or 0)
    seen = _seen(ctxt.node_id, stage, rnd)
    for r_stage, r_round, action, occurrence in rules:
        if (r_stage, r_round, occurrence) != (stage, rnd, seen):
            continue
        if action == "raise":
            raise RuntimeError(f"test fault: this device fails {stage} of round {rnd}")
        if action == "stall":
            time.sleep(600)
        if action in ("nan", "range"):
            os.environ["FEDAGENT_TEST_CORRUPT_NOW"] = action
    try:
        return call_next(msg, ctxt)
    finally:
        os.environ.pop("FEDAGENT_TEST_CORRUPT_NOW", None)


def corrupt(adapter: dict, rnd: int) -> dict:
    """The trained adapter, spoiled when a nan/range fault is active for this message (tests only)."""
    action = os.environ.get("FEDAGENT_TEST_CORRUPT_NOW")
    if not action:
        return adapter
    out = {k: v.copy() for k, v in adapter.items()}
    out["adapter.B"][0, 0] = np.nan if action == "nan" else 1e3
    return out
