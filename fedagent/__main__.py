import sys

from fedagent.cli import main

sys.exit(main())
