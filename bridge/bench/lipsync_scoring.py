"""How lip-sync output is scored against frame targets, and which labelling of recorded speech is current: shared
by `bench lipsync`, its forced-alignment comparison and the tools that label or train."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# 2: an alignment that leaves words of the text out is a failed one (version 1 labelled them silence)
# 3: pauses between words may be silence, phone starts are on our frames' clock (2 was a frame early), and an
#    alignment does not depend on what the decoder aligned before
REAL_LABELS_VERSION = 3


def labels_current(json_path: Path) -> bool:
    return json_path.exists() and json.loads(json_path.read_text()).get("labels_version") == REAL_LABELS_VERSION


def predict_utterance(model, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(viseme per frame, mouth weights per frame) of one utterance from a fresh state, the model's lookahead
    filled with silence at the end so every frame is answered."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.audio import features

    pad = np.full((model.lookahead, features.N_MELS), np.log(features.LOG_FLOOR), np.float32)
    model.reset()
    p_vis, p_mouth = model.step(np.concatenate([mel, pad]))
    return p_vis[model.lookahead:].argmax(-1), p_mouth[model.lookahead:]


def lipsync_metrics(pred_vis: np.ndarray, pred_mouth: np.ndarray, tgt_vis: np.ndarray, tgt_mouth: np.ndarray) -> dict:
    """Viseme frame accuracy, mouth-weight MAE and correlation per channel, and mouth opening in silence
    (frames whose target is the rest pose)."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.audio.visemes import MOUTH_CHANNELS

    jaw = MOUTH_CHANNELS.index("jawOpen")
    corr = {}
    for c, name in enumerate(MOUTH_CHANNELS):
        if tgt_mouth[:, c].std() > 1e-4 and pred_mouth[:, c].std() > 1e-6:
            corr[name] = round(float(np.corrcoef(pred_mouth[:, c], tgt_mouth[:, c])[0, 1]), 3)
    rest = tgt_mouth.max(axis=1) < 0.02
    return {
        "frames": int(len(tgt_vis)),
        "viseme_accuracy": round(float((pred_vis == tgt_vis).mean()), 3),
        "mouth_mae": round(float(np.abs(pred_mouth - tgt_mouth).mean()), 4),
        "jawOpen_mae": round(float(np.abs(pred_mouth[:, jaw] - tgt_mouth[:, jaw]).mean()), 4),
        "jawOpen_correlation": corr.get("jawOpen"),
        "mean_channel_correlation": round(float(np.mean(list(corr.values()))), 3) if corr else None,
        "channel_correlation": corr,
        "silence_frames": int(rest.sum()),
        "silence_jawOpen_mean": round(float(pred_mouth[rest, jaw].mean()), 4) if rest.any() else None,
        "silence_jawOpen_p95": round(float(np.percentile(pred_mouth[rest, jaw], 95)), 4) if rest.any() else None,
    }
