"""Label the wideband (16 kHz G.722) recordings of Asterisk's English prompts exactly as the 8 kHz ones: the same
speaker, texts, split (label_real_speech.is_train) and labels (pocketsphinx forced alignment, labels v3); only the
band differs (50-7000 Hz against 300-3400 Hz). A prompt held out in the 8 kHz set is held out here too.

Source: Debian asterisk-core-sounds-en-g722 1.6.1-1 (CC-BY-SA-3.0, Allison Smith / Digium, Inc.; see NOTICE),
put in asterisk-g722/ of the real corpus by tools/fetch_real_data.py; decoded with PyPI `g722` (a training-time
tool, not a product dependency). Writes, in --out:

- allison_wb_train: the training prompts (is_train), wideband;
- allison_wb_eval: the held-out prompts, wideband (a diagnostic, never trained on; real_eval keeps the 8 kHz ones);
- real_train_wideband: real_train with its 8 kHz Allison prompts replaced by allison_wb_train (the Italian and
  Russian prompts kept), for `train_lipsync.py --real-sets real_train_wideband`.

    python tools/label_wideband_speech.py [--real DIR] [--out build/lipsync]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from label_real_speech import Aligner, aligned, example, is_train, save_set  # noqa: E402

from bridge.audio import features  # noqa: E402
from bridge.paths import real_data_dir  # noqa: E402


def decode_g722(path: Path) -> np.ndarray:
    """A raw G.722 file (64 kb/s, as Asterisk stores it) -> 16 kHz float PCM."""
    import G722

    pcm = np.asarray(G722.G722(features.SAMPLE_RATE, 64000).decode(path.read_bytes()), np.int16)
    return pcm.astype(np.float32) / 32768.0


def prompts(real: Path):
    """(name, g722 path, transcript) for every English prompt with a transcript and a G.722 recording."""
    for line in (real / "asterisk" / "core-sounds-en.txt").read_text(errors="replace").splitlines():
        if ":" not in line or line.startswith(";"):
            continue
        name, text = line.split(":", 1)
        path = real / "asterisk-g722" / f"{name.strip()}.g722"
        if path.exists():
            yield name.strip(), path, text


def kept_from(data: Path, name: str, drop_group: str) -> tuple[list[dict], list[dict]]:
    """The examples and metadata of set `name` whose group is not `drop_group`."""
    meta = json.loads((data / f"{name}.json").read_text())["utterances"]
    with np.load(data / f"{name}.npz") as npz:
        z = {k: npz[k] for k in ("mel", "visemes", "mouth", "lengths")}
    examples, kept, start = [], [], 0
    for m, n in zip(meta, z["lengths"]):
        if m["group"] != drop_group:
            examples.append({k: z[k][start:start + n] for k in ("mel", "visemes", "mouth")})
            kept.append(m)
        start += n
    return examples, kept


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=real_data_dir())
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "lipsync")
    args = ap.parse_args(argv)
    aligner = Aligner()
    sets = {"allison_wb_train": ([], []), "allison_wb_eval": ([], [])}
    skipped = {"not_in_dictionary": 0, "alignment_failed": 0}
    for (name, _, _), words, pcm, events in aligned(aligner, prompts(args.real), decode_g722, skipped):
        train = is_train(name)
        target = "allison_wb_train" if train else "allison_wb_eval"
        sets[target][0].append(example(pcm, events))
        sets[target][1].append({"group": "asterisk_wb_train" if train else "asterisk_wb_eval", "name": name,
                                "text": words, "seconds": round(len(pcm) / features.SAMPLE_RATE, 2)})
    for name, (examples, meta) in sets.items():
        save_set(args.out, name, examples, meta, [])
    other, other_meta = kept_from(args.out, "real_train", "asterisk_train")
    save_set(args.out, "real_train_wideband", sets["allison_wb_train"][0] + other,
             sets["allison_wb_train"][1] + other_meta, [])
    print(f"skipped: {skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
