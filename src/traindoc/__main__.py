"""``python -m traindoc ...`` is the same as ``traindoc ...``."""

import sys

from traindoc.cli import main

sys.exit(main())
