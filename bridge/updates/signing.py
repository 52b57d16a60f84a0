"""Ed25519 keys as a few pure functions: generate, serialize, load, sign, and say why a signature check failed.

Keys are securesystemslib `CryptoSigner`s (pyca/cryptography underneath), private keys serialized as unencrypted
PKCS#8 PEM (the publisher keeps them in a 0700 folder), public keys as TUF key dicts inside root metadata.
`diagnose` turns TUF's single "signed by 0/1 keys" error into the three reasons a person can act on:
a signature that does not verify, a key that is not trusted (unknown or revoked), or too few signatures.
"""
from __future__ import annotations

from cryptography.hazmat.primitives.serialization import load_pem_private_key
from securesystemslib.signer import CryptoSigner, Key, SSlibKey
from tuf.api.metadata import Metadata, Root
from tuf.api.serialization.json import CanonicalJSONSerializer

from bridge.updates import reasons


def generate() -> CryptoSigner:
    """A new Ed25519 key pair."""
    return CryptoSigner.generate_ed25519()


def private_pem(signer: CryptoSigner) -> bytes:
    """The private key as PKCS#8 PEM (unencrypted: protect the file, not the bytes)."""
    return signer.private_bytes


def load_signer(pem: bytes) -> CryptoSigner:
    """A signer from PKCS#8 PEM bytes written by `private_pem`."""
    return CryptoSigner(load_pem_private_key(pem, None))


def public_key(signer: CryptoSigner) -> SSlibKey:
    return signer.public_key


def key_id(key: Key) -> str:
    return key.keyid


def sign(metadata: Metadata, signers: list[CryptoSigner]) -> Metadata:
    """Replace `metadata`'s signatures with one from each signer (a threshold role gets several)."""
    metadata.signatures.clear()
    for signer in signers:
        metadata.sign(signer, append=True)
    return metadata


def diagnose(trusted_root: Root, metadata: Metadata) -> reasons.UpdateRefused:
    """Why `metadata` (a top-level role) failed TUF's threshold check against `trusted_root`. A new root must
    also satisfy its own keys; that is checked when the trusted root's keys were enough."""
    role = metadata.signed.type
    problem = _diagnose_against(trusted_root, role, metadata, "this device's trusted root")
    if problem is None and isinstance(metadata.signed, Root):
        problem = _diagnose_against(metadata.signed, role, metadata, f"root version {metadata.signed.version}")
    return problem or reasons.ThresholdNotMet(f"{role} metadata is not signed by enough trusted keys")


def _diagnose_against(delegator: Root, role: str, metadata: Metadata, who: str) -> reasons.UpdateRefused | None:
    payload = CanonicalJSONSerializer().serialize(metadata.signed)
    result = delegator.get_verification_result(role, payload, metadata.signatures)
    if result.verified:
        return None
    trusted = set(delegator.roles[role].keyids)
    signers = set(metadata.signatures)
    invalid = sorted((signers & trusted) - set(result.signed))
    untrusted = sorted(signers - trusted)
    have = f"{len(result.signed)} of the {result.threshold} needed"
    if invalid:
        return reasons.SignatureInvalid(f"{role} metadata has a signature by trusted key {invalid[0][:12]} that does "
                                        f"not verify (valid signatures: {have})")
    if untrusted and not result.signed:
        return reasons.UntrustedKey(f"{role} metadata is signed only by keys {who} does not trust "
                                    f"({', '.join(k[:12] for k in untrusted)}: unknown or revoked)")
    return reasons.ThresholdNotMet(f"{role} metadata has {have} valid signatures from keys {who} trusts")
