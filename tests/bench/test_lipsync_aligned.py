"""Synthetic held-out speech labelled both ways (tools/align_synthetic.py) and scored by bench/lipsync_aligned.py."""
from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import espeak_or_skip, tool_module


def _inputs(data):
    """Held-out recordings' texts (two English, one French: not read by espeak here) and a one-utterance
    eval_all, as the held-out JSON files name them."""
    data.mkdir()
    (data / "real_eval.json").write_text(json.dumps({"utterances": [
        {"group": "librivox", "name": "a", "text": "please open the window", "seconds": 2.0},
        {"group": "cards", "name": "b", "text": "ten of hearts", "seconds": 1.5},
        {"group": "june_fr", "name": "c", "text": "Activé.", "language": "fr", "seconds": 1.0}]}))
    (data / "eval_all.json").write_text(json.dumps({"utterances": [
        {"text": "Buongiorno, come stai oggi?", "language": "it", "variant": "f3", "rate": 170, "pitch": 50,
         "pitch_range": 50, "word_gap": 0, "augmented": False}]}))


def test_the_same_audio_is_labelled_by_espeak_and_by_forced_alignment_then_scored_both_ways(tmp_path):
    espeak_or_skip()
    pytest.importorskip("pocketsphinx")
    import numpy as np

    from bridge.audio.lipsync import LipSyncModel
    from bridge.bench import lipsync_aligned

    data = tmp_path / "lipsync"
    _inputs(data)
    assert tool_module("align_synthetic").main(["--data", str(data)]) == 0
    meta = json.loads((data / "synth_aligned.json").read_text())
    assert [m["group"] for m in meta["utterances"]] == ["same_text", "same_text", "eval_all"]
    with np.load(data / "synth_aligned.npz") as z:
        n = int(z["lengths"].sum())
        assert len(z["mel"]) == len(z["visemes_exact"]) == len(z["visemes_aligned"]) == len(z["mouth_aligned"]) == n
        aligned = meta["utterances"][0]["aligned"]
        first = slice(0, int(z["lengths"][0]))
        if aligned:  # two labellings of one recording: mostly the same speech frames, not the same boundaries
            assert (z["visemes_exact"][first] != z["visemes_aligned"][first]).any()
    out = lipsync_aligned.score(LipSyncModel(backend="onnxruntime"), data)
    for group in ("same_text", "eval_all", "same_text/librivox", "same_text/cards"):
        assert set(out[group]) == {"exact_all", "exact_aligned", "forced_aligned", "forced_vs_exact_labels"}
        assert out[group]["exact_all"]["utterances"] == (2 if group == "same_text" else 1)
    assert out["same_text"]["exact_all"]["viseme_accuracy"] > 0.5  # a model that hears English speech
    assert lipsync_aligned.ensure(data) is None  # made once, then reused


def test_without_pocketsphinx_only_this_figure_is_skipped_and_says_why(tmp_path, monkeypatch):
    from bridge.bench import lipsync_aligned

    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # how Python marks a module as not importable
    reason = lipsync_aligned.ensure(tmp_path)
    assert reason and "pocketsphinx is not installed" in reason
    assert not (tmp_path / "synth_aligned.npz").exists()
