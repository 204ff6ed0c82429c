"""``python3 -m codegen.cli``: the ``symcost`` command without an installed console script."""

import sys

from . import main

sys.exit(main())
