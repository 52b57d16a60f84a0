"""Our own phoneme -> viseme -> ARKit mouth tables, and the coarticulation model that turns a timed phoneme
string into smooth per-frame training targets.

Phonemes are IPA (as espeak-ng reports them, any language). Each maps to one of the 15 standard visemes
(bridge.frame.VISEME_NAMES); each viseme has a mouth pose over MOUTH_CHANNELS (ARKit names). Targets blend the
poses of neighbouring phonemes with dominance functions (Cohen & Massaro style): every phoneme pulls the mouth
toward its pose with a strength that is flat over its own span and decays exponentially outside it, so lips
close early for a /p/ and a short reduced vowel barely opens the jaw.
"""
from __future__ import annotations

import unicodedata

import numpy as np

from bridge.frame import ARKIT_INDEX, VISEME_NAMES

# The ARKit channels the audio model predicts, in model output order.
MOUTH_CHANNELS: tuple[str, ...] = (
    "jawOpen", "mouthClose", "mouthFunnel", "mouthPucker", "mouthSmileLeft", "mouthSmileRight",
    "mouthStretchLeft", "mouthStretchRight", "mouthRollLower", "mouthRollUpper", "mouthShrugLower",
    "mouthShrugUpper", "mouthPressLeft", "mouthPressRight", "mouthLowerDownLeft", "mouthLowerDownRight",
    "mouthUpperUpLeft", "mouthUpperUpRight", "tongueOut",
)
MOUTH_ARKIT_INDICES = np.array([ARKIT_INDEX[n] for n in MOUTH_CHANNELS], dtype=np.int64)
VISEME_INDEX = {name: i for i, name in enumerate(VISEME_NAMES)}


def _pose(**channels: float) -> np.ndarray:
    """A mouth pose. Keys are channel names or short forms: `Smile=0.3` sets mouthSmileLeft and -Right."""
    out = np.zeros(len(MOUTH_CHANNELS), dtype=np.float32)
    for key, value in channels.items():
        names = [n for n in (key, f"mouth{key}", f"mouth{key}Left", f"mouth{key}Right") if n in MOUTH_CHANNELS]
        assert names, key
        for n in names:
            out[MOUTH_CHANNELS.index(n)] = value
    return out


# Viseme -> mouth pose. Values are what an animator would key for a clear, mid-energy articulation.
VISEME_POSES: dict[str, np.ndarray] = {
    "sil": _pose(),
    "PP": _pose(jawOpen=0.08, mouthClose=0.08, Press=0.55, RollLower=0.2, RollUpper=0.15),
    "FF": _pose(jawOpen=0.1, RollLower=0.5, UpperUp=0.25, ShrugUpper=0.1),
    "TH": _pose(jawOpen=0.15, tongueOut=0.45, LowerDown=0.1),
    "DD": _pose(jawOpen=0.2, Stretch=0.12, LowerDown=0.15),
    "kk": _pose(jawOpen=0.25, Stretch=0.1, LowerDown=0.1),
    "CH": _pose(jawOpen=0.15, Funnel=0.45, Pucker=0.2, UpperUp=0.2, LowerDown=0.2),
    "SS": _pose(jawOpen=0.08, Stretch=0.3, Smile=0.15, UpperUp=0.1, LowerDown=0.1),
    "nn": _pose(jawOpen=0.18, Stretch=0.08, LowerDown=0.08),
    "RR": _pose(jawOpen=0.18, Funnel=0.25, Pucker=0.2),
    "aa": _pose(jawOpen=0.7, LowerDown=0.35, UpperUp=0.15, Stretch=0.1),
    "E": _pose(jawOpen=0.45, Stretch=0.3, Smile=0.15, LowerDown=0.25, UpperUp=0.15),
    "ih": _pose(jawOpen=0.25, Smile=0.35, Stretch=0.3, UpperUp=0.1),
    "oh": _pose(jawOpen=0.5, Funnel=0.55, Pucker=0.25, LowerDown=0.1),
    "ou": _pose(jawOpen=0.2, Pucker=0.7, Funnel=0.35),
}
assert set(VISEME_POSES) == set(VISEME_NAMES)

# How strongly each viseme holds the mouth against its neighbours (lip closure must be reached; alveolars are
# hidden behind the lips and give way), and how fast that pull decays outside the phoneme (seconds).
DOMINANCE = {"sil": 1.0, "PP": 4.0, "FF": 2.0, "TH": 1.2, "DD": 0.5, "kk": 0.4, "CH": 1.5, "SS": 0.8, "nn": 0.5,
             "RR": 0.8, "aa": 1.5, "E": 1.2, "ih": 1.0, "oh": 1.5, "ou": 1.8}
DECAY_S = {"sil": 0.05, "PP": 0.04, "FF": 0.04, "TH": 0.035, "DD": 0.03, "kk": 0.03, "CH": 0.045, "SS": 0.035,
           "nn": 0.03, "RR": 0.04, "aa": 0.06, "E": 0.055, "ih": 0.05, "oh": 0.06, "ou": 0.06}

# IPA symbol -> viseme. Multi-character affricates are matched first; vowels with several symbols (diphthongs)
# are split into equal parts. 'h'-like sounds take the shape of the following phoneme.
_AFFRICATES = {"tʃ": "CH", "dʒ": "CH", "tɕ": "CH", "dʑ": "CH", "ts": "SS", "dz": "SS", "tʂ": "CH", "dʐ": "CH",
               "pf": "FF"}
_SYMBOLS = {
    "PP": "pbmɸβ", "FF": "fvɱʋ", "TH": "θð", "DD": "tdɗʈɖ", "kk": "kgɡŋxɣqɢχcɟʔ",
    "CH": "ʃʒɕʑçʝʂʐ", "SS": "sz", "nn": "nlɲɳɫʎɭɬʟ", "RR": "rɹɾʀʁɻɽɚɝ",
    "aa": "aɑɐäʌæ", "E": "eɛəɜɘ", "ih": "iɪɨɯj", "oh": "oɔɒøɤœɵ", "ou": "uʊwʏyɥʉ",
}
IPA_TO_VISEME: dict[str, str] = {ch: vis for vis, chars in _SYMBOLS.items() for ch in chars}
TRANSPARENT = set("hɦħʕ")
VOWEL_VISEMES = {"aa", "E", "ih", "oh", "ou"}
# Marks espeak attaches to phonemes that do not change the mouth shape (length, stress, syllabic, nasal...).
_IGNORED = set("ːˑˈˌ-_'.,^`|") | {"\u0361", "\u035c"}


def _clean(phoneme: str) -> str:
    decomposed = unicodedata.normalize("NFD", phoneme)
    return "".join(c for c in decomposed if c not in _IGNORED and not unicodedata.combining(c))


def phoneme_visemes(phoneme: str) -> list[str] | None:
    """Visemes of one IPA phoneme, in time order (two for a diphthong). [] means silence; None means 'take
    the next phoneme's shape' (h); unknown symbols are skipped."""
    s = _clean(phoneme)
    if not s:
        return []
    if s in _AFFRICATES:
        return [_AFFRICATES[s]]
    if all(c in TRANSPARENT for c in s):
        return None
    out: list[str] = []
    i = 0
    while i < len(s):
        if s[i:i + 2] in _AFFRICATES:
            out.append(_AFFRICATES[s[i:i + 2]])
            i += 2
            continue
        vis = IPA_TO_VISEME.get(s[i])
        if vis is not None and (not out or out[-1] != vis):
            out.append(vis)
        i += 1
    return out


def segments_from_events(events: list[tuple[str, float]], end_s: float) -> list[tuple[float, float, str]]:
    """Timed phoneme events [(ipa, start_s)] -> viseme segments [(start_s, end_s, viseme)] covering [0, end_s).
    Zero-length events are dropped, diphthongs split, 'h' takes the next segment's viseme."""
    segs: list[list] = []
    events = sorted(events, key=lambda e: e[1])
    for k, (ph, start) in enumerate(events):
        stop = events[k + 1][1] if k + 1 < len(events) else end_s
        if stop - start <= 1e-4:
            continue
        visemes = phoneme_visemes(ph)
        if visemes is None:
            segs.append([start, stop, None])
            continue
        if not visemes:
            visemes = ["sil"]
        step = (stop - start) / len(visemes)
        for j, vis in enumerate(visemes):
            segs.append([start + j * step, start + (j + 1) * step, vis])
    for k in range(len(segs) - 1, -1, -1):  # 'h' copies what follows (or silence at the end)
        if segs[k][2] is None:
            segs[k][2] = segs[k + 1][2] if k + 1 < len(segs) else "sil"
    if not segs or segs[0][0] > 0:
        segs.insert(0, [0.0, segs[0][0] if segs else end_s, "sil"])
    if segs[-1][1] < end_s:
        segs.append([segs[-1][1], end_s, "sil"])
    return [(float(a), float(b), str(v)) for a, b, v in segs]


def frame_targets(segments: list[tuple[float, float, str]], frame_times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame (viseme index (T,), mouth pose (T, len(MOUTH_CHANNELS))) at `frame_times` (seconds).

    The viseme is the one whose segment holds the frame; the pose is the dominance-weighted blend."""
    t = np.asarray(frame_times, dtype=np.float64)
    labels = np.zeros(len(t), dtype=np.int64)
    weight_sum = np.full(len(t), 1e-6)
    pose_sum = np.zeros((len(t), len(MOUTH_CHANNELS)))
    closure = np.zeros(len(t))  # dominance of lip-closing phonemes (p, b, m)
    for start, stop, vis in segments:
        inside = (t >= start) & (t < stop)
        labels[inside] = VISEME_INDEX[vis]
        pose = VISEME_POSES[vis].astype(np.float64)
        duration = stop - start
        if vis in VOWEL_VISEMES:  # short, reduced vowels open less
            pose = pose * min(1.0, 0.45 + duration / 0.12)
        if vis == "sil" and duration < 0.08:  # a brief gap between words is not a rest pose
            strength = DOMINANCE["sil"] * duration / 0.08
        else:
            strength = DOMINANCE[vis]
        outside = np.maximum(start - t, 0.0) + np.maximum(t - stop, 0.0)
        dominance = strength * np.exp(-outside / DECAY_S[vis])
        weight_sum += dominance
        pose_sum += dominance[:, None] * pose[None, :]
        if vis == "PP":
            closure += dominance
    pose = pose_sum / weight_sum[:, None]
    # Lips must meet for p/b/m even when the vowels around them keep the jaw open: in ARKit terms mouthClose
    # cancels the lip gap that jawOpen makes, so it follows jawOpen by the closers' share of the dominance.
    share = np.clip((closure / weight_sum - 0.3) / 0.4, 0.0, 1.0)  # full closure once the closer dominates
    close = MOUTH_CHANNELS.index("mouthClose")
    pose[:, close] = np.maximum(pose[:, close], share * pose[:, MOUTH_CHANNELS.index("jawOpen")])
    return labels, pose.astype(np.float32)
