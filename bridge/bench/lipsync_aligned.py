"""Like-for-like lip-sync figures: synthetic held-out speech scored against espeak-ng's exact phoneme timings
AND against the pocketsphinx forced alignment that labels the recorded sets, on the same audio.

The recorded sets (LibriVox, cards, ...) can only be labelled by forced alignment; the synthetic held-out sets are
labelled by the synthesizer's own phone events. Scoring the same synthetic audio both ways shows how much of the
recorded-vs-synthetic gap is the labels rather than the voice. The set (synth_aligned, tools/align_synthetic.py)
is made once under --data, about 2 minutes on one core; without pocketsphinx only this figure is skipped.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from bridge.bench.lipsync_scoring import labels_current, lipsync_metrics, predict_utterance
from bridge.errors import FaceBridgeError

REPO = Path(__file__).resolve().parents[2]
KEYS = ("frames", "viseme_accuracy", "jawOpen_correlation", "jawOpen_mae", "mean_channel_correlation")


def ensure(data: Path) -> str | None:
    """Make synth_aligned under `data` when missing or labelled by an older labeller; -> None when ready, else
    why it is skipped."""
    if (data / "synth_aligned.npz").exists() and labels_current(data / "synth_aligned.json"):
        return None
    if importlib.util.find_spec("pocketsphinx") is None:
        return "pocketsphinx is not installed (pip install -e .[tools]): forced-alignment labels not made"
    tool = REPO / "tools" / "align_synthetic.py"
    if not tool.exists() or not (data / "real_eval.json").exists() or not (data / "eval_all.json").exists():
        return "needs a source checkout with real_eval and eval_all under --data"
    print(f"labelling synthetic held-out speech by forced alignment into {data} (once, about 2 min) ...", flush=True)
    proc = subprocess.run([sys.executable, str(tool), "--data", str(data)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise FaceBridgeError(f"forced alignment of synthetic speech failed ({proc.stderr.strip().splitlines()[-1:]})",
                              "install espeak-ng and the tools extra (pocketsphinx), then run it again")
    return None


def _predict(model, mel_all: np.ndarray, lengths: np.ndarray):
    start = 0
    for n in lengths:
        yield (slice(start, start + n), *predict_utterance(model, mel_all[start:start + n]))
        start += n


def score(model, data: Path) -> dict:
    """Per group (same_text, and per recorded group within it; eval_all): exact labels on every utterance,
    exact and forced labels on the utterances the aligner could align."""
    meta = json.loads((data / "synth_aligned.json").read_text())
    with np.load(data / "synth_aligned.npz") as z:
        lengths = z["lengths"]
        labels = {k: z[k] for k in ("visemes_exact", "mouth_exact", "visemes_aligned", "mouth_aligned")}
        preds = list(_predict(model, z["mel"].astype(np.float32), lengths))
    utts = meta["utterances"]
    groups = {"same_text": lambda m: m["group"] == "same_text", "eval_all": lambda m: m["group"] == "eval_all"}
    for sub in sorted({m["subgroup"] for m in utts if m["group"] == "same_text"}):
        groups[f"same_text/{sub}"] = lambda m, s=sub: m["group"] == "same_text" and m["subgroup"] == s

    def metrics(which: str, keep) -> dict:
        idx = [i for i, m in enumerate(utts) if keep(m)]
        if not idx:
            return {}
        sl = [preds[i][0] for i in idx]
        r = lipsync_metrics(np.concatenate([preds[i][1] for i in idx]), np.concatenate([preds[i][2] for i in idx]),
                            np.concatenate([labels[f"visemes_{which}"][s] for s in sl]).astype(np.int64),
                            np.concatenate([labels[f"mouth_{which}"][s] for s in sl]).astype(np.float32))
        return {"utterances": len(idx), **{k: r[k] for k in KEYS}}

    out = {"labels": "exact = espeak-ng's phoneme events; forced = pocketsphinx forced alignment "
                     "(tools/label_real_speech.py force_align), the labels of the recorded sets",
           "alignment_failed": meta["alignment_failed"]}
    def agreement(keep) -> dict:
        """The forced labels scored against the exact ones: how far the aligner itself is from the truth."""
        sl = [preds[i][0] for i, m in enumerate(utts) if keep(m) and m["aligned"]]
        if not sl:
            return {}
        jaw = [np.concatenate([labels[f"mouth_{w}"][s][:, 0] for s in sl]).astype(np.float32)
               for w in ("exact", "aligned")]
        same = np.concatenate([labels["visemes_exact"][s] == labels["visemes_aligned"][s] for s in sl])
        return {"viseme_agreement": round(float(same.mean()), 3),
                "jawOpen_correlation": round(float(np.corrcoef(*jaw)[0, 1]), 3)}

    for name, keep in groups.items():
        out[name] = {"exact_all": metrics("exact", keep),
                     "exact_aligned": metrics("exact", lambda m, k=keep: k(m) and m["aligned"]),
                     "forced_aligned": metrics("aligned", lambda m, k=keep: k(m) and m["aligned"]),
                     "forced_vs_exact_labels": agreement(keep)}
        g = out[name]
        print(f"{name}: exact labels {g['exact_aligned'].get('viseme_accuracy')} / "
              f"{g['exact_aligned'].get('jawOpen_correlation')}, forced labels "
              f"{g['forced_aligned'].get('viseme_accuracy')} / {g['forced_aligned'].get('jawOpen_correlation')} "
              f"(viseme acc / jawOpen r, {g['forced_aligned'].get('utterances')} aligned utterances); forced labels "
              f"against exact {g['forced_vs_exact_labels']}", flush=True)
    return out
