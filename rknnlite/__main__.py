"""``python -m rknnlite`` runs the ``rknnlite`` command."""

import sys

from .cli import main

sys.exit(main())
