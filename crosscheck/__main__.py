"""``python -m crosscheck``: the same program as the ``crosscheck`` command."""

import sys

from crosscheck._cli.main import main

sys.exit(main())
