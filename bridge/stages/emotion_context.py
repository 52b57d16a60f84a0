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
  fear and neutral mass moves to `surprise`. Raised and wide are read against this subject's own neutral, not
  against zero: on real faces the regressor reads some brows and lids as raised all the time (a still, neutral face
  read as surprise, issue 19), so the evidence is the rise over a baseline that follows the brows and lids down
  at once and up only slowly (BASELINE_RISE a second), i.e. the lowest recent reading, which is where a face rests.
  The first reading starts it; a face that starts surprised is read as surprised once it has been seen resting.
The shapes are the expression regressor's raw weights (before the One-Euro filter), which under-read brows and
eyes on real faces, hence the low ramps below. The output is renormalised to sum to one. Each formula is written
once, over plain floats for one face (EmotionContext) or arrays for many (EmotionContextRows).
"""
from __future__ import annotations

import numpy as np

from bridge.frame import ARKIT_INDEX, EMOTION_NAMES
from bridge.stages.values import clip, maximum, minimum

HOLD_S = 2.0  # longest eye closure across which the open-eyed reading is held
CLOSED = 0.5  # mean eyeBlink at which both eyes count as shut
MOUTH_OPEN = (0.12, 0.3)  # jawOpen ramp over which an open mouth discounts unsupported fear
FEAR_EVIDENCE = 0.25  # max(browInnerUp, mean eyeWide) at which fear is fully supported
SURPRISE_BROWS = (0.1, 0.35)  # ramp of max(browInnerUp, mean browOuterUp)
SURPRISE_EYES = (0.05, 0.25)  # ramp of mean eyeWide
SURPRISE_SHARE = 0.8  # at full surprise evidence, this share of fear + neutral moves to surprise
BASELINE_RISE = 0.02  # per second: how fast the resting brows/lids baseline may climb (a surprise lasts ~1-3 s)
_E = {name: i for i, name in enumerate(EMOTION_NAMES)}


def _ramp(x, lo_hi: tuple[float, float]):
    lo, hi = lo_hi
    return clip((x - lo) / (hi - lo), 0.0, 1.0)


def _pair(w, name: str):
    return 0.5 * (w[ARKIT_INDEX[f"{name}Left"]] + w[ARKIT_INDEX[f"{name}Right"]])


# The formulas, each over plain floats (one face: EmotionContext) or arrays with one value per face
# (EmotionContextRows); w: the 52 raw ARKit weights as a sequence (of floats, or of arrays over the faces).
def eyes_shut(blinks: np.ndarray):
    """Whether both eyes count as shut: blinks (2,) eyeBlink left/right -> bool, or (n, 2) -> (n,)."""
    return np.mean(blinks, -1) >= CLOSED


def evidence(w):
    """(brows, eyeWide): max(browInnerUp, mean browOuterUp) and mean eyeWide."""
    return maximum(w[ARKIT_INDEX["browInnerUp"]], _pair(w, "browOuterUp")), _pair(w, "eyeWide")


def resting(x, rest, dt):
    """The resting reading after dt seconds: it follows x down at once and climbs at most BASELINE_RISE a second."""
    return minimum(x, rest + BASELINE_RISE * dt)


def surprise_of(brows, eye_wide, rest_brows, rest_eye_wide):
    """Surprise evidence in [0, 1]: brows raised and eyes widened over their resting readings, together."""
    return (_ramp(maximum(brows - rest_brows, 0.0), SURPRISE_BROWS)
            * _ramp(maximum(eye_wide - rest_eye_wide, 0.0), SURPRISE_EYES))


def reread(p: list, w, surprise, eye_wide) -> list:
    """The 7 probabilities p (EMOTION_NAMES order) read with surprise evidence and the open mouth, renormalised."""
    p = list(p)
    for source in ("fear", "neutral"):
        moved = SURPRISE_SHARE * surprise * p[_E[source]]
        p[_E[source]] = p[_E[source]] - moved
        p[_E["surprise"]] = p[_E["surprise"]] + moved
    mouth = _ramp(w[ARKIT_INDEX["jawOpen"]], MOUTH_OPEN)
    support = minimum(1.0, maximum(w[ARKIT_INDEX["browInnerUp"]], eye_wide) / FEAR_EVIDENCE)
    moved = mouth * (1.0 - support) * p[_E["fear"]]
    p[_E["fear"]] = p[_E["fear"]] - moved
    p[_E["neutral"]] = p[_E["neutral"]] + moved
    p = [maximum(v, 0.0) for v in p]
    total = maximum(sum(p), 1e-9)  # summed in order, as numpy sums 7 values
    return [v / total for v in p]


class EmotionContext:
    """Conditions each classified emotion on blinks and the face's shapes; one per tracked subject."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._open: np.ndarray | None = None  # last reading with open eyes
        self._closed_since: float | None = None
        self._rest: tuple[float, float] | None = None  # this subject's resting (brows, eyeWide): lowest recent reading
        self._t: float | None = None

    def __call__(self, probs: np.ndarray, weights: np.ndarray, blinks: np.ndarray, t: float) -> np.ndarray:
        """probs: (7,) classifier output; weights: (52,) raw ARKit weights; blinks: (2,) eyeBlink left/right;
        t: media time, seconds. -> (7,) probabilities. In plain floats: the same float64 arithmetic as numpy's
        on these few values, at a fraction of its per-call cost."""
        p = np.asarray(probs, np.float64).tolist()
        w = np.asarray(weights, np.float64).tolist()
        closed = eyes_shut(blinks)
        if closed:
            self._closed_since = t if self._closed_since is None else self._closed_since
            if self._open is not None and t - self._closed_since <= HOLD_S:
                return self._open.copy()
        else:
            self._closed_since = None
        brows, eye_wide = evidence(w)
        surprise = 0.0  # shut eyes are not wide; nor do they tell where this face's lids rest
        if self._closed_since is None:
            if self._rest is None:  # the first reading starts the resting one
                self._rest = (brows, eye_wide)
            else:
                dt = maximum(0.0, t - self._t) if self._t is not None else 0.0
                self._rest = (resting(brows, self._rest[0], dt), resting(eye_wide, self._rest[1], dt))
            self._t = t
            surprise = surprise_of(brows, eye_wide, *self._rest)
        p = np.array(reread(p, w, surprise, eye_wide), np.float32)
        if not closed:
            self._open = p.copy()
        return p


class EmotionContextRows:
    """EmotionContext's state for many streams at once, one row per stream, through the same formulas."""

    def __init__(self, rows: int) -> None:
        self._open = np.zeros((rows, len(EMOTION_NAMES)), np.float32)
        self._has_open = np.zeros(rows, bool)
        self._closed_since = np.full(rows, np.nan)
        self._rest = np.zeros((rows, 2))  # resting (brows, eyeWide)
        self._has_rest = np.zeros(rows, bool)
        self._t = np.full(rows, np.nan)  # media time of the last reading with open eyes

    def reset(self, rows) -> None:
        self._has_open[rows] = False
        self._closed_since[rows] = np.nan
        self._has_rest[rows] = False
        self._t[rows] = np.nan

    def __call__(self, rows: np.ndarray, probs: np.ndarray, weights: np.ndarray, blinks: np.ndarray,
                 t: np.ndarray) -> np.ndarray:
        """rows (n,) distinct; probs (n, 7); weights (n, 52) raw ARKit weights; blinks (n, 2); t (n,) media
        seconds -> (n, 7) probabilities."""
        p = list(np.array(probs, np.float64).T)  # columns: one array over the rows per emotion
        w = list(np.asarray(weights, np.float64).T)
        closed = eyes_shut(np.asarray(blinks, np.float32))
        since = self._closed_since[rows]
        since = np.where(closed, np.where(np.isnan(since), t, since), np.nan)
        self._closed_since[rows] = since
        hold = closed & self._has_open[rows] & (t - since <= HOLD_S)
        brows, eye_wide = evidence(w)
        seeing = ~closed  # open eyes only move the resting reading
        seen, x = rows[seeing], np.stack([brows, eye_wide], 1)[seeing]
        last_t = self._t[seen]
        dt = np.where(np.isnan(last_t), 0.0, maximum(0.0, t[seeing] - last_t))
        rest = np.where(self._has_rest[seen][:, None], resting(x, self._rest[seen], dt[:, None]), x)
        self._rest[seen], self._has_rest[seen], self._t[seen] = rest, True, t[seeing]
        surprise = np.zeros(len(rows))
        surprise[seeing] = surprise_of(x[:, 0], x[:, 1], rest[:, 0], rest[:, 1])
        p = np.stack(reread(p, w, surprise, eye_wide), 1).astype(np.float32)
        p = np.where(hold[:, None], self._open[rows], p)
        self._open[seen] = p[seeing]
        self._has_open[seen] = True
        return p
