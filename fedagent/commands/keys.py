"""`fedagent keys init|show|rotate|revoke|add`: the publisher's Ed25519 keys and the trust file for devices."""
from __future__ import annotations

import json

from bridge.argparsing import folder_path
from bridge.errors import FaceBridgeError


def _threshold(text: str) -> tuple[str, tuple[int, int]]:
    try:
        role, _, rule = text.partition("=")
        m, _, n = rule.partition("/")
        return role, (int(m), int(n or m))
    except ValueError:
        raise FaceBridgeError(f"--threshold {text!r} is not ROLE=M/N", "for example --threshold targets=2/2") from None


def add_parser(sub) -> None:
    p = sub.add_parser("keys", help="create and manage the publisher's signing keys",
                       description="Keys for the four TUF roles (root, targets, snapshot, timestamp). KEYS/trust.json "
                                   "is public: give it to devices for their first `fedagent update install`.")
    actions = p.add_subparsers(dest="keys_action", metavar="ACTION", required=True)
    init = actions.add_parser("init", help="new keys and trust.json in --dir")
    init.add_argument("--dir", type=folder_path, required=True,
                      help="keys folder to create (private keys are written 0600)")
    init.add_argument("--threshold", action="append", default=[], metavar="ROLE=M/N",
                      help="M of N keys must sign ROLE (default 1/1 each; e.g. root=2/3, targets=2/2)")
    init.add_argument("--expires", action="append", default=[], metavar="ROLE=DAYS",
                      help="metadata lifetime in days (default root=365 targets=90 snapshot=30 timestamp=7)")
    init.set_defaults(func=_init)
    for name, text in (("show", "roles, key ids, thresholds, root version"),):
        s = actions.add_parser(name, help=text)
        s.add_argument("--dir", type=folder_path, required=True)
        s.set_defaults(func=_show)
    rotate = actions.add_parser(
        "rotate", help="replace every key of a role (new root version; then publish); after a key compromise",
        description="Replace every key of ROLE. After a stolen or leaked key: rotate that role (for timestamp or "
                    "snapshot, rotate both), then `fedagent publish`. Devices walk to the new root, refuse "
                    "anything the old keys sign, and drop the version floors the old keys set (TUF 5.3.11), so "
                    "versions a thief inflated (a fast-forward attack) stop blocking updates. docs/UPDATES.md, "
                    "'After a key compromise'.")
    rotate.add_argument("--dir", type=folder_path, required=True)
    rotate.add_argument("--role", required=True, choices=("root", "targets", "snapshot", "timestamp"))
    rotate.set_defaults(func=lambda a: _change(a, lambda ring: ring.rotate(a.role), a.role))
    revoke = actions.add_parser("revoke", help="remove a lost or compromised key (new root version; then publish)")
    revoke.add_argument("--dir", type=folder_path, required=True)
    revoke.add_argument("keyid", help="the key id (or its first 8+ characters) from `fedagent keys show`")
    revoke.set_defaults(func=lambda a: _change(a, lambda ring: ring.revoke(a.keyid)))
    add = actions.add_parser("add", help="add a key to a role, optionally raising its threshold")
    add.add_argument("--dir", type=folder_path, required=True)
    add.add_argument("--role", required=True, choices=("root", "targets", "snapshot", "timestamp"))
    add.add_argument("--threshold", type=int)
    add.set_defaults(func=lambda a: _change(a, lambda ring: ring.add(a.role, a.threshold)))


def _init(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.keys import ROLES, KeyRing

    expires = {}
    for item in args.expires:
        role, _, days = item.partition("=")
        try:
            expires[role] = float(days)
        except ValueError:
            raise FaceBridgeError(f"--expires {item!r} is not ROLE=DAYS", "for example --expires timestamp=1") from None
        if role not in ROLES or not 0 < expires[role] <= 3650:
            raise FaceBridgeError(f"--expires {item!r} is not valid", f"ROLE is one of {', '.join(ROLES)} and DAYS "
                                  "more than 0, at most 3650")
    ring = KeyRing.init(args.dir, dict(_threshold(t) for t in args.threshold), expires)
    print(f"keys written to {ring.dir} (private keys in {ring.dir / 'private'}, keep them offline)")
    trust = ring.dir / "trust.json"
    print(f"devices trust {trust}: fedagent update install --from REPO --trust {trust}")
    return 0


def _show(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.keys import KeyRing

    print(json.dumps(KeyRing(args.dir).describe(), indent=2))
    return 0


def _change(args, change, rotated: str | None = None) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from fedagent.publisher.keys import KeyRing

    version = change(KeyRing(args.dir))
    print(f"root version {version} written to {args.dir}/trust.json; run `fedagent publish --keys {args.dir} "
          "--repo REPO` so devices pick it up")
    if rotated in ("timestamp", "snapshot"):
        other = "snapshot" if rotated == "timestamp" else "timestamp"
        print(f"if the old {rotated} key was stolen: also `fedagent keys rotate --dir {args.dir} --role {other}` "
              "before publishing; devices then drop the timestamp, snapshot and targets version floors the old "
              "keys set (recovery from inflated versions, TUF 5.3.11)")
    elif rotated in ("targets", "root"):
        print(f"devices refuse anything the old {rotated} keys sign once they have this root"
              + ("; they drop the targets version floor the old keys set" if rotated == "targets" else ""))
    return 0
