"""Identity refreshes as stacked rows: a subject refreshed in a batch gets exactly what it gets alone, and the shared
refresher folds every observation waiting in one batch with the identities the inline refresh gives."""
import threading

import numpy as np
import pytest

from bridge.bench.expression import _run, sequences
from bridge.expression.identity import IDENTITY_STEPS, identity_refresh, identity_refresh_steps
from bridge.expression.model import load_model
from bridge.expression.refresh import IdentityRefresher
from bridge.expression.stage import ExpressionEstimator

SUBJECTS = 9


class Collect:
    """A refresher that only keeps what it is offered (the observations of a real engine's frames)."""

    def __init__(self) -> None:
        self.offered = []

    def offer(self, engine, observation) -> None:
        self.offered.append((engine, observation))


@pytest.fixture(scope="module")
def clips():
    return list(sequences(load_model(), np.random.default_rng(4242), SUBJECTS, 4))


@pytest.fixture(scope="module")
def observations(clips):
    collect = Collect()
    for clip in clips:
        engine = ExpressionEstimator(refresher=collect)
        for i in range(3):
            _run(engine, clip, i)
    return [o for _, o in collect.offered]


def _columns(observations):
    _, identity, weights, rot, xy, focal, centre = zip(*observations)
    return np.stack(identity), np.stack(weights), np.stack(rot), np.stack(xy), np.array(focal), np.array(centre)


def test_a_row_in_a_batch_gets_what_it_gets_alone_bit_for_bit(observations):
    model = load_model()
    cols = _columns(observations)
    alone = np.concatenate([identity_refresh(model, *(c[k:k + 1] for c in cols)) for k in range(len(observations))])
    for n in (2, 5, len(observations)):
        np.testing.assert_array_equal(identity_refresh(model, *(c[:n] for c in cols)), alone[:n])
    assert np.isfinite(alone).all() and np.abs(alone[:, :100]).max() > 0.05  # a real estimate, not the prior


def test_the_steps_give_the_whole_refresh(observations):
    model = load_model()
    cols = _columns(observations[:4])
    steps, taken = identity_refresh_steps(model, *cols), 0
    while True:
        try:
            next(steps)
            taken += 1
        except StopIteration as done:
            np.testing.assert_array_equal(done.value, identity_refresh(model, *cols))
            break
    assert taken + 1 == IDENTITY_STEPS


def test_the_refresher_folds_what_waits_in_one_batch_with_the_inline_identities(clips):
    inline = [ExpressionEstimator() for _ in clips]
    refresher = IdentityRefresher(workers=1)
    gate = threading.Event()

    class Blocker:  # holds the one worker, so every engine's observation waits for the next batch
        def refresh_identity(self, _observation):
            gate.wait(30)

    try:
        shared = [ExpressionEstimator(refresher=refresher) for _ in clips]
        for i in range(3):
            refresher.offer(Blocker(), None)
            for k, clip in enumerate(clips):
                _run(inline[k], clip, i)
                _run(shared[k], clip, i)
            gate.set()
            assert refresher.drain(30)
            gate.clear()
            for a, b in zip(inline, shared):
                np.testing.assert_array_equal(a.identity, b.identity)
        assert refresher.counts["done"] == 3 * (SUBJECTS + 1) and refresher.counts["failed"] == 0
        assert refresher.counts["batches"] == 3 * 2  # each time the blocker, then all the engines together
    finally:
        gate.set()
        refresher.close()


def test_a_batch_that_fails_is_refreshed_one_at_a_time(clips):
    refresher = IdentityRefresher(workers=1)
    gate = threading.Event()

    class Blocker:
        def refresh_identity(self, _observation):
            gate.wait(30)

    try:
        good = [ExpressionEstimator(refresher=refresher) for _ in range(2)]
        broken = ExpressionEstimator(refresher=refresher)
        refresher.offer(Blocker(), None)
        for engine in good:
            _run(engine, clips[0], 0)
        refresher.offer(broken, (0, np.zeros(3), None, None, None, None, None))  # not an observation at all
        gate.set()
        assert refresher.drain(30)
        assert refresher.counts["failed"] == 1 and refresher.counts["done"] == 3
        assert all(engine._updates == 1 for engine in good) and broken._updates == 0
    finally:
        gate.set()
        refresher.close()
