"""Audio + video mouth fusion: a continuous weighting, not a hard switch.

For each mouth channel the audio lip-sync drives (LipSyncResult.mouth_mask):

    camera_trust = face_trust(frame) * mouth_visible                 (0 = camera cannot see the mouth)
    w_audio      = (1 - camera_trust) + camera_trust * speech * AUDIO_SHARE_WHEN_VISIBLE
    mouth        = w_audio * audio + (1 - w_audio) * camera

where face_trust rises linearly from 0 at confidence CONF_LOW to 1 at CONF_HIGH (0 when no face was found)
and speech is the voice-activity probability. So:
  * face lost, turned away or mouth hidden  -> speech drives the mouth fully;
  * face visible and the person silent      -> the camera wins (w_audio = 0);
  * face visible and speaking               -> an even blend: audio sharpens lip closures and rounding the
                                               camera blurs, the camera keeps the person's own style.
tongueOut always comes from audio (cameras cannot see the tongue), scaled by speech. Each frame is fused with
the result for its own instant (LipSyncStream.at; in step, result_at by media time), not the newest one, so time
in a busy pipeline does not count against it. A result more than STALE_S from the frame's instant (an audio
dropout, or lip-sync falling behind) is ignored, so the camera or the neutral pose takes over instead of a frozen
mouth; `fuse_mouth` says which happened ("fused", "late", "none") and the run's statistics count it, so a
degradation is never silent.
"""
from __future__ import annotations

import numpy as np

from bridge.frame import ARKIT_INDEX, FaceFrame, versions_with

CONF_LOW, CONF_HIGH = 0.3, 0.7
AUDIO_SHARE_WHEN_VISIBLE = 0.5
STALE_S = 0.25
TONGUE = ARKIT_INDEX["tongueOut"]


def face_trust(frame: FaceFrame) -> float:
    if not frame.face_found:
        return 0.0
    return float(np.clip((frame.confidence - CONF_LOW) / (CONF_HIGH - CONF_LOW), 0.0, 1.0))


def audio_weight(frame: FaceFrame, voice_activity: float, mouth_visible: float) -> float:
    camera_trust = face_trust(frame) * float(np.clip(mouth_visible, 0.0, 1.0))
    speech = float(np.clip(voice_activity, 0.0, 1.0))
    return (1.0 - camera_trust) + camera_trust * speech * AUDIO_SHARE_WHEN_VISIBLE


def fuse_mouth(frame: FaceFrame, result, mouth_visible: float = 1.0, at: float | None = None,
               age_s: float | None = None) -> str:
    """Blend the audio mouth into `frame.blendshapes` in place and set `frame.visemes`. `result` is a
    LipSyncResult or None; None or a stale result leaves the frame as the camera made it. `at` is the frame's
    instant on the result's clock (default its capture time); `age_s`, when given instead, is how far the result's
    instant is from the frame's (in step, by media time). Returns "fused", "late" (a result, but more than
    STALE_S from the frame's instant) or "none" (no result yet)."""
    if result is None:
        return "none"
    age = abs((frame.t_capture_mono if at is None else at) - result.t_capture_mono) if age_s is None else age_s
    if age > STALE_S:
        return "late"
    w = audio_weight(frame, result.voice_activity, mouth_visible)
    mask = result.mouth_mask
    shapes = frame.blendshapes.astype(np.float32, copy=True)
    shapes[mask] = w * result.blendshapes[mask] + (1.0 - w) * shapes[mask]
    shapes[TONGUE] = result.blendshapes[TONGUE]
    frame.blendshapes[:] = np.clip(shapes, 0.0, 1.0)
    frame.visemes = np.asarray(result.visemes, dtype=np.float32).copy()
    frame.latencies_ms["lipsync"] = max(0.0, float(result.latency_ms))  # a result read ahead may be early
    frame.model_versions = versions_with(frame.model_versions, "lipsync", result.model_version or "lipsync.onnx")
    return "fused"
