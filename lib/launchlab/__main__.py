"""`python -m launchlab …` works like the `launchlab` script (for an environment whose bin/ is not on PATH)."""

import sys

from launchlab.cli import main

if __name__ == "__main__":  # a worker process of multiprocessing imports this module again: it must not run
    sys.exit(main())
