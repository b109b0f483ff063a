"""What the tools for grading platforms (:mod:`course_tools.gradescope`, :mod:`course_tools.classroom`)
share: which course notebook ``NN`` names, its exercises, the points option, and the PyTorch pin.

Standard library only at import time: the Gradescope bundle's ``run_autograder`` imports this
package before anything is known to work, and must still write a result when torch does not
import (the course's checkers, which import torch, are loaded only when an exercise list is
asked for)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

TORCH_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")


class PlatformError(Exception):
    """A bad argument of a platform tool (the command exits with status 2)."""


def course_notebook(solutions: Path, name: str) -> Path:
    """The solution notebook that ``name`` (``01``, ``01_attention`` or ``01_attention.ipynb``) names."""
    from . import build

    if not Path(solutions).is_dir():
        raise PlatformError(f"--solutions: no folder {solutions}")
    try:
        return build.select_solutions(Path(solutions), [name])[0]
    except build.BuildError as error:
        raise PlatformError(str(error).replace("--execute ", "")) from error


def exercises(solutions: Path, notebook: Path) -> list[str]:
    """The exercises the grader grades in ``notebook`` (a solution), in order."""
    from .grade import checker_exercises, load_course

    return [e.name for e in load_course(Path(solutions), checker_exercises())[notebook.name].exercises]


def points_of(specs: list[str], names: list[str]) -> dict[str, float]:
    """Each exercise's points from ``--points`` values (the grader's syntax: ``[EXERCISE=]POINTS``)."""
    from .grade.cli import parse_points
    from .grade.common import UsageError

    try:
        default, chosen = parse_points(specs)
    except UsageError as error:
        raise PlatformError(str(error)) from error
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise PlatformError(f"--points: {', '.join(unknown)}: not an exercise of this notebook "
                            f"(it has: {', '.join(names)})")
    return {name: chosen.get(name, default) for name in names}


def torch_pin(version: str | None = None) -> str:
    """The PyTorch version to install: ``version``, else this environment's (without its local
    part such as ``+cpu``: the platform installs the CPU build of the same release)."""
    if version is None:
        try:
            version = metadata.version("torch").split("+")[0]
        except metadata.PackageNotFoundError as error:
            raise PlatformError("--torch: PyTorch is not installed here; name the version to pin") from error
    if not TORCH_VERSION.fullmatch(version):
        raise PlatformError(f"--torch: expected a release such as 2.5.1, got {version!r}")
    return version
