"""The server's rules for a round of the lip-sync adapter, as a legacy FedAvg for the SecAgg+ workflow.

Policy:
- Sampling never blocks for a day (stock `wait_for` does): it waits at most `wait_s` for `min_clients` nodes,
  leaving out nodes the workflow excluded after a halted attempt, and otherwise skips the round.
- Every device reports the same `num_examples` and no metrics (both travel in the clear next to the masked
  vectors), so the weights are equal and nothing per device is learned from them.
- An aggregate is accepted only when it has the adapter's shapes, is finite, lies within +-clipping_range and
  moved less than `max_update_norm` from the current global adapter; otherwise the round is rejected and the
  global adapter stays as it was. A device's own NaN or out-of-range update never gets this far: the device's
  update guard (client_app.py) refuses to send it.
- Optional central differential privacy: devices clip their update to L2 <= dp_clip (Flower's
  fixedclipping_mod, inside SecAgg+), and the server adds Gaussian noise of stdev dp_noise * dp_clip / n to the
  aggregate of n devices. The server sees the un-noised aggregate (trusted-server DP).
- Every accepted aggregate is kept by `on_accept` (the server's audit trail of global adapters).
- After each accepted round the new global adapter is evaluated on the server's own held-out set and published
  (on_publish) only when its error is no worse than the last published one.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import numpy as np
from flwr.common import FitIns, Parameters, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM, add_gaussian_noise_to_params, compute_stdv

from bridge.errors import FaceBridgeError
from fedagent.app.events import AggregateEvent, DpEvent, EvaluateEvent, Event, RoundEvent
from fedagent.app.task import Adapter, adapter_from_list, adapter_to_list

log = logging.getLogger(__name__)


class AdapterFedAvg(FedAvg):
    """FedAvg over devices' adapters with bounded sampling, aggregate checks, optional DP and publish-if-better."""

    def __init__(self, initial: Adapter, *, min_clients: int = 2, clients_per_round: int = 0,
                 train_config: dict | None = None, num_examples: int = 1, clipping_range: float = 1.0,
                 max_update_norm: float = 2.0, dp_noise: float = 0.0, dp_clip: float = 0.0, wait_s: float = 120.0,
                 evaluate_fn: Callable[[Adapter], float] | None = None,
                 on_publish: Callable[[Adapter, int, float], None] | None = None,
                 on_accept: Callable[[Adapter, int], None] | None = None,
                 on_event: Callable[[Event], None] | None = None):
        super().__init__(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=min_clients,
                         min_available_clients=min_clients, accept_failures=True,
                         initial_parameters=ndarrays_to_parameters(adapter_to_list(initial)))
        if dp_noise < 0 or dp_clip < 0 or (dp_noise > 0 and dp_clip <= 0):
            raise FaceBridgeError(f"differential privacy needs a positive clip with noise (noise {dp_noise}, clip "
                                  f"{dp_clip})", "pass --dp-clip > 0 with --dp-noise, or neither")
        self.current = {k: v.copy() for k, v in initial.items()}
        self.min_clients, self.clients_per_round = int(min_clients), int(clients_per_round)
        self.train_config = dict(train_config or {})
        self.num_examples, self.clipping_range = int(num_examples), float(clipping_range)
        self.max_update_norm, self.dp_noise, self.dp_clip = float(max_update_norm), float(dp_noise), float(dp_clip)
        self.wait_s = float(wait_s)
        self.evaluate_fn, self.on_publish, self.on_accept = evaluate_fn, on_publish, on_accept
        self.on_event = on_event or (lambda event: None)
        self.excluded: set = set()
        self.best_error: float | None = None
        self.accepted_round = 0
        self.published: list[int] = []

    def exclude(self, node_ids: set) -> None:
        self.excluded = set(node_ids)

    # -- sampling -------------------------------------------------------------------------------------------
    def configure_fit(self, server_round: int, parameters: Parameters, client_manager) -> list:
        deadline = time.monotonic() + self.wait_s
        while True:
            nodes = [p for p in client_manager.all().values() if p.node_id not in self.excluded]
            if len(nodes) >= self.min_clients:
                break
            if time.monotonic() >= deadline:
                self.on_event(RoundEvent(round=server_round, status="skipped",
                                         reason=f"{len(nodes)} of the {self.min_clients} devices needed are online"))
                return []
            time.sleep(1.0)
        if 0 < self.clients_per_round < len(nodes):
            nodes = random.sample(nodes, self.clients_per_round)
        config = {"server-round": server_round, "num-examples": self.num_examples,
                  "clipping-range": self.clipping_range, **self.train_config}
        if self.dp_clip > 0:
            config[KEY_CLIPPING_NORM] = self.dp_clip
        return [(proxy, FitIns(parameters, dict(config))) for proxy in nodes]

    # -- aggregation ----------------------------------------------------------------------------------------
    def aggregate_fit(self, server_round: int, results: list, failures: list):
        if not results:
            return self._reject(server_round, "no device completed the round")
        aggregated, _ = super().aggregate_fit(server_round, results, failures)
        try:
            arrays = [np.asarray(a, np.float64) for a in parameters_to_ndarrays(aggregated)]
            adapter_from_list(arrays)
        except FaceBridgeError as e:
            return self._reject(server_round, str(e))
        if not all(np.isfinite(a).all() for a in arrays):
            return self._reject(server_round, "the aggregate holds NaN or infinite values")
        peak = max(float(np.abs(a).max()) for a in arrays)
        if peak > self.clipping_range:
            return self._reject(server_round, f"the aggregate reaches {peak:.3g}, outside +-{self.clipping_range}")
        moved = float(np.sqrt(sum(((a - c) ** 2).sum() for a, c in zip(arrays, adapter_to_list(self.current)))))
        if self.max_update_norm > 0 and moved > self.max_update_norm:
            return self._reject(server_round, f"the aggregate moved {moved:.3g} (L2), more than {self.max_update_norm}")
        params = ndarrays_to_parameters([a.astype(np.float32) for a in arrays])
        if self.dp_noise > 0:
            params = add_gaussian_noise_to_params(params, self.dp_noise, self.dp_clip, len(results))
            params = ndarrays_to_parameters([a.astype(np.float32) for a in parameters_to_ndarrays(params)])
            self.on_event(DpEvent(round=server_round,
                                  noise_stdev=compute_stdv(self.dp_noise, self.dp_clip, len(results))))
        self.current = adapter_from_list(parameters_to_ndarrays(params))
        self.accepted_round = server_round
        if self.on_accept is not None:
            self.on_accept(self.current, server_round)
        self.on_event(AggregateEvent(round=server_round, status="accepted", devices=len(results),
                                     update_norm=round(moved, 6)))
        return params, {}

    def _reject(self, server_round: int, reason: str):
        log.warning("round %s rejected: %s", server_round, reason)
        self.on_event(AggregateEvent(round=server_round, status="rejected", reason=reason))
        return None, {}

    # -- server-side evaluation and publishing --------------------------------------------------------------
    def evaluate(self, server_round: int, parameters: Parameters):
        if self.evaluate_fn is None:
            return None
        adapter = adapter_from_list(parameters_to_ndarrays(parameters))
        error = float(self.evaluate_fn(adapter))
        if server_round == 0:
            self.best_error = error
            status = "baseline"
        elif server_round != self.accepted_round:
            status = "unchanged"
        elif self.best_error is None or error <= self.best_error:
            self.best_error = error
            status = "published"
            if self.on_publish is not None:
                self.on_publish(adapter, server_round, error)
            self.published.append(server_round)
        else:
            status = "not published (worse than the last published adapter)"
        self.on_event(EvaluateEvent(round=server_round, held_out_mouth_mae=round(error, 6), status=status))
        return error, {"held_out_mouth_mae": error}
