"""Keys and a release repository for `fedagent simulate`, so a simulation ends with a signed release.

Policy: a simulation signs with throw-away keys made inside its own work folder (`keys/`, `repo/`), never with
the operator's keys; the release it publishes is the same kind `fedagent publish` makes, so `fedagent update
install --from <work>/repo --trust <work>/keys/trust.json` on a device verifies and installs it.
"""
from __future__ import annotations

from pathlib import Path

from fedagent.publisher.keys import KeyRing


def simulation_publishing(work: Path) -> tuple[dict, str]:
    """({"keys-dir", "repo-dir"} run settings, the command a device runs to install what gets published)."""
    keys, repo = Path(work) / "keys", Path(work) / "repo"
    if not (keys / "keys.json").exists():
        KeyRing.init(keys)
    repo.mkdir(parents=True, exist_ok=True)
    return ({"keys-dir": str(keys.resolve()), "repo-dir": str(repo.resolve())},
            f"fedagent update install --from {repo.resolve()} --trust {(keys / 'trust.json').resolve()}")
