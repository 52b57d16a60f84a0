"""The server's progress events: one small dataclass per kind, one line each in `<state-dir>/events.jsonl`.

Why typed: the Flower server app writes them (server_app, strategy, workflow) and `fedagent simulate`, `fedagent
server`, the benchmark and the tests read them back from disk; one definition per kind keeps writer and readers
agreeing on names and units. The file format is fixed (other tools read it): `{"t": <unix seconds>, "event":
<kind>, <fields in the order below>}`, a field marked optional left out when it has no value. Events carry counts,
timings and errors only, never parameters, node ids or keys.

`parse` never fails on what it reads: a line of a kind this version does not know, or a known kind missing a
field it needs, comes back as an `OtherEvent` holding the raw fields; unknown fields of a known kind are kept in
`extra` and written back.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar


def optional():
    """A field written only when it has a value (None leaves it out of the line)."""
    return field(default=None, metadata={"optional": True})


@dataclass(kw_only=True)
class Event:
    kind: ClassVar[str] = ""
    t: float | None = None  # unix seconds when the server wrote the line (set by the writer)
    extra: dict = field(default_factory=dict, repr=False)  # fields this version does not know, kept as read

    def to_json(self) -> dict:
        """The JSON object of this event's line, keys in the file's order."""
        out: dict[str, Any] = {} if self.t is None else {"t": self.t}
        out["event"] = self.kind
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("t", "extra") or (value is None and f.metadata.get("optional") and self._omit_none()):
                continue
            out[f.name] = value
        return {**out, **self.extra}

    def _omit_none(self) -> bool:
        return True


@dataclass(kw_only=True)
class RunEvent(Event):
    """The run started or finished (the server app's first and last line)."""

    kind: ClassVar[str] = "run"
    status: str  # started | finished
    run_id: int  # the SuperLink's run id
    rounds: int  # rounds asked for
    seconds: float | None = optional()  # finished: wall seconds of all rounds
    published_rounds: list[int] | None = optional()  # finished: rounds whose adapter was published
    best_held_out_mouth_mae: float | None = optional()  # finished: mouth-weight MAE (0..1) of the best adapter

    def _omit_none(self) -> bool:
        return self.status != "finished"  # a finished run writes every field, null where nothing was evaluated


@dataclass(kw_only=True)
class StageEvent(Event):
    """One SecAgg+ stage of one attempt of a round ended."""

    kind: ClassVar[str] = "stage"
    round: int
    attempt: int  # 1 for a round's first try, 2.. for retries
    stage: str  # setup | share_keys | collect_masked_vectors | unmask
    status: str  # ok | halted
    nodes: int  # devices still in the round after the stage
    nodes_in: int | None = optional()  # devices that entered the stage
    failures: list[str] | None = optional()  # distinct one-line reasons devices gave for failing
    seconds: float | None = None  # wall seconds of the stage


@dataclass(kw_only=True)
class RoundEvent(Event):
    """A round's outcome: done, rejected, retried, failed (from the workflow) or skipped (too few devices)."""

    kind: ClassVar[str] = "round"
    round: int
    attempt: int | None = optional()  # the attempt this outcome ends
    stage: str | None = optional()  # always "round" when present
    status: str  # done | rejected | retry | failed | skipped
    nodes: int | None = optional()  # devices whose update is in the aggregate (0 unless done)
    halted_in: str | None = optional()  # retry/failed: the stage that halted the attempt
    excluded: int | None = optional()  # retry/failed: devices left out of the next attempt
    reason: str | None = optional()  # skipped: why, in one line
    seconds: float | None = optional()  # wall seconds of the attempt's stages


@dataclass(kw_only=True)
class AggregateEvent(Event):
    """The server's checks on a round's unmasked aggregate: accepted or rejected."""

    kind: ClassVar[str] = "aggregate"
    round: int
    status: str  # accepted | rejected
    devices: int | None = optional()  # accepted: devices in the aggregate
    update_norm: float | None = optional()  # accepted: L2 distance moved from the global adapter (weight units)
    reason: str | None = optional()  # rejected: why, in one line


@dataclass(kw_only=True)
class DpEvent(Event):
    """Central differential privacy: Gaussian noise added to an accepted aggregate."""

    kind: ClassVar[str] = "dp"
    round: int
    noise_stdev: float  # standard deviation of the noise per parameter (weight units): noise * clip / devices


@dataclass(kw_only=True)
class EvaluateEvent(Event):
    """The server's held-out evaluation of the global adapter after a round (round 0: the starting adapter)."""

    kind: ClassVar[str] = "evaluate"
    round: int
    held_out_mouth_mae: float  # mean absolute mouth-weight error (weights 0..1) on the server's held-out windows
    status: str  # baseline | unchanged | published | not published (...)


@dataclass(kw_only=True)
class PublishEvent(Event):
    """A round's adapter was published (signed as a release when keys and a repository were given)."""

    kind: ClassVar[str] = "publish"
    round: int
    release: str | None  # the signed release's name, None when kept unsigned
    signed: bool


@dataclass(kw_only=True)
class OtherEvent(Event):
    """A line this version cannot read as one of the kinds above, kept as it was."""

    name: Any = None  # the line's "event" value, if any
    fields: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        head = {} if self.t is None else {"t": self.t}
        return {**head, **({} if self.name is None else {"event": self.name}), **self.fields}


KINDS = {cls.kind: cls for cls in (RunEvent, StageEvent, RoundEvent, AggregateEvent, DpEvent, EvaluateEvent,
                                   PublishEvent)}


def parse(raw: dict) -> Event:
    """The typed event of one line's JSON object; never raises for what a line may hold."""
    data = dict(raw)
    name, t = data.pop("event", None), data.pop("t", None)
    cls = KINDS.get(name) if isinstance(name, str) else None
    if cls is not None:
        names = {f.name for f in dataclasses.fields(cls)} - {"t", "extra"}
        known = {k: v for k, v in data.items() if k in names}
        try:
            return cls(t=t, extra={k: v for k, v in data.items() if k not in names}, **known)
        except TypeError:  # a field the kind needs is missing
            pass
    return OtherEvent(t=t, name=name, fields=data)
