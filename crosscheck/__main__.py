"""``python -m crosscheck``: the same program as the ``crosscheck`` command."""

import sys

from ._cli import main

sys.exit(main())
