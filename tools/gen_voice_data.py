"""Lip-sync training speech from voices built on recorded speakers: Debian's flite and festival voices.

espeak-ng (formant synthesis) is all the synthetic training speech had; these voices are made from recordings of
real people (flite 2.2: clustergen voices of the CMU ARCTIC speakers awb, rms, slt and the kal diphones;
festival 2.5: the ked and kal diphones and the slt HTS voice), so their spectra, prosody and coarticulation are
nearer a human's. Programs run offline at data-generation time only; nothing of them ships with FaceBridge.

Per utterance: English text (tools/gen_lipsync_data.py's English sentences and the transcripts of the Asterisk
prompts of the training split, never a held-out text) -> a voice at a random speaking rate and pitch ->
16 kHz -> pocketsphinx forced alignment on the known text (tools/label_real_speech.py's Aligner: the voices give
no phone timings on their command line) -> the same augmentation as the espeak-ng data (EQ, reverberation,
telephone band, noise, level) -> log-mel + viseme and mouth targets (bridge/audio/visemes.py).

    python tools/gen_voice_data.py --out build/lipsync --count 600     # -> voices_train.npz (+ .json)
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from gen_lipsync_data import SENTENCES, augment  # noqa: E402
from label_real_speech import Aligner, clean_text, example, is_train, load_pcm, save_set  # noqa: E402

from bridge.paths import real_data_dir  # noqa: E402

# (program, voice): flite's built-in voices and festival's installed English ones
VOICES = (("flite", "kal"), ("flite", "kal16"), ("flite", "awb"), ("flite", "rms"), ("flite", "slt"),
          ("festival", "voice_kal_diphone"), ("festival", "voice_ked_diphone"),
          ("festival", "voice_cmu_us_slt_arctic_hts"))


def held_out_texts(data: Path) -> set[str]:
    """Texts of the held-out recordings (real_eval.json), which must never be spoken in training."""
    import json

    path = data / "real_eval.json"
    return {u["text"] for u in json.loads(path.read_text())["utterances"]} if path.exists() else set()


def texts(real: Path, words: set[str], banned: set[str]) -> list[str]:
    """English sentences the aligner's dictionary covers: gen_lipsync_data's and the training-split prompts'."""
    out = [clean_text(s, words) for s in SENTENCES["en-us"] + SENTENCES["en"]]
    listing = real / "asterisk" / "core-sounds-en.txt"
    if listing.exists():
        for line in listing.read_text(errors="replace").splitlines():
            if ":" in line and not line.startswith(";"):
                name, text = line.split(":", 1)
                if is_train(name.strip()):
                    out.append(clean_text(text, words))
    return sorted({t for t in out if t and t not in banned and len(t.split()) >= 2})


def synth(program: str, voice: str, text: str, stretch: float, pitch: float, tmp: Path) -> np.ndarray:
    """-> 16 kHz float32 audio of `text`; `stretch` > 1 is slower, `pitch` scales the mean F0 (flite only)."""
    wav = tmp / "out.wav"
    if program == "flite":
        cmd = ["flite", "-voice", voice, "-t", text, "-o", str(wav), "--setf", f"duration_stretch={stretch:.3f}",
               "--setf", f"int_f0_target_mean={pitch * (100 if voice in ('kal', 'kal16', 'awb', 'rms') else 160):.0f}"]
    else:
        (tmp / "in.txt").write_text(text + "\n")
        cmd = ["text2wave", "-eval", f"({voice})", "-eval", f"(Parameter.set 'Duration_Stretch {stretch:.3f})",
               str(tmp / "in.txt"), "-o", str(wav)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    return load_pcm(wav)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "lipsync")
    ap.add_argument("--real", type=Path, default=real_data_dir())
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="voices_train")
    args = ap.parse_args(argv)
    for program in ("flite", "text2wave"):
        if not shutil.which(program):
            raise SystemExit(f"{program} is not installed: apt-get install flite festival festvox-us-slt-hts "
                             "festvox-kallpc16k festvox-kdlpc16k")
    aligner = Aligner()
    pool = texts(args.real, aligner.words, held_out_texts(args.out))
    print(f"{len(pool)} texts, {len(VOICES)} voices", flush=True)
    rng = np.random.default_rng(args.seed)
    examples, meta, failed, started = [], [], 0, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        while len(examples) < args.count:
            program, voice = VOICES[int(rng.integers(len(VOICES)))]
            text = " ".join(str(t) for t in rng.choice(pool, int(rng.integers(1, 3)), replace=False))
            stretch, pitch = float(rng.uniform(0.75, 1.35)), float(rng.uniform(0.8, 1.25))
            pcm = synth(program, voice, text, stretch, pitch, Path(tmp))
            pad = [np.zeros(int(rng.uniform(0.1, 0.9) * 16000), np.float32) for _ in range(2)]
            pcm = np.concatenate([pad[0], pcm / (np.max(np.abs(pcm)) + 1e-9) * 0.5, pad[1]])
            events = aligner.align(pcm, re.sub(r"\s+", " ", text))
            if events is None:
                failed += 1
                continue
            speech = np.abs(pcm) > 1e-3
            rms = float(np.sqrt(np.mean(pcm[speech] ** 2))) if speech.any() else 0.1
            clean = rng.random() < 0.15
            examples.append(example(pcm if clean else augment(pcm, rng, rms), events))
            meta.append({"voice": f"{program}:{voice}", "text": text, "stretch": round(stretch, 3),
                         "pitch": round(pitch, 3), "augmented": not clean})
            if len(examples) % 50 == 0:
                print(f"  {len(examples)}/{args.count} ({time.time() - started:.0f} s, {failed} not aligned)",
                      flush=True)
    save_set(args.out, args.name, examples, meta, [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
