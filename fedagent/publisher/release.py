"""The server's one publish step: an accepted, no-worse global adapter becomes the next signed release.

Policy: the adapter is first written to the server's state folder (`published/round-<r>.npz` and a JSON with
the round and the held-out error; `global.npz` is the latest), atomically. When a keys folder and a repository
folder are configured, it is then published as the next signed release of the `lipsync` model through
fedagent/publisher/publish.py (the signed-updates work), which devices install with `fedagent update install`. Without
them the adapter is kept but not signed, and the event says so.
"""
from __future__ import annotations

from pathlib import Path

from bridge.audio.lipsync import load_adapter, save_adapter
from bridge.fsutil import atomic_write_json
from fedagent.app.task import Adapter
from fedagent.publisher.publish import publish_release


def global_path(state_dir: str | Path) -> Path:
    return Path(state_dir) / "global.npz"


def current_global(state_dir: str | Path) -> Adapter | None:
    """The last published global adapter of this server, or None before the first."""
    path = global_path(state_dir)
    return load_adapter(path) if path.exists() else None


def publish_adapter(adapter: Adapter, *, server_round: int, error: float, state_dir: str | Path,
                    keys_dir: str | Path | None = None, repo_dir: str | Path | None = None,
                    run_id: int | None = None) -> dict:
    """Keep `adapter` as the new global one and, when keys and repository are given, sign it as the next release.
    -> {"round", "path", "release" (number or None)}."""
    state = Path(state_dir)
    path = save_adapter(state / "published" / f"round-{server_round:04d}.npz", adapter)
    release = None
    if keys_dir and repo_dir:
        release = publish_release(keys_dir, repo_dir, [path], model="lipsync",
                                  notes=f"federated round {server_round}, server held-out mouth error {error:.4f}")
    atomic_write_json(path.with_suffix(".json"), {"round": server_round, "held_out_mouth_mae": error, "run_id": run_id,
                                                  "release": release})
    save_adapter(global_path(state), adapter)
    return {"round": server_round, "path": str(path), "release": release}
