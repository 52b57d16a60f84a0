"""Recorded speech labelled by forced alignment (tools/label_real_speech.py) and scored by `bench lipsync`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import tool_module

REAL = Path(__file__).resolve().parents[2] / "build" / "real"


def test_every_arpabet_phone_maps_to_a_viseme_or_silence():
    from bridge.audio.visemes import phoneme_visemes

    label = tool_module("label_real_speech")
    for arpa, ipa in label.ARPABET_IPA.items():
        vis = phoneme_visemes(ipa)
        assert vis is None or (vis == [] if arpa == "SIL" else len(vis) >= 1), (arpa, ipa, vis)


def test_transcripts_become_dictionary_words_or_are_refused():
    label = tool_module("label_real_speech")
    words = {"please", "enter", "your", "pass", "code"}
    assert label.clean_text("Please enter your pass-code. [beep]", words) == "please enter your pass code"
    assert label.clean_text("Please dial 9.", words) is None


def test_the_train_and_held_out_split_is_fixed_by_the_prompt_name():
    label = tool_module("label_real_speech")
    names = [f"prompt-{i}" for i in range(400)]
    split = [label.is_train(n) for n in names]
    assert split == [label.is_train(n) for n in names]
    assert 0.6 < np.mean(split) < 0.8


@pytest.mark.skipif(not (REAL / "asterisk" / "agent-pass.wav").exists(),
                    reason="recorded speech not fetched (python tools/fetch_real_data.py)")
def test_a_recorded_prompt_aligns_to_its_transcript_in_time_order():
    pytest.importorskip("pocketsphinx")
    label = tool_module("label_real_speech")
    aligner = label.Aligner()
    pcm = label.load_pcm(REAL / "asterisk" / "agent-pass.wav")
    events = aligner.align(pcm, "please enter your password followed by the pound key")
    assert events and events[0][0] == "p" and [t for _, t in events] == sorted(t for _, t in events)
    ex = label.example(pcm, events)
    assert len(ex["mel"]) == len(ex["visemes"]) == len(ex["mouth"]) and ex["mouth"][:, 0].max() > 0.3
