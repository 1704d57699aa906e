"""`python -m launchlab …` works like the `launchlab` script (for an environment whose bin/ is not on PATH)."""

import sys

from launchlab.cli import main

sys.exit(main())
