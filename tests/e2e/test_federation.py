"""Federated rounds with a real SuperLink and real SuperNodes on 127.0.0.1 (marker `flower`: a few minutes in all).

Devices dump the update that enters SecAgg+ only under the test-only FEDAGENT_TEST_DUMP_DIR; faults are injected
with FEDAGENT_TEST_FAULTS (fedagent/app/faults.py) in the devices' own environment.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bridge.audio.lipsync import load_adapter
from fedagent.app.events import OtherEvent, RoundEvent, StageEvent, parse
from fedagent.app.task import adapter_to_list
from fedagent.local.federation import LocalFederation

pytestmark = [pytest.mark.flower, pytest.mark.timeout(600)]

FAST = {"rounds": 1, "max-epochs": 2, "patience": 1, "timeout-setup": 20.0, "timeout-share-keys": 20.0,
        "timeout-train": 30.0, "timeout-unmask": 20.0, "wait": 60.0}


class Devices:
    """Three real devices on one real SuperLink for the whole module; faults are set per run through files."""

    def __init__(self, work: Path, stores, evaluation):
        self.work, self.evaluation = work, evaluation
        self.fed = LocalFederation(work, device_env={"FEDAGENT_TEST_FAULTS_DIR": str(work / "faults")})
        (work / "faults").mkdir()
        self.fed.start_link()
        for i, store in enumerate(stores):
            self.fed.add_device(f"device{i}", store.root, wait=False,
                                extra_env={"FEDAGENT_TEST_FAULTS_FILE": str(work / "faults" / f"device{i}.txt"),
                                           "FEDAGENT_TEST_DUMP_DIR": str(work / "dumps")})
        self.fed.wait_devices(len(stores))
        self.runs = 0

    def run(self, faults: dict | None = None, background: bool = False, **settings):
        """-> (outcome, state folder, dumps folder) of a run with `faults` {device index: rules}."""
        self.runs += 1
        for p in (self.work / "faults").glob("*"):
            p.unlink()
        for i, rules in (faults or {}).items():
            (self.work / "faults" / f"device{i}.txt").write_text(rules)
        dumps = self.work / "dumps"
        if dumps.exists():
            dumps.rename(self.work / f"dumps-before-{self.runs}")
        state = self.work / f"server-{self.runs}"
        outcome = self.fed.run({**FAST, "min-clients": 3, "eval-store": str(self.evaluation.root), **settings},
                               state_dir=state)
        return outcome, state, dumps


@pytest.fixture(scope="module")
def devices(speaker_population, tmp_path_factory):
    stores, evaluation = speaker_population
    group = Devices(tmp_path_factory.mktemp("federation"), stores, evaluation)
    yield group
    group.fed.close()


def updates(dumps: Path, rnd: int) -> list[list[np.ndarray]]:
    out = []
    for path in sorted(dumps.glob(f"update-r{rnd}-n*.npz")):
        with np.load(path) as z:
            out.append([z[f"arr_{i}"] for i in range(len(z.files))])
    return out


def assert_aggregate_is_fedavg(state: Path, rnd: int, client_updates: list) -> float:
    aggregate = adapter_to_list(load_adapter(state / "rounds" / f"round-{rnd:04d}.npz"))
    mean = [np.mean([u[i] for u in client_updates], axis=0) for i in range(len(aggregate))]
    error = max(float(np.abs(a - m).max()) for a, m in zip(aggregate, mean))
    assert error < 1e-5, f"SecAgg+ aggregate differs from FedAvg by {error}"
    return error


def stage_events(outcome, rnd: int):
    return [e for e in outcome.events if isinstance(e, StageEvent) and e.round == rnd]


# -- a clean run ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_run(devices):
    return devices.run()


def test_a_round_runs_every_secagg_stage_and_the_run_completes(clean_run):
    outcome, _, _ = clean_run
    assert outcome.ok, outcome.info
    assert [(e.stage, e.status, e.nodes) for e in stage_events(outcome, 1)] == [
        ("setup", "ok", 3), ("share_keys", "ok", 3), ("collect_masked_vectors", "ok", 3), ("unmask", "ok", 3)]
    assert outcome.rounds[0]["held_out_mouth_mae"] is not None


def test_the_secagg_aggregate_equals_fedavg_of_the_devices_updates(clean_run):
    _, state, dumps = clean_run
    client_updates = updates(dumps, 1)
    assert len(client_updates) == 3
    error = assert_aggregate_is_fedavg(state, 1, client_updates)
    assert error > 0  # it went through quantisation, not around it


def test_server_logs_and_state_hold_no_individual_update(clean_run, devices):
    _, state, dumps = clean_run
    work = devices.work
    server_files = [p for p in state.rglob("*") if p.is_file()] + [work / "logs" / "superlink.log"]
    server_files += [p for p in (work / "homes" / "superlink").rglob("*") if p.is_file()]
    blobs = [p.read_bytes() for p in server_files]
    for update in updates(dumps, 1):
        for array in update:
            flat = array.ravel()
            for start_at in (0, len(flat) // 2):
                probe32 = flat[start_at:start_at + 6].astype(np.float32).tobytes()
                probe64 = flat[start_at:start_at + 6].astype(np.float64).tobytes()
                text = f"{flat[start_at]:.6f}".encode()
                for path, blob in zip(server_files, blobs):
                    assert probe32 not in blob and probe64 not in blob, f"an update's values are in {path}"
                    assert text not in blob or abs(flat[start_at]) < 1e-3, f"an update's value is printed in {path}"
    for line in (state / "events.jsonl").read_text().splitlines():
        assert not any(k in json.loads(line) for k in ("parameters", "metrics", "num_examples"))


def test_every_line_of_the_events_file_reads_as_a_known_kind_and_writes_back_the_same(clean_run):
    _, state, _ = clean_run
    for line in (state / "events.jsonl").read_text().splitlines():
        event = parse(json.loads(line))
        assert not isinstance(event, OtherEvent) and not event.extra, line
        assert json.dumps(event.to_json()) == line


# -- corrupt updates ------------------------------------------------------------------------------------------


def test_a_nan_or_out_of_range_update_is_refused_by_its_device_and_never_aggregated(devices):
    faults = {0: "collect_masked_vectors:1:nan", 1: "collect_masked_vectors:2:range"}
    outcome, state, dumps = devices.run(faults, rounds=2, threshold=0.5)
    assert outcome.ok
    for rnd in (1, 2):
        assert [(e.stage, e.nodes) for e in stage_events(outcome, rnd)][2:] == [
            ("collect_masked_vectors", 2), ("unmask", 2)]
        contributed = updates(dumps, rnd)  # a refused update is never dumped, never masked
        assert len(contributed) == 2
        assert_aggregate_is_fedavg(state, rnd, contributed)
    logs = devices.work / "logs"
    nan_line = [line for line in (logs / "device0-clientapp.log").read_text().splitlines() if "refused" in line]
    range_line = [line for line in (logs / "device1-clientapp.log").read_text().splitlines() if "refused" in line]
    assert nan_line and "1 value(s) are NaN or infinite" in nan_line[-1]
    assert range_line and "outside +-1" in range_line[-1]
    told = [r for e in outcome.events if isinstance(e, StageEvent) for r in e.failures or []]
    assert any("local update refused (1 value(s) are NaN" in r for r in told)  # the server learns why, not what


# -- dropouts -------------------------------------------------------------------------------------------------


def test_a_device_dropping_before_key_sharing_triggers_a_retry_without_it(devices):
    # every neighbour must survive (threshold 1.0): the round halts in share_keys, is retried without the device
    strict, state, dumps = devices.run({0: "share_keys:1:raise"}, threshold=1.0, **{"min-clients": 2})
    assert strict.ok
    attempts = [(e.attempt, e.stage, e.status, e.nodes) for e in stage_events(strict, 1)]
    assert attempts[:2] == [(1, "setup", "ok", 3), (1, "share_keys", "halted", 2)]
    assert attempts[2:] == [(2, "setup", "ok", 2), (2, "share_keys", "ok", 2), (2, "collect_masked_vectors", "ok", 2),
                            (2, "unmask", "ok", 2)]
    assert any(e.status == "retry" for e in strict.events if isinstance(e, RoundEvent))
    assert_aggregate_is_fedavg(state, 1, updates(dumps, 1))


def test_a_device_dropping_before_key_sharing_is_left_out_and_the_round_goes_on(devices):
    # the default threshold: the dropped device is left out and the same attempt completes (stock 1.42 halts)
    lenient, state, dumps = devices.run({0: "share_keys:1:raise"}, **{"min-clients": 2})
    assert lenient.ok
    assert [(e.attempt, e.stage, e.nodes) for e in stage_events(lenient, 1)] == [
        (1, "setup", 3), (1, "share_keys", 2), (1, "collect_masked_vectors", 2), (1, "unmask", 2)]
    assert_aggregate_is_fedavg(state, 1, updates(dumps, 1))


def test_a_device_killed_mid_round_does_not_stop_the_round(devices):
    """Runs last: it kills device 2 for good."""
    victim = devices.fed.devices[2]
    result = {}

    def run():
        outcome, state, dumps = devices.run({2: "collect_masked_vectors:1:stall"}, **{"timeout-train": 15.0})
        result.update(outcome=outcome, state=state, dumps=dumps)

    runner = threading.Thread(target=run)
    runner.start()
    marker = devices.work / "faults"
    deadline = time.monotonic() + 240
    while not any("collect_masked_vectors:1" in _text_or_empty(p) for p in marker.glob("fedagent-faults-*.json")):
        assert time.monotonic() < deadline, "the stalled device never reached training"
        time.sleep(0.2)
    time.sleep(1.0)  # the stalled device is inside training and will never answer
    devices.fed.kill_device(victim)
    runner.join(300)
    outcome = result["outcome"]
    assert outcome.ok and not victim.alive()
    assert [(e.stage, e.nodes) for e in stage_events(outcome, 1)][2:] == [
        ("collect_masked_vectors", 2), ("unmask", 2)]
    survivors = updates(result["dumps"], 1)
    assert len(survivors) == 2
    assert_aggregate_is_fedavg(result["state"], 1, survivors)


def _text_or_empty(path) -> str:
    """A device's fault file, or "" when it went between the glob and the read (its process ended: round 2 of the
    loaded check at 4f7f02c)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
