"""The bundle parser is strict: one reading of every document, plain file names, an exact file set."""
import json

import pytest

from bridge.updates import bundle, reasons

GOOD = {"schema": 1, "model": "lipsync", "kind": "adapter", "release": 3, "contract": 1, "base_sha256": "a" * 64,
        "hardware": ["any"], "tensorrt_major": None,
        "files": {"adapter.npz": {"sha256": "b" * 64, "length": 10},
                  "reference.npz": {"sha256": "c" * 64, "length": 5}},
        "reference": {"file": "reference.npz", "atol": 0.001, "rtol": 0.001}, "published_utc": "", "notes": ""}


def test_a_bundle_round_trips():
    parsed = bundle.parse(json.dumps(GOOD).encode())
    assert parsed.release == 3 and parsed.files["adapter.npz"].length == 10
    assert bundle.parse(parsed.to_json()) == parsed
    assert parsed.target_path("adapter.npz") == "models/lipsync/r3/adapter.npz"


@pytest.mark.parametrize("name", ["ok.npz", "a-b_c.1"])
def test_plain_names_pass(name):
    assert bundle.check_name(name) == name


@pytest.mark.parametrize("name", ["../x", "x/../y", "/abs", ".hidden", "a\\b", "a\0b", "a b", "", "x" * 200,
                                  "caf\u00e9", "a..b", 5, None])
def test_anything_else_is_bad_path(name):
    with pytest.raises(reasons.BadPath):
        bundle.check_name(name)


def test_oversized_bundle_is_too_large():
    with pytest.raises(reasons.TooLarge):
        bundle.parse(b" " * (bundle.MAX_BUNDLE_BYTES + 1))


@pytest.mark.parametrize("text", ['{"a": 1, "a": 1}', '{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}',
                                  '{"a": 12345678901234567890}', '{"a": -99999999999999999}'])
def test_strict_json_refuses_duplicates_non_finite_and_huge_numbers(text):
    with pytest.raises(reasons.Malformed):
        bundle.strict_json(text.encode(), "test")


def test_length_must_be_a_true_integer():
    doc = json.loads(json.dumps(GOOD))
    doc["files"]["adapter.npz"]["length"] = 10.0
    with pytest.raises(reasons.Malformed):
        bundle.parse(json.dumps(doc).encode())
