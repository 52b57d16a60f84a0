"""`fedagent update install|status|rollback` (device side) and `fedagent bench-update`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from bridge.argparsing import input_file, output_file, positive_float, positive_int
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_text


def trust_file(text: str) -> str:
    return input_file(text, "it is written by `fedagent keys init KEYS` (KEYS/trust.json): run that first")


def add_parser(sub) -> None:
    p = sub.add_parser("update", help="install, inspect or roll back signed model releases on this device")
    actions = p.add_subparsers(dest="update_action", metavar="ACTION", required=True)
    i = actions.add_parser("install", help="verify and install the newest signed release")
    i.add_argument("--from", dest="source", required=True, metavar="REPO_DIR_OR_URL")
    i.add_argument("--state", help="update state folder (default: $FACEBRIDGE_HOME/updates or the XDG data dir)")
    i.add_argument("--trust", type=trust_file,
                   help="trust.json from `fedagent keys init` (first install only; later the device keeps the newest "
                        "root it verified and ignores this)")
    i.add_argument("--model", action="append", help="only this model (repeatable; default: all this device has)")
    i.add_argument("--max-bytes", type=positive_int, default=512 * 1024 * 1024, help="largest release accepted")
    i.add_argument("--deadline", type=positive_float, default=600.0, help="seconds the whole check may take")
    i.add_argument("--json", action="store_true", help="print the result (or the refusal) as JSON")
    i.set_defaults(func=_install)
    s = actions.add_parser("status", help="installed release, files, previous release, last check and refusal")
    s.add_argument("--state")
    s.add_argument("--model", default="lipsync")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_status)
    r = actions.add_parser("rollback", help="make the previous release (or the shipped model) active again")
    r.add_argument("--state")
    r.add_argument("--model", default="lipsync")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_rollback)

    b = sub.add_parser("bench-update", help="time each install step of a 1 MB release from a loopback repository")
    b.add_argument("--json", dest="out", type=output_file, help="write the result JSON here")
    b.add_argument("--repeats", type=positive_int, default=5)
    b.set_defaults(func=_bench)


class _ProgressLine:
    """One stderr line redrawn per event (only on a terminal)."""

    def __init__(self):
        self.tty = sys.stderr.isatty()

    def __call__(self, event) -> None:
        if not self.tty:
            return
        text = f"{event.step} {event.name}"
        if event.total:
            text += f" {event.done / 1e6:.2f}/{event.total / 1e6:.2f} MB"
        print(f"\r\033[K{text}", end="" if event.step != "done" else "\n", file=sys.stderr, flush=True)


def _refused_as_json(args, run):
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.updates.reasons import UpdateRefused

    try:
        return run()
    except UpdateRefused as e:
        if args.json:
            print(json.dumps({"status": "refused", **e.as_dict()}))
        raise


def _install(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.updates.install import Limits, install
    from bridge.updates.reasons import SomeRefused

    repeated = sorted({m for m in args.model or () if args.model.count(m) > 1})
    if repeated:
        raise FaceBridgeError(f"--model {repeated[0]} is given twice", "name each model once")
    trust = Path(args.trust).read_bytes() if args.trust else None
    results = _refused_as_json(args, lambda: install(
        args.source, args.state, trust=trust, models=args.model, report=None if args.json else _ProgressLine(),
        limits=Limits(args.max_bytes, args.deadline)))
    refused = [r for r in results if r.status == "refused"]
    code = SomeRefused.exit_code if refused else 0
    if args.json:
        print(json.dumps({"status": SomeRefused.reason if refused else "ok", "exit_code": code,
                          "results": [r.to_dict() for r in results]}, indent=1))
        return code
    for r in results:
        if r.status == "refused":
            print(f"{r.model}: refused ({r.refusal.reason}): {r.refusal}; release {r.release} stays active")
        elif r.status != "no-release":
            previous = f"release {r.previous_release}" if r.previous_release else "the shipped model"
            print(f"{r.model}: {r.status}, release {r.release} active (previous: {previous})")
    if all(r.status == "no-release" for r in results):
        print("the repository has no release for this device's models")
    if refused:
        print(f"{len(refused)} of {sum(r.status != 'no-release' for r in results)} releases were refused (exit "
              f"{code}); the others are active", file=sys.stderr)
    return code


def _status(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.updates.status import status

    report = status(args.state, args.model)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    previous = "none" if report["previous_release"] is None else report["previous_release"]
    print(f"{report['model']}: release {report['release']} ({report['kind']}), previous {previous}, "
          f"floor {report['floor']}, files {'verified' if report['verified'] else 'DAMAGED: ' + report['problem']}")
    for name, f in report["files"].items():
        print(f"  {name}  {f['length']} bytes  sha256 {f['sha256']}")
    if report["rolled_back"]:  # by `fedagent update rollback`, or by a bridge whose release failed in service
        why = [h["why"] for h in report["history"] if h.get("action") == "rollback" and h.get("why")]
        print(f"rolled back (never installed again): release {', '.join(map(str, report['rolled_back']))}"
              + (f"; last: {why[-1]}" if why else ""))
    check, refusal = report["last_check"], report["last_refusal"]
    print("last check: " + (f"{check['utc']} from {check['source']}: {check['result']}" if check else "never"))
    print("last refusal: " + (f"{refusal['utc']} {refusal['reason']} (exit {refusal['exit_code']}): "
                              f"{refusal['message']}" if refusal else "none"))
    return 0


def _rollback(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.updates.rollback import rollback

    result = _refused_as_json(args, lambda: rollback(args.state, args.model))
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        to = f"release {result.release}" if result.release else "the shipped model"
        print(f"{result.model}: rolled back from release {result.from_release} to {to}")
    return 0


def _bench(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.bench_update import run

    result = run(repeats=args.repeats)
    text = json.dumps(result, indent=1)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    print(text)
    return 0
