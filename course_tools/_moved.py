"""The tools' old names, ``python -m course_utils.<tool>``, kept for one release.

Each old name is a package, ``course_utils/<tool>/`` (``__init__`` forwards attribute
look-ups, ``__main__`` the command), not a ``course_utils/<tool>.py`` module: so git sees
``course_utils/<tool>.py`` renamed to ``course_tools/<tool>.py`` and merges a concurrent edit
of the old file into the new one. Delete them and this module in the next release.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings

TOOLS = ("build", "grade", "start", "check_env")


def notice(tool: str) -> str:
    """The one line that says where ``tool`` went."""
    return (
        f"course_utils.{tool} has moved to course_tools.{tool}: "
        f"run `python -m course_tools.{tool}` (the old name goes in the next release)"
    )


def run(tool: str) -> None:
    """``python -m course_utils.<tool>``: the notice on stderr (so stdout is the tool's
    alone), then the tool with the same arguments; its exit status is the command's."""
    print(f"note: {notice(tool)}", file=sys.stderr, flush=True)
    runpy.run_module(f"course_tools.{tool}", run_name="__main__", alter_sys=True)


def module_getattr(tool: str):
    """A module ``__getattr__`` (PEP 562) for ``course_utils.<tool>``: ``from
    course_utils.<tool> import NAME`` still finds NAME, with a DeprecationWarning."""

    def __getattr__(name: str):
        if name.startswith("__"):  # import machinery probing (__path__, __file__...)
            raise AttributeError(name)
        warnings.warn(notice(tool), DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(f"course_tools.{tool}"), name)

    return __getattr__
