"""The Flower app project that `flwr run` packages (a FAB) and pushes to the SuperLink: settings only, no code.

Policy: the project holds pyproject.toml ([tool.flwr.app] components and run-config defaults), a LICENSE and a
README, and no Python file: the components name `fedagent.app.server_app:app` and `fedagent.app.client_app:app`, which
every device and the server already have installed (pinned, with the SuperLink's runtime dependency installation
off). So a run ships settings to the devices, not code. (A Control API user could still push a different FAB;
OSS Flower 1.42 cannot pin app code, see docs/FEDERATED.md.)

RUN_CONFIG lists every setting with its default and meaning; `fedagent server`/`simulate` override them.
"""
from __future__ import annotations

from pathlib import Path

from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_text

# key: (default, what it means)
RUN_CONFIG: dict[str, tuple[object, str]] = {
    "rounds": (2, "federated rounds in this run"),
    "min-clients": (2, "devices a round needs; a round waits `wait` seconds for them, then is skipped"),
    "clients-per-round": (0, "devices sampled per round (0: every online device)"),
    "wait": (120.0, "seconds a round waits for min-clients devices"),
    "state-dir": ("", "server folder: events.jsonl, global.npz, published adapters"),
    "eval-store": ("", "server's own held-out learning store: a new global adapter is published only when no worse"),
    "keys-dir": ("", "signing keys folder (fedagent keys init); with repo-dir, publish signed releases"),
    "repo-dir": ("", "release repository folder devices install from"),
    "num-shares": (1.0, "SecAgg+ neighbours per device, as a fraction of the sampled devices (1.0: all)"),
    "threshold": (0.67, "SecAgg+ shares needed to rebuild a dropped device's mask, fraction of num-shares"),
    "clipping-range": (1.0, "every adapter value must lie in +-this (SecAgg+ clamps silently; the guard refuses)"),
    "quantization-range": (1 << 22, "SecAgg+ quantization levels"),
    "modulus-range": (1 << 32, "SecAgg+ modulus (power of 2)"),
    "num-examples": (1, "the constant example count every device reports; also SecAgg+'s max_weight"),
    "max-update-norm": (2.0, "largest L2 change of the global adapter one round may make (0: no limit)"),
    "timeout-setup": (30.0, "seconds the setup stage waits for devices"),
    "timeout-share-keys": (30.0, "seconds the share-keys stage waits"),
    "timeout-train": (120.0, "seconds the collect-masked-vectors stage (local training) waits"),
    "timeout-unmask": (30.0, "seconds the unmask stage waits"),
    "poll": (0.1, "seconds between the server's polls for replies (Flower's default: 3)"),
    "retries": (2, "times a halted round is retried without the devices that dropped before key sharing"),
    "dp-noise": (0.0, "central DP noise multiplier (0: off); needs dp-clip"),
    "dp-clip": (0.0, "L2 bound of each device's update when DP is on (clipped on the device, before masking)"),
    "lr": (3e-3, "local Adam learning rate"),
    "max-epochs": (5, "local epochs per round (early stopping on the device's held-out slice)"),
    "patience": (2, "local epochs without held-out improvement before stopping"),
    "batch": (2048, "frames per local step"),
    "viseme-kl": (0.1, "weight keeping visemes near the global adapter's (they have no teacher)"),
    "proximal": (1e-3, "weight keeping the local adapter near the global one"),
    "jaw-weight": (3.0, "loss weight of jawOpen"),
}

LICENSE = ("FaceBridge fedagent Flower app, Apache-2.0. This project holds settings only; the code it names is\n"
           "the installed `fedagent` package (see the FaceBridge NOTICE).\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("facebridge")
    except PackageNotFoundError:
        return "0.0.0"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def write_project(folder: str | Path) -> Path:
    """Write the app project into `folder` (created) and return it."""
    folder = Path(folder)
    lines = [
        "[build-system]", 'requires = ["hatchling"]', 'build-backend = "hatchling.build"', "",
        "[project]", 'name = "fedagent-lipsync"', f'version = "{_version()}"',
        'description = "Federated personalisation of the FaceBridge lip-sync adapter under SecAgg+"',
        'license = { file = "LICENSE" }', 'dependencies = ["flwr>=1.42.0"]', "",
        "[tool.flwr.app]", 'publisher = "facebridge"', "fab-format-version = 1", 'flwr-version-target = "1.42.0"', "",
        "[tool.flwr.app.components]", 'serverapp = "fedagent.app.server_app:app"',
        'clientapp = "fedagent.app.client_app:app"', "", "[tool.flwr.app.config]"]
    for key, (default, meaning) in RUN_CONFIG.items():
        lines.append(f"{key} = {_toml_value(default)}  # {meaning}")
    atomic_write_text(folder / "pyproject.toml", "\n".join(lines) + "\n")
    atomic_write_text(folder / "LICENSE", LICENSE)
    atomic_write_text(folder / "README.md", "# fedagent-lipsync\n\nSettings for `flwr run`; see "
                      "FaceBridge docs/FEDERATED.md.\n")
    return folder


def run_config_file(path: str | Path, overrides: dict) -> Path:
    """A TOML file of run-config overrides for `flwr run --run-config FILE` (unknown keys are refused)."""
    unknown = sorted(set(overrides) - set(RUN_CONFIG))
    if unknown:
        raise FaceBridgeError(f"unknown run setting(s) {', '.join(unknown)}", f"use {', '.join(RUN_CONFIG)}")
    text = "".join(f"{k} = {_toml_value(v)}\n" for k, v in overrides.items())
    return atomic_write_text(path, text)
