"""OpenVINO imported without its telemetry: nothing leaves the machine.

`import openvino` otherwise sends a usage event to Google Analytics (its openvino_telemetry package, from a
forked process, and it writes a client id under ~/intel); that fork is also what made gRPC print "Other threads
are currently calling into gRPC, skipping fork() handlers" on runs with --grpc. OpenVINO falls back to its own
no-op telemetry stub when the package cannot be imported, which is what `import_openvino` arranges.
"""
from __future__ import annotations

import sys


def import_openvino():
    """The openvino module, with openvino_telemetry blocked for this process; raises ImportError without it."""
    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino_telemetry", None)  # None: `import openvino_telemetry` fails, the stub runs
    # optional extra: openvino
    import openvino

    return openvino
