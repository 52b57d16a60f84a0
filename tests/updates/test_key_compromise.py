"""A stolen online key and the way back: a thief with the timestamp key inflates its version to 2^63 (a
fast-forward attack, which TUF accepts), the publisher rotates the timestamp and snapshot keys with the real
`fedagent keys rotate` and publishes, and every device installs again: the floors the old keys set are dropped
(TUF 5.3.11), the floors of roles whose keys did not change still hold, and the thief's old key signs nothing."""
from datetime import datetime, timedelta, timezone

from tuf.api.metadata import Metadata, MetaFile, Timestamp
from tuf.api.serialization.json import JSONSerializer

from bridge.updates.store import StateDir
from tests.updates.kit import cli_install, fedagent
from tests.updates.test_hostile_metadata import recovers

INFLATED = 2 ** 63


def _inflated_timestamp(publisher, signers) -> bytes:
    """Timestamp version 2^63 for the repository's current snapshot, signed by `signers` (the stolen key)."""
    snapshot = publisher.md("snapshot")
    data = (publisher.repo / "metadata" / f"{snapshot.signed.version}.snapshot.json").read_bytes()
    md = Metadata(Timestamp(version=INFLATED, expires=datetime.now(timezone.utc).replace(microsecond=0)
                            + timedelta(days=7), snapshot_meta=MetaFile.from_data(snapshot.signed.version, data,
                                                                                  ["sha256"])))
    for signer in signers:
        md.sign(signer, append=True)
    return md.to_bytes(JSONSerializer(compact=False))


def test_a_fast_forward_by_a_stolen_timestamp_key_is_undone_by_rotating_the_keys(publisher, device, server,
                                                                                   tmp_path):
    home = tmp_path / "home"
    stolen = publisher.signers("timestamp")
    forged = _inflated_timestamp(publisher, stolen)
    server.serve("/metadata/timestamp.json", forged)  # served by the thief in the middle
    assert device.install(server.url)[0].status == "up-to-date"  # TUF accepts a validly signed fast-forward
    assert StateDir(device.state).read().tuf_floors["timestamp"] == INFLATED

    server.rules.clear()
    publisher.publish()  # the publisher, not yet aware, publishes release 2 at an honest timestamp version
    code, out = cli_install(server.url, device.state, home)
    assert (code, out["reason"]) == (13, "rollback"), out
    assert "fedagent keys rotate --role timestamp" in out["message"]
    (publisher.repo / "metadata" / "timestamp.json").write_bytes(forged)  # and the thief writes into the repo

    for role in ("timestamp", "snapshot"):
        proc = fedagent("keys", "rotate", "--dir", publisher.keys, "--role", role, home=home)
        assert proc.returncode == 0, proc.stderr
        assert "fedagent publish" in proc.stdout and "TUF 5.3.11" in proc.stdout
    proc = fedagent("publish", "--keys", publisher.keys, "--repo", publisher.repo, "--json",
                    f"lipsync={publisher.adapter()}", home=home)
    assert proc.returncode == 0, proc.stderr
    assert publisher.md("timestamp").signed.version < 1000  # the thief's version, signed by a retired key, is ignored
    code, out = cli_install(server.url, device.state, home)
    assert code == 0, out
    assert out["results"][0]["status"] == "installed" and out["results"][0]["release"] == 3
    floors = StateDir(device.state).read().tuf_floors
    assert floors["timestamp"] < 1000 and floors["root"] == 3  # root's floor only rose

    server.serve("/metadata/timestamp.json", _inflated_timestamp(publisher, stolen))  # the thief tries again
    device.refused(server.url, "untrusted-key")
    recovers(publisher, device, server, before=3)


def test_a_floor_holds_when_only_another_role_rotates(publisher, device, server):
    """Rotating the targets keys drops only the targets floor: an older timestamp is still a rollback."""
    publisher.publish()
    old_timestamp = (publisher.repo / "metadata" / "timestamp.json").read_bytes()
    assert device.install(server.url)[0].status == "installed"
    publisher.ring.rotate("targets")
    release = publisher.publish()
    assert device.install(server.url)[0].release == release
    server.serve("/metadata/timestamp.json", old_timestamp)
    device.refused(server.url, "rollback")
    recovers(publisher, device, server, before=release)
