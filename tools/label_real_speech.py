"""Label recorded human speech for lip-sync training and evaluation: pocketsphinx forced alignment of each
recording to its transcript -> timed ARPAbet phones -> IPA -> our viseme and ARKit-mouth targets (the same
tables and coarticulation as the espeak-ng data, bridge/audio/visemes.py).

Sources (tools/fetch_real_data.py puts them in the user cache, bridge/paths.py real_data_dir): Asterisk's English
prompts (one speaker, studio, 8 kHz telephone band, CC-BY-SA-3.0, with their transcripts) and pocketsphinx's test
recordings (five LibriVox audiobook sentences, public domain; five read card names). The Asterisk prompts are split
by a hash of their name: about 70% may be trained on (real_train), the rest are held out with all of LibriVox and
the cards (real_eval, one file per group in the JSON). synth_same_text is espeak-ng reading the held-out texts,
labelled the same way (aligned by pocketsphinx, not by espeak's own events), so the two differ only in the voice.
Speakers in other languages (Asterisk's French, Italian and Russian prompts, one speaker each) are aligned by the
English model on espeak-ng's phonemes (tools/align_other_languages.py); whole speakers go to one side: OTHER_SPLIT
says which train and which is held out, at most --other-max prompts each (chosen by a hash).

    python tools/label_real_speech.py [--real DIR] [--out build/lipsync]
"""
from __future__ import annotations

import argparse
import hashlib
import io
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from forced_alignment import force_align, phone_start_s  # noqa: E402,F401 (tests read them here)

from bridge.audio import features  # noqa: E402
from bridge.audio.visemes import MOUTH_CHANNELS, frame_targets, segments_from_events  # noqa: E402
from bridge.bench.lipsync import REAL_LABELS_VERSION  # noqa: E402
from bridge.frame import VISEME_NAMES  # noqa: E402
from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402
from bridge.paths import real_data_dir  # noqa: E402

ARPABET_IPA = {
    "AA": "ɑ", "AE": "æ", "AH": "ʌ", "AO": "ɔ", "AW": "aʊ", "AY": "aɪ", "B": "b", "CH": "tʃ", "D": "d", "DH": "ð",
    "EH": "ɛ", "ER": "ɝ", "EY": "eɪ", "F": "f", "G": "ɡ", "HH": "h", "IH": "ɪ", "IY": "i", "JH": "dʒ", "K": "k",
    "L": "l", "M": "m", "N": "n", "NG": "ŋ", "OW": "oʊ", "OY": "ɔɪ", "P": "p", "R": "ɹ", "S": "s", "SH": "ʃ",
    "T": "t", "TH": "θ", "UH": "ʊ", "UW": "u", "V": "v", "W": "w", "Y": "j", "Z": "z", "ZH": "ʒ", "SIL": "_",
}
TRAIN_SHARE = 0.7
OTHER_SPLIT = {"it": ("carlo_it", "real_train"), "ru": ("ivr_ru", "real_train"), "fr": ("june_fr", "real_eval")}


def is_train(name: str) -> bool:
    """The fixed split of the Asterisk prompts: a hash of the prompt's name, about TRAIN_SHARE of them."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < TRAIN_SHARE


def load_pcm(path: Path) -> np.ndarray:
    import soundfile
    import soxr

    audio, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    audio = audio.mean(1)
    if rate == features.SAMPLE_RATE:
        return audio
    return soxr.resample(audio, rate, features.SAMPLE_RATE).astype(np.float32)


def clean_text(text: str, words: set[str]) -> str | None:
    """Transcript -> lower-case dictionary words, or None when a word is not in the dictionary."""
    text = re.sub(r"\[[^\]]*\]", " ", text).lower().replace("-", " ")
    tokens = [t.strip(".,!?;:\"()") for t in text.split()]
    tokens = [t for t in tokens if t]
    if not tokens or any(t not in words for t in tokens):
        return None
    return " ".join(tokens)


# Optional silence between words, as a probability: pocketsphinx's default (0.005) all but never takes it, so a
# pause between two words was labelled as the words stretched over it (labels version 3 uses 0.3).
SILENCE_PROBABILITY = 0.3


class Aligner:
    """pocketsphinx (en-us acoustic model) forced alignment: (pcm16k, text) -> [(IPA, start_s)] or None."""

    def __init__(self):
        from pocketsphinx import Decoder, get_model_path

        self.decoder = Decoder(samprate=features.SAMPLE_RATE, silprob=SILENCE_PROBABILITY, loglevel="FATAL")
        dict_path = Path(get_model_path()) / "en-us" / "cmudict-en-us.dict"
        self.words = {line.split()[0] for line in dict_path.read_text(errors="replace").splitlines() if line.strip()}

    def align(self, pcm: np.ndarray, text: str):
        aligned = force_align(self.decoder, pcm, text)
        if aligned is None:
            return None
        events = [(ARPABET_IPA.get(phone, "_"), start) for _, phones in aligned for phone, start in phones]
        return events or None


SYNTH_PAD = 3200  # samples of silence either side of espeak-ng's reading of a held-out text (synth_same_text)


def espeak_reading(espeak, text: str) -> tuple[np.ndarray, list]:
    """espeak-ng (en-us) reading `text`: 16 kHz PCM with SYNTH_PAD of silence either side, and its phoneme events
    (phoneme, start s) on that padded clock."""
    from gen_lipsync_data import resample_to_16k

    synth, events = espeak.synth(text, "en-us")
    silence = np.zeros(SYNTH_PAD, np.float32)
    pad_s = SYNTH_PAD / features.SAMPLE_RATE
    return (np.concatenate([silence, resample_to_16k(synth, espeak.sample_rate), silence]),
            [(p, t + pad_s) for p, t in events])


def example(pcm: np.ndarray, events) -> dict:
    mel = features.log_mel(pcm)
    labels, mouth = frame_targets(segments_from_events(events, len(pcm) / features.SAMPLE_RATE),
                                  features.frame_center_s(np.arange(len(mel))))
    return {"mel": mel, "visemes": labels, "mouth": mouth}


def save_set(out: Path, name: str, examples: list[dict], meta: list[dict], keep_audio: list[np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, mel=np.concatenate([e["mel"] for e in examples]).astype(np.float16),
                        visemes=np.concatenate([e["visemes"] for e in examples]).astype(np.int8),
                        mouth=np.concatenate([e["mouth"] for e in examples]).astype(np.float16),
                        lengths=np.array([len(e["mel"]) for e in examples], np.int64),
                        **{f"pcm_{i}": a for i, a in enumerate(keep_audio)})
    atomic_write_bytes(out / f"{name}.npz", buf.getvalue())
    atomic_write_json(out / f"{name}.json", {"set": name, "labels_version": REAL_LABELS_VERSION,
                                             "frames": int(sum(len(e["mel"]) for e in examples)),
                                             "mouth_channels": list(MOUTH_CHANNELS), "visemes": list(VISEME_NAMES),
                                             "utterances": meta})
    print(f"{name}: {len(examples)} utterances, {sum(len(e['mel']) for e in examples) / 6000:.1f} min", flush=True)


def recordings(real: Path):
    """(group, name, wav path, transcript) for every recording with a transcript."""
    lines = (real / "asterisk" / "core-sounds-en.txt").read_text(errors="replace").splitlines()
    for line in lines:
        if ":" not in line or line.startswith(";"):
            continue
        name, text = line.split(":", 1)
        wav = real / "asterisk" / f"{name.strip()}.wav"
        if wav.exists():
            yield ("asterisk_train" if is_train(name.strip()) else "asterisk_eval"), name.strip(), wav, text
    for group in ("librivox", "cards"):
        folder = real / "sphinx" / group
        trans = next(folder.glob("*transcription"), None)
        if trans is None:
            continue
        for line in trans.read_text().splitlines():
            m = re.match(r"\s*<s>(.*)</s>\s*\((.+)\)", line)
            if m and (folder / f"{m.group(2)}.wav").exists():
                yield group, m.group(2), folder / f"{m.group(2)}.wav", m.group(1)


def other_recordings(real: Path, most: int):
    """(group, target set, name, wav path, transcript, language) for the prompts of OTHER_SPLIT's speakers."""
    for lang, (group, target) in OTHER_SPLIT.items():
        txt = real / f"asterisk-{lang}" / f"core-sounds-{lang}.txt"
        if not txt.exists():
            continue
        rows = []
        for line in txt.read_text(encoding="utf-8-sig", errors="replace").splitlines():
            if ":" not in line or line.startswith(";"):
                continue
            name, text = (v.strip() for v in line.split(":", 1))
            if text and (real / f"asterisk-{lang}" / f"{name}.wav").exists():
                rows.append((hashlib.sha256(name.encode()).hexdigest(), name, text))
        for _, name, text in sorted(rows)[:most]:
            yield group, target, name, real / f"asterisk-{lang}" / f"{name}.wav", text, lang


def aligned(aligner, items, load, skipped: dict):
    """(item, words, pcm, events) for each item (..., path, text) whose text is in the dictionary and aligns; the
    others are counted in `skipped` (not_in_dictionary, alignment_failed). load(path) -> 16 kHz float pcm."""
    for item in items:
        path, text = item[-2:]
        words = clean_text(text, aligner.words)
        if words is None:
            skipped["not_in_dictionary"] += 1
            continue
        pcm = load(path)
        events = aligner.align(pcm, words)
        if events is None:
            skipped["alignment_failed"] += 1
            continue
        yield item, words, pcm, events


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=real_data_dir())
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "lipsync")
    ap.add_argument("--keep-audio", type=int, default=4, help="store the audio of the first N held-out recordings")
    ap.add_argument("--other-max", type=int, default=150, help="prompts per speaker of another language (0: none)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    aligner = Aligner()
    from gen_lipsync_data import Espeak

    espeak = Espeak()
    sets = {"real_train": ([], []), "real_eval": ([], []), "synth_same_text": ([], [])}
    audio: list[np.ndarray] = []
    skipped = {"not_in_dictionary": 0, "alignment_failed": 0}
    for (group, name, _, _), words, pcm, events in aligned(aligner, recordings(args.real), load_pcm, skipped):
        target = "real_train" if group == "asterisk_train" else "real_eval"
        sets[target][0].append(example(pcm, events))
        sets[target][1].append({"group": group, "name": name, "text": words, "seconds": round(len(pcm) / 16000, 2)})
        if target == "real_eval":
            if len(audio) < args.keep_audio:
                audio.append(pcm)
            spcm, _ = espeak_reading(espeak, words)
            sevents = aligner.align(spcm, words)
            if sevents is not None:
                sets["synth_same_text"][0].append(example(spcm, sevents))
                sets["synth_same_text"][1].append({"group": group, "name": name, "text": words, "voice": "en-us"})
    from align_other_languages import ForeignAligner

    foreign = ForeignAligner(espeak, aligner.decoder)
    for group, target, name, wav, text, lang in other_recordings(args.real, args.other_max):
        pcm = load_pcm(wav)
        events = foreign.align(pcm, text, lang)
        if events is None:
            skipped["alignment_failed"] += 1
            continue
        sets[target][0].append(example(pcm, events))
        sets[target][1].append({"group": group, "name": name, "text": text, "language": lang,
                                "seconds": round(len(pcm) / 16000, 2)})
    for name, (examples, meta) in sets.items():
        save_set(args.out, name, examples, meta, audio if name == "real_eval" else [])
    print(f"skipped: {skipped}")
    atomic_write_json(args.out / "real_speech_skipped.json", skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
