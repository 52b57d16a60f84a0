"""Forced alignment of recorded speech in languages pocketsphinx has no model for (French, Italian, Russian), by
the English acoustic model on espeak-ng's phonemes mapped to their nearest English phone.

Each word of the transcript is phonemised by espeak-ng in its language (IPA, one word at a time); every IPA phone
is mapped to the nearest ARPAbet phone (by place and manner, e.g. French /y/ -> UW, Russian /ɨ/ -> IH, a trill or
uvular r -> R) only to let the English model find where it is. The labels keep espeak's IPA, so the viseme and
mouth targets come from the same tables as for every other language (bridge/audio/visemes.py). The timing is
that of an English model listening to foreign speech: good to the phone class (mouth shape), not finer; it is
used for speakers the English data lacks, and is described as such wherever the figures are given.

Used by tools/label_real_speech.py.
"""
from __future__ import annotations

import re

import numpy as np
from forced_alignment import force_align  # the same two-pass alignment as for English

from bridge.audio.visemes import phoneme_visemes

IPA_ARPABET = {  # the nearest English phone; diphthongs and affricates first (longest match wins)
    "aɪ": "AY", "aʊ": "AW", "ɔɪ": "OY", "eɪ": "EY", "oʊ": "OW", "tʃ": "CH", "dʒ": "JH", "ts": "T S", "dz": "D Z",
    "tɕ": "CH", "dʑ": "JH", "ʃʲ": "SH", "ɕ": "SH", "ʑ": "ZH",
    "p": "P", "b": "B", "m": "M", "ɱ": "M", "f": "F", "v": "V", "θ": "TH", "ð": "DH", "t": "T", "d": "D",
    "n": "N", "ɲ": "N", "ŋ": "NG", "k": "K", "g": "G", "ɡ": "G", "s": "S", "z": "Z", "ʃ": "SH", "ʒ": "ZH",
    "l": "L", "ɫ": "L", "ʎ": "L", "r": "R", "ɾ": "R", "ʁ": "R", "ʀ": "R", "ɹ": "R", "j": "Y", "w": "W", "ɥ": "W",
    "h": "HH", "x": "HH", "ɣ": "G", "ç": "HH", "β": "V",
    "i": "IY", "ɪ": "IH", "y": "UW", "ʏ": "UH", "e": "EY", "ɛ": "EH", "ø": "ER", "œ": "AH", "ə": "AH", "ɐ": "AH",
    "a": "AA", "ɑ": "AA", "æ": "AE", "ʌ": "AH", "ɔ": "AO", "o": "OW", "u": "UW", "ʊ": "UH", "ɨ": "IH", "ɯ": "UW",
    "ɜ": "ER", "ɝ": "ER", "ɚ": "ER",
}
_STRIP = re.compile("[ːˑˈˌ\u0303\u0361\u035c\u02b2\u0325\u032a\u0329\u032f\u031e\u031d-]")
VOICES = {"fr": "fr", "it": "it", "ru": "ru"}


def arpabet(ipa: str) -> str | None:
    """IPA phone (espeak's spelling) -> space-separated ARPAbet, or None for a pause/stress mark."""
    s = _STRIP.sub("", ipa).replace("ʲ", "")
    out = []
    while s:
        for n in (2, 1):
            if s[:n] in IPA_ARPABET:
                out.append(IPA_ARPABET[s[:n]])
                s = s[n:]
                break
        else:
            s = s[1:]  # a symbol with no English neighbour: let its neighbours take its time
    return " ".join(out) or None


class ForeignAligner:
    """(pcm16k, text, lang) -> [(IPA, start_s)] or None, through an English pocketsphinx decoder."""

    def __init__(self, espeak, decoder):
        self.espeak = espeak
        self.decoder = decoder
        self._known: set[str] = set()

    def word_phones(self, word: str, lang: str) -> list[tuple[str, str]]:
        """[(IPA, ARPAbet)] of one word as espeak-ng says it in `lang`."""
        _, events = self.espeak.synth(word, VOICES[lang])
        phones = []
        for ipa, _t in events:
            arpa = arpabet(ipa)
            if arpa is not None and phoneme_visemes(ipa) not in (None, ["sil"]):
                phones.extend((ipa if k == 0 else "", a) for k, a in enumerate(arpa.split()))
        return phones

    def align(self, pcm: np.ndarray, text: str, lang: str):
        return self.align_words(pcm, re.findall(r"[^\W\d_]+(?:['’][^\W\d_]+)?", text.lower()), lang)

    def align_words(self, pcm: np.ndarray, words: list[str], lang: str):
        """(ipa, start_s) events of `words` spoken in `pcm`, or None when they do not all align."""
        entries = []
        for w in words:
            phones = self.word_phones(w, lang)
            if not phones:
                continue
            name = "x_" + "_".join(a.lower() for _, a in phones)
            if name not in self._known:
                self.decoder.add_word(name, " ".join(a for _, a in phones), True)
                self._known.add(name)
            entries.append((name, phones))
        if not entries:
            return None
        aligned = force_align(self.decoder, pcm, " ".join(n for n, _ in entries))
        if aligned is None:
            return None
        events, k = [], 0
        for name, phones in aligned:
            if k < len(entries) and name == entries[k][0]:
                ipas = [ipa for ipa, _ in entries[k][1]]
                k += 1
                for (_, start), ipa in zip(phones, ipas):
                    if ipa:  # the second half of a split phone (ts -> T S) belongs to the first
                        events.append((ipa, start))
            else:
                events.append(("_", phones[0][1] if phones else 0.0))  # silence or filler
        if k != len(entries):
            return None
        return events or None
