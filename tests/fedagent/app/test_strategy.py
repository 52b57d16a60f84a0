"""The server's round rules: a corrupt aggregate is never accepted; a new adapter is published only when no worse."""
import numpy as np
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedagent.app.events import AggregateEvent, DpEvent, EvaluateEvent
from fedagent.app.strategy import AdapterFedAvg
from fedagent.app.task import adapter_to_list, default_adapter


def results(*adapters):
    return [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(adapter_to_list(a)), 1, {})) for a in adapters]


def shifted(delta: float, where=(0, 0)):
    a = {k: v.copy() for k, v in default_adapter().items()}
    a["adapter.B"][where] += delta
    return a


def strategy(**kw):
    events = []
    return AdapterFedAvg(default_adapter(), on_event=events.append, **kw), events


def test_a_good_aggregate_is_the_mean_and_is_kept():
    s, events = strategy(on_accept=lambda a, r: events.append(("kept", r)))
    params, metrics = s.aggregate_fit(1, results(shifted(0.1), shifted(-0.3)), [])
    got = parameters_to_ndarrays(params)
    assert np.isclose(got[1][0, 0], default_adapter()["adapter.B"][0, 0] - 0.1, atol=1e-6)
    assert metrics == {} and ("kept", 1) in events and s.accepted_round == 1


def test_nan_out_of_range_and_too_large_aggregates_are_rejected():
    everywhere = (slice(None), slice(None))
    for bad, reason in ((shifted(np.nan), "NaN"), (shifted(5.0), "outside"), (shifted(0.9, everywhere), "moved")):
        s, events = strategy(max_update_norm=2.0)
        params, _ = s.aggregate_fit(1, results(bad, default_adapter()), [])
        assert params is None and s.accepted_round == 0
        assert any(isinstance(e, AggregateEvent) and e.status == "rejected" and reason in e.reason for e in events)
    s, events = strategy()
    assert s.aggregate_fit(1, [], [RuntimeError("gone")])[0] is None


def test_publishing_happens_only_for_accepted_rounds_that_are_no_worse():
    errors = iter([0.05, 0.04, 0.045, 0.04, 0.03])
    published = []
    s, events = strategy(evaluate_fn=lambda a: next(errors), on_publish=lambda a, r, e: published.append((r, e)))
    params = ndarrays_to_parameters(adapter_to_list(default_adapter()))
    s.evaluate(0, params)  # baseline 0.05
    for rnd in (1, 2, 3):
        s.aggregate_fit(rnd, results(shifted(0.01 * rnd)), [])
        s.evaluate(rnd, params)
    assert published == [(1, 0.04), (3, 0.04)]  # round 2 was worse than the last published
    s.evaluate(4, params)  # round 4 never aggregated: nothing to publish
    assert [e.status for e in events if isinstance(e, EvaluateEvent)][-1] == "unchanged"


def test_dp_adds_noise_of_the_documented_size():
    s, events = strategy(dp_noise=1.0, dp_clip=0.2)
    s.aggregate_fit(1, results(default_adapter(), default_adapter()), [])
    assert [e.noise_stdev for e in events if isinstance(e, DpEvent)] == [0.1]  # noise * clip / devices
