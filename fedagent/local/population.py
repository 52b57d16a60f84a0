"""A simulated population of speakers for `fedagent simulate` and `fedagent bench`: each device is one espeak-ng
speaker (language, voice variant, speaking rate, pitch) whose learning store is filled as `facebridge run
--learn` would fill it, with log-mel windows and teacher mouth weights.

What stands in for the camera: the teacher is the synthetic coarticulation target of the training data
(bridge/audio/visemes.py) seen through an articulation style, teacher = clip(gain * pose + offset, 0, 1) per
mouth channel. The style has a population part shared by every speaker (how the video tracker's scale differs
from the synthetic tables) and a personal part drawn per speaker (how this person articulates), both seeded.
The global adapter can learn the first part, only personalisation the second. tongueOut is never taught (a
camera cannot see it). Speech comes from tools/gen_lipsync_data.py (espeak-ng, offline), so this module needs a
source checkout and espeak-ng; devices are cached under `cache_dir` by their description.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bridge.audio.learn_store import CAMERA_CHANNELS, LearnStore, LearnWindow
from bridge.audio.visemes import MOUTH_CHANNELS
from bridge.errors import FaceBridgeError

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "tools" / "gen_lipsync_data.py"
# (language, voice variant, words per minute): the federated devices, then speakers that never take part
DEVICE_SPEAKERS = (("it", "m7", 150), ("pt-br", "f3", 185), ("fi", "Andrea", 140), ("en-us", "f5", 230),
                   ("de", "benjamin", 120), ("es", "iven", 200), ("fr", "m7", 170), ("pl", "f3", 210),
                   ("sv", "Andrea", 160), ("nl", "benjamin", 190), ("cs", "iven", 130), ("en", "f5", 175))
HELD_OUT_SPEAKERS = (("it", "f5", 210), ("pt-br", "benjamin", 135), ("fi", "iven", 180), ("en-us", "m7", 150),
                     ("de", "f3", 200), ("es", "Andrea", 165))
POPULATION_SEED = 20260601
WINDOW_FRAMES = 300


@dataclass(frozen=True)
class Speaker:
    language: str
    variant: str
    rate: int
    pitch: int
    seed: int  # the speaker's texts, augmentation and personal style

    @property
    def name(self) -> str:
        return f"{self.language}+{self.variant}@{self.rate}"


def speakers(kind: str, count: int) -> list[Speaker]:
    """The first `count` device speakers (kind "device") or held-out speakers (kind "held-out")."""
    table = DEVICE_SPEAKERS if kind == "device" else HELD_OUT_SPEAKERS
    if count > len(table):
        raise FaceBridgeError(f"the simulated population has {len(table)} {kind} speakers, {count} were asked for",
                              f"use at most {len(table)}")
    offset = 0 if kind == "device" else 1000
    return [Speaker(lang, variant, rate, 35 + (7 * i) % 40, offset + i) for i, (lang, variant, rate) in
            enumerate(table[:count])]


def _style(seed: int, personal: float = 0.25, population: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    pop = np.random.default_rng(POPULATION_SEED)
    gain = np.exp(pop.normal(0.0, population, len(MOUTH_CHANNELS)))
    offset = pop.normal(0.0, 0.02, len(MOUTH_CHANNELS))
    own = np.random.default_rng([POPULATION_SEED, seed])
    gain = gain * np.exp(own.normal(0.0, personal, len(MOUTH_CHANNELS)))
    offset = offset + own.normal(0.0, 0.03, len(MOUTH_CHANNELS))
    return gain.astype(np.float32), offset.astype(np.float32)


@functools.lru_cache(maxsize=1)
def _generator_module():
    if "gen_lipsync_data" in sys.modules:  # already imported (tests load tools/ as modules too)
        return sys.modules["gen_lipsync_data"]
    if not GENERATOR.exists():
        raise FaceBridgeError("the simulated population needs tools/gen_lipsync_data.py",
                              "run fedagent simulate/bench from a FaceBridge source checkout")
    spec = importlib.util.spec_from_file_location("gen_lipsync_data", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _generator():
    """(tools/gen_lipsync_data, a fresh synthesizer). Fresh each time: libespeak-ng holds one audio callback per
    process, and whichever Espeak was created last owns it."""
    module = _generator_module()
    try:
        return module, module.Espeak()
    except module.EspeakError as e:
        raise FaceBridgeError(f"espeak-ng is not usable ({e})", "apt-get install espeak-ng libespeak-ng1") from None


def speaker_windows(speaker: Speaker, utterances: int, styled: bool = True) -> list[LearnWindow]:
    """Render `utterances` sentences of one speaker into learning windows (at most WINDOW_FRAMES frames)."""
    gen, espeak = _generator()
    rng = np.random.default_rng([POPULATION_SEED, speaker.seed, 1])
    gain, offset = _style(speaker.seed) if styled else (np.ones(len(MOUTH_CHANNELS), np.float32),
                                                        np.zeros(len(MOUTH_CHANNELS), np.float32))
    windows = []
    for _ in range(utterances):
        spec = gen.UtteranceSpec(gen._text(rng, speaker.language), speaker.language, speaker.variant,
                                 int(rng.integers(speaker.rate - 10, speaker.rate + 11)),
                                 speaker.pitch, int(rng.integers(30, 71)), int(rng.choice([0, 0, 1, 3])))
        pad = (float(rng.uniform(0.1, 0.5)), float(rng.uniform(0.1, 0.5)))
        ex = gen.example(espeak, spec, rng if rng.random() < 0.8 else None, pad)
        teacher = np.clip(ex["mouth"] * gain + offset, 0.0, 1.0)
        for lo in range(0, len(ex["mel"]), WINDOW_FRAMES):
            mel = ex["mel"][lo:lo + WINDOW_FRAMES]
            if len(mel) < 100:
                continue
            windows.append(LearnWindow(mel=mel, mouth=teacher[lo:lo + len(mel)], trust=np.ones(len(mel), np.float32),
                                       source="simulated", channels=CAMERA_CHANNELS,
                                       meta={"speaker": speaker.name}))
    return windows


def speaker_store(speaker: Speaker, utterances: int, cache_dir: Path, styled: bool = True) -> LearnStore:
    """The speaker's learning store under `cache_dir`, generated on first use (owner-only like a real one)."""
    key = json.dumps({"speaker": asdict(speaker), "utterances": utterances, "styled": styled, "v": 1},
                     sort_keys=True)
    name = speaker.name.replace("+", "_").replace("@", "_")
    folder = Path(cache_dir) / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    store = LearnStore(folder)
    done = folder / ".complete"
    if done.exists():
        return store
    store.clear()
    windows = speaker_windows(speaker, utterances, styled)
    if len(windows) < 2:
        raise FaceBridgeError(f"espeak-ng produced {len(windows)} window(s) of speech for {speaker.name}",
                              "check that espeak-ng speaks (`espeak-ng -v it hello`) and has its voices")
    for i, window in enumerate(windows):
        window.t_start = 1.7e9 + i * 3.0  # names sort in generation order
        store.add(window)
    done.write_text(key)
    return store
