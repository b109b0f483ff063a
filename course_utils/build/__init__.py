"""Moved to :mod:`course_tools.build`; this forwarder goes in the next release."""

from course_tools import _moved

__getattr__ = _moved.module_getattr("build")
