"""The `flwr` CLI against one SuperLink's Control API, with machine-readable answers.

Policy: the CLI gets its own FLWR_HOME with one connection named `fedagent`, so the user's ~/.flwr is never
read or written. Every call asks for `--format json` and is bounded in time. `flwr run` returns 0 even for a
run that fails, so a run's outcome is only ever taken from `flwr list --run-id N --format json`.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_text
from fedagent.local.processes import BIN, Tls, flower_env

CONNECTION = "fedagent"
UNAVAILABLE = "Connection to the SuperLink is unavailable"  # flwr's words for an HTTP transport error


class FlowerCli:
    def __init__(self, home: Path, address: str, tls: Tls | None = None):
        self.home, self.address = Path(home), address
        lines = ["[superlink]", f'default = "{CONNECTION}"', f"[superlink.{CONNECTION}]", f'address = "{address}"']
        lines += [f'root-certificates = "{tls.ca}"'] if tls else ["insecure = true"]
        atomic_write_text(self.home / "config.toml", "\n".join(lines) + "\n")

    def _call(self, *args: str, timeout: float = 60.0) -> dict:
        cmd = [str(BIN / "flwr"), *args, "--format", "json"]
        try:
            out = subprocess.run(cmd, env=flower_env(self.home), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FaceBridgeError(f"`flwr {args[0]}` did not answer within {timeout:.0f} s",
                                  f"check that the SuperLink at {self.address} is running") from None
        text = out.stdout.strip()
        start = text.find("{")
        try:
            answer = json.loads(text[start:]) if start >= 0 else {}
        except json.JSONDecodeError:
            answer = {}
        if not answer.get("success"):
            message = (answer.get("error-message") or out.stderr.strip() or text or "no answer").strip()
            raise FaceBridgeError(f"`flwr {' '.join(args[:2])}` failed: {message.splitlines()[-1][:300]}",
                                  f"check the SuperLink at {self.address}")
        return answer

    def nodes(self) -> list[dict]:
        return self._call("supernode", "list", CONNECTION)["nodes"]

    def online_node_ids(self) -> set[int]:
        return {int(n["node-id"]) for n in self.nodes() if n.get("status") == "online"}

    def register(self, public_key: Path) -> int:
        answer = self._call("supernode", "register", str(public_key), CONNECTION)
        return int(answer.get("node-id", 0))

    def run(self, app_dir: Path, run_config: Path, attempts: int = 3) -> int:
        """Start a run. A transport error (a loaded machine can time out flwr's HTTP call) is tried again, but
        only once `flwr list` shows that the failed call started no run, so a run is never started twice (this
        SuperLink runs one at a time: a run not finished is the one the failed call started)."""
        for attempt in range(1, attempts + 1):
            try:
                answer = self._call("run", str(app_dir), CONNECTION, "--run-config", str(run_config), timeout=120)
                return int(answer["run-id"])
            except FaceBridgeError as error:
                if UNAVAILABLE not in error.problem or attempt == attempts:
                    raise
            time.sleep(2.0 * attempt)
            try:
                runs = self._call("list", CONNECTION)["runs"]
            except FaceBridgeError as error:
                if UNAVAILABLE not in error.problem:
                    raise
                continue
            unfinished = [int(run["run-id"]) for run in runs if not str(run.get("status", "")).startswith("finished")]
            if unfinished:
                return max(unfinished)
        raise AssertionError("unreachable")

    def run_info(self, run_id: int) -> dict:
        runs = self._call("list", CONNECTION, "--run-id", str(run_id))["runs"]
        if not runs:
            raise FaceBridgeError(f"the SuperLink does not know run {run_id}", "start the run again")
        return runs[0]

    def stop_run(self, run_id: int) -> None:
        try:
            self._call("stop", str(run_id), CONNECTION, timeout=30)
        except FaceBridgeError:
            pass


def succeeded(info: dict) -> bool:
    return str(info.get("status", "")) in ("finished:completed", "completed")
