"""Entry point: ``python -m zloop.compat``."""

import sys

from zloop.compat.cli import main

sys.exit(main())
