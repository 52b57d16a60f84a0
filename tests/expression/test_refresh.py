"""The shared identity refresher: the same identity as the inline refresh when it keeps up, latest wins per engine
when it does not, a reset drops a refresh measured before it, and many engines on one shared model stay apart."""
import threading

import numpy as np
import pytest

from bridge.bench.expression import _run, sequences
from bridge.expression.model import load_model
from bridge.expression.refresh import IdentityRefresher
from bridge.expression.stage import IDENTITY_UPDATES, ExpressionEstimator

SEED = 777


@pytest.fixture(scope="module")
def clips():
    model = load_model()
    return list(sequences(model, np.random.default_rng(SEED), 2, 12))


@pytest.fixture
def refresher():
    r = IdentityRefresher(workers=1)
    yield r
    r.close()


def test_a_refresher_that_keeps_up_gives_the_inline_identity_bit_for_bit(clips, refresher):
    inline, shared = ExpressionEstimator(), ExpressionEstimator(refresher=refresher)
    for i in range(12):
        a, b = _run(inline, clips[0], i), _run(shared, clips[0], i)
        assert refresher.drain(30)
        # the frame itself used the identity from before its own refresh: equal once both folded it in
        np.testing.assert_array_equal(inline.identity, shared.identity)
        np.testing.assert_array_equal(a.blendshapes, b.blendshapes)
    assert refresher.counts["done"] == 12 and refresher.counts["failed"] == 0


def test_latest_wins_per_engine_and_a_reset_drops_an_older_refresh(clips, refresher):
    gate, entered = threading.Event(), threading.Event()

    class Blocker:  # holds the one worker until released, so observations pile up behind it
        def refresh_identity(self, _observation):
            entered.set()
            gate.wait(30)

    est = ExpressionEstimator(refresher=refresher)
    refresher.offer(Blocker(), None)
    assert entered.wait(30)  # the worker holds the blocker: on a loaded machine it may take a while to start
    for i in range(5):
        _run(est, clips[0], i)
    assert refresher.counts["replaced"] == 4  # one waits for this engine: the newest
    gate.set()
    assert refresher.drain(30)
    assert est._updates == 1 and refresher.counts["done"] == 2

    gate.clear()
    entered.clear()
    refresher.offer(Blocker(), None)
    assert entered.wait(30)
    _run(est, clips[0], 5)
    est.reset()  # the subject changed while its refresh waited: that refresh must not land
    gate.set()
    assert refresher.drain(30)
    assert est._updates == 0 and est.identity[-1] == 0.5 and not est.identity[:-1].any()


def test_many_engines_on_the_shared_model_keep_their_own_identities(clips, refresher):
    alone = []  # each subject on its own, refreshed inline: the identity after each frame
    for clip in clips:
        est = ExpressionEstimator()
        alone.append([(_run(est, clip, i), est.identity.copy())[1] for i in range(12)])
    shared = [ExpressionEstimator(refresher=refresher) for _ in clips]
    for i in range(12):
        for k, clip in enumerate(clips):  # interleaved: each call changes the subject the shared model last saw
            r = _run(shared[k], clip, i)
            if i:  # a frame reports the identity it had before its own refresh folded in
                np.testing.assert_array_equal(r.morph.identity, alone[k][i - 1][:100])
            assert refresher.drain(30)
            np.testing.assert_array_equal(shared[k].identity, alone[k][i])
    assert all(e._updates == 12 < IDENTITY_UPDATES for e in shared)
