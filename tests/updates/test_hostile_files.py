"""Hostile updates, file side: truncated, oversized, endless and slow files, hash mismatches, files mixed from
two releases, extra and missing files, path tricks and links, malformed bundles, incompatible and broken
releases. Each is refused with its reason, release 1 keeps serving intact, and a newer release installs."""
import copy
import json
import os

import numpy as np
import pytest

from tests.updates.kit import adapter_bytes
from tests.updates.test_hostile_metadata import recovers


def test_tampered_adapter_bytes_are_hash_mismatch(publisher, device, server):
    publisher.publish()
    path = publisher.url_of()
    data = bytearray((publisher.repo / path[1:]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    server.serve(path, bytes(data))
    device.refused(server.url, "hash-mismatch")
    recovers(publisher, device, server)


def test_truncated_adapter_is_hash_mismatch(publisher, device, server):
    publisher.publish()
    path = publisher.url_of()
    server.serve(path, (publisher.repo / path[1:]).read_bytes()[:100])
    device.refused(server.url, "hash-mismatch")
    recovers(publisher, device, server)


def test_adapter_with_bytes_appended_is_too_large(publisher, device, server):
    publisher.publish()
    path = publisher.url_of()
    server.serve(path, (publisher.repo / path[1:]).read_bytes() + b"\0" * 5)
    device.refused(server.url, "too-large")
    recovers(publisher, device, server)


def test_endless_adapter_is_too_large(publisher, device, server):
    publisher.publish()
    server.serve_endless(publisher.url_of())
    device.refused(server.url, "too-large")
    recovers(publisher, device, server)


def test_adapter_dripping_slowly_runs_out_of_time(publisher, device, server):
    publisher.publish()
    path = publisher.url_of()
    server.serve_drip(path, (publisher.repo / path[1:]).read_bytes())
    from bridge.updates.install import Limits
    device.refused(server.url, "network", limits=Limits(deadline_s=1.0))
    recovers(publisher, device, server)


def test_release_above_the_size_cap_is_refused_before_any_file_is_downloaded(publisher, device, server):
    publisher.publish()
    from bridge.updates.install import Limits
    device.refused(server.url, "too-large", limits=Limits(max_release_bytes=1000))
    assert not any("/r2/" in r for r in server.requests)  # sizes are checked before download
    recovers(publisher, device, server)


def test_adapter_of_an_older_release_served_in_place_of_the_new_one_is_hash_mismatch(publisher, device, server):
    """Files mixed from two releases: release 1's adapter at release 2's address."""
    old = publisher.repo / publisher.url_of()[1:]
    publisher.publish()
    server.serve(publisher.url_of(), old.read_bytes())
    device.refused(server.url, "hash-mismatch")
    recovers(publisher, device, server)


def test_bundle_and_targets_disagreeing_on_a_file_is_hash_mismatch(publisher, device, server):
    """A bundle listing release 1's reference next to release 2's adapter: signed, but mixed."""
    bundle, files = publisher.release_files()
    other = copy.deepcopy(bundle)
    other["release"] = 2
    other["files"]["adapter.npz"]["sha256"] = "0" * 64
    publisher.forge_release(files, other)
    device.refused(server.url, "hash-mismatch")
    recovers(publisher, device, server)


def test_missing_adapter_on_the_server_is_not_found(publisher, device, server):
    publisher.publish()
    (publisher.repo / publisher.url_of()[1:]).unlink()
    device.refused(server.url, "not-found")
    publisher.publish()
    recovers(publisher, device, server)


def test_bundle_listing_a_file_the_targets_do_not_sign_is_file_set(publisher, device, server):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    listed = {"adapter.npz": files["adapter.npz"]}  # reference.npz not in the signed targets
    publisher.forge_release(files, bundle, listed=listed)
    device.refused(server.url, "file-set")
    recovers(publisher, device, server)


@pytest.mark.parametrize("change", ["extra file", "missing reference", "missing adapter"])
def test_bundle_with_extra_or_missing_files_is_file_set(publisher, device, server, change):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    if change == "extra file":
        files["extra.bin"] = b"surprise"
        bundle["files"]["extra.bin"] = {"sha256": __import__("hashlib").sha256(b"surprise").hexdigest(), "length": 8}
    else:
        name = "reference.npz" if change == "missing reference" else "adapter.npz"
        del bundle["files"][name]
        del files[name]
    publisher.forge_release(files, bundle)
    device.refused(server.url, "file-set")
    recovers(publisher, device, server)


@pytest.mark.parametrize("name", ["../adapter.npz", "/etc/passwd", "a/b.npz", "..", ".hidden", "nul\0.npz",
                                  "back\\slash.npz", "caf\u00e9.npz", ""])
def test_file_names_with_path_tricks_are_bad_path(publisher, device, server, name):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    bundle["files"][name] = bundle["files"].pop("adapter.npz")
    files[name if name and "\0" not in name and "/" not in name else "x"] = files.pop("adapter.npz")
    publisher.forge_release({"reference.npz": files["reference.npz"]}, bundle)
    device.refused(server.url, "bad-path")
    recovers(publisher, device, server)


def test_a_link_in_a_folder_repository_is_bad_path(publisher, device, server, tmp_path):
    publisher.publish()
    adapter = publisher.repo / publisher.url_of()[1:]
    secret = tmp_path / "secret.npz"
    secret.write_bytes(adapter.read_bytes())  # even with the right content, a link is not followed
    adapter.unlink()
    os.symlink(secret, adapter)
    device.refused(publisher.repo, "bad-path")
    adapter.unlink()
    publisher.publish()
    recovers(publisher, device, server)


def test_linked_metadata_in_a_folder_repository_is_bad_path(publisher, device, server, tmp_path):
    publisher.publish()
    ts = publisher.repo / "metadata" / "timestamp.json"
    (tmp_path / "ts.json").write_bytes(ts.read_bytes())
    ts.unlink()
    os.symlink(tmp_path / "ts.json", ts)
    device.refused(publisher.repo, "bad-path")
    ts.unlink()
    recovers(publisher, device, server)


@pytest.mark.parametrize("field,value,reason", [
    ("release", 2 ** 60, "malformed"),
    ("release", "2", "malformed"),
    ("release", 2.0, "malformed"),
    ("release", True, "malformed"),
    ("contract", None, "malformed"),
    ("hardware", "any", "malformed"),
    ("kind", "plugin", "malformed"),
    ("unexpected", 1, "malformed"),
    ("schema", 2, "incompatible"),
])
def test_bundle_with_wrong_types_or_huge_numbers_is_refused(publisher, device, server, field, value, reason):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    bundle[field] = value
    bundle = (json.dumps(bundle) + "\n").encode()  # as bytes: written exactly so
    publisher.forge_release(files, bundle)
    device.refused(server.url, reason)
    recovers(publisher, device, server)


@pytest.mark.parametrize("raw", [
    b'{"schema": 1, "schema": 1}',
    b'{"release": NaN}',
    b'{"reference": {"atol": 1e999}}',
    b'[1, 2, 3]',
    b'{"model": "lipsync"',
    b'\xff\xfe not utf-8',
    b'{"notes": ' + b'[' * 30000 + b']' * 30000 + b'}',  # nesting deeper than any parser's stack
])
def test_bundle_that_is_not_strict_json_is_malformed(publisher, device, server, raw):
    _, files = publisher.release_files()
    publisher.forge_release(files, raw)
    device.refused(server.url, "malformed")
    recovers(publisher, device, server)


@pytest.mark.parametrize("field,value", [("base_sha256", "0" * 64), ("hardware", ["sm999"]), ("contract", 7)])
def test_release_for_another_base_model_hardware_or_contract_is_incompatible(publisher, device, server, field, value):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    bundle[field] = value
    publisher.forge_release(files, bundle)
    device.refused(server.url, "incompatible")
    recovers(publisher, device, server)


def test_adapter_with_wrong_tensor_shapes_is_incompatible(publisher, device, server):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    files["adapter.npz"] = adapter_bytes(0, **{"adapter.A": np.zeros((64, 8), np.float32)})
    bundle["files"]["adapter.npz"] = _entry(files["adapter.npz"])
    publisher.forge_release(files, bundle)
    device.refused(server.url, "incompatible")
    recovers(publisher, device, server)


def _entry(data: bytes) -> dict:
    import hashlib
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


@pytest.mark.parametrize("broken", ["outputs of another adapter", "NaN weights", "garbage model"])
def test_release_failing_its_smoke_test_is_refused(publisher, device, server, broken):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    if broken == "outputs of another adapter":
        files["adapter.npz"] = adapter_bytes(7, scale=0.5)
    elif broken == "NaN weights":
        files["adapter.npz"] = adapter_bytes(0, **{"adapter.B": np.full((8, 34), np.nan, np.float32)})
    else:
        bundle["kind"], bundle["base_sha256"] = "model", None
        files["model.onnx"] = b"\x08\x07not an onnx graph" * 100
        del files["adapter.npz"], bundle["files"]["adapter.npz"]
        bundle["files"]["model.onnx"] = _entry(files["model.onnx"])
    if "adapter.npz" in files:
        bundle["files"]["adapter.npz"] = _entry(files["adapter.npz"])
    publisher.forge_release(files, bundle)
    device.refused(server.url, "smoke-test-failed")
    recovers(publisher, device, server)


def test_reference_that_is_not_an_npz_is_malformed(publisher, device, server):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    files["reference.npz"] = b"PK\x03\x04 this is no archive"
    bundle["files"]["reference.npz"] = _entry(files["reference.npz"])
    publisher.forge_release(files, bundle)
    device.refused(server.url, "malformed")
    recovers(publisher, device, server)
