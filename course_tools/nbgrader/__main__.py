"""``python -m course_tools.nbgrader``: the command line (:func:`course_tools.nbgrader.main`)."""

import sys

from . import main

sys.exit(main())
