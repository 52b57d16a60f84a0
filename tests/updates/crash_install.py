"""Run one install that dies with os._exit(137) when it reaches STEP (for the crash tests):
python tests/updates/crash_install.py STEP SOURCE STATE"""
import os
import sys

from bridge.updates.install import install


def main() -> int:
    step, source, state = sys.argv[1:4]

    def report(event):
        if event.step == step and (step != "download" or event.done > 0):
            os._exit(137)  # no cleanup, no finally blocks: as a power cut would leave it
    install(source, state, models=["lipsync"], report=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
