"""Signed model updates, device side: a model file reaches a session only if its owner's publisher signed it.

TUF (python-tuf's ngclient) checks the metadata: roles, thresholds, expiry, versions, lengths and hashes. On
top of that this package keeps what TUF leaves to the application: a durable release floor per model, the
release's own bundle (base model, contract, hardware, exact file set, reference inputs and outputs), a staged
install with a smoke test, an atomic switch with the previous release kept for rollback, and recovery after a
crash at any instant. See docs/UPDATES.md.

Modules: reasons (why an update was refused, with exit codes), bundle (the release description), signing
(Ed25519 keys and signature diagnosis), store (the state directory), fetch (ngclient over HTTP or a folder),
smoke (the ONNX Runtime smoke test), compat (what this device can run), contract (the inputs and outputs a
model must keep), bridge_inputs (the bridge's own recorded inputs every release runs on), arrays (bounded .npz
reading), floors (durable version floors, their reset on key rotation, the clock check), install (the staged,
atomic install), rollback, status (read-only report), watch (noticing a new active release).
"""
