"""The bridge's own reference inputs: a release is also run on what the bridge itself feeds that model.

A release's reference.npz is the publisher's word: inputs chosen to make its outputs look right. So the device
also runs each new release on inputs shipped with the package (bridge/data/reference_inputs/: real face crops,
detector frames and landmark patches recorded from the real pipeline on bridge/data/sample.mp4, and a second of
real speech features from bridge/data/sample_speech.wav, made by tools/make_reference_inputs.py), and every
output its consumers read must be finite and inside the range they accept (coordinates within reach of the
model's input, probabilities in [0, 1], ...; index.json beside the files, sha256-pinned). A model with the
right interface but garbage on real data is refused as `smoke-test-failed` before it can serve.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from bridge.errors import ModelError
from bridge.updates import reasons
from bridge.updates.arrays import read_npz

INPUTS_DIR = Path(__file__).resolve().parents[1] / "data" / "reference_inputs"
REBUILD = "restore bridge/data/reference_inputs (`git checkout bridge/data`), or rebuild it with " \
          "`python tools/make_reference_inputs.py`"


@lru_cache(maxsize=1)
def index() -> dict:
    try:
        return json.loads((INPUTS_DIR / "index.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"the bridge's reference inputs are unreadable ({e})", REBUILD) from None


def load_items(path: Path, what: str) -> list[dict[str, np.ndarray]]:
    """The feeds of an inputs file (`item<i>.<input name>` arrays), float16 widened to float32."""
    items: dict[int, dict[str, np.ndarray]] = {}
    for key, value in read_npz(path, what).items():
        item, _, name = key.partition(".")
        if not item.startswith("item") or not item[4:].isdigit() or not name:
            raise reasons.Malformed(f"{what} holds {key!r}, not item<i>.<input>")
        items.setdefault(int(item[4:]), {})[name] = value.astype(np.float32) if value.dtype == np.float16 else value
    return [items[i] for i in sorted(items)]


def run_checked(model: str, session, items: list[dict[str, np.ndarray]], ranges: dict[str, list]) -> None:
    """SmokeTestFailed unless `session` gives finite, in-range outputs for every item."""
    for i, feeds in enumerate(items):
        if set(feeds) != set(session.input_names):
            raise reasons.SmokeTestFailed(f"{model} takes inputs {session.input_names}, the bridge feeds "
                                          f"{sorted(feeds)}")
        try:
            outputs = session.run(feeds)
        except Exception as e:  # ONNX Runtime raises its own types
            first = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            raise reasons.SmokeTestFailed(f"{model} fails on the bridge's own input {i} ({first})") from None
        for name, (low, high) in ranges.items():
            value = outputs.get(name)
            if value is None or not np.isfinite(value).all():
                raise reasons.SmokeTestFailed(f"{model} gives no finite {name} on the bridge's own input {i} (real "
                                              "data from the sample video or speech)")
            if value.size and (value.min() < low or value.max() > high):
                raise reasons.SmokeTestFailed(
                    f"{model} gives {name} in [{value.min():.4g}, {value.max():.4g}] on the bridge's own input {i}, "
                    f"outside the [{low:g}, {high:g}] its consumers accept")


def check_on_bridge_inputs(model: str, session) -> int:
    """Run `session` (a release of `model`) on the bridge's own inputs for that model. -> items run (0: the
    bridge ships none for this model)."""
    entry = index().get("models", {}).get(model)
    if entry is None:
        return 0
    path = INPUTS_DIR / entry["file"]
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as e:
        raise ModelError(f"the bridge's reference inputs for {model} are unreadable ({e})", REBUILD) from None
    if digest != entry["sha256"]:
        raise ModelError(f"the bridge's reference inputs {path} do not match their sha256", REBUILD)
    items = load_items(path, f"the bridge's reference inputs for {model}")
    run_checked(model, session, items, entry["ranges"])
    return len(items)
