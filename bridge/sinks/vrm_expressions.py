"""VRM expression presets from ARKit weights, for VMC avatars without ARKit ("PerfectSync") blendshapes.

Most VRM avatars only have the preset expressions: the five vowels, blinks and a few emotions. This derives them
from the 52 ARKit weights (and from lip-sync visemes when audio drives the mouth). VRM 1.0 names are used here;
VRM 0.x names map one to one (VRM0_NAMES), except that VRM 0.x has no 'surprised'.
"""
from __future__ import annotations

import numpy as np

from bridge.frame import ARKIT_INDEX, VISEME_NAMES

VRM1_NAMES = ("aa", "ih", "ou", "ee", "oh", "blink", "blinkLeft", "blinkRight", "happy", "angry", "sad", "surprised")
VRM0_NAMES = ("A", "I", "U", "E", "O", "Blink", "Blink_L", "Blink_R", "Joy", "Angry", "Sorrow", None)
_VISEME = {name: i for i, name in enumerate(VISEME_NAMES)}


def _mean(w: np.ndarray, *names: str) -> float:
    return float(np.mean([w[ARKIT_INDEX[n]] for n in names]))


def vrm_weights(blendshapes: np.ndarray, visemes: np.ndarray | None = None) -> np.ndarray:
    """Weights in VRM1_NAMES order, each in [0, 1]."""
    w = np.nan_to_num(np.asarray(blendshapes, np.float64), nan=0.0)
    jaw = _mean(w, "jawOpen")
    funnel, pucker = _mean(w, "mouthFunnel"), _mean(w, "mouthPucker")
    smile = _mean(w, "mouthSmileLeft", "mouthSmileRight")
    wide = min(1.0, _mean(w, "mouthStretchLeft", "mouthStretchRight") + 0.5 * smile)
    if visemes is not None:  # speech: the visemes name the vowel directly
        v = np.nan_to_num(np.asarray(visemes, np.float64), nan=0.0)
        vowels = [v[_VISEME["aa"]], v[_VISEME["ih"]], v[_VISEME["ou"]], v[_VISEME["E"]], v[_VISEME["oh"]]]
    else:  # open + rounded = oh, rounded = ou, open + wide = ee, wide = ih, open = aa
        rounded = max(funnel, pucker)
        vowels = [jaw * (1 - rounded) * (1 - 0.5 * wide), wide * (1 - jaw), pucker * (1 - 0.5 * jaw),
                  wide * jaw, jaw * funnel]
    left, right = _mean(w, "eyeBlinkLeft"), _mean(w, "eyeBlinkRight")
    both = min(left, right)  # the shared part closes both eyes; the rest is one-sided
    emotions = [smile, _mean(w, "browDownLeft", "browDownRight"),
                _mean(w, "mouthFrownLeft", "mouthFrownRight") + 0.5 * _mean(w, "browInnerUp") * (1 - smile),
                0.5 * _mean(w, "eyeWideLeft", "eyeWideRight") + 0.5 * _mean(w, "browInnerUp") * jaw]
    return np.clip(np.array([*vowels, both, left - both, right - both, *emotions]), 0.0, 1.0)
