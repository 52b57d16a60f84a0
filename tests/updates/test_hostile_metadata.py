"""Hostile updates, metadata side: tampering, wrong or revoked keys, thresholds, replays and rollbacks, expiry
and malformed metadata, each against a real repository served over loopback HTTP. Every case must be refused
with its reason while release 1 keeps serving, leave nothing half-installed, and let a newer valid release
install afterwards."""
import json
import shutil
from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time
from tuf.api.metadata import Metadata

from bridge.updates.signing import generate
from tests.updates.kit import Device, Publisher, clear_tuf_cache


def recovers(publisher, device, server, before=1):
    """The previous release still serves intact; a newer honest release then installs."""
    device.assert_intact(before)
    server.rules.clear()
    release = publisher.publish()
    assert device.install(server.url)[0].status == "installed"
    device.assert_intact(release)


def test_targets_edited_after_signing_is_signature_invalid(publisher, device, server):
    def edit(data: bytes) -> bytes:
        doc = json.loads(data)
        doc["signed"]["expires"] = "2099-01-01T00:00:00Z"
        return json.dumps(doc).encode()
    publisher.publish(publisher.adapter())  # release 2, then the online-key holder edits its targets
    publisher.forge(targets_bytes=edit)
    device.refused(server.url, "signature-invalid")
    recovers(publisher, device, server)


def test_timestamp_signed_by_an_unknown_key_is_untrusted_key(publisher, device, server):
    publisher.publish()
    publisher.forge(timestamp_signers=[generate()])
    device.refused(server.url, "untrusted-key")
    recovers(publisher, device, server)


def test_snapshot_signed_by_an_unknown_key_is_untrusted_key(publisher, device, server):
    publisher.forge(snapshot_signers=[generate()])
    device.refused(server.url, "untrusted-key")
    recovers(publisher, device, server)


def test_targets_signed_by_the_online_keys_only_is_untrusted_key(publisher, device, server):
    """An attacker holding the snapshot and timestamp keys (online) signs targets with them: refused."""
    publisher.forge(targets_signers=publisher.signers("timestamp"))
    device.refused(server.url, "untrusted-key")
    recovers(publisher, device, server)


def test_unsigned_targets_is_threshold(publisher, device, server):
    publisher.forge(targets_signers=[])
    device.refused(server.url, "threshold")
    recovers(publisher, device, server)


def test_targets_signed_by_a_revoked_key_is_untrusted_key(publisher, device, server):
    old = publisher.signers("targets")
    keyid = old[0].public_key.keyid
    publisher.ring.revoke(keyid)
    publisher.publish()  # carries root version 2 without the revoked key
    device.install(server.url)
    device.assert_intact(2)
    publisher.forge(targets_signers=old)  # the thief of the revoked key tries
    device.refused(server.url, "untrusted-key")
    recovers(publisher, device, server, before=2)


@pytest.fixture
def two_of_two(tmp_path, monkeypatch):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    pub = Publisher(tmp_path / "pub2", thresholds={"targets": (2, 2)})
    pub.publish()
    from tests.updates.kit import HostileServer
    with HostileServer(pub.repo) as srv:
        dev = Device(tmp_path / "state2", pub.trust)
        dev.install(srv.url)
        yield pub, dev, srv


@pytest.mark.parametrize("how", ["one of two", "one valid and one unknown"])
def test_two_of_two_targets_with_one_valid_signature_is_threshold(two_of_two, how):
    pub, dev, srv = two_of_two
    signers = pub.signers("targets")
    pub.forge(targets_signers=signers[:1] + ([generate()] if how != "one of two" else []))
    dev.refused(srv.url, "threshold")
    recovers(pub, dev, srv)


def test_two_of_two_targets_signed_twice_by_one_key_is_refused(two_of_two):
    """The same key's signature twice: python-tuf refuses duplicate key ids when parsing."""
    pub, dev, srv = two_of_two
    signer = pub.signers("targets")[0]

    def twice(data: bytes) -> bytes:
        doc = json.loads(data)
        doc["signatures"] = doc["signatures"] + doc["signatures"]
        return json.dumps(doc).encode()
    pub.forge(targets_signers=[signer], targets_bytes=twice, to=srv)
    dev.refused(srv.url, "malformed")
    recovers(pub, dev, srv)


def test_new_root_signed_only_by_a_new_key_is_untrusted_key(publisher, device, server):
    root = publisher.ring.root()
    md = Metadata.from_bytes(root.to_bytes())
    md.signed.version = 2
    intruder = generate()
    for keyid in list(md.signed.roles["root"].keyids):
        md.signed.revoke_key(keyid, "root")
    md.signed.add_key(intruder.public_key, "root")
    md.signatures.clear()
    md.sign(intruder)
    (publisher.repo / "metadata" / "2.root.json").write_bytes(md.to_bytes())
    device.refused(server.url, "untrusted-key")
    (publisher.repo / "metadata" / "2.root.json").unlink()
    recovers(publisher, device, server)


def test_older_timestamp_replayed_is_rollback(publisher, device, server):
    old = (publisher.repo / "metadata" / "timestamp.json").read_bytes()
    publisher.publish()
    device.install(server.url)
    server.serve("/metadata/timestamp.json", old)
    device.refused(server.url, "rollback")
    recovers(publisher, device, server, before=2)


def test_copy_of_an_older_repository_never_lowers_the_release(publisher, device, server, tmp_path):
    shutil.copytree(publisher.repo, tmp_path / "old-repo")
    publisher.publish()
    device.install(server.url)
    device.refused(tmp_path / "old-repo", "rollback")
    recovers(publisher, device, server, before=2)


def test_timestamp_pointing_to_an_older_snapshot_is_rollback(publisher, device, server):
    publisher.publish()
    device.install(server.url)
    snap_version = publisher.md("snapshot").signed.version
    publisher.forge()
    ts = publisher.md("timestamp")
    old_snapshot = (publisher.repo / "metadata" / f"{snap_version - 1}.snapshot.json").read_bytes()
    from tuf.api.metadata import MetaFile
    ts.signed.snapshot_meta = MetaFile.from_data(snap_version - 1, old_snapshot, ["sha256"])
    ts.signed.version += 1
    ts.signatures.clear()
    for s in publisher.signers("timestamp"):
        ts.sign(s, append=True)
    (publisher.repo / "metadata" / "timestamp.json").write_bytes(ts.to_bytes())
    device.refused(server.url, "rollback")
    recovers(publisher, device, server, before=2)


def test_an_older_model_relisted_in_newer_valid_metadata_is_rollback(publisher, device, server):
    """TUF accepts it (newer, validly signed targets); the release floor does not."""
    old_entries = {k: v for k, v in publisher.md("targets").signed.targets.items()}
    publisher.publish()
    device.install(server.url)
    publisher.forge(lambda targets: targets.targets.update(old_entries))
    device.refused(server.url, "rollback")
    recovers(publisher, device, server, before=2)


@pytest.mark.parametrize("how", ["delete", "truncate", "delete-all"])
def test_lost_or_truncated_local_metadata_then_a_replay_is_rollback(publisher, device, server, tmp_path, how):
    shutil.copytree(publisher.repo, tmp_path / "old-repo")
    publisher.publish()
    device.install(server.url)
    clear_tuf_cache(device.state, how)
    device.refused(tmp_path / "old-repo", "rollback")
    recovers(publisher, device, server, before=2)


def test_same_release_number_with_other_content_is_equivocation(publisher, device, server):
    bundle, files = publisher.release_files()
    files["adapter.npz"] = files["adapter.npz"]  # same files, other notes: a different signed bundle, release 1
    bundle["notes"] = "a second release 1"
    publisher.forge_release(files, bundle)
    device.refused(server.url, "equivocation")
    recovers(publisher, device, server)


def test_freshly_signed_but_expired_timestamp_is_expired(publisher, device, server):
    publisher.publish(expires={"timestamp": timedelta(seconds=-60)})
    device.refused(server.url, "expired")
    recovers(publisher, device, server)


def test_expired_targets_is_expired(publisher, device, server):
    publisher.forge(expires={"targets": datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=1)})
    device.refused(server.url, "expired")
    recovers(publisher, device, server)


def test_frozen_repository_is_expired_once_its_timestamp_runs_out(publisher, device, server, tmp_path):
    """The repository stops changing (a freeze attack); a week later its timestamp has expired. Read from the
    folder: freezegun's clock is for this thread's code, not for the HTTP server thread."""
    with freeze_time(datetime.now(timezone.utc) + timedelta(days=8)):
        device.refused(publisher.repo, "expired")
    recovers(publisher, device, server)


def test_timestamp_that_is_not_json_is_malformed(publisher, device, server):
    server.serve("/metadata/timestamp.json", b'{"signed": {"_type": "timestamp", ')
    device.refused(server.url, "malformed")
    recovers(publisher, device, server)


@pytest.mark.parametrize("version", ["2", 2 ** 70, -1, 1.5])
def test_timestamp_with_a_wrong_type_or_huge_version_is_refused(publisher, device, server, version):
    doc = json.loads((publisher.repo / "metadata" / "timestamp.json").read_bytes())
    doc["signed"]["version"] = version
    server.serve("/metadata/timestamp.json", json.dumps(doc).encode())
    err = device.refused(server.url, "signature-invalid" if version == 2 ** 70 else "malformed")
    assert "timestamp" in str(err)
    recovers(publisher, device, server)


def test_timestamp_with_a_duplicate_key_is_refused(publisher, device, server):
    """A second "version" after the signed one: Python keeps the last, and the signature covers what was read."""
    data = (publisher.repo / "metadata" / "timestamp.json").read_text()
    version = json.loads(data)["signed"]["version"]
    head, sep, tail = data.rpartition(f'"version": {version}')
    server.serve("/metadata/timestamp.json", (head + sep + f', "version": {version + 5}' + tail).encode())
    device.refused(server.url, "signature-invalid")
    recovers(publisher, device, server)


def test_endless_timestamp_is_too_large(publisher, device, server):
    server.serve_endless("/metadata/timestamp.json")
    device.refused(server.url, "too-large")
    recovers(publisher, device, server)


def test_padded_snapshot_is_too_large(publisher, device, server):
    publisher.publish()
    name = f"/metadata/{publisher.md('snapshot').signed.version}.snapshot.json"
    server.serve(name, (publisher.repo / name[1:]).read_bytes() + b" " * 4096)
    device.refused(server.url, "too-large")
    recovers(publisher, device, server)


def test_a_repository_server_that_is_down_is_network(publisher, device, server):
    device.refused("http://127.0.0.1:9/", "network")
    recovers(publisher, device, server)
