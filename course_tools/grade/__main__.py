"""``python -m course_tools.grade``: the command line (:mod:`.cli`)."""

import sys

from .cli import main

sys.exit(main())
