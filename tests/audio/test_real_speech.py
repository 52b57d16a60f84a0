"""Recorded speech labelled by forced alignment (tools/label_real_speech.py) and scored by `bench lipsync`."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import real_corpus, tool_module


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


def test_a_recorded_prompt_aligns_to_its_transcript_in_time_order():
    pytest.importorskip("pocketsphinx")
    real = real_corpus("asterisk/agent-pass.wav")
    label = tool_module("label_real_speech")
    aligner = label.Aligner()
    pcm = label.load_pcm(real / "asterisk" / "agent-pass.wav")
    events = aligner.align(pcm, "please enter your password followed by the pound key")
    assert events and events[0][0] == "p" and [t for _, t in events] == sorted(t for _, t in events)
    ex = label.example(pcm, events)
    assert len(ex["mel"]) == len(ex["visemes"]) == len(ex["mouth"]) and ex["mouth"][:, 0].max() > 0.3


def test_every_ipa_phone_the_other_languages_use_has_an_english_neighbour():
    other = tool_module("align_other_languages")
    for ipa in ("a", "ɑ̃", "y", "ʁ", "ɲ", "tʃ", "dʒ", "ts", "ɨ", "tʲ", "ɕː", "ø", "ɛ̃", "ˈo", "r"):
        arpa = other.arpabet(ipa)
        assert arpa and all(p in tool_module("label_real_speech").ARPABET_IPA for p in arpa.split()), (ipa, arpa)
    assert other.arpabet("ˈ") is None


def test_whole_speakers_of_other_languages_go_to_one_side(tmp_path):
    label = tool_module("label_real_speech")
    folder = tmp_path / "asterisk-fr"
    folder.mkdir()
    (folder / "core-sounds-fr.txt").write_text("; French\n\nactivated: activé\nadded: ajouté\nmissing: manque\n",
                                               encoding="utf-8")
    for name in ("activated", "added"):
        (folder / f"{name}.wav").write_bytes(b"")
    rows = list(label.other_recordings(tmp_path, most=10))
    assert sorted(r[2] for r in rows) == ["activated", "added"]  # a prompt without its recording is left out
    assert {(r[0], r[1], r[5]) for r in rows} == {(*label.OTHER_SPLIT["fr"], "fr")}
    assert len(list(label.other_recordings(tmp_path, most=1))) == 1
    groups = {g: t for g, t in label.OTHER_SPLIT.values()}
    assert "real_eval" in groups.values() and "real_train" in groups.values()


def test_a_prompt_in_another_language_aligns_in_time_order_with_espeaks_phonemes():
    pytest.importorskip("pocketsphinx")
    real = real_corpus("asterisk-it/activated.wav")
    label = tool_module("label_real_speech")
    other = tool_module("align_other_languages")
    espeak = tool_module("gen_lipsync_data").Espeak()
    foreign = other.ForeignAligner(espeak, label.Aligner().decoder)
    pcm = label.load_pcm(real / "asterisk-it" / "activated.wav")
    events = foreign.align(pcm, "Attivato.", "it")
    phones = [p for p, _ in events if p != "_"]
    assert phones[:3] == ["a", "t", "i"] and [t for _, t in events] == sorted(t for _, t in events)


def test_an_alignment_that_leaves_words_out_is_a_failed_one():
    """pocketsphinx gives its best partial path when it cannot reach the end of the text; those words would be
    labelled silence while they are spoken (espeak-ng reading this prompt is such a case)."""
    pytest.importorskip("pocketsphinx")
    from tests.helpers import espeak_or_skip

    gen, espeak = espeak_or_skip()
    label = tool_module("label_real_speech")
    aligner = label.Aligner()
    for text in ("please enter a new extension followed by pound", "to exit the menu", "call forwarding"):
        audio, _ = espeak.synth(text, "en-us")
        pcm = np.concatenate([np.zeros(3200, np.float32), gen.resample_to_16k(audio, espeak.sample_rate),
                              np.zeros(3200, np.float32)])
        aligned = label.force_align(aligner.decoder, pcm, text)
        if aligned is not None:
            said = [w.split("(")[0] for w, _ in aligned if not w.startswith(("<", "[", "+"))]
            assert said == text.split(), (text, aligned)


def test_phone_starts_are_on_our_frames_clock():
    """pocketsphinx's frame f (a 25.6 ms window from f * 10 ms) is our frame f: a phone starting there has frame f
    as its first, not f - 1."""
    from bridge.audio import features

    label = tool_module("label_real_speech")
    for f in (1, 7, 250):
        assert features.frame_center_s(f - 1) < label.phone_start_s(f) < features.frame_center_s(f)


def test_a_pause_between_two_words_is_labelled_silence():
    """With pocketsphinx's default silence probability the aligner stretched the words over a pause between them
    (the cards' "four ... queen of clubs"); the optional silence must be taken where the audio is silent."""
    pytest.importorskip("pocketsphinx")
    from tests.helpers import espeak_or_skip

    gen, espeak = espeak_or_skip()
    label = tool_module("label_real_speech")
    words = [gen.resample_to_16k(espeak.synth(w, "en-us")[0], espeak.sample_rate) for w in ("four", "queen")]
    gap = np.zeros(4000, np.float32)  # 250 ms
    pcm = np.concatenate([np.zeros(3200, np.float32), words[0], gap, words[1], np.zeros(3200, np.float32)])
    events = label.Aligner().align(pcm, "four queen")
    assert events is not None
    mid = (3200 + len(words[0]) + len(gap) / 2) / 16000  # the middle of the pause
    before = [p for p, t in events if t <= mid]
    assert before[-1] == "_", events


def test_an_alignment_does_not_depend_on_what_was_aligned_before():
    """pocketsphinx's front end (live cepstral mean, noise estimate) carried over between utterances: the same
    recording aligned differently (or not at all) after other ones; here after loud noise, 5 of its phones moved."""
    pytest.importorskip("pocketsphinx")
    real = real_corpus("asterisk/agent-pass.wav")
    label = tool_module("label_real_speech")
    text = "please enter your password followed by the pound key"
    pcm = label.load_pcm(real / "asterisk" / "agent-pass.wav")
    fresh = label.Aligner().align(pcm, text)
    used = label.Aligner()
    used.align(np.random.default_rng(0).normal(0, 0.3, 48000).astype(np.float32), "goodbye")
    assert fresh is not None and used.align(pcm, text) == fresh


def test_sets_from_an_older_labeller_are_labelled_again_or_scored_as_they_are(tmp_path, capsys):
    from bridge.bench import lipsync

    for name in lipsync.REAL_SETS:
        (tmp_path / f"{name}.npz").write_bytes(b"")
        (tmp_path / f"{name}.json").write_text('{"utterances": []}')  # no labels_version: the first labeller
    assert not lipsync.labels_current(tmp_path / "real_eval.json")
    assert lipsync._ensure_real(tmp_path, tmp_path / "no-recordings")  # nothing to label again with: kept
    assert "scored as it is" in capsys.readouterr().out
    (tmp_path / "real_eval.json").write_text(f'{{"labels_version": {lipsync.REAL_LABELS_VERSION}}}')
    assert lipsync.labels_current(tmp_path / "real_eval.json")
