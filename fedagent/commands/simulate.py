"""`fedagent simulate --clients N --rounds R`: a real SuperLink and N real SuperNodes on 127.0.0.1."""
from __future__ import annotations

import tempfile
from pathlib import Path

from bridge.argparsing import folder_path, output_file
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_json
from fedagent.app.project import RUN_CONFIG


def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="run federated rounds with simulated speakers on this machine",
                       description="Start a real SuperLink and N real SuperNodes on 127.0.0.1, each device a "
                                   "simulated espeak-ng speaker with its own learning store, run R rounds of "
                                   "SecAgg+ fine-tuning of the lip-sync adapter, show every stage, and stop all "
                                   "processes at the end. Needs a source checkout and espeak-ng.")
    p.add_argument("--clients", type=int, default=3, help="devices (default 3)")
    p.add_argument("--rounds", type=int, default=RUN_CONFIG["rounds"][0],
                   help=f"rounds (default {RUN_CONFIG['rounds'][0]})")
    p.add_argument("--work", type=folder_path, metavar="DIR",
                   help="work folder for logs, Flower homes and server state (default: a new temporary folder)")
    p.add_argument("--flower-default", action="store_true",
                   help="run ClientApps as Flower does by default (a new process per message) instead of the "
                        "warm per-device host; for comparison, slower")
    p.add_argument("--utterances", type=int, default=30, help="sentences per simulated speaker (default 30)")
    p.add_argument("--held-out", type=int, default=2, help="speakers in the server's held-out set (default 2)")
    p.add_argument("--cache", default="build/fedagent/population", help="where simulated stores are cached")
    p.add_argument("--no-publish", action="store_true", help="keep the global adapter unsigned (no keys, no repo)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a run setting (see docs/FEDERATED.md), e.g. --set timeout-train=60")
    p.add_argument("--json", metavar="OUT", type=output_file,
                   help="also write the outcome (rounds, timings, traffic) as JSON")
    p.set_defaults(func=run)


def parse_settings(items: list[str]) -> dict:
    import tomllib

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise FaceBridgeError(f"--set {item!r} is not KEY=VALUE", "write it like --set rounds=3")
        if key not in RUN_CONFIG:
            raise FaceBridgeError(f"--set {key}: there is no such setting",
                                  f"choose one of: {', '.join(RUN_CONFIG)}")
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value
        default = RUN_CONFIG[key][0]
        if isinstance(default, (int, float)) and not isinstance(out[key], (int, float)):
            raise FaceBridgeError(f"--set {item!r}: {key} is a number", f"for example --set {key}={default!r}")
    return out


def run(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.local.processes import interrupt_on_sigterm
    from fedagent.local.simulation import simulate, summary_lines
    from fedagent.publisher.signing_setup import simulation_publishing

    interrupt_on_sigterm()
    settings = parse_settings(args.set)  # before anything is made
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fedagent-simulate-"))
    publish, install_hint = ({}, None) if args.no_publish else simulation_publishing(work)
    sim = simulate(args.clients, args.rounds, work=work, fast=not args.flower_default, utterances=args.utterances,
                   held_out=args.held_out, settings=settings, cache=Path(args.cache),
                   publish=publish)
    for line in summary_lines(sim):
        print(line)
    released = [e.release for e in sim.outcome.published() if e.release]
    if released and install_hint:
        print(f"signed release {released[-1]} published; a device installs it with:\n  {install_hint}")
    if args.json:
        atomic_write_json(args.json, {"run_id": sim.outcome.run_id, "status": sim.outcome.info.get("status"),
                                      "wall_s": sim.outcome.wall_s, "rounds": sim.outcome.rounds,
                                      "traffic": sim.outcome.info.get("network-traffic"), "work": str(sim.work)})
    return 0
