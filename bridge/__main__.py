"""`python -m bridge ...` is the `facebridge` command (useful where the package is on PYTHONPATH but not installed)."""
from bridge.cli import main

raise SystemExit(main())
