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


def test_rows_filter_each_stream_as_its_own_filter_would():
    from bridge.stages.filters import OneEuroRows

    rng = np.random.default_rng(0)
    singles = [OneEuroFilter(2.0, 1.5) for _ in range(5)]
    rows, t = OneEuroRows(5, 52, 2.0, 1.5), np.zeros(5)
    for step in range(200):  # passes of changing membership; time steps, repeats and jumps back; a reset
        sel = np.sort(rng.choice(5, size=rng.integers(1, 6), replace=False))
        x = rng.normal(size=(len(sel), 52))
        t[sel] += rng.choice([1 / 30, 1 / 15, 0.0, -0.1], size=len(sel), p=[0.7, 0.2, 0.05, 0.05])
        if step == 100:
            rows.reset(sel[:1])
            singles[sel[0]].reset()
        want = np.stack([singles[i](x[k], t[i]) for k, i in enumerate(sel)])
        assert np.array_equal(rows(sel, x, t[sel]), want)
