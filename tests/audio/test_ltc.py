"""The LTC decoder against LTC audio generated from the SMPTE layout (tests/audio/ltc_signal.py)."""
import numpy as np
import pytest

from bridge.audio.ltc import LtcDecoder
from bridge.audio.sources import to_mono_16k
from tests.audio.ltc_signal import ltc_audio


def decode(pcm, chunk=160):
    decoder, frames = LtcDecoder(), []
    for k in range(0, len(pcm), chunk):
        frames += decoder.feed(pcm[k:k + chunk])
    return frames


@pytest.mark.parametrize("fps, rate, invert", [(25, 48000, False), (30, 48000, True), (24, 44100, False)])
def test_every_frame_is_read_at_any_polarity_and_rate(fps, rate, invert):
    frames = decode(ltc_audio((10, 0, 0, 0), fps, 3.0, rate=rate, invert=invert))
    assert len(frames) >= 3 * fps - 4  # the first intervals teach the decoder the bit length
    by_text = {f.text: f for f in frames}
    assert f"10:00:02:{fps - 2:02d}" in by_text
    assert abs(by_text["10:00:01:00"].start_sample - rate) < 2, "a frame begins where its bit 0 does"
    steps = [(f2.start_sample - f1.start_sample) for f1, f2 in zip(frames, frames[1:])]
    assert np.allclose(steps, rate / fps, atol=2), "each frame starts one frame after the last"

def test_noisy_quiet_ltc_resampled_to_16k_decodes():
    rng = np.random.default_rng(1)
    pcm = ltc_audio((23, 59, 58, 0), 25, 4.0, amplitude=0.05)
    pcm = pcm + rng.normal(0, 0.003, len(pcm)).astype(np.float32)
    frames = decode(to_mono_16k(pcm, 48000), chunk=160)
    texts = [f.text for f in frames]
    assert "23:59:59:24" in texts and "00:00:00:00" in texts, "midnight rolls over"
    assert len(frames) >= 4 * 25 - 5


def test_silence_and_noise_give_no_frames():
    rng = np.random.default_rng(2)
    assert decode(np.zeros(48000, np.float32)) == []
    assert decode(rng.normal(0, 0.3, 48000).astype(np.float32)) == []
