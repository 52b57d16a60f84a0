"""`fedagent` command line (federated adapter training and signed updates arrive in a later issue)."""
import sys


def main(argv=None) -> int:
    print("fedagent: federated personalisation is not built yet; see docs/ARCHITECTURE.md 'Coming next'.",
          file=sys.stderr)
    return 2
