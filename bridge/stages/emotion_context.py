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
BASELINE_RISE = 0.02  # per second: how fast the resting brows/lids baseline may climb (a surprise lasts ~1-3 s)
_E = {name: i for i, name in enumerate(EMOTION_NAMES)}


def _ramp(x: float, lo_hi: tuple[float, float]) -> float:
    lo, hi = lo_hi
    return min(max((x - lo) / (hi - lo), 0.0), 1.0)


def _pair(w, name: str) -> float:
    return 0.5 * float(w[ARKIT_INDEX[f"{name}Left"]] + w[ARKIT_INDEX[f"{name}Right"]])


class EmotionContext:
    """Conditions each classified emotion on blinks and the face's shapes; one per tracked subject."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._open: np.ndarray | None = None  # last reading with open eyes
        self._closed_since: float | None = None
        self._rest: tuple[float, float] | None = None  # this subject's resting (brows, eyeWide): lowest recent reading
        self._t: float | None = None

    def _raised(self, brows: float, eye_wide: float, t: float) -> tuple[float, float]:
        """(brows, eyeWide) above this subject's resting reading, which follows them down at once and climbs
        at most BASELINE_RISE a second."""
        if self._rest is None:
            self._rest = (brows, eye_wide)
        else:
            dt = max(0.0, t - self._t) if self._t is not None else 0.0
            self._rest = tuple(min(v, rest + BASELINE_RISE * dt) for v, rest in zip((brows, eye_wide), self._rest))
        self._t = t
        return max(brows - self._rest[0], 0.0), max(eye_wide - self._rest[1], 0.0)

    def __call__(self, probs: np.ndarray, weights: np.ndarray, blinks: np.ndarray, t: float) -> np.ndarray:
        """probs: (7,) classifier output; weights: (52,) raw ARKit weights; blinks: (2,) eyeBlink left/right;
        t: media time, seconds. -> (7,) probabilities. In plain floats: the same float64 arithmetic as numpy's
        on these few values, at a fraction of its per-call cost."""
        p = np.asarray(probs, np.float64).tolist()
        w = np.asarray(weights, np.float64).tolist()
        closed = float(np.mean(blinks)) >= CLOSED
        if closed:
            self._closed_since = t if self._closed_since is None else self._closed_since
            if self._open is not None and t - self._closed_since <= HOLD_S:
                return self._open.copy()
        else:
            self._closed_since = None
        eye_wide = _pair(w, "eyeWide")
        surprise = 0.0  # shut eyes are not wide; nor do they tell where this face's lids rest
        if self._closed_since is None:
            brows_up, eyes_up = self._raised(max(w[ARKIT_INDEX["browInnerUp"]], _pair(w, "browOuterUp")), eye_wide, t)
            surprise = _ramp(brows_up, SURPRISE_BROWS) * _ramp(eyes_up, SURPRISE_EYES)
        for source in ("fear", "neutral"):
            moved = SURPRISE_SHARE * surprise * p[_E[source]]
            p[_E[source]] -= moved
            p[_E["surprise"]] += moved
        mouth = _ramp(w[ARKIT_INDEX["jawOpen"]], MOUTH_OPEN)
        support = min(1.0, max(w[ARKIT_INDEX["browInnerUp"]], eye_wide) / FEAR_EVIDENCE)
        moved = mouth * (1.0 - support) * p[_E["fear"]]
        p[_E["fear"]] -= moved
        p[_E["neutral"]] += moved
        p = [max(v, 0.0) for v in p]
        total = max(sum(p), 1e-9)  # numpy sums 7 values in order too
        p = np.array([v / total for v in p], np.float32)
        if not closed:
            self._open = p.copy()
        return p


def _ramps(x: np.ndarray, lo_hi: tuple[float, float]) -> np.ndarray:
    lo, hi = lo_hi
    return np.clip((x - lo) / (hi - lo), 0.0, 1.0)


class EmotionContextRows:
    """EmotionContext for many streams at once, one row per stream."""

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
        p = np.asarray(probs, np.float64).copy()
        w = np.asarray(weights, np.float64)
        col = lambda name: w[:, ARKIT_INDEX[name]]  # noqa: E731
        pair = lambda name: 0.5 * (col(f"{name}Left") + col(f"{name}Right"))  # noqa: E731
        closed = np.asarray(blinks, np.float32).mean(1) >= CLOSED
        since = self._closed_since[rows]
        since = np.where(closed, np.where(np.isnan(since), t, since), np.nan)
        self._closed_since[rows] = since
        hold = closed & self._has_open[rows] & (t - since <= HOLD_S)
        eye_wide = pair("eyeWide")
        x = np.stack([np.maximum(col("browInnerUp"), pair("browOuterUp")), eye_wide], 1)
        seen = rows[~closed]  # EmotionContext._raised: open eyes only
        last_t = self._t[seen]
        dt = np.where(np.isnan(last_t), 0.0, np.maximum(0.0, t[~closed] - last_t))
        rest = np.where(self._has_rest[seen][:, None], np.minimum(x[~closed], self._rest[seen] + BASELINE_RISE *
                                                                  dt[:, None]), x[~closed])
        self._rest[seen], self._has_rest[seen], self._t[seen] = rest, True, t[~closed]
        up = np.zeros_like(x)
        up[~closed] = np.maximum(x[~closed] - rest, 0.0)
        surprise = np.where(closed, 0.0, _ramps(up[:, 0], SURPRISE_BROWS) * _ramps(up[:, 1], SURPRISE_EYES))
        for source in ("fear", "neutral"):
            moved = SURPRISE_SHARE * surprise * p[:, _E[source]]
            p[:, _E[source]] -= moved
            p[:, _E["surprise"]] += moved
        mouth = _ramps(col("jawOpen"), MOUTH_OPEN)
        support = np.minimum(1.0, np.maximum(col("browInnerUp"), eye_wide) / FEAR_EVIDENCE)
        moved = mouth * (1.0 - support) * p[:, _E["fear"]]
        p[:, _E["fear"]] -= moved
        p[:, _E["neutral"]] += moved
        p = np.clip(p, 0.0, None)
        p = (p / np.maximum(p.sum(1, keepdims=True), 1e-9)).astype(np.float32)
        p = np.where(hold[:, None], self._open[rows], p)
        seen_open = rows[~closed]
        self._open[seen_open] = p[~closed]
        self._has_open[seen_open] = True
        return p
