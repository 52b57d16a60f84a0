"""pocketsphinx forced alignment on our frames' clock: the one aligner every labelled speech set uses, English
(tools/label_real_speech.py) and other languages on English phones (tools/align_other_languages.py)."""
from __future__ import annotations

import re

import numpy as np

from bridge.audio import features


def phone_start_s(frame: int) -> float:
    """pocketsphinx frame `frame` -> the start time of a phone whose first frame it is, on our frames' clock. Its
    frame f is a 25.6 ms window from f * 10 ms, centred at f * 10 + 12.8 ms: our front end's frame f (centred at
    f * 10 + 12.5 ms). So the phone starts halfway between the centres of our frames f - 1 and f, and frame f is its
    first. (Labels version 2 took f * 10 ms, which made frame f - 1 the first: every label one frame early.)"""
    return (frame * features.HOP + features.WINDOW / 2 - features.HOP / 2) / features.SAMPLE_RATE


def force_align(decoder, pcm: np.ndarray, text: str):
    """pocketsphinx forced alignment of `text` in `pcm` (16 kHz floats): [(word, [(ARPAbet phone, start_s)])], or
    None when pocketsphinx cannot align it or aligns only part of the text. Two passes: the words, then the phones
    within them. The same for an utterance whatever the decoder aligned before."""
    raw = (np.clip(pcm, -1, 1) * 32767).astype(np.int16).tobytes()
    try:
        # the feature front end starts afresh (its live cepstral mean and noise estimate): else they carry over from
        # whatever the decoder aligned before, and an utterance aligned in one order failed in another (labels v3)
        decoder.reinit_feat()
        decoder.set_align_text(text)
        decoder.start_utt()
        decoder.process_raw(raw, full_utt=True)
        decoder.end_utt()
        decoder.set_alignment()
        decoder.start_utt()
        decoder.process_raw(raw, full_utt=True)
        decoder.end_utt()
        aligned = [(word.name, [(p.name, phone_start_s(p.start)) for p in word]) for word in decoder.get_alignment()]
    except (RuntimeError, ValueError):
        return None
    # pocketsphinx returns its best partial path when the search does not reach the text's end: the words left
    # out would be labelled silence while they are spoken, so such an alignment is a failed one
    said = [re.sub(r"\(\d+\)$", "", w) for w, _ in aligned if not (w.startswith(("<", "[", "+")))]
    return aligned if said == text.split() else None
