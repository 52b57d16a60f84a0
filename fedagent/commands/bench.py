"""`fedagent bench --json OUT`: accuracy of base, global and personalised adapters; cost of a round."""
from __future__ import annotations

from pathlib import Path

from bridge.argparsing import output_file, positive_int
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_json


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure federated personalisation (accuracy and round cost)",
                       description="Simulated espeak-ng speakers as devices, with held-out speakers: mouth-weight "
                                   "error of the base, global and personalised adapters; then round time and "
                                   "bytes per client with real processes for each --clients count.")
    p.add_argument("--json", required=True, metavar="OUT", type=output_file, help="write the results here")
    p.add_argument("--clients", default="3,5,10", help="client counts to time (default 3,5,10)")
    p.add_argument("--rounds", type=positive_int, default=2, help="rounds per timed run (default 2)")
    p.add_argument("--compare-default", type=int, default=5, metavar="N",
                   help="also time N clients with Flower's default ClientApp mode (0: skip; default 5)")
    p.add_argument("--devices", type=positive_int, default=10, help="speakers taking part, accuracy part (default 10)")
    p.add_argument("--held-out", type=positive_int, default=6, help="speakers never trained on (default 6)")
    p.add_argument("--fed-rounds", type=positive_int, default=5, help="FedAvg rounds for the accuracy part (default 5)")
    p.add_argument("--utterances", type=positive_int, default=30, help="sentences per speaker (default 30)")
    p.add_argument("--cache", default="build/fedagent/population", help="where simulated stores are cached")
    p.add_argument("--no-timing", action="store_true", help="skip the real-process round timings")
    p.add_argument("--no-accuracy", action="store_true", help="skip the accuracy part")
    p.set_defaults(func=run)


def run(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.local.bench import run_bench

    try:
        clients = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        raise FaceBridgeError(f"--clients {args.clients!r} is not a list of numbers", "write it like 3,5,10") from None
    if not clients or min(clients) < 2 or args.compare_default < 0:
        raise FaceBridgeError(f"--clients {args.clients!r}: a federated round needs at least 2 clients (and "
                              "--compare-default 0 or more)", "write it like --clients 3,5,10")
    report = run_bench(clients, args.rounds, args.devices, args.held_out, args.utterances, args.fed_rounds,
                       args.compare_default or None, Path(args.cache), timing=not args.no_timing,
                       quality=not args.no_accuracy)
    atomic_write_json(args.json, report)
    for part in report.get("accuracy", []):
        s = part["held_out_speakers"]["summary"]
        print(f"{'styled' if part['styled_teacher'] else 'acoustic-only'} held-out speakers: base {s['base']}, "
              f"global {s['global']} ({s['global_vs_base_pct']}% better), personal {s['personal']} "
              f"({s['personal_vs_global_pct']}% better than global)")
    for r in report.get("rounds", []):
        print(f"{r['clients']} clients, {r['mode']}: {r['round_seconds_mean']} s per round, "
              f"{r['bytes_per_client_per_round']} bytes per client per round")
    print(f"wrote {args.json}")
    return 0
