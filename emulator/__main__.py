"""``python -m emulator`` is the same as the ``emulator`` console script."""

import sys

from emulator.cli import main

sys.exit(main())
