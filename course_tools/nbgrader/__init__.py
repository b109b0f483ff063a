"""Lay out the course as an nbgrader course (instructors who grade with nbgrader).

    python -m course_tools.nbgrader DIR [NN ...] [--solutions DIR] [--points N] [--points NAME=N ...]

writes, for each chosen notebook (``01``, ``01_attention`` or ``01_attention.ipynb``; default
all), ``DIR/source/NN_name/NN_name.ipynb``, and ``DIR/nbgrader_config.py`` when there is none.
Then, in ``DIR``: ``nbgrader generate_assignment NN_name`` writes the student version to
``release/``, and ``nbgrader autograde NN_name`` grades ``submitted/<student>/NN_name/``.
The notebooks need no files beside them (their data ship in the package), but every
machine that runs them needs the course package installed.

The nbgrader metadata is made here, not stored in ``solutions/``: which cells are exercises
and which only call checkers is what the course's grader already reads from the solutions
(:func:`course_tools.grade.load_course`), so one source says it for both graders, and a cell
added to a solution needs no metadata to be kept in step by hand.

* an exercise cell (the cell the grader grades): an autograded answer (``solution``), graded
  through its test cell; nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` are the
  course's own markers, and ``generate_assignment`` replaces them with the stubs of
  ``notebooks/`` (:func:`generate_assignment_preprocessors`, which ``nbgrader_config.py`` uses);
* a cell that only calls checkers: an autograder test (``grade``, locked) worth ``--points``
  per exercise (default 1), whose source becomes :func:`assert_passed` of the same checker:
  nbgrader gives a test cell full points unless it raises or writes to stderr, and a checker
  does neither (its verdict is a value it shows), so the test raises unless the verdict is
  passed;
* prose (markdown): read-only (``locked``); the course's other code cells stay ordinary cells,
  which students may change as the prose invites them to (``TRAIN = False`` in 07), and which
  ``autograde`` runs as the student left them.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

from .. import build

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema
DEFAULT_POINTS = 1.0  # per exercise
CONFIG_FILE = "nbgrader_config.py"
CONFIG = '''\
# nbgrader's configuration for the course, written by `python -m course_tools.nbgrader`
# (which leaves this file alone once it exists).
c = get_config()  # noqa: F821 (nbgrader defines get_config)

# The student stubs of the course's notebooks/ (the raise names the exercise and the way on)
# instead of nbgrader's bare `raise NotImplementedError()`.
from course_tools.nbgrader import generate_assignment_preprocessors  # noqa: E402

c.GenerateAssignment.preprocessors = generate_assignment_preprocessors()

# Seconds a cell may take when autograding: nbgrader's default (30) is less than the course's
# training cells take on a CPU.
c.Execute.timeout = {timeout}
'''


def _metadata(**fields) -> dict:
    return {"grade": False, "solution": False, "locked": False, **fields, "schema_version": SCHEMA_VERSION}


def grade_cell_source(checker: str, name: str) -> str:
    """The autograder test cell for the exercise ``name``, checked by ``checker``: the import
    comes in the same cell, so no name a student's cell defines stands in for it."""
    return (
        f"# nbgrader's test of {name}: its points only when the course's checker says passed\n"
        "from course_tools.nbgrader import assert_passed as _assert_passed\n"
        f'_assert_passed("{checker}", {name})'
    )


def nbgrader_notebook(solution, course_nb, points: dict[str, float] | None = None,
                      default_points: float = DEFAULT_POINTS):
    """The nbgrader source notebook of one solution notebook (``solution``, as read by
    :func:`course_tools.build.read_notebook`) and its :class:`~course_tools.grade.CourseNotebook`.
    ``points``: ``{exercise: points}`` where not ``default_points``."""
    from ..grade import check_calls

    points = dict(points or {})
    nb, _ = build.with_header(solution, "notebooks", course_nb.filename)  # the student's header links
    for key in build.DROPPED_NOTEBOOK_METADATA:
        nb.metadata.pop(key, None)
    by_cell = {e.cell_id: e for e in course_nb.exercises}
    by_name = {e.name: e for e in course_nb.exercises}
    unknown = set(points) - set(by_name)
    if unknown:
        raise ValueError(f"points: {course_nb.filename} has no exercise {', '.join(sorted(unknown))} "
                         f"(its exercises: {', '.join(by_name)})")
    checkers = {e.checker: e.name for e in course_nb.exercises}
    scored: set[str] = set()
    test_ids: set[str] = set()  # a second test of one exercise gets its cell's id too (grade ids are unique)
    for cell in nb.cells:
        for key in build.DROPPED_CELL_METADATA:
            cell.metadata.pop(key, None)
        # a check cell may call an earlier notebook's checkers too: only this one's are graded here
        names = [name for _, name in check_calls([cell], checkers)] if cell.id in course_nb.check_cells else []
        if cell.id in by_cell:
            meta = _metadata(solution=True, grade_id=by_cell[cell.id].name)
        elif names:
            cell.source = "\n".join(grade_cell_source(by_name[n].checker, n) for n in names)
            worth = sum(points.get(n, default_points) for n in dict.fromkeys(names) if n not in scored)
            scored.update(names)
            grade_id = by_name[names[0]].checker
            grade_id = f"{grade_id}-{cell.id}" if grade_id in test_ids else grade_id
            test_ids.add(grade_id)
            meta = _metadata(grade=True, locked=True, points=worth, grade_id=grade_id)
        elif build.ANY_MARKER.search(cell.source):
            # an answer no checker grades (a markdown answer): nbgrader's manually graded answer
            meta = _metadata(solution=True, grade=cell.cell_type == "markdown", grade_id=f"answer-{cell.id}",
                             **({"points": default_points} if cell.cell_type == "markdown" else {}))
        elif cell.cell_type == "markdown":
            meta = _metadata(locked=True, grade_id=f"cell-{cell.id}")
        else:
            continue
        cell.metadata["nbgrader"] = meta
    return nb


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="\n")


def layout_course(directory: Path, names: list[str] | None = None, solutions: Path = Path("solutions"),
                  points: dict[str, float] | None = None, default_points: float = DEFAULT_POINTS) -> list[Path]:
    """Write ``directory/source/NN_name/NN_name.ipynb`` for the solutions ``names`` (default
    all) and ``directory/nbgrader_config.py`` when missing; returns the files written."""
    from ..grade import checker_exercises, load_course

    chosen = build.select_solutions(Path(solutions), list(names or []))
    course = load_course(Path(solutions), checker_exercises())
    exercises = {e.name for path in chosen for e in course[path.name].exercises}
    unknown = set(points or {}) - exercises
    if unknown:
        raise ValueError(f"points: no exercise {', '.join(sorted(unknown))} in the chosen notebooks "
                         f"(they have: {', '.join(sorted(exercises))})")
    written = []
    for path in chosen:
        course_nb = course[path.name]
        own = {n: p for n, p in (points or {}).items() if n in {e.name for e in course_nb.exercises}}
        solution, _ = build.read_notebook(path)
        nb = nbgrader_notebook(solution, course_nb, own, default_points)
        target = Path(directory) / "source" / path.stem / path.name
        _write(target, build.render(nb))
        written.append(target)
    config = Path(directory) / CONFIG_FILE
    if not config.exists():
        _write(config, CONFIG.format(timeout=build.EXECUTE_CELL_TIMEOUT))
        written.append(config)
    return written


@functools.cache
def _course_clear_solutions():
    """nbgrader's ``ClearSolutions`` replacing each solution block as ``course_tools.build``
    does (made on first use: nbgrader is imported only where it runs)."""
    from nbgrader.preprocessors import ClearSolutions

    class CourseClearSolutions(ClearSolutions):
        def _replace_solution_region(self, cell, language: str) -> bool:
            if not build.ANY_MARKER.search(cell.source):
                return False
            cell.source = build.strip_solutions(cell.source, cell.cell_type, f"cell {cell.get('id')}")
            return True

    return CourseClearSolutions


def generate_assignment_preprocessors() -> list:
    """nbgrader's own ``GenerateAssignment`` preprocessors, with the course's stubs (those of
    ``notebooks/``) in place of nbgrader's ``ClearSolutions``: ``nbgrader_config.py`` sets them."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.preprocessors import ClearSolutions

    default = GenerateAssignment.class_traits()["preprocessors"].default()
    return [_course_clear_solutions() if p is ClearSolutions else p for p in default]


# --------------------------------------------------------------------------- in the kernel


class _NotebookCells:
    """Contains the file names ipykernel compiles this kernel's cells under (one folder of its
    own), the code a student may have written; nothing outside a kernel."""

    def __init__(self) -> None:
        try:
            from ipykernel.compiler import get_file_name
        except ImportError:
            self.folder = None
        else:
            self.folder = os.path.dirname(get_file_name(""))

    def __contains__(self, filename: object) -> bool:
        return self.folder is not None and os.path.dirname(str(filename)) == self.folder


def assert_passed(checker: str, answer: object) -> None:
    """nbgrader's test: call the course's ``course_utils.checks.<checker>`` on ``answer`` (its
    verdict shows as usual) and raise ``AssertionError`` unless the verdict is passed (not
    "not implemented", "failed" or "error"), the checker is the package's own and ``answer``
    is not the course's reference (the same object, a subclass or a wrapper of it, as the
    course's grader finds it). What the checker's code writes to stderr goes to stdout:
    nbgrader takes any stderr output of a test cell for a failure."""
    import contextlib
    import importlib
    import io

    from ..grade.kernel_side import uses_reference

    checks = importlib.import_module("course_utils.checks")
    if not (checker.startswith("check_") and checker in checks.__all__):
        raise ValueError(f"checker: course_utils.checks has no checker {checker!r}")
    check = getattr(checks, checker, None)
    exercise = getattr(check, "exercise", None)
    code = getattr(check, "__code__", None)
    package = os.path.dirname(os.path.abspath(checks.__file__))
    if not isinstance(exercise, str) or code is None or os.path.dirname(os.path.abspath(code.co_filename)) != package:
        raise AssertionError(f"course_utils.checks.{checker} is not the course's checker (something replaced it)")
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        result = check(answer)
    if errors.getvalue():
        print(errors.getvalue(), end="")
    if type(result) is not checks.CheckResult or result.status != "passed" or result.passed is not True:
        status = getattr(result, "status", type(result).__name__)
        raise AssertionError(f"{exercise}: the checker's verdict is {status!r}, not passed")
    reference = getattr(importlib.import_module("course_utils"), exercise, None)
    how = uses_reference(answer, exercise, reference, _NotebookCells())
    if how:
        raise AssertionError(f"{exercise}: {how}: the course's reference is not an answer")


# --------------------------------------------------------------------------- command line


def _points(values: list[str]) -> tuple[float, dict[str, float]]:
    default, per = DEFAULT_POINTS, {}
    for value in values:
        name, _, number = value.rpartition("=")
        try:
            amount = float(number)
        except ValueError:
            amount = -1.0
        if not amount >= 0:
            raise ValueError(f"--points: expected N or NAME=N with N >= 0, got {value!r}")
        if name:
            per[name] = amount
        else:
            default = amount
    return default, per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.nbgrader",
        description="Write an nbgrader course folder (source/NN_name/NN_name.ipynb, nbgrader_config.py) "
                    "from the solution notebooks.",
    )
    parser.add_argument("directory", type=Path, metavar="DIR", help="the nbgrader course folder")
    parser.add_argument("names", nargs="*", metavar="NN", help="notebooks (01, 01_attention, ...; default all)")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), metavar="DIR",
                        help="solution notebooks (default: solutions)")
    parser.add_argument("--points", action="append", default=[], metavar="N|NAME=N",
                        help=f"points per exercise (default {DEFAULT_POINTS:g}); NAME=N for one exercise "
                             "(repeatable)")
    args = parser.parse_args(argv)
    try:
        default, per = _points(args.points)
        written = layout_course(args.directory, args.names, args.solutions, per, default)
    except (ValueError, build.BuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"then, in {args.directory}: nbgrader generate_assignment NN_name; nbgrader autograde NN_name")
    return 0


__all__ = ["assert_passed", "generate_assignment_preprocessors", "grade_cell_source", "layout_course", "main",
           "nbgrader_notebook"]
