"""``python -m fairbench``: the same as the ``fairbench`` command."""

import sys

from fairbench.cli.main import main

sys.exit(main())
