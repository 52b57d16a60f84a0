"""Generate lip-sync training and evaluation data offline with espeak-ng.

espeak-ng (GPL-3) is used only here, offline, through its C library (ctypes) with phoneme events that give
each phoneme's position in the produced audio. Nothing from espeak-ng ships in FaceBridge: only the model
trained on this data does. Pipeline per utterance:

  text -> espeak-ng (voice, variant, rate, pitch, word gap) -> 22.05 kHz audio + timed IPA phonemes
       -> 16 kHz, silence padding, augmentation (EQ, reverberation, telephone band, room tone,
          noise, level)
       -> log-mel frames (bridge.audio.features) + per-frame viseme labels and ARKit mouth targets
          (bridge.audio.visemes: our phoneme -> viseme -> ARKit tables with coarticulation)

Held-out sets use languages, voice variants and speaking rates that the training set never sees.

    python tools/gen_lipsync_data.py --out build/lipsync            # train + eval sets (about a minute)
    python tools/gen_lipsync_data.py --out build/lipsync --sets eval_all --count 40
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import signal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bridge.audio import features  # noqa: E402
from bridge.audio.visemes import MOUTH_CHANNELS, frame_targets, segments_from_events  # noqa: E402
from bridge.frame import VISEME_NAMES  # noqa: E402
from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# espeak-ng through its C API


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", _EventId)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))
_EVENT_LIST_TERMINATED, _EVENT_PHONEME = 0, 7
_AUDIO_OUTPUT_SYNCHRONOUS, _PHONEME_EVENTS, _PHONEME_IPA = 2, 0x1, 0x2
_RATE, _PITCH, _RANGE, _WORDGAP = 1, 3, 4, 7
_CHARS_UTF8 = 1


class EspeakError(RuntimeError):
    pass


class Espeak:
    """Synthesizes text and reports (IPA phoneme, start second) events aligned to the produced samples."""

    def __init__(self):
        name = ctypes.util.find_library("espeak-ng") or "libespeak-ng.so.1"
        try:
            self._lib = ctypes.CDLL(name)
        except OSError:
            raise EspeakError("libespeak-ng is not installed; install it with "
                              "`apt-get install espeak-ng libespeak-ng1`") from None
        self.sample_rate = self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, None,
                                                       _PHONEME_EVENTS | _PHONEME_IPA)
        if self.sample_rate <= 0:
            raise EspeakError("espeak_Initialize failed (is espeak-ng-data installed?)")
        self._chunks: list[np.ndarray] = []
        self._events: list[tuple[str, float]] = []
        self._callback = _CALLBACK(self._on_audio)  # keep a reference: C holds the pointer
        self._lib.espeak_SetSynthCallback(self._callback)

    def _on_audio(self, wav, count, events):
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            if events[i].type == _EVENT_PHONEME:
                ipa = events[i].id.string.decode("utf-8", "replace")
                self._events.append((ipa, events[i].audio_position / 1000.0))
            i += 1
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0

    def synth(self, text: str, voice: str, rate: int = 175, pitch: int = 50, pitch_range: int = 50,
              word_gap: int = 0) -> tuple[np.ndarray, list[tuple[str, float]]]:
        """-> (float32 mono audio at self.sample_rate, [(ipa, start_s)])."""
        if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise EspeakError(f"espeak-ng has no voice {voice!r}")
        for param, value in ((_RATE, rate), (_PITCH, pitch), (_RANGE, pitch_range), (_WORDGAP, word_gap)):
            self._lib.espeak_SetParameter(param, int(value), 0)
        self._chunks, self._events = [], []
        data = text.encode("utf-8")
        self._lib.espeak_Synth(data, len(data) + 1, 0, 1, 0, _CHARS_UTF8, None, None)
        self._lib.espeak_Synchronize()
        audio = np.concatenate(self._chunks).astype(np.float32) / 32768.0 if self._chunks else np.zeros(0, np.float32)
        return audio, list(self._events)


# ---------------------------------------------------------------------------------------------------------
# What to say

SENTENCES = {
    "en-us": ["Hello world, this is a test of the microphone.", "The quick brown fox jumps over the lazy dog.",
              "Please call Stella and ask her to bring these things with her from the store.",
              "Would you like a cup of coffee or a glass of orange juice?",
              "My voice is my passport, verify me.", "She sells sea shells by the sea shore.",
              "We will meet at the museum on Thursday at five thirty.", "Put the blue book back on the top shelf."],
    "en": ["I thought the weather would be better this afternoon.", "Much of the history of the world is lost.",
              "Can you pass the butter, please?", "Fresh fish and chips are sold on the pier."],
    "de": ["Guten Morgen, wie geht es Ihnen heute?", "Ich möchte zwei Brötchen und einen Kaffee, bitte.",
           "Der schnelle braune Fuchs springt über den faulen Hund.", "Wir fahren morgen früh mit dem Zug nach Berlin.",
           "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich."],
    "fr": ["Bonjour, je voudrais un croissant et un café.", "Le vif renard brun saute par-dessus le chien paresseux.",
           "Nous allons à la plage demain matin si il fait beau.",
           "Pourquoi est-ce que tu ne réponds pas au téléphone?",
           "Les chaussettes de l'archiduchesse sont-elles sèches?"],
    "es": ["Hola, ¿qué tal? Me llamo Pablo y vivo en Madrid.", "El veloz murciélago hindú comía feliz cardillo y kiwi.",
           "Mañana vamos a la playa con mis amigos.", "¿Dónde está la estación de tren, por favor?",
           "Tres tristes tigres tragaban trigo en un trigal."],
    "nl": ["Goedemorgen, hoe gaat het met u?", "Ik wil graag een kopje thee met melk.",
           "Morgen fietsen we samen naar het strand.", "Pa's wijze lynx bezag vroom het fikse aquaduct."],
    "pl": ["Dzień dobry, jak się masz?", "Chrząszcz brzmi w trzcinie w Szczebrzeszynie.",
           "Jutro pojedziemy pociągiem do Krakowa.", "Poproszę kawę z mlekiem i kawałek ciasta."],
    "sv": ["God morgon, hur mår du idag?", "Jag vill gärna ha en kopp kaffe.",
           "Vi åker till skärgården på lördag.", "Sju sjösjuka sjömän sköttes av sju sköna sjuksköterskor."],
    "cs": ["Dobrý den, jak se máte?", "Příliš žluťoučký kůň úpěl ďábelské ódy.", "Zítra pojedeme vlakem do Prahy."],
    # held-out languages
    "it": ["Buongiorno, come stai oggi?", "Vorrei un caffè e una brioche, per favore.",
           "Domani andiamo al mare con i nostri amici.",
           "Quel vituperabile xenofobo zelante assaggia il whisky ed esclama alleluia.",
           "La stazione dei treni è dietro la piazza principale."],
    "pt-br": ["Bom dia, como você está?", "Eu gostaria de um café com leite, por favor.",
              "Amanhã vamos à praia com os nossos amigos.", "A rápida raposa marrom pula sobre o cão preguiçoso.",
              "Onde fica a estação de trem mais próxima?"],
    "fi": ["Hyvää huomenta, mitä kuuluu?", "Haluaisin kupin kahvia, kiitos.",
           "Huomenna menemme rannalle ystävien kanssa."],
}
# Letters per language for pronounceable pseudo-words (more phoneme variety than a few sentences give).
LETTERS = {
    "en-us": ("b c d f g h j k l m n p r s t v w y z th sh ch wh", "a e i o u ee oo ay ow oy"),
    "en": ("b c d f g h j k l m n p r s t v w y th sh ch", "a e i o u ee oo ay ow"),
    "de": ("b d f g h k l m n p r s t w z sch ch pf", "a e i o u ä ö ü ei au eu"),
    "fr": ("b c d f g j l m n p r s t v ch gn", "a e i o u é è ou on an in eu oi"),
    "es": ("b c d f g j l m n p r s t v z ll ñ ch", "a e i o u"),
    "nl": ("b d f g h j k l m n p r s t v w z sch", "a e i o u aa oe ui ij eu"),
    "pl": ("b c d f g h j k l m n p r s t w z sz cz rz ch", "a e i o u y ą ę ó"),
    "sv": ("b d f g h j k l m n p r s t v sj", "a e i o u y å ä ö"),
    "cs": ("b c d f h j k l m n p r s t v z č š ř ž", "a e i o u á é í ů y"),
    "it": ("b c d f g l m n p r s t v z gn gl", "a e i o u"),
    "pt-br": ("b c d f g j l m n p r s t v z lh nh ch", "a e i o u ã õ ê ô"),
    "fi": ("h j k l m n p r s t v", "a e i o u y ä ö aa ii"),
}
TRAIN_LANGUAGES = ["en-us", "en", "de", "fr", "es", "nl", "pl", "sv", "cs"]
HELDOUT_LANGUAGES = ["it", "pt-br", "fi"]
TRAIN_VARIANTS = ["", "m1", "m2", "m3", "m4", "m6", "f1", "f2", "f4", "klatt", "klatt3", "Alex", "anika", "edward",
                  "john", "linda", "max", "pablo", "steph"]
HELDOUT_VARIANTS = ["m7", "f3", "f5", "Andrea", "benjamin", "iven"]
TRAIN_RATES = [(125, 155), (185, 235)]  # words per minute; espeak's default is 175
HELDOUT_RATES = [110, 170, 255]
SETS = ("train", "eval_lang", "eval_voice", "eval_rate", "eval_all")


def _pseudo_text(rng: np.random.Generator, lang: str) -> str:
    consonants, vowels = (part.split() for part in LETTERS[lang])
    words = []
    for _ in range(rng.integers(3, 9)):
        coda = lambda: rng.choice(consonants) if rng.random() < 0.3 else ""
        syllables = [rng.choice(consonants) + rng.choice(vowels) + coda() for _ in range(rng.integers(1, 4))]
        words.append("".join(syllables))
    return " ".join(words).capitalize() + rng.choice([".", ",", "?", "!"])


def _text(rng: np.random.Generator, lang: str) -> str:
    parts = []
    for _ in range(rng.integers(1, 4)):
        r = rng.random()
        if r < 0.55:
            parts.append(str(rng.choice(SENTENCES[lang])))
        elif r < 0.9:
            parts.append(_pseudo_text(rng, lang))
        else:
            parts.append(str(rng.integers(2, 99999)) + ".")
    return " ".join(parts)


@dataclass
class UtteranceSpec:
    text: str
    language: str
    variant: str
    rate: int
    pitch: int
    pitch_range: int
    word_gap: int

    @property
    def voice(self) -> str:
        return self.language + (f"+{self.variant}" if self.variant else "")


def _spec(rng: np.random.Generator, set_name: str) -> UtteranceSpec:
    unseen_lang = set_name in ("eval_lang", "eval_all")
    unseen_voice = set_name in ("eval_voice", "eval_all")
    unseen_rate = set_name in ("eval_rate", "eval_all")
    lang = str(rng.choice(HELDOUT_LANGUAGES if unseen_lang else TRAIN_LANGUAGES))
    variant = str(rng.choice(HELDOUT_VARIANTS if unseen_voice else TRAIN_VARIANTS))
    if unseen_rate:
        rate = int(rng.choice(HELDOUT_RATES))
    else:
        lo, hi = TRAIN_RATES[rng.integers(len(TRAIN_RATES))]
        rate = int(rng.integers(lo, hi + 1))
    word_gap = int(rng.choice([0, 0, 0, 1, 3, 8]))
    return UtteranceSpec(_text(rng, lang), lang, variant, rate, int(rng.integers(25, 76)),
                         int(rng.integers(20, 81)), word_gap)


# ---------------------------------------------------------------------------------------------------------
# Augmentation (all on 16 kHz float32)


def _colored_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    exponent = rng.choice([0.0, 1.0, 2.0])  # white, pink, brown
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.maximum(np.fft.rfftfreq(n), 1.0 / n)
    noise = np.fft.irfft(spectrum / freqs ** (exponent / 2), n)
    return (noise / (np.std(noise) + 1e-9)).astype(np.float32)


def _peaking_eq(f0: float, gain_db: float, q: float, fs: int = features.SAMPLE_RATE) -> tuple[np.ndarray, np.ndarray]:
    """RBJ audio-EQ-cookbook peaking biquad."""
    a = 10 ** (gain_db / 40)
    w0 = 2 * np.pi * f0 / fs
    alpha = np.sin(w0) / (2 * q)
    b = np.array([1 + alpha * a, -2 * np.cos(w0), 1 - alpha * a])
    den = np.array([1 + alpha / a, -2 * np.cos(w0), 1 - alpha / a])
    return b / den[0], den / den[0]


def augment(pcm: np.ndarray, rng: np.random.Generator, speech_rms: float) -> np.ndarray:
    x = pcm.astype(np.float64)
    if rng.random() < 0.6:  # EQ: microphone / room colouring, sometimes band-limited like a headset
        for _ in range(rng.integers(1, 3)):
            b, a = _peaking_eq(rng.uniform(150, 6000), rng.uniform(-9, 9), rng.uniform(0.5, 2.5))
            x = signal.lfilter(b, a, x)
        if rng.random() < 0.3:
            x = signal.sosfilt(signal.butter(2, [rng.uniform(80, 300), rng.uniform(3400, 7500)], "bandpass",
                                             fs=features.SAMPLE_RATE, output="sos"), x)
    if rng.random() < 0.4:  # reverberation: exponentially decaying noise tail
        rt60 = rng.uniform(0.15, 0.7)
        n = int(rt60 * features.SAMPLE_RATE)
        t = np.arange(n) / features.SAMPLE_RATE
        ir = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
        ir[0] = 0.0
        ir *= rng.uniform(0.2, 0.7) / (np.sqrt(np.sum(ir ** 2)) + 1e-9)
        ir[0] = 1.0
        x = signal.fftconvolve(x, ir)[: len(x)]
    if rng.random() < 0.25:  # telephone / VoIP channel: 8 kHz band (300-3400 Hz), a little compression
        level = np.sqrt(np.mean(x ** 2)) + 1e-9
        x = signal.resample_poly(x, 1, 2)
        x = signal.sosfilt(signal.butter(4, [300, 3400], "bandpass", fs=8000, output="sos"), x)
        x = signal.resample_poly(np.tanh(x / (np.max(np.abs(x)) + 1e-9) * rng.uniform(1, 3)), 2, 1)[: len(pcm)]
        x = np.pad(x, (0, len(pcm) - len(x)))
        x *= level / (np.sqrt(np.mean(x ** 2)) + 1e-9)
    if rng.random() < 0.3:  # room tone: a steady noise floor through the pauses, as in a real room (audiobooks)
        x = x + _colored_noise(rng, len(x)) * speech_rms * 10 ** (-rng.uniform(25, 45) / 20)
    if rng.random() < 0.6:  # background noise at 3..40 dB SNR (also fills the silences)
        snr_db = rng.uniform(3, 40)
        x = x + _colored_noise(rng, len(x)) * speech_rms * 10 ** (-snr_db / 20)
    peak = np.max(np.abs(x)) + 1e-9
    x = x / peak * 10 ** (rng.uniform(-40, -1) / 20)  # level: quiet laptop mic .. hot headset
    return x.astype(np.float32)


# ---------------------------------------------------------------------------------------------------------


def resample_to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    from math import gcd

    g = gcd(rate, features.SAMPLE_RATE)
    return signal.resample_poly(audio, features.SAMPLE_RATE // g, rate // g).astype(np.float32)


def render(espeak: Espeak, spec: UtteranceSpec, rng: np.random.Generator | None, pad_s: tuple[float, float]):
    """-> (pcm16k, segments) with `pad_s` seconds of silence before/after; augmented when rng is given."""
    audio, events = espeak.synth(spec.text, spec.voice, spec.rate, spec.pitch, spec.pitch_range, spec.word_gap)
    pcm = resample_to_16k(audio, espeak.sample_rate)
    lead = int(pad_s[0] * features.SAMPLE_RATE)
    pcm = np.concatenate([np.zeros(lead, np.float32), pcm, np.zeros(int(pad_s[1] * features.SAMPLE_RATE), np.float32)])
    events = [(ph, t + pad_s[0]) for ph, t in events]
    end_s = len(pcm) / features.SAMPLE_RATE
    segments = segments_from_events(events, end_s)
    speech = np.abs(pcm) > 1e-3
    speech_rms = float(np.sqrt(np.mean(pcm[speech] ** 2))) if speech.any() else 0.1
    if rng is not None:
        pcm = augment(pcm, rng, speech_rms)
    return pcm, segments


def example(espeak: Espeak, spec: UtteranceSpec, rng: np.random.Generator | None, pad_s=(0.3, 0.3)):
    """-> dict(pcm, mel (T,40), visemes (T,), mouth (T,C), segments)."""
    pcm, segments = render(espeak, spec, rng, pad_s)
    mel = features.log_mel(pcm)
    times = features.frame_center_s(np.arange(len(mel)))
    labels, mouth = frame_targets(segments, times)
    return {"pcm": pcm, "mel": mel, "visemes": labels, "mouth": mouth, "segments": segments}


def generate_set(espeak: Espeak, set_name: str, count: int, seed: int, out_dir: Path, keep_audio: int = 0) -> dict:
    rng = np.random.default_rng([seed, SETS.index(set_name)])
    mels, labels, mouths, lengths, specs = [], [], [], [], []
    audio = {}
    started = time.time()
    for i in range(count):
        spec = _spec(rng, set_name)
        pad = (float(rng.uniform(0.1, 0.9)), float(rng.uniform(0.1, 0.9)))
        clean = rng.random() < 0.15  # keep some clean speech
        ex = example(espeak, spec, None if clean else rng, pad)
        mels.append(ex["mel"].astype(np.float16))
        labels.append(ex["visemes"].astype(np.int8))
        mouths.append(ex["mouth"].astype(np.float16))
        lengths.append(len(ex["mel"]))
        specs.append({**spec.__dict__, "augmented": not clean})
        if i < keep_audio:
            audio[f"pcm_{i}"] = ex["pcm"]
        if (i + 1) % 100 == 0 or i + 1 == count:
            print(f"  {set_name}: {i + 1}/{count} utterances, {sum(lengths) / 100 / 60:.1f} min "
                  f"({time.time() - started:.0f} s)", flush=True)
    path = out_dir / f"{set_name}.npz"
    import io

    buf = io.BytesIO()
    np.savez_compressed(buf, mel=np.concatenate(mels), visemes=np.concatenate(labels), mouth=np.concatenate(mouths),
                        lengths=np.array(lengths, np.int64), **audio)
    atomic_write_bytes(path, buf.getvalue())
    atomic_write_json(out_dir / f"{set_name}.json", {"set": set_name, "seed": seed, "frames": int(sum(lengths)),
                                                     "mouth_channels": list(MOUTH_CHANNELS),
                                                     "visemes": list(VISEME_NAMES), "utterances": specs})
    return {"set": set_name, "utterances": count, "minutes": round(sum(lengths) / 100 / 60, 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="build/lipsync", help="output folder (default build/lipsync)")
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated subset of {','.join(SETS)}")
    p.add_argument("--train-count", type=int, default=1500, help="training utterances")
    p.add_argument("--count", type=int, default=120, help="utterances per evaluation set")
    p.add_argument("--keep-audio", type=int, default=4, help="also store the audio of the first N of each eval set")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    espeak = Espeak()
    for name in args.sets.split(","):
        if name not in SETS:
            p.error(f"unknown set {name!r}; choose from {', '.join(SETS)}")
        count = args.train_count if name == "train" else args.count
        print(generate_set(espeak, name, count, args.seed, out_dir, 0 if name == "train" else args.keep_audio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
