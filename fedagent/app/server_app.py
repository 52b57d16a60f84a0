"""The server side (Flower ServerApp): rounds of SecAgg+ over the devices' adapters, checked, evaluated, published.

Policy: SecAgg+ exists only on Flower's legacy path, so the app runs `DefaultWorkflow(fit_workflow=
RobustSecAggPlusWorkflow(...))` on a `LegacyContext` around a legacy FedAvg (fedagent/app/strategy.py). The server
never sees one device's update: only the unmasked sum, plus which devices took part and the constant example
count each reports. Settings come from the run config (defaults in fedagent/app/project.py, where each is
explained); `max_weight` is the constant example count every device reports, so each weight quantizes exactly.
Progress goes, in counts and timings only, to `<state-dir>/events.jsonl`, which `fedagent simulate` and
`fedagent server` print as it grows.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path

from flwr.app import Context
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.workflow import DefaultWorkflow

from bridge.audio.learn_store import LearnStore
from bridge.audio.lipsync import save_adapter
from fedagent.app.data_store import store_frames
from fedagent.app.events import Event, PublishEvent, RunEvent
from fedagent.app.project import RUN_CONFIG
from fedagent.app.strategy import AdapterFedAvg
from fedagent.app.task import TrainConfig, default_adapter, mouth_error
from fedagent.app.workflow import RobustSecAggPlusWorkflow
from fedagent.publisher.release import current_global, publish_adapter

log = logging.getLogger("fedagent.server")
TRAIN_KEYS = tuple(k.replace("_", "-") for k in TrainConfig.__dataclass_fields__)


class EventLog:
    """Append-only JSON lines: what happened, in counts and timings (never parameters or node secrets)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, event: Event) -> None:
        line = dataclasses.replace(event, t=round(time.time(), 3)).to_json()
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        log.info("%s", line)


def held_out_evaluator(store_dir: str):
    """mouth MAE of an adapter on the server's own held-out windows (computed once, then a matrix product)."""
    frames = store_frames(LearnStore(store_dir))
    return lambda adapter: mouth_error(adapter, frames)


def _get(cfg, key):
    """A run setting: the run's value, else its one default (fedagent/app/project.py RUN_CONFIG), as its type."""
    default = RUN_CONFIG[key][0]
    return type(default)(cfg.get(key, default))


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    state_dir = Path(str(cfg["state-dir"]))
    events = EventLog(state_dir / "events.jsonl")
    rounds = _get(cfg, "rounds")
    events(RunEvent(status="started", run_id=context.run_id, rounds=rounds))
    initial = current_global(state_dir) or default_adapter()
    evaluate_fn = held_out_evaluator(str(cfg["eval-store"])) if str(cfg.get("eval-store", "")) else None
    num_examples = _get(cfg, "num-examples")
    keys_dir, repo_dir = str(cfg.get("keys-dir", "")), str(cfg.get("repo-dir", ""))

    def publish(adapter, server_round, error):
        done = publish_adapter(adapter, server_round=server_round, error=error, state_dir=state_dir,
                               keys_dir=keys_dir or None, repo_dir=repo_dir or None, run_id=context.run_id)
        events(PublishEvent(round=server_round, release=done["release"], signed=done["release"] is not None))

    def keep(adapter, server_round):
        save_adapter(state_dir / "rounds" / f"round-{server_round:04d}.npz", adapter)

    strategy = AdapterFedAvg(
        initial, min_clients=_get(cfg, "min-clients"), clients_per_round=_get(cfg, "clients-per-round"),
        train_config={k: cfg[k] for k in TRAIN_KEYS if k in cfg}, num_examples=num_examples,
        clipping_range=_get(cfg, "clipping-range"), max_update_norm=_get(cfg, "max-update-norm"),
        dp_noise=_get(cfg, "dp-noise"), dp_clip=_get(cfg, "dp-clip"), wait_s=_get(cfg, "wait"),
        evaluate_fn=evaluate_fn, on_publish=publish, on_accept=keep, on_event=events)
    fit = RobustSecAggPlusWorkflow(
        _get(cfg, "num-shares"), _get(cfg, "threshold"),
        max_weight=float(num_examples), clipping_range=_get(cfg, "clipping-range"),
        quantization_range=_get(cfg, "quantization-range"), modulus_range=_get(cfg, "modulus-range"),
        stage_timeouts={"setup": _get(cfg, "timeout-setup"), "share_keys": _get(cfg, "timeout-share-keys"),
                        "collect_masked_vectors": _get(cfg, "timeout-train"),
                        "unmask": _get(cfg, "timeout-unmask")},
        poll_s=_get(cfg, "poll"), max_retries=_get(cfg, "retries"), progress=events, exclude=strategy.exclude)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    started = time.monotonic()
    DefaultWorkflow(fit_workflow=fit)(grid, legacy)
    events(RunEvent(status="finished", run_id=context.run_id, rounds=rounds,
                    seconds=round(time.monotonic() - started, 2), published_rounds=strategy.published,
                    best_held_out_mouth_mae=strategy.best_error))
