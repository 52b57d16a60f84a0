"""The One-Euro filter smooths jitter and follows motion."""

import numpy as np

from bridge.stages.filters import OneEuroFilter


def test_one_euro_smooths_jitter_and_follows_motion():
    rng = np.random.default_rng(0)
    f = OneEuroFilter(min_cutoff=1.0, beta=0.5)
    still = [f(np.array([0.5]) + rng.normal(0, 0.02, 1), i / 30)[0] for i in range(60)]
    assert np.std(still[30:]) < 0.01  # jitter of 0.02 is cut to well under half
    f.reset()
    ramp = [f(np.array([i / 30.0]), i / 30)[0] for i in range(60)]
    assert abs(ramp[-1] - 59 / 30) < 0.15  # a steady motion is followed closely
