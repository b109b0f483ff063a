"""`python -m course_utils.start`: says where the tool moved, then runs it."""

from course_tools import _moved

_moved.run("start")
