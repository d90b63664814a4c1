"""``python -m dpplugins``: the command line (see :mod:`dpplugins.cli`)."""

import sys

from dpplugins.cli import main

sys.exit(main())
