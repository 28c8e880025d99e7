"""``python -m control`` = ``python -m control.server``."""

import sys

from control.server import main

sys.exit(main())
