"""The server's round events: typed in memory, the same JSON lines on disk as before, and never fatal to read."""
import json

from fedagent.app.events import (
    AggregateEvent,
    DpEvent,
    EvaluateEvent,
    OtherEvent,
    PublishEvent,
    RoundEvent,
    RunEvent,
    StageEvent,
    parse,
)
from fedagent.app.server_app import EventLog
from fedagent.local.federation import EventFollower, summarize_rounds
from fedagent.local.simulation import format_event

# Lines as the server app wrote them before the events were typed (tools and tests read this format).
LINES = [
    '{"t": 1.5, "event": "run", "status": "started", "run_id": 7, "rounds": 2}',
    '{"t": 2.0, "event": "evaluate", "round": 0, "held_out_mouth_mae": 0.05, "status": "baseline"}',
    '{"t": 3.0, "event": "stage", "round": 1, "attempt": 1, "stage": "setup", "status": "ok", "nodes": 3, '
    '"nodes_in": 3, "seconds": 0.2}',
    '{"t": 3.1, "event": "stage", "round": 1, "attempt": 1, "stage": "share_keys", "status": "halted", "nodes": 2, '
    '"nodes_in": 3, "failures": ["device gone"], "seconds": 1.25}',
    '{"t": 3.2, "event": "round", "round": 1, "attempt": 1, "stage": "round", "status": "retry", "nodes": 0, '
    '"halted_in": "share_keys", "excluded": 1, "seconds": 1.45}',
    '{"t": 4.0, "event": "stage", "round": 1, "attempt": 2, "stage": "unmask", "status": "ok", "nodes": 2, '
    '"nodes_in": 2, "seconds": 0.5}',
    '{"t": 4.1, "event": "dp", "round": 1, "noise_stdev": 0.1}',
    '{"t": 4.2, "event": "aggregate", "round": 1, "status": "accepted", "devices": 2, "update_norm": 0.25}',
    '{"t": 4.3, "event": "round", "round": 1, "attempt": 2, "stage": "round", "status": "done", "nodes": 2, '
    '"seconds": 2.0}',
    '{"t": 4.4, "event": "publish", "round": 1, "release": null, "signed": false}',
    '{"t": 4.5, "event": "evaluate", "round": 1, "held_out_mouth_mae": 0.04, "status": "published"}',
    '{"t": 5.0, "event": "aggregate", "round": 2, "status": "rejected", "reason": "no device completed the round"}',
    '{"t": 5.1, "event": "round", "round": 3, "status": "skipped", "reason": "1 of the 2 devices needed are online"}',
    '{"t": 6.0, "event": "run", "status": "finished", "run_id": 7, "rounds": 2, "seconds": 4.5, '
    '"published_rounds": [1], "best_held_out_mouth_mae": null}',
]


def test_every_kind_reads_typed_and_writes_back_the_very_same_line():
    events = [parse(json.loads(line)) for line in LINES]
    assert [type(e) for e in events] == [RunEvent, EvaluateEvent, StageEvent, StageEvent, RoundEvent, StageEvent,
                                         DpEvent, AggregateEvent, RoundEvent, PublishEvent, EvaluateEvent,
                                         AggregateEvent, RoundEvent, RunEvent]
    assert [json.dumps(e.to_json()) for e in events] == LINES
    assert events[3].failures == ["device gone"] and events[9].release is None and events[13].published_rounds == [1]


def test_an_unknown_kind_a_missing_field_or_a_new_field_never_breaks_reading():
    unknown = parse({"t": 1.0, "event": "checkpoint", "round": 2, "bytes": 10})
    assert isinstance(unknown, OtherEvent) and unknown.name == "checkpoint" and unknown.fields["bytes"] == 10
    assert unknown.to_json() == {"t": 1.0, "event": "checkpoint", "round": 2, "bytes": 10}
    missing = parse({"event": "stage", "round": 1})  # no attempt, stage, status, nodes
    assert isinstance(missing, OtherEvent) and missing.to_json() == {"event": "stage", "round": 1}
    assert isinstance(parse({}), OtherEvent) and isinstance(parse({"event": ["odd"]}), OtherEvent)
    newer = parse({"event": "dp", "round": 1, "noise_stdev": 0.1, "mechanism": "gaussian"})
    assert isinstance(newer, DpEvent) and newer.extra == {"mechanism": "gaussian"}
    assert newer.to_json() == {"event": "dp", "round": 1, "noise_stdev": 0.1, "mechanism": "gaussian"}


def test_the_server_log_stamps_each_event_and_the_follower_hands_them_back_typed(tmp_path):
    path = tmp_path / "state" / "events.jsonl"
    log = EventLog(path)
    log(RunEvent(status="started", run_id=3, rounds=1))
    log(StageEvent(round=1, attempt=1, stage="setup", status="ok", nodes=2, nodes_in=2, seconds=0.1))
    with open(path, "a") as f:
        f.write("not json\n[1, 2]\n")  # lines a reader must survive
    log(PublishEvent(round=1, release="r1", signed=True))
    with open(path, "a") as f:
        f.write('{"t": 9.0, "event": "evalu')  # a line still being written
    seen = []
    follower = EventFollower(path, seen.append)
    follower.poll()
    assert [type(e) for e in seen] == [RunEvent, StageEvent, PublishEvent] and follower.events == seen
    assert all(isinstance(e.t, float) and e.t > 1e9 for e in seen)
    assert json.loads(path.read_text().splitlines()[0]).keys() == {"t", "event", "status", "run_id", "rounds"}
    with open(path, "a") as f:
        f.write('ate", "round": 1, "held_out_mouth_mae": 0.03, "status": "published"}\n')
    follower.poll()
    assert isinstance(seen[-1], EvaluateEvent) and seen[-1].held_out_mouth_mae == 0.03
    assert summarize_rounds(seen) == [{"round": 1, "seconds": 0.1, "attempts": 1, "status": None, "devices": None,
                                       "held_out_mouth_mae": 0.03, "published": True, "release": "r1"}]


def test_a_person_reads_one_line_per_stage_problem_and_publication():
    stage, retry, done, rejected, published = (parse(json.loads(LINES[i])) for i in (3, 4, 8, 11, 9))
    assert format_event(stage) == ("round 1  share_keys              2/3 devices    1.2 s  halted  "
                                   "failed: device gone")
    assert format_event(retry) == "round 1  retry, halted in share_keys"
    assert format_event(done) is None
    assert format_event(rejected) == "round 2  aggregate rejected: no device completed the round"
    assert format_event(published) == "round 1  published (unsigned: no keys/repo)"
    assert format_event(OtherEvent(name="checkpoint")) is None
