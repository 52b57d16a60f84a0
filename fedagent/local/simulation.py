"""`fedagent simulate`: the whole federated loop on this machine with real processes on 127.0.0.1.

Policy: N simulated speakers (fedagent/local/population.py) each get a real SuperNode reading their own learning
store; a real SuperLink runs the app; the server's held-out set is made of speakers who never take part. The
run's progress is printed per SecAgg+ stage and per round, its outcome is taken from the SuperLink's run status,
and every process started is stopped at the end (bounded grace, then kill), also on errors and Ctrl-C.
Stores are cached under `cache`, so a second simulation starts in seconds.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bridge.audio.learn_store import LearnStore
from bridge.errors import FaceBridgeError
from fedagent.app.events import AggregateEvent, DpEvent, EvaluateEvent, Event, PublishEvent, RoundEvent, StageEvent
from fedagent.local import population
from fedagent.local.federation import LocalFederation, RunOutcome

DEFAULT_CACHE = Path("build") / "fedagent" / "population"


def server_eval_store(held_out: int, utterances: int, cache: Path) -> LearnStore:
    """One store holding the windows of `held_out` speakers who never take part (the server's held-out set)."""
    folder = cache / f"server-eval-{held_out}x{utterances}"
    store = LearnStore(folder)
    if (folder / ".complete").exists():
        return store
    store.clear()
    for speaker in population.speakers("held-out", held_out):
        for path in population.speaker_store(speaker, utterances, cache).paths():
            shutil.copyfile(path, store._open() / path.name)
    (folder / ".complete").write_text("ok")
    return store


def device_stores(clients: int, utterances: int, cache: Path) -> list[LearnStore]:
    return [population.speaker_store(s, utterances, cache) for s in population.speakers("device", clients)]


def format_event(event: Event) -> str | None:
    """The one line a person reads for an event, or None for events not worth a line (a done round, a run)."""
    match event:
        case StageEvent():
            line = (f"round {event.round}  {event.stage:<23} {event.nodes}/"
                    f"{'?' if event.nodes_in is None else event.nodes_in} devices  {event.seconds or 0:5.1f} s")
            line += f"  (attempt {event.attempt})" if event.attempt > 1 else ""
            line += "" if event.status == "ok" else f"  {event.status}"
            return line + (f"  failed: {'; '.join(event.failures)}" if event.failures else "")
        case RoundEvent() if event.status != "done":
            extra = f", halted in {event.halted_in}" if event.halted_in else ""
            reason = f": {event.reason}" if event.reason else ""
            return f"round {event.round}  {event.status}{extra}{reason}"
        case AggregateEvent(status="rejected"):
            return f"round {event.round}  aggregate rejected: {event.reason}"
        case DpEvent():
            return f"round {event.round}  DP noise of stdev {event.noise_stdev:.4g} added to the aggregate"
        case EvaluateEvent():
            return f"round {event.round}  server held-out mouth error {event.held_out_mouth_mae:.4f}  ({event.status})"
        case PublishEvent():
            return (f"round {event.round}  published" +
                    (f" as signed release {event.release}" if event.release else " (unsigned: no keys/repo)"))
    return None


def print_event(event: Event) -> None:
    line = format_event(event)
    if line:
        print(line, flush=True)


@dataclass
class Simulation:
    outcome: RunOutcome
    work: Path
    devices: int


def simulate(clients: int, rounds: int, work: Path | None = None, fast: bool = True, utterances: int = 30,
             held_out: int = 2, settings: dict | None = None, cache: Path = DEFAULT_CACHE, on_event=print_event,
             timeout: float = 900.0, nice: int = 10, device_env: dict | None = None, publish: dict | None = None,
             say=print) -> Simulation:
    if clients < 2:
        raise FaceBridgeError(f"--clients {clients}: secure aggregation needs at least 2 devices", "use 2 or more")
    if rounds < 1:
        raise FaceBridgeError(f"--rounds {rounds} is not positive", "use 1 or more")
    work = Path(work or tempfile.mkdtemp(prefix="fedagent-simulate-"))
    say(f"fedagent simulate: {clients} devices x {rounds} round(s), SuperLink and SuperNodes on 127.0.0.1, "
        f"{'warm ClientApp hosts' if fast else 'Flower default (a ClientApp process per message)'}; work folder {work}")
    stores = device_stores(clients, utterances, Path(cache))
    evaluation = server_eval_store(held_out, utterances, Path(cache))
    with LocalFederation(work, fast=fast, nice=nice, device_env=device_env) as fed:
        fed.start_link()
        for i, store in enumerate(stores):
            fed.add_device(f"device{i}", store.root, wait=False)
        fed.wait_devices(clients)
        say(f"fedagent simulate: {clients} devices online")
        run_settings = {"rounds": rounds, "min-clients": clients, "eval-store": str(evaluation.root),
                        **(publish or {}), **(settings or {})}
        outcome = fed.run(run_settings, timeout=timeout, on_event=on_event)
    if not outcome.ok:
        raise FaceBridgeError(f"run {outcome.run_id} ended {outcome.info.get('status')} "
                              f"({outcome.info.get('status-details')})", f"see the logs in {work / 'logs'}")
    return Simulation(outcome, work, clients)


def summary_lines(sim: Simulation) -> list[str]:
    o = sim.outcome
    traffic = o.info.get("network-traffic", {})
    total = int(traffic.get("total-bytes", 0))
    lines = [f"run {o.run_id} {o.info.get('status')} in {o.wall_s:.1f} s"]
    for r in o.rounds:
        lines.append(f"  round {r['round']}: {r['seconds']:.1f} s, {r['devices']} devices, {r['attempts']} attempt(s), "
                     f"held-out error {r['held_out_mouth_mae']}, {'published' if r['published'] else 'not published'}")
    lines.append(f"  traffic {total} bytes in all, {total // max(1, sim.devices * max(1, len(o.rounds)))} per device "
                 "per round")
    return lines


def fail(message: str) -> int:
    print(f"fedagent simulate: {message}", file=sys.stderr)
    return 1
