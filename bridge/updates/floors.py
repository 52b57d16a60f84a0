"""The durable lower bounds of a device's checks: TUF metadata versions and the time of the last good check.

python-tuf keeps its own rollback protection in a cache that may be lost (no fsync), so the versions of every
role it verified are also kept in state.json and a repository below them is a `rollback`. A floor is reset only
the way TUF recovers from a fast-forward attack (spec 5.3.11, python-tuf's trusted metadata set): when the
trusted root replaces a role's keys, metadata signed by the old keys no longer counts, so an inflated version a
stolen key signed must not block the new keys forever. Rotating the timestamp or snapshot keys resets both of
them and the targets floor (snapshot pins the targets version); rotating the targets keys resets the targets
floor; root's floor never goes down (the root chain walks one signed version at a time).

The clock: TUF judges expiry by the device's clock, so a clock set back makes expired metadata look fresh. A
check is refused (`clock`) when the clock reads more than CLOCK_TOLERANCE before the last successful check.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tuf.api.metadata import Metadata, Root

from bridge.updates import reasons
from bridge.updates.store import StateDir, UpdateState

TUF_ROLES = ("root", "timestamp", "snapshot", "targets")
CLOCK_TOLERANCE = timedelta(hours=1)
# role whose keys changed -> floors that reset (TUF 5.3.11: timestamp and snapshot go together)
RESETS = {"timestamp": ("timestamp", "snapshot", "targets"), "snapshot": ("timestamp", "snapshot", "targets"),
          "targets": ("targets",), "root": ()}
UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def check_clock(state: UpdateState, now: datetime) -> None:
    """ClockBehind when `now` is more than CLOCK_TOLERANCE before the last successful check."""
    if not state.checked_utc:
        return
    last = datetime.strptime(state.checked_utc, UTC_FORMAT).replace(tzinfo=timezone.utc)
    if now < last - CLOCK_TOLERANCE:
        raise reasons.ClockBehind(f"this device's clock reads {now.strftime(UTC_FORMAT)}, {_ago(last - now)} before "
                                  f"its last successful update check ({state.checked_utc})")


def _ago(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} hours"


def role_keys(root: Root) -> dict[str, list[str]]:
    """Each top-level role's keyids (sorted) and threshold, as the floors record them."""
    return {role: [*sorted(root.roles[role].keyids), f"threshold={root.roles[role].threshold}"]
            for role in TUF_ROLES}


def verified_versions(tuf_dir: Path) -> dict[str, int]:
    """The version of each role python-tuf just verified (read back from its cache)."""
    out = {}
    for role in TUF_ROLES:
        try:
            out[role] = Metadata.from_file(str(tuf_dir / f"{role}.json")).signed.version
        except Exception as e:  # after a successful refresh all four are there and valid
            raise reasons.Malformed(f"verified {role} metadata is unreadable ({str(e)[:80]})") from None
    return out


def floors_in_force(state: UpdateState, keys: dict[str, list[str]], previous_root: bytes | None) -> dict[str, int]:
    """The floors that still hold under a root with `keys`: those of rotated roles are dropped (5.3.11)."""
    recorded = state.tuf_keys
    if not recorded and previous_root is not None:  # a state written before keys were recorded
        try:
            recorded = role_keys(Metadata[Root].from_bytes(previous_root).signed)
        except Exception:
            recorded = {}
    floors = dict(state.tuf_floors)
    for role in TUF_ROLES:
        if role in recorded and recorded[role] != keys[role]:
            for reset in RESETS[role]:
                floors.pop(reset, None)
    return floors


def raise_floors(store: StateDir, state: UpdateState, now: datetime) -> UpdateState:
    """After a successful refresh: refuse metadata older than any verified here under the same keys, then raise
    the floors, keep the newest root as the next bootstrap and note the time of this good check."""
    versions = verified_versions(store.tuf_dir)
    root_bytes = (store.tuf_dir / "root.json").read_bytes()
    keys = role_keys(Metadata[Root].from_bytes(root_bytes).signed)
    floors = floors_in_force(state, keys, store.trusted_root())
    for role in TUF_ROLES:
        floor = floors.get(role, 0)
        if versions[role] < floor:
            raise reasons.Rollback(
                f"the repository offers {role} metadata version {versions[role]}, older than version {floor} this "
                "device has already verified with the same keys (a replay of an older repository)",
                "install from your publisher's current repository; if a signing key was stolen, the publisher "
                f"rotates it (`fedagent keys rotate --role {role}`) and publishes")
    if root_bytes != store.trusted_root():
        store.save_trusted_root(root_bytes)
    floors = {role: max(versions[role], floors.get(role, 0)) for role in TUF_ROLES}
    last = state.checked_utc
    checked = max(filter(None, (last, now.strftime(UTC_FORMAT))))
    state = replace(state, tuf_floors=floors, tuf_keys=keys, checked_utc=checked)
    store.commit(state)
    return state
