"""Wideband recorded prompts (tools/label_wideband_speech.py): G.722 decodes to 16 kHz with the band above 4 kHz,
and swapping the 8 kHz Allison prompts out of real_train keeps every other utterance whole, on its own frames."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import tool_module


def test_g722_decodes_to_16_khz_wideband(tmp_path):
    g722 = pytest.importorskip("G722")
    t = np.arange(16000) / 16000
    tone = (0.3 * (np.sin(2 * np.pi * 1000 * t) + np.sin(2 * np.pi * 6000 * t)) * 32767).astype(np.int16)
    path = tmp_path / "tone.g722"
    path.write_bytes(g722.G722(16000, 64000).encode(tone))
    pcm = tool_module("label_wideband_speech").decode_g722(path)
    assert pcm.dtype == np.float32 and len(pcm) == len(tone)
    power = np.abs(np.fft.rfft(pcm[2000:])) ** 2
    freq = np.fft.rfftfreq(len(pcm) - 2000, 1 / 16000)
    high, low = power[np.abs(freq - 6000) < 50].sum(), power[np.abs(freq - 1000) < 50].sum()
    assert high > 0.1 * low  # an 8 kHz (telephone) recording has nothing there


def test_kept_from_drops_one_group_and_keeps_the_rest_on_their_frames(tmp_path):
    tool = tool_module("label_wideband_speech")
    lengths = [3, 5, 2]
    groups = ["asterisk_train", "carlo_it", "ivr_ru"]
    frames = sum(lengths)
    mel = np.repeat(np.arange(frames, dtype=np.float16)[:, None], 4, axis=1)
    np.savez(tmp_path / "real_train.npz", mel=mel, visemes=np.arange(frames, dtype=np.int8),
             mouth=mel[:, :2], lengths=np.array(lengths))
    meta = [{"group": g, "name": f"n{i}"} for i, g in enumerate(groups)]
    (tmp_path / "real_train.json").write_text(json.dumps({"utterances": meta}))
    examples, kept = tool.kept_from(tmp_path, "real_train", "asterisk_train")
    assert [m["group"] for m in kept] == ["carlo_it", "ivr_ru"]
    assert [e["visemes"].tolist() for e in examples] == [[3, 4, 5, 6, 7], [8, 9]]
    assert all(len(e["mel"]) == len(e["mouth"]) == len(e["visemes"]) for e in examples)
