"""`fedagent bench`: does federated personalisation help, and what does a round cost on this machine.

Accuracy (in process, deterministic): a population of simulated speakers (fedagent/local/population.py), `devices` of
them taking part and `held_out` never seen by training. The global adapter comes from `rounds` rounds of FedAvg
over the devices' local fine-tunes, run with the same code the ClientApp runs (tests/e2e/test_federation.py
shows SecAgg+ gives this average within 1e-5). Reported per speaker, on held-out windows of that speaker:
mouth-weight MAE of the shipped (base) adapter, of the global adapter, and of the speaker's personalised adapter
(fine-tuned from the global one on the speaker's own training windows, early-stopped on its held-out slice,
exactly what a device keeps). Done twice: with the articulation style the simulated camera adds, and with none
(acoustic differences only).

Cost (real processes): for each client count, a real SuperLink and SuperNodes on 127.0.0.1 run `rounds`
rounds; per round: wall seconds of the four SecAgg+ stages (from the server's events), and bytes per device per
round from the SuperLink's traffic counters. Flower's default ClientApp mode can be timed beside it.
"""
from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from fedagent.app.data_store import load_device_data
from fedagent.app.events import Event, StageEvent
from fedagent.app.task import TrainConfig, default_adapter, fine_tune, mouth_error
from fedagent.local import population
from fedagent.local.federation import LocalFederation
from fedagent.local.simulation import device_stores, server_eval_store

ROUND_CONFIG = TrainConfig()  # what the server sends by default (fedagent/app/project.py RUN_CONFIG)
PERSONAL_CONFIG = TrainConfig.personal()


def _mean(values) -> float:
    return round(float(np.mean(values)), 5)


def federated_global(datas: list, rounds: int) -> tuple[dict, list[float]]:
    """FedAvg of local fine-tunes, `rounds` times, from the shipped adapter.
    -> (global adapter, mean device error after each round)."""
    current = default_adapter()
    history = []
    for _ in range(rounds):
        locals_ = [fine_tune(current, d.train, d.held_out, ROUND_CONFIG).adapter for d in datas]
        current = {k: np.mean([a[k] for a in locals_], axis=0).astype(np.float32) for k in current}
        history.append(_mean([mouth_error(current, d.held_out) for d in datas]))
    return current, history


def _speaker_rows(speakers, datas, global_adapter) -> list[dict]:
    base = default_adapter()
    rows = []
    for speaker, data in zip(speakers, datas):
        personal = fine_tune(global_adapter, data.train, data.held_out, PERSONAL_CONFIG)
        rows.append({"speaker": speaker.name, "held_out_frames": len(data.held_out),
                     "base": round(mouth_error(base, data.held_out), 5),
                     "global": round(mouth_error(global_adapter, data.held_out), 5),
                     "personal": round(personal.error_after, 5), "personal_epochs": personal.epochs})
    return rows


def _summary(rows: list[dict]) -> dict:
    base, glob, pers = (np.array([r[k] for r in rows]) for k in ("base", "global", "personal"))
    return {"base": _mean(base), "global": _mean(glob), "personal": _mean(pers),
            "global_vs_base_pct": round(float(100 * (1 - glob.mean() / base.mean())), 1),
            "personal_vs_global_pct": round(float(100 * (1 - pers.mean() / glob.mean())), 1),
            "speakers_global_better_than_base": int((glob < base).sum()),
            "speakers_personal_better_than_global": int((pers < glob).sum()), "speakers": len(rows)}


def accuracy(devices: int, held_out: int, utterances: int, rounds: int, cache: Path, styled: bool, say=print) -> dict:
    started = time.monotonic()
    parts = {}
    for kind, count in (("device", devices), ("held-out", held_out)):
        speakers = population.speakers(kind, count)
        stores = [population.speaker_store(s, utterances, cache, styled=styled) for s in speakers]
        parts[kind] = (speakers, [load_device_data(st) for st in stores])
    say(f"  {'styled' if styled else 'acoustic-only'}: {devices} devices + {held_out} held-out speakers ready "
        f"({time.monotonic() - started:.0f} s)")
    global_adapter, history = federated_global(parts["device"][1], rounds)
    held_rows = _speaker_rows(*parts["held-out"], global_adapter)
    device_rows = _speaker_rows(*parts["device"], global_adapter)
    return {"styled_teacher": styled, "rounds": rounds, "device_error_per_round": history,
            "held_out_speakers": {"summary": _summary(held_rows), "per_speaker": held_rows},
            "devices": {"summary": _summary(device_rows), "per_speaker": device_rows},
            "seconds": round(time.monotonic() - started, 1)}


def round_cost(clients: int, rounds: int, fast: bool, utterances: int, cache: Path, say=print) -> dict:
    stores = device_stores(clients, utterances, cache)
    evaluation = server_eval_store(2, utterances, cache)
    with tempfile.TemporaryDirectory(prefix="fedagent-bench-") as work, \
            LocalFederation(work, fast=fast, nice=0) as fed:
        started = time.monotonic()
        fed.start_link()
        for i, store in enumerate(stores):
            fed.add_device(f"device{i}", store.root, wait=False)
        fed.wait_devices(clients)
        ready_s = time.monotonic() - started
        outcome = fed.run({"rounds": rounds, "min-clients": clients, "eval-store": str(evaluation.root)})
    traffic = outcome.info.get("network-traffic", {})
    total = int(traffic.get("total-bytes", 0))
    per_round = [r["seconds"] for r in outcome.rounds]
    result = {"clients": clients, "mode": "warm ClientApp host" if fast else "Flower default (process per message)",
              "status": outcome.info.get("status"), "round_seconds": per_round,
              "round_seconds_mean": round(float(np.mean(per_round)), 2) if per_round else None,
              "stage_seconds": _stage_means(outcome.events), "startup_seconds": round(ready_s, 1),
              "run_wall_seconds": outcome.wall_s, "bytes_total": total,
              "bytes_per_client_per_round": total // max(1, clients * rounds),
              "compute_seconds": outcome.info.get("compute-time")}
    say(f"  {clients} clients, {result['mode']}: rounds {per_round} s, {result['bytes_per_client_per_round']} "
        "bytes per client per round")
    return result


def _stage_means(events: list[Event]) -> dict:
    out: dict[str, list] = {}
    for e in events:
        if isinstance(e, StageEvent) and e.seconds is not None:
            out.setdefault(e.stage, []).append(e.seconds)
    return {k: round(float(np.mean(v)), 2) for k, v in out.items()}


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in load] if load else None}


def run_bench(clients: list[int], rounds: int, devices: int, held_out: int, utterances: int, fed_rounds: int,
              compare_default: int | None, cache: Path, timing: bool = True, quality: bool = True, say=print) -> dict:
    # optional extra: fed (flwr); the module loads without it
    import flwr

    report = {"machine": machine(), "flwr": getattr(flwr, "__version__", "1.42.0"), "utterances": utterances}
    if quality:
        say("accuracy (in-process FedAvg of on-device fine-tunes):")
        report["accuracy"] = [accuracy(devices, held_out, utterances, fed_rounds, cache, styled=True, say=say),
                              accuracy(devices, held_out, utterances, fed_rounds, cache, styled=False, say=say)]
    if timing:
        say("round cost (real SuperLink and SuperNodes on 127.0.0.1):")
        report["rounds"] = [round_cost(n, rounds, True, utterances, cache, say) for n in clients]
        if compare_default:
            report["rounds"].append(round_cost(compare_default, rounds, False, utterances, cache, say))
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return report
