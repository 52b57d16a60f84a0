"""Emotion read in the context of the face's own shapes: shut eyes hold the last open-eyed reading, an open
mouth without raised brows or widened eyes is not fear, and raised brows with wide eyes are surprise.

fer's mini-Xception sees one grey 64x64 crop and nothing else. Three of its mistakes on real faces have a cause
the rest of the pipeline can see (issue 19):
- eyes shut (a blink, a laugh, looking down): the crop has no eyes, and the classifier leans to `sad`. While both
  eyes read closed, the probabilities of the last frame read with open eyes are held, for up to HOLD_S seconds;
  a longer closure (crying, resting the eyes) is read as it comes.
- the mouth open in speech (an "O"): the classifier leans to `fear`. Fear shows in the brows and eyes (inner brows
  raised, upper lids raised); with the jaw open and neither of those, the fear mass goes to `neutral`, in
  proportion to the missing evidence.
- surprise: brows raised together with widened eyes is surprise's own signature; in proportion to it, part of the
  fear and neutral mass moves to `surprise`.
The shapes are the expression regressor's raw weights (before the One-Euro filter), which under-read brows and
eyes on real faces, hence the low ramps below. The output is renormalised to sum to one.
"""
from __future__ import annotations

import numpy as np

from bridge.frame import ARKIT_INDEX, EMOTION_NAMES

HOLD_S = 2.0  # longest eye closure across which the open-eyed reading is held
CLOSED = 0.5  # mean eyeBlink at which both eyes count as shut
MOUTH_OPEN = (0.12, 0.3)  # jawOpen ramp over which an open mouth discounts unsupported fear
FEAR_EVIDENCE = 0.25  # max(browInnerUp, mean eyeWide) at which fear is fully supported
SURPRISE_BROWS = (0.1, 0.35)  # ramp of max(browInnerUp, mean browOuterUp)
SURPRISE_EYES = (0.05, 0.25)  # ramp of mean eyeWide
SURPRISE_SHARE = 0.8  # at full surprise evidence, this share of fear + neutral moves to surprise
_E = {name: i for i, name in enumerate(EMOTION_NAMES)}


def _ramp(x: float, lo_hi: tuple[float, float]) -> float:
    lo, hi = lo_hi
    return float(np.clip((x - lo) / (hi - lo), 0.0, 1.0))


def _pair(w: np.ndarray, name: str) -> float:
    return 0.5 * float(w[ARKIT_INDEX[f"{name}Left"]] + w[ARKIT_INDEX[f"{name}Right"]])


class EmotionContext:
    """Conditions each classified emotion on blinks and the face's shapes; one per tracked subject."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._open: np.ndarray | None = None  # last reading with open eyes
        self._closed_since: float | None = None

    def __call__(self, probs: np.ndarray, weights: np.ndarray, blinks: np.ndarray, t: float) -> np.ndarray:
        """probs: (7,) classifier output; weights: (52,) raw ARKit weights; blinks: (2,) eyeBlink left/right;
        t: media time, seconds. -> (7,) probabilities."""
        p = np.asarray(probs, np.float64).copy()
        w = np.asarray(weights, np.float64)
        if float(np.mean(blinks)) >= CLOSED:
            self._closed_since = t if self._closed_since is None else self._closed_since
            if self._open is not None and t - self._closed_since <= HOLD_S:
                return self._open.copy()
        else:
            self._closed_since = None
        eye_wide = _pair(w, "eyeWide")
        brows = max(float(w[ARKIT_INDEX["browInnerUp"]]), _pair(w, "browOuterUp"))
        surprise = _ramp(brows, SURPRISE_BROWS) * _ramp(eye_wide, SURPRISE_EYES)
        for source in ("fear", "neutral"):
            moved = SURPRISE_SHARE * surprise * p[_E[source]]
            p[_E[source]] -= moved
            p[_E["surprise"]] += moved
        mouth = _ramp(float(w[ARKIT_INDEX["jawOpen"]]), MOUTH_OPEN)
        support = min(1.0, max(float(w[ARKIT_INDEX["browInnerUp"]]), eye_wide) / FEAR_EVIDENCE)
        moved = mouth * (1.0 - support) * p[_E["fear"]]
        p[_E["fear"]] -= moved
        p[_E["neutral"]] += moved
        p = np.clip(p, 0.0, None)
        p = (p / max(float(p.sum()), 1e-9)).astype(np.float32)
        if float(np.mean(blinks)) < CLOSED:
            self._open = p.copy()
        return p
