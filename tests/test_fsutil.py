"""Atomic writes leave no temporary files."""
import json

from bridge.fsutil import atomic_write_json


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "sub" / "results.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]
