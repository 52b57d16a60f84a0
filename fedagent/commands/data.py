"""`fedagent data stats|clear|export`: look at, empty or copy this device's learning store."""
from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="this device's learning store (what `facebridge run --learn` recorded)",
                       description="The learning store holds short windows of audio features with the camera's "
                                   "mouth weights, on this device only (owner-only folder, bounded in size).")
    p.add_argument("--store", metavar="DIR", help="store folder (default $FACEBRIDGE_HOME/learn or "
                   "~/.local/share/facebridge/learn)")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    s = actions.add_parser("stats", help="how much is stored (numbers only)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=_stats)
    c = actions.add_parser("clear", help="delete every stored window and the feature cache")
    c.add_argument("--yes", action="store_true", help="do not ask")
    c.set_defaults(func=_clear)
    e = actions.add_parser("export", help="copy the windows to a folder you own (for inspection)")
    e.add_argument("dest", help="destination folder (created owner-only)")
    e.set_defaults(func=_export)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _store(args):
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.app.data_store import open_store

    return open_store(args.store)


def _stats(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.app.data_store import stats

    info = stats(_store(args))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if info["mode"] is None:  # no folder: nothing was ever recorded here
        print(f"{info['store']}: nothing recorded yet (no such folder; `facebridge run --audio mic --learn` makes it)")
        return 0
    print(f"{info['store']}: {info['windows']} windows, {info['seconds'] / 60:.1f} min of speech, "
          f"{info['bytes'] / 2**20:.1f} of {info['max_bytes'] / 2**20:.0f} MiB, {info['windows_with_audio']} with raw "
          f"audio, folder mode {info['mode']}")
    return 0


def _clear(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.app.data_store import clear

    store = _store(args)
    if not args.yes:
        answer = input(f"delete every learning window in {store.root}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    print(f"deleted {clear(store)} windows from {store.root}")
    return 0


def _export(args) -> int:
    store = _store(args)
    print(f"copied {store.export(args.dest)} windows to {args.dest}")
    return 0
