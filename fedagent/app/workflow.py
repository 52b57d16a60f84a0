"""Flower 1.42's SecAgg+ workflow made to survive the dropouts a phone or laptop really has, and to run fast.

Policy, on top of stock `SecAggPlusWorkflow` (legacy path, LegacyContext + legacy FedAvg):
- A node that drops before key sharing completes (in setup or share_keys) is removed from the round, as if it
  had never been sampled: the survivors mask only with the nodes whose key shares they received, so the round
  completes with them (stock 1.42 keeps the dead node in the sampled set and halts the whole round in unmask).
- Each of the four stages has its own timeout; a node that has not answered by then counts as dropped.
- A round that still halts (too few live neighbours, no aggregate) is detected and retried, at most
  `max_retries` times, without the nodes that did not complete key sharing in the halted attempt.
- Replies are polled every `poll_s` through the Grid's own push/pull API instead of the stock 3 s sleep.
- Every stage reports (round, attempt, stage, nodes in, nodes out, seconds, and the distinct one-line reasons
  devices gave for failing) to `progress`; never node ids, keys, shares or vectors.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

from fedagent.app.events import Event, RoundEvent, StageEvent

STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")
DEFAULT_TIMEOUTS = {"setup": 30.0, "share_keys": 30.0, "collect_masked_vectors": 120.0, "unmask": 30.0}


def _reason(failure: BaseException) -> str:
    """A device's error reply as one short line (Flower wraps it as "<class ...>:<'message'>")."""
    error = failure.args[0] if failure.args else failure
    text = str(getattr(error, "reason", None) or error)
    if ":<'" in text:
        text = text.split(":<'", 1)[1].rstrip("'>")
    return text.splitlines()[0][:160] if text else "no reason given"


class FastPollGrid:
    """A Grid whose send_and_receive polls for replies every `poll_s` seconds (push_messages + pull_messages,
    the Grid's public API); everything else is the wrapped Grid's."""

    def __init__(self, grid, poll_s: float = 0.1):
        self._grid, self.poll_s = grid, poll_s

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable, *, timeout: float | None = None) -> list:
        ids = set(self._grid.push_messages(messages))
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list = []
        while ids:
            got = list(self._grid.pull_messages(ids))
            replies.extend(got)
            ids.difference_update(m.metadata.reply_to_message_id for m in got)
            if not ids or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(self.poll_s)
        return replies


@dataclass
class RoundAttempt:
    """What one attempt of a round did, in node counts (node ids stay inside the server process)."""

    round: int
    attempt: int
    completed: bool = False
    halted_in: str | None = None
    sampled: set = field(default_factory=set)
    after: dict = field(default_factory=dict)  # stage -> set of node ids still in the round after it
    seconds: dict = field(default_factory=dict)

    def early_dropouts(self) -> set:
        """Nodes that did not complete key sharing."""
        return self.sampled - self.after.get("share_keys", set())


class RobustSecAggPlusWorkflow(SecAggPlusWorkflow):
    """SecAggPlusWorkflow with early-dropout removal, per-stage timeouts, fast polls, halt detection and retry."""

    def __init__(self, num_shares, reconstruction_threshold, *, stage_timeouts: dict | None = None,
                 poll_s: float = 0.1, max_retries: int = 2, progress: Callable[[Event], None] | None = None,
                 exclude: Callable[[set], None] | None = None, **kwargs):
        super().__init__(num_shares, reconstruction_threshold, **kwargs)
        self.stage_timeouts = {**DEFAULT_TIMEOUTS, **(stage_timeouts or {})}
        self.poll_s, self.max_retries = poll_s, max_retries
        self.progress = progress or (lambda event: None)
        self.exclude = exclude or (lambda nodes: None)  # tells the strategy whom not to sample on a retry
        self.attempts: list[RoundAttempt] = []

    # -- one round, retried ---------------------------------------------------------------------------------
    def __call__(self, grid, context) -> None:
        cfg = context.state.config_records[MAIN_CONFIGS_RECORD]
        rnd = int(cfg[Key.CURRENT_ROUND])
        fast = FastPollGrid(grid, self.poll_s)
        excluded: set = set()
        for attempt in range(1, self.max_retries + 2):
            before = context.state.array_records[MAIN_PARAMS_RECORD]
            record = self._attempt(fast, context, RoundAttempt(rnd, attempt))
            self.attempts.append(record)
            if record.completed and context.state.array_records[MAIN_PARAMS_RECORD] is not before:
                self._report(record, "round", "done", len(record.after.get("unmask", ())))
                break
            if record.completed:  # unmasked, but the strategy refused the aggregate: no retry
                self._report(record, "round", "rejected", 0)
                break
            excluded |= record.early_dropouts()
            self.exclude(excluded)
            more = attempt <= self.max_retries
            self._report(record, "round", "retry" if more else "failed", 0,
                         halted_in=record.halted_in, excluded=len(excluded))
            if not more:
                break
        self.exclude(set())

    def _attempt(self, grid, context, record: RoundAttempt) -> RoundAttempt:
        # optional extra: fed (flwr); the module loads without it
        from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

        state = WorkflowState()
        steps = (self.setup_stage, self.share_keys_stage, self.collect_masked_vectors_stage, self.unmask_stage)
        for name, step in zip(STAGES, steps):
            nodes_in = set(state.active_node_ids)
            known_failures = len(state.failures)
            self.timeout = self.stage_timeouts[name]
            started = time.monotonic()
            ok = step(grid, context, state)
            if name == "setup":
                record.sampled = set(state.sampled_node_ids)
                nodes_in = record.sampled
            record.seconds[name] = round(time.monotonic() - started, 3)
            record.after[name] = set(state.active_node_ids)
            reasons = sorted({_reason(e) for e in state.failures[known_failures:]})
            self._report(record, name, "ok" if ok else "halted", len(state.active_node_ids), nodes_in=len(nodes_in),
                         **({"failures": reasons} if reasons else {}))
            if not ok:
                record.halted_in = name
                return record
        record.completed = True
        return record

    # -- the early-dropout fix ------------------------------------------------------------------------------
    def share_keys_stage(self, grid, context, state) -> bool:
        ok = super().share_keys_stage(grid, context, state)
        survivors = set(state.active_node_ids)
        if survivors != state.sampled_node_ids:
            # Nodes that never shared keys take no part: nobody masks with them, nobody holds their shares.
            state.sampled_node_ids = survivors
            state.nid_to_neighbours = {nid: set(nbrs) & survivors for nid, nbrs in state.nid_to_neighbours.items()
                                       if nid in survivors}
            return bool(survivors) and self._check_threshold(state)
        return ok

    def collect_masked_vectors_stage(self, grid, context, state) -> bool:
        known = len(state.failures)
        ok = super().collect_masked_vectors_stage(grid, context, state)
        # stock 1.42 walks the replies twice and appends each failure of this stage once per walk
        new = state.failures[known:]
        half = len(new) // 2
        if len(new) % 2 == 0 and [str(e) for e in new[:half]] == [str(e) for e in new[half:]]:
            state.failures = state.failures[:known] + new[:half]
        return ok

    def _report(self, record: RoundAttempt, stage: str, status: str, nodes_out: int, **extra) -> None:
        if stage in STAGES:
            self.progress(StageEvent(round=record.round, attempt=record.attempt, stage=stage, status=status,
                                     nodes=nodes_out, seconds=record.seconds.get(stage), **extra))
        else:
            self.progress(RoundEvent(round=record.round, attempt=record.attempt, stage=stage, status=status,
                                     nodes=nodes_out, seconds=round(sum(record.seconds.values()), 3), **extra))
