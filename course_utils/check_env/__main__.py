"""`python -m course_utils.check_env`: says where the tool moved, then runs it."""

from course_tools import _moved

_moved.run("check_env")
