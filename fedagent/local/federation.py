"""A federation on this machine: one real SuperLink, real SuperNodes, and runs of the fedagent app on them.

Policy: everything lives in one work folder (Flower homes, logs, the app project, the server state) and is
stopped together when the federation closes, in reverse start order with a bounded grace. A run is started
with `flwr run`, followed through the server's events file (stages and rounds as they happen), and judged by
the run's status read back from the SuperLink, never by `flwr run`'s exit code. `fedagent simulate`, `fedagent
server`, the benchmark and the tests all use this one class, so what is tested is what users run.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from bridge.errors import FaceBridgeError
from fedagent.app.events import EvaluateEvent, Event, PublishEvent, RoundEvent, RunEvent, StageEvent, parse
from fedagent.app.project import run_config_file, write_project
from fedagent.local.flower_cli import FlowerCli, succeeded
from fedagent.local.processes import Proc, Tls, free_port, node_id_of, stop_all, superlink, supernode, wait_for

log = logging.getLogger(__name__)
STATUS_EVERY_S = 60.0  # a `flwr list` call costs about 1.5 CPU-seconds; the events file says when to look


@dataclass
class Device:
    name: str
    store: str
    procs: list[Proc]
    node_id: int | None = None

    def alive(self) -> bool:
        return all(p.alive() for p in self.procs)


@dataclass
class RunOutcome:
    run_id: int
    info: dict  # the SuperLink's record of the run (status, traffic, compute time)
    events: list[Event]
    wall_s: float
    rounds: list[dict] = field(default_factory=list)  # one summary per round

    @property
    def ok(self) -> bool:
        return succeeded(self.info)

    def published(self) -> list[PublishEvent]:
        return [e for e in self.events if isinstance(e, PublishEvent)]


class EventFollower:
    """Reads the server's events.jsonl as it grows and hands each new event (typed) to `on_event`; a line that is
    not a JSON object is logged and skipped."""

    def __init__(self, path: Path, on_event=None):
        self.path, self.on_event, self.offset = path, on_event, 0
        self.events: list[Event] = []

    def poll(self, *_):
        if not self.path.exists():
            return
        with open(self.path) as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            try:
                raw = json.loads(line)
            except ValueError:
                raw = None
            if not isinstance(raw, dict):
                log.warning("%s: skipped a line that is not a JSON object: %.80s", self.path, line)
                continue
            event = parse(raw)
            self.events.append(event)
            if self.on_event is not None:
                self.on_event(event)


class LocalFederation:
    """SuperLink + SuperNodes on this machine. Devices connect to `host:port` (127.0.0.1 unless told otherwise),
    which serves only the Fleet API; the `flwr` CLI uses the Control API on 127.0.0.1:`control_port`."""

    def __init__(self, work: str | Path, fast: bool = True, tls: Tls | None = None, node_auth: bool = False,
                 host: str = "127.0.0.1", port: int | None = None, nice: int = 0, device_env: dict | None = None,
                 control_port: int | None = None):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.fast, self.tls, self.node_auth, self.nice = fast, tls, node_auth, nice
        self.host, self.port = host, port or free_port()  # the devices' (Fleet API) listener
        self.control_port = control_port or free_port()  # Control and Runtime APIs, 127.0.0.1 only
        self.device_env = dict(device_env or {})
        self.procs: list[Proc] = []
        self.devices: list[Device] = []
        self.link: Proc | None = None
        self.cli: FlowerCli | None = None

    @property
    def control_address(self) -> str:
        return f"127.0.0.1:{self.control_port}"

    @property
    def address(self) -> str:
        """Where devices connect."""
        return f"{'127.0.0.1' if self.host in ('0.0.0.0', '::') else self.host}:{self.port}"

    def __enter__(self) -> LocalFederation:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, grace: float = 5.0) -> None:
        stop_all(self.procs, grace)
        self.procs.clear()

    # -- processes ------------------------------------------------------------------------------------------
    def start_link(self) -> Proc:
        self.link = superlink(self.work / "homes" / "superlink", self.work / "logs", self.control_port, self.host,
                              self.port, self.tls, self.node_auth, self.nice)
        self.procs.append(self.link)
        self.cli = FlowerCli(self.work / "homes" / "cli", self.control_address, self.tls)
        return self.link

    def add_device(self, name: str, store: str | Path, auth_key: Path | None = None, extra_env: dict | None = None,
                   wait: bool = True, timeout: float = 120.0) -> Device:
        home = self.work / "homes" / name
        procs = supernode(home, self.work / "logs", name, self.address, free_port(),
                          {"store": str(store), "personal": str(home / "personal" / "lipsync-personal.npz")},
                          root_ca=self.tls.ca if self.tls else None, auth_key=auth_key, fast=self.fast,
                          store=str(store), nice=self.nice, extra_env={**self.device_env, **(extra_env or {})})
        self.procs.extend(procs)
        device = Device(name, str(store), procs)
        self.devices.append(device)
        if wait:
            device.node_id = wait_for(lambda: node_id_of(procs[0]), timeout, f"device {name} to connect", procs)
        return device

    def wait_devices(self, count: int, timeout: float = 180.0) -> set[int]:
        """Wait until `count` devices are online: local ones by their logs (cheap), then the SuperLink's list."""
        watched = [p for d in self.devices for p in d.procs] + ([self.link] if self.link else [])
        if len(self.devices) >= count:
            for device in self.devices:
                device.node_id = wait_for(lambda d=device: node_id_of(d.procs[0]), timeout,
                                          f"device {device.name} to connect", watched)

        def enough():
            ids = self.cli.online_node_ids()
            return ids if len(ids) >= count else None

        return wait_for(enough, timeout, f"{count} device(s) to be online", watched, poll=3.0)

    def kill_device(self, device: Device) -> None:
        """The device dies at once (SIGKILL of its SuperNode and ClientApp host)."""
        for proc in device.procs:
            proc.kill_now()

    # -- runs -----------------------------------------------------------------------------------------------
    def run(self, settings: dict, timeout: float = 600.0, on_event=None, state_dir: Path | None = None) -> RunOutcome:
        """Start the app with `settings` (run-config overrides), follow it to the end, return what happened."""
        if self.cli is None:
            raise FaceBridgeError("the SuperLink is not started", "call start_link() first")
        state = Path(state_dir or self.work / "server")
        state.mkdir(parents=True, exist_ok=True)
        events_path = state / "events.jsonl"
        follower = EventFollower(events_path, on_event)
        follower.offset = events_path.stat().st_size if events_path.exists() else 0
        app = write_project(self.work / "app")
        config = run_config_file(self.work / "run-config.toml", {"state-dir": str(state), **settings})
        started = time.monotonic()
        run_id = self.cli.run(app, config)
        info = self._follow(run_id, follower, started + timeout)
        outcome = RunOutcome(run_id, info, follower.events, round(time.monotonic() - started, 2))
        outcome.rounds = summarize_rounds(follower.events)
        return outcome

    def _follow(self, run_id: int, follower: EventFollower, deadline: float) -> dict:
        """Print events as they come (cheap file reads); ask the SuperLink for the run's status (a `flwr` CLI call,
        about 1.5 CPU-seconds) only every STATUS_EVERY_S and once the server says the run is over."""
        last_status, info = time.monotonic(), {}
        while True:
            follower.poll()
            if self.link is not None and not self.link.alive():
                raise FaceBridgeError(f"the SuperLink exited during run {run_id}", f"see {self.link.log}")
            over = any(isinstance(e, RunEvent) and e.status == "finished" for e in follower.events)
            now = time.monotonic()
            if over or now - last_status >= STATUS_EVERY_S:
                info, last_status = self.cli.run_info(run_id), now
                if str(info.get("status", "")).startswith("finished"):
                    follower.poll()
                    return info
            if now >= deadline:
                self.cli.stop_run(run_id)
                raise FaceBridgeError(f"run {run_id} did not finish in time (status {info.get('status')})",
                                      f"see the logs in {self.work / 'logs'}; the run was stopped")
            time.sleep(0.5 if over else 0.2)


def summarize_rounds(events: list[Event]) -> list[dict]:
    """Per round: wall seconds of the four stages over all attempts, attempts, outcome, server held-out error."""
    rounds: dict[int, dict] = {}
    for e in events:
        r = getattr(e, "round", None)  # every kind but run (and lines this version cannot read) has one
        if not r:
            continue
        entry = rounds.setdefault(r, {"round": r, "seconds": 0.0, "attempts": 0, "status": None,
                                      "devices": None, "held_out_mouth_mae": None, "published": False})
        match e:
            case StageEvent():
                entry["seconds"] = round(entry["seconds"] + (e.seconds or 0.0), 3)
                entry["attempts"] = max(entry["attempts"], e.attempt)
                if e.stage == "unmask":
                    entry["devices"] = e.nodes
            case RoundEvent():
                entry["status"] = e.status
            case EvaluateEvent():
                entry["held_out_mouth_mae"] = e.held_out_mouth_mae
            case PublishEvent():
                entry["published"] = True
                entry["release"] = e.release
    return [rounds[r] for r in sorted(rounds)]
