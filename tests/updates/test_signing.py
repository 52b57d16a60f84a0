"""Key helpers and the diagnosis of a failed threshold check."""
from datetime import datetime, timedelta, timezone

from tuf.api.metadata import Metadata, MetaFile, Root, Timestamp

from bridge.updates import reasons, signing


def _setup(threshold=1, keys=1):
    signers = [signing.generate() for _ in range(keys)]
    root = Root(expires=datetime.now(timezone.utc) + timedelta(days=1))
    for s in signers:
        root.add_key(s.public_key, "timestamp")
    root.roles["timestamp"].threshold = threshold
    ts = Metadata(Timestamp(expires=datetime.now(timezone.utc) + timedelta(days=1), snapshot_meta=MetaFile(1)))
    return root, ts, signers


def test_a_key_survives_its_pem_round_trip():
    signer = signing.generate()
    again = signing.load_signer(signing.private_pem(signer))
    assert signing.key_id(signing.public_key(again)) == signing.key_id(signer.public_key)


def test_diagnose_tells_the_three_failures_apart():
    root, ts, (key,) = _setup()
    signing.sign(ts, [signing.generate()])
    assert isinstance(signing.diagnose(root, ts), reasons.UntrustedKey)
    signing.sign(ts, [key])
    ts.signed.version = 5  # edited after signing
    assert isinstance(signing.diagnose(root, ts), reasons.SignatureInvalid)
    root2, ts2, signers = _setup(threshold=2, keys=2)
    signing.sign(ts2, signers[:1])
    assert isinstance(signing.diagnose(root2, ts2), reasons.ThresholdNotMet)
