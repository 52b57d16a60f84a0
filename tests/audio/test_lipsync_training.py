"""Lip-sync training data: perturbation keeps labels on their frames; other voices never speak a held-out text."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.helpers import tool_module

pytest.importorskip("torch")


def _utterance(n: int = 400) -> dict:
    rng = np.random.default_rng(3)
    vis = np.repeat(np.arange(n // 20) % 15, 20)
    # every frame's mel carries its label, so a label can be checked against the frame it ends up on
    mel = np.repeat(vis[:, None].astype(np.float32), 40, axis=1) + rng.normal(0, 1e-3, (n, 40)).astype(np.float32)
    return {"mel": mel, "visemes": vis, "mouth": np.repeat(vis[:, None] / 15.0, 19, axis=1).astype(np.float32)}


def test_rate_and_vocal_tract_perturbation_keep_each_label_on_its_frame():
    train = tool_module("train_lipsync")
    rng = np.random.default_rng(0)
    u = _utterance()
    lengths = set()
    for _ in range(20):
        p = train.perturb(u, rng)
        assert len(p["mel"]) == len(p["visemes"]) == len(p["mouth"])
        lengths.add(len(p["mel"]))
        # the EQ adds a smooth curve across bands, the same on every frame: take it out with the band median
        level = p["mel"] - np.median(p["mel"] - p["visemes"][:, None], axis=0)
        steady = np.r_[False, p["visemes"][1:] == p["visemes"][:-1]] & np.r_[p["visemes"][:-1] == p["visemes"][1:],
                                                                             False]
        assert np.abs(level[steady].mean(1) - p["visemes"][steady]).max() < 0.05
        assert np.allclose(p["mouth"][:, 0], p["visemes"] / 15.0)
    assert min(lengths) < 370 and max(lengths) > 430  # rates from 0.8x to 1.25x


def test_crops_come_from_each_pool_at_its_share():
    train = tool_module("train_lipsync")
    rng = np.random.default_rng(1)
    base, other = _utterance(), _utterance()
    other = {**other, "mel": other["mel"] + 100.0}
    mel, vis, _ = next(train.batches([base], rng, 400, 50, [([other], 0.25)]))
    from_other = (mel[:, :, 0].numpy() > 50).all(1).mean()
    assert 0.18 < from_other < 0.32


def test_the_other_voices_never_speak_a_held_out_text(tmp_path):
    gen = tool_module("gen_voice_data")
    words = {"please", "call", "stella", "press", "one", "for", "help", "the", "quick", "brown", "fox"}
    (tmp_path / "real_eval.json").write_text(json.dumps({"utterances": [{"text": "press one for help"}]}))
    real = tmp_path / "real"
    (real / "asterisk").mkdir(parents=True)
    names = [n for n in (f"p{i}" for i in range(40)) if tool_module("label_real_speech").is_train(n)]
    (real / "asterisk" / "core-sounds-en.txt").write_text(f"{names[0]}: Press one for help.\n{names[1]}: call stella\n")
    pool = gen.texts(real, words, gen.held_out_texts(tmp_path))
    assert "call stella" in pool and "press one for help" not in pool


@pytest.mark.skipif(not shutil.which("flite"), reason="flite is not installed (apt-get install flite)")
def test_a_flite_voice_speaks_at_16_khz(tmp_path):
    gen = tool_module("gen_voice_data")
    slow = gen.synth("flite", "rms", "please call stella", 1.3, 1.0, tmp_path)
    fast = gen.synth("flite", "rms", "please call stella", 0.8, 1.0, tmp_path)
    assert slow.dtype == np.float32 and np.abs(slow).max() > 0.05
    assert len(slow) > 1.3 * len(fast)


def test_the_running_normalisation_in_the_graph_matches_frame_by_frame_numpy_however_it_is_stepped(tmp_path):
    import onnxruntime as ort
    import torch

    train, norm = tool_module("train_lipsync"), tool_module("lipsync_norm")
    rng = np.random.default_rng(2)
    mean, std = rng.normal(-6, 2, 40).astype(np.float32), rng.uniform(1, 3, 40).astype(np.float32)
    # a speaker louder and tilted against the training statistics: the normalisation must pull it back
    mel = (rng.normal(mean + 3 + np.linspace(-2, 2, 40), std * 0.7, (700, 40))).astype(np.float32)
    layer = norm.RunningNorm(mean, std, 50.0)
    with torch.no_grad():
        whole, _ = layer(torch.from_numpy(mel)[None], torch.zeros(1, 128))
        row, parts = torch.zeros(1, 128), []
        for start in (0, 1, 8, 300, 301):  # uneven calls carry the statistics in the state row
            stop = {0: 1, 1: 8, 8: 300, 300: 301, 301: 700}[start]
            out, row = layer(torch.from_numpy(mel[start:stop])[None], row)
            parts.append(out[0])
    expected = norm.reference(mel, mean, std, 50.0)
    assert np.abs(whole[0].numpy() - expected).max() < 1e-3
    assert np.abs(torch.cat(parts).numpy() - expected).max() < 1e-3
    assert abs(expected[400:].mean() - mean.mean()) < 0.1  # level and tilt taken out after a few time constants
    net = train.LipSyncNet(mean, std, 50.0)
    train.export(net, tmp_path / "lipsync.onnx")
    train.check_onnx(tmp_path / "lipsync.onnx", net)  # ONNX = torch, frame-by-frame = whole
    sess = ort.InferenceSession(str(tmp_path / "lipsync.onnx"), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[1].shape == [3, 1, 128]
