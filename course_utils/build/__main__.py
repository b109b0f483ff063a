"""`python -m course_utils.build`: says where the tool moved, then runs it."""

from course_tools import _moved

_moved.run("build")
