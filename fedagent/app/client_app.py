"""The device side of a round (Flower ClientApp): fine-tune the adapter on the local store, send it masked.

Policy:
- Mods, outermost first: secaggplus_mod (SecAgg+ masking; it calls this app only in collect_masked_vectors),
  update_guard_mod (refuses to send an update with NaN/inf values or values outside the round's clipping
  range, with one line in the device's log), dp_clipping_mod (Flower's fixedclipping_mod when the server asks
  for DP). So clipping happens before the guard looks, and the guard before masking.
- The reply carries the adapter, the constant `num-examples` the server asked for and no metrics: nothing
  about this device's data (size, error) leaves it. The held-out error before and after stays in the device's
  own report beside its personalised adapter.
- The personalised adapter (this round's local fine-tune) is kept on the device when it beats the global
  adapter on the device's held-out slice, whether or not the round completes.
- Node config: `store` (learning store folder), `personal` (where the personalised adapter goes).
- Test-only switches, read from the environment of the device's own processes, never from the server:
  FEDAGENT_TEST_DUMP_DIR (write the update that enters SecAgg+) and FEDAGENT_TEST_FAULTS (fedagent/app/faults.py).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
from flwr.app import Context, Message
from flwr.client.mod import fixedclipping_mod, secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

from bridge.audio.learn_store import default_store_dir
from bridge.audio.lipsync import save_adapter
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_json
from fedagent.app import faults
from fedagent.app.data_store import DeviceData, load_device_data, open_store
from fedagent.app.task import TrainConfig, adapter_from_list, adapter_to_list, fine_tune

log = logging.getLogger("fedagent.client")
_DATA: dict[str, DeviceData] = {}  # store path -> rows, filled once per process (the warm host preloads it)


def device_data(store_dir: str | None) -> DeviceData:
    key = str(store_dir or "")
    if key not in _DATA:
        _DATA[key] = load_device_data(open_store(store_dir))
    return _DATA[key]


def personal_path(context: Context) -> Path:
    configured = context.node_config.get("personal")
    if configured:
        return Path(str(configured))

    return default_store_dir().parent / "adapters" / "lipsync-personal.npz"


def _say(line: str) -> None:
    print(f"fedagent client: {line}", file=sys.stderr, flush=True)


# -- mods ---------------------------------------------------------------------------------------------------


def update_guard_mod(msg: Message, ctxt: Context, call_next) -> Message:
    """Refuse to send an update that is not finite or leaves +-clipping-range (SecAgg+ would clamp it silently)."""
    out = call_next(msg, ctxt)
    if out.has_error():
        return out
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    limit = float(fitins.config.get("clipping-range", 1.0))
    arrays = parameters_to_ndarrays(compat.recorddict_to_fitres(out.content, keep_input=True).parameters)
    bad = sum(int((~np.isfinite(a)).sum()) for a in arrays)
    outside = sum(int((np.abs(np.nan_to_num(a)) > limit).sum()) for a in arrays)
    if bad or outside:
        problem = (f"{bad} value(s) are NaN or infinite" if bad else
                   f"{outside} value(s) lie outside +-{limit:g}")
        _say(f"update refused, not sent: {problem}; this round continues without this device")
        raise FaceBridgeError(f"local update refused ({problem})", "the round continues without this device")
    dump = os.environ.get("FEDAGENT_TEST_DUMP_DIR")
    if dump:  # tests only: the exact update that enters SecAgg+
        rnd = int(fitins.config.get("server-round", 0))
        Path(dump).mkdir(parents=True, exist_ok=True)
        np.savez(Path(dump) / f"update-r{rnd}-n{ctxt.node_id}.npz", *arrays)
    return out


def dp_clipping_mod(msg: Message, ctxt: Context, call_next) -> Message:
    """Flower's fixedclipping_mod when the round asks for DP clipping (the key is in the config), else nothing."""
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    if KEY_CLIPPING_NORM in fitins.config:
        return fixedclipping_mod(msg, ctxt, call_next)
    return call_next(msg, ctxt)


app = ClientApp()


@app.train(mods=[faults.fault_mod, secaggplus_mod, update_guard_mod, dp_clipping_mod])
def train(msg: Message, context: Context) -> Message:
    started = time.monotonic()
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    config = dict(fitins.config)
    rnd = int(config.get("server-round", 0))
    global_adapter = adapter_from_list(parameters_to_ndarrays(fitins.parameters))
    try:
        data = device_data(context.node_config.get("store"))
    except FaceBridgeError as e:
        _say(str(e))
        raise
    result = fine_tune(global_adapter, data.train, data.held_out, TrainConfig.from_config(config))
    sent = faults.corrupt(result.adapter, rnd)
    kept = _keep_personal(context, result, rnd)
    _say(f"round {rnd}: trained {result.epochs} epoch(s) on {data.train_windows} windows in "
         f"{time.monotonic() - started:.1f} s; held-out mouth error {result.error_before:.4f} -> "
         f"{result.error_after:.4f}{' (personal adapter kept)' if kept else ''}")
    fitres = FitRes(status=Status(Code.OK, ""), parameters=ndarrays_to_parameters(adapter_to_list(sent)),
                    num_examples=int(config.get("num-examples", 1)), metrics={})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


def _keep_personal(context: Context, result, rnd: int) -> bool:
    if not (result.error_after < result.error_before):
        return False
    path = personal_path(context)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        save_adapter(path, result.adapter)
        os.chmod(path, 0o600)
        atomic_write_json(path.with_suffix(".json"), {"round": rnd, "held_out_error_global": result.error_before,
                                                      "held_out_error_personal": result.error_after,
                                                      "epochs": result.epochs, "saved": time.time()})
        os.chmod(path.with_suffix(".json"), 0o600)
    except OSError as e:
        _say(f"personal adapter not saved ({e.strerror})")
        return False
    return True
