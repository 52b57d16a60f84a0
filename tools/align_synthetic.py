"""Synthetic held-out speech labelled both ways on the same audio: espeak-ng's exact phoneme timings and the
pocketsphinx forced alignment that labels the recorded sets (tools/label_real_speech.py), for a like-for-like
comparison of recorded against synthetic figures (issue 19, `facebridge bench lipsync`).

Two groups, into one cached set (synth_aligned.npz/.json under --out, made once):
- same_text: espeak-ng en-us reading the held-out English recordings' texts (real_eval.json), synthesized exactly
  as synth_same_text is (same padding); aligned by the English aligner on the words, as the recorded English is.
- eval_all: the first --eval-count utterances of the eval_all held-out set spoken again (same text, language,
  voice, rate, pitch; padding and augmentation drawn afresh, see eval_all()); aligned word by word on espeak-ng's
  phonemes in their language (tools/align_other_languages.py), as the recorded French speaker is.
An utterance the aligner cannot align (its phone pass fails) is kept with "aligned": false and its exact labels
in both places: the bench scores forced labels on the aligned ones only, and exact labels on both the aligned ones
and all of them, which shows what the selection alone changes.

    python tools/align_synthetic.py [--data build/lipsync] [--eval-count 100]
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from bridge.audio import features  # noqa: E402
from bridge.audio.visemes import frame_targets, segments_from_events  # noqa: E402
from bridge.bench.lipsync import REAL_LABELS_VERSION  # noqa: E402
from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402


def _targets(pcm: np.ndarray, mel: np.ndarray, segments):
    return frame_targets(segments, features.frame_center_s(np.arange(len(mel))))


class WordAligner:
    """ForeignAligner on whitespace tokens (numbers included: espeak-ng says them in the language)."""

    def __init__(self, espeak, decoder):
        from align_other_languages import VOICES, ForeignAligner

        for lang in ("it", "pt-br", "fi"):
            VOICES.setdefault(lang, lang)
        self.inner = ForeignAligner(espeak, decoder)

    def align(self, pcm: np.ndarray, text: str, lang: str):
        words = re.findall(r"\d+|[^\W\d_]+(?:['’][^\W\d_]+)?", text.lower())
        return self.inner.align_words(pcm, words, lang)


def same_text(espeak, aligner, data: Path):
    from label_real_speech import espeak_reading

    meta = [m for m in json.loads((data / "real_eval.json").read_text())["utterances"] if "language" not in m]
    for m in meta:  # the held-out English recordings' texts (those of synth_same_text, before its alignment)
        pcm, events = espeak_reading(espeak, m["text"])
        exact = segments_from_events(events, len(pcm) / features.SAMPLE_RATE)
        yield {"group": "same_text", "subgroup": m["group"], "name": m["name"]}, pcm, exact, \
            (lambda pcm=pcm, text=m["text"]: aligner.align(pcm, text))


def eval_all(espeak, word_aligner, data: Path, count: int):
    """The first `count` specs of eval_all.json (text, language, voice, rate, pitch, word gap) spoken again; the
    padding and augmentation are drawn afresh per utterance (the stored features cannot be regenerated bit for
    bit: the augmentation's random stream has changed since they were made), so this is a resample of
    eval_all's conditions, scored both ways on the same audio."""
    from gen_lipsync_data import UtteranceSpec, example

    meta = json.loads((data / "eval_all.json").read_text())["utterances"][:count]
    fields = UtteranceSpec.__dataclass_fields__
    for i, m in enumerate(meta):
        spec = UtteranceSpec(**{k: m[k] for k in fields})
        rng = np.random.default_rng([0, 4, i])
        pad = (float(rng.uniform(0.1, 0.9)), float(rng.uniform(0.1, 0.9)))
        ex = example(espeak, spec, rng if m.get("augmented", True) else None, pad)
        yield {"group": "eval_all", "subgroup": spec.language, "index": i}, ex["pcm"], ex["segments"], \
            (lambda pcm=ex["pcm"], text=spec.text, lang=spec.language: word_aligner.align(pcm, text, lang))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "build" / "lipsync", help="real_eval and eval_all JSON")
    ap.add_argument("--out", type=Path, default=None, help="where synth_aligned goes (default: --data)")
    ap.add_argument("--eval-count", type=int, default=100, help="utterances of eval_all (its first N)")
    args = ap.parse_args(argv)
    from gen_lipsync_data import Espeak
    from label_real_speech import Aligner

    started = time.time()
    args.out = args.out or args.data
    args.out.mkdir(parents=True, exist_ok=True)
    espeak, aligner = Espeak(), Aligner()
    word_aligner = WordAligner(espeak, aligner.decoder)
    mels, vex, mex, val, mal, lengths, meta = [], [], [], [], [], [], []
    failed = {"same_text": 0, "eval_all": 0}
    for gen in (same_text(espeak, aligner, args.data), eval_all(espeak, word_aligner, args.data, args.eval_count)):
        for m, pcm, exact, align in gen:
            mel = features.log_mel(pcm)
            events = align()
            m["aligned"] = events is not None
            failed[m["group"]] += events is None
            forced = exact if events is None else segments_from_events(events, len(pcm) / features.SAMPLE_RATE)
            (v1, m1), (v2, m2) = _targets(pcm, mel, exact), _targets(pcm, mel, forced)
            mels.append(mel.astype(np.float16)), lengths.append(len(mel)), meta.append(m)
            vex.append(v1.astype(np.int8)), mex.append(m1.astype(np.float16))
            val.append(v2.astype(np.int8)), mal.append(m2.astype(np.float16))
    buf = io.BytesIO()
    np.savez_compressed(buf, mel=np.concatenate(mels), lengths=np.array(lengths, np.int64),
                        visemes_exact=np.concatenate(vex), mouth_exact=np.concatenate(mex),
                        visemes_aligned=np.concatenate(val), mouth_aligned=np.concatenate(mal))
    atomic_write_bytes(args.out / "synth_aligned.npz", buf.getvalue())
    atomic_write_json(args.out / "synth_aligned.json", {"set": "synth_aligned", "frames": int(sum(lengths)),
                                                        "labels_version": REAL_LABELS_VERSION,
                                                        "alignment_failed": failed, "utterances": meta,
                                                        "seconds_to_make": round(time.time() - started, 1)})
    print(f"synth_aligned: {len(meta)} utterances ({failed} of them not aligned), {sum(lengths) / 6000:.1f} min, "
          f"{time.time() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
