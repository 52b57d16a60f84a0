"""Range calibration (`facebridge calibrate --ranges`): each blendshape's gain set so that the user's own full
expression reaches 1.0, so that an avatar's eyes close on a full blink and its mouth opens all the way.

Trackers read faces short of the full range (the sample's blinks peak at 0.78 and 0.85). The user walks through
the expressions below, holding each for a few seconds in front of the camera; each step's blendshapes take their
peak from that step's frames. From a recorded clip (`--source FILE`) the clip is one step that holds every
expression, and each blendshape takes its peak from the whole clip. The frames are measured as a run streams them:
after the neutral calibration, before any mapping. The peak is the highest weight held for two frames in a row
(one glitched frame does not set a gain; a blink lasts four or more frames at 30 fps); a gain is at most MAX_GAIN
(noise is not blown up), and a shape whose peak stays under MIN_PEAK was not seen and keeps its gain. The gains
are stored in the subject's mapping (bridge/mapping.py), in their profile; every other setting is kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bridge.frame import ARKIT_INDEX
from bridge.mapping import Mapping

HELD_FRAMES = 2  # a peak counts when it holds this many frames in a row
MIN_PEAK = 0.05  # under this the expression was not seen: the gain is left as it was
MAX_GAIN = 5.0
STEP_SECONDS = 4.0  # each expression, from a camera

# (what the user is asked to do, the blendshapes that expression sets the range of)
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("close both eyes fully (a slow, full blink)", ("eyeBlinkLeft", "eyeBlinkRight")),
    ("smile as wide as you can", ("mouthSmileLeft", "mouthSmileRight")),
    ("open your jaw as wide as you can", ("jawOpen",)),
    ("raise your brows", ("browInnerUp", "browOuterUpLeft", "browOuterUpRight")),
    ("lower your brows (frown)", ("browDownLeft", "browDownRight")),
    ("pucker your lips (a kiss)", ("mouthPucker", "mouthFunnel")),
    ("puff your cheeks", ("cheekPuff",)),
    ("look to your left (eyes only)", ("eyeLookOutLeft", "eyeLookInRight")),
    ("look to your right (eyes only)", ("eyeLookInLeft", "eyeLookOutRight")),
    ("look up (eyes only)", ("eyeLookUpLeft", "eyeLookUpRight")),
    ("look down (eyes only)", ("eyeLookDownLeft", "eyeLookDownRight")),
)


@dataclass
class RangeResult:
    """One blendshape's measured peak and the gain it got (None: not seen, gain kept)."""

    name: str
    peak: float
    gain: float | None


def peak_of(values) -> float:
    """The highest value held for HELD_FRAMES consecutive frames (0 for fewer frames than that)."""
    values = np.asarray(values, np.float64)
    if len(values) < HELD_FRAMES:
        return 0.0
    held = np.lib.stride_tricks.sliding_window_view(values, HELD_FRAMES).min(axis=1)
    return float(held.max())


def gain_for_peak(mapping: Mapping, name: str, peak: float) -> float | None:
    """The gain that takes `peak` (a calibrated weight) to 1.0 through the shape's dead zone; None under MIN_PEAK."""
    dead = mapping.shape(name).dead_zone
    past = (peak - dead) / (1.0 - dead)
    if peak < MIN_PEAK or past <= 0.0:
        return None
    return round(min(1.0 / past, MAX_GAIN), 4)


def ranges_from_peaks(mapping: Mapping, peaks: dict[str, float]) -> tuple[Mapping, list[RangeResult]]:
    """The mapping with the gain each shape's peak calls for (a shape not seen keeps its gain)."""
    results = []
    for name, peak in peaks.items():
        gain = gain_for_peak(mapping, name, peak)
        results.append(RangeResult(name, peak, gain))
        if gain is not None:
            mapping = mapping.with_shape(name, gain=gain)
    return mapping, results


def ranges_from_frames(mapping: Mapping, steps: list[tuple[tuple[str, ...], list[np.ndarray]]]
                       ) -> tuple[Mapping, list[RangeResult]]:
    """The mapping with the gains that `steps` (each: its blendshapes, the weights of its frames) call for."""
    peaks = {name: peak_of([w[ARKIT_INDEX[name]] for w in frames]) for names, frames in steps for name in names}
    return ranges_from_peaks(mapping, peaks)


def step_shapes() -> tuple[str, ...]:
    """Every blendshape the walk-through sets, in its order."""
    return tuple(name for _, names in STEPS for name in names)
