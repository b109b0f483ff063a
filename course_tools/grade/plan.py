"""Stage: planning. The course's side of grading (:func:`load_course`: every assignment, its
exercises and the cells that only call checkers, from the solutions), which assignment a
submission is (:func:`which_assignment`, by its name, its header link or its exercise cells),
and the cells to run for it (:func:`plan_run`: the course's student notebook with the
student's exercise cells in place, each followed by the grader's check cell)."""

from __future__ import annotations

import ast
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from .. import build
from .common import CHECK_SOURCE, END_SOURCE
from .scan import CellScan, defined_names, import_aliases, parse_cell, scan_exercise_cell

CHECK_CALL = re.compile(r"\b(check_\w+)\s*\(")


@dataclass
class Exercise:
    name: str  # the function or class the exercise defines
    checker: str  # the check_* function that checks it
    cell_id: str  # id of its cell in the course's notebooks


@dataclass
class CourseNotebook:
    """One assignment: the course's student notebook and its exercises, in order."""

    filename: str
    notebook: Any
    exercises: list[Exercise]
    check_cells: set[str]  # ids of the course's cells that only call checkers
    aliases: dict[str, str]  # names its cells import: {name: dotted module or object}
    # the exercises of the notebooks after this one: their references compute this one's
    # answers too (notebook 02's MultiHeadAttention with identity projections is notebook
    # 01's attention), so they are hidden while it is graded
    later: list[str] = field(default_factory=list)


def checker_exercises() -> dict[str, str]:
    """``{checker function name: exercise}`` for every checker in ``course_utils.checks``."""
    from course_utils import checks  # imports torch: only when grading

    names = {}
    for name in dir(checks):
        exercise = getattr(getattr(checks, name), "exercise", None)
        if name.startswith("check_") and isinstance(exercise, str):
            names[name] = exercise
    return names


def _code_lines(source: str) -> Iterable[str]:
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or re.match(r"(def|class)\s", stripped):
            continue
        yield line


def check_calls(cells, checkers: dict[str, str]) -> list[tuple[int, str]]:
    """``(cell index, exercise)`` for every call of a course checker in the code cells."""
    calls = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        for line in _code_lines(cell.get("source", "")):
            for name in CHECK_CALL.findall(line):
                if name in checkers:
                    calls.append((i, checkers[name]))
    return calls


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def solution_exercises(path: Path, checkers: dict[str, str]) -> list[str]:
    """The exercises a solution notebook checks, in order."""
    nb = nbformat.read(path, as_version=4)
    return _unique(exercise for _, exercise in check_calls(nb.cells, checkers))


def _only_checks(source: str, checkers: dict[str, str]) -> bool:
    tree = parse_cell(source)
    return bool(tree and tree.body) and all(
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
        and s.value.func.id in checkers for s in tree.body
    )


def load_course(solutions: Path, checkers: dict[str, str]) -> dict[str, CourseNotebook]:
    """Every assignment of the course: ``{file name: CourseNotebook}`` from the solutions."""
    course = {}
    by_exercise = {exercise: fn for fn, exercise in checkers.items()}
    for path in build.notebook_files(solutions) if Path(solutions).is_dir() else []:
        solution, _ = build.read_notebook(path)
        student = build.student_notebook(solution, path.name)
        exercises = []
        for name in _unique(e for _, e in check_calls(solution.cells, checkers)):
            cells = [c for c in solution.cells if c.cell_type == "code" and name in defined_names(c.source)]
            marked = [c for c in cells if "BEGIN SOLUTION" in c.source] or cells
            if marked:
                exercises.append(Exercise(name, by_exercise[name], marked[0].id))
        aliases: dict[str, str] = {}
        for cell in student.cells:
            tree = parse_cell(cell.source) if cell.cell_type == "code" else None
            if tree is not None:
                aliases.update(import_aliases(tree))
        check_cells = {c.id for c in student.cells if c.cell_type == "code" and _only_checks(c.source, checkers)}
        course[path.name] = CourseNotebook(path.name, student, exercises, check_cells, aliases)
    names = list(course)
    for i, name in enumerate(names):
        course[name].later = _unique(e.name for n in names[i + 1:] for e in course[n].exercises)
    return course


HEADER_LINK = re.compile(r"/(?:notebooks|solutions)/(\d{2}_[^/)\s\"']+\.ipynb)")


def header_assignment(nb) -> str | None:
    """The course notebook the header cell's link names (the course's own mark), or None."""
    for cell in nb.cells[:3]:
        if build.HEADER_TAG in cell.get("metadata", {}).get("tags", []) or "colab" in cell.get("source", ""):
            match = HEADER_LINK.search(cell.get("source", ""))
            if match:
                return match.group(1)
    return None


def _exercise_cell(nb, exercise: Exercise) -> int | None:
    """Index of the student's cell for ``exercise``: the cell with its id that defines the
    name, else the last cell that defines it, else the cell with its id."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.get("cell_type") == "code"]
    by_id = [i for i, c in code if c.get("id") == exercise.cell_id]
    defining = [i for i, c in code if exercise.name in defined_names(c.get("source", ""))]
    for i in by_id:
        if i in defining:
            return i
    if defining:
        return defining[-1]
    return by_id[0] if by_id else None


def recognise(nb, course: dict[str, CourseNotebook]) -> dict[str, int]:
    """``{assignment: how many of its exercise cells the notebook has}`` (by id or name)."""
    found = {}
    for name, course_nb in course.items():
        ids = {c.get("id") for c in nb.cells}
        defined = set().union(*(defined_names(c.get("source", "")) for c in nb.cells if c.get("cell_type") == "code"))
        found[name] = sum(e.cell_id in ids or e.name in defined for e in course_nb.exercises)
    return found


def which_assignment(nb, named: str, course: dict[str, CourseNotebook]) -> tuple[str | None, str | None]:
    """``(assignment, why it is the wrong one)``: the notebook ``named`` (its file name or
    ``--assignment``) when it is that course notebook; else the problem. A notebook whose
    name says nothing is recognised from its header link and exercise cells."""
    header = header_assignment(nb)
    counts = recognise(nb, course)
    best = max(counts, key=counts.get, default=None)
    if named:
        if named not in course:
            return None, f"no course notebook {named} in the solutions"
        if header and header != named:
            return None, f"its header says it is {header}, not {named}"
        if counts[named] == 0 and best is not None and counts[best] > 0:
            return None, f"its exercise cells are those of {best}, not {named}"
        return named, None
    if header in course:
        return header, None
    if best is not None and counts[best] > 0:
        return best, None
    return None, "not a notebook of this course (no header link or exercise cell of any course notebook)"


@dataclass
class Step:
    """One cell the grader runs: ``kind`` is "setup", "course" (the course's own cell,
    index ``index`` in its notebook), "exercise" (the student's cell ``index``), "check"
    or "end" (the grader's)."""

    kind: str
    source: str
    index: int | None = None
    exercise: str | None = None
    nonce: str = ""


@dataclass
class Plan:
    steps: list[Step]
    exercise_cells: dict[str, int | None]  # exercise -> the student's cell (None: the stub ran)
    ignored: list[int]  # the student's code cells that were changed or added and not run
    scans: dict[str, CellScan]


def plan_run(nb, course_nb: CourseNotebook) -> Plan:
    """The cells to run for a student's notebook: the course's student notebook with the
    student's exercise cells in place, each followed by the grader's check cell."""
    chosen = {e.name: _exercise_cell(nb, e) for e in course_nb.exercises}
    by_cell_id = {e.cell_id: e for e in course_nb.exercises}
    steps, scans = [], {}
    for index, cell in enumerate(course_nb.notebook.cells):
        if cell.cell_type != "code" or cell.id in course_nb.check_cells:
            continue
        exercise = by_cell_id.get(cell.id)
        if exercise is None:
            steps.append(Step("course", cell.source, index))
            continue
        own = chosen[exercise.name]
        source = nb.cells[own].get("source", "") if own is not None else cell.source
        scans[exercise.name] = scan_exercise_cell(source, exercise.name, course_nb.aliases)
        steps.append(Step("exercise", source, own, exercise.name))
        nonce = secrets.token_hex(16)
        steps.append(Step("check", CHECK_SOURCE.format(nonce=nonce, name=exercise.name), None, exercise.name, nonce))
    nonce = secrets.token_hex(16)
    steps.append(Step("end", END_SOURCE.format(nonce=nonce), nonce=nonce))
    course_sources = {c.id: c.source for c in course_nb.notebook.cells if c.cell_type == "code"}
    unchanged = set(course_sources.values())
    used = set(chosen.values())
    # a cell without the course's id (nbformat 4.4 and v3 have none, or a copy got new ones) is
    # known by its source: only a changed or added cell is worth a line in the report
    ignored = [
        i for i, c in enumerate(nb.cells)
        if c.get("cell_type") == "code" and i not in used and c.get("source", "").strip()
        and (course_sources.get(c.get("id")) != c.get("source") if c.get("id") in course_sources
             else c.get("source") not in unchanged)
    ]
    return Plan(steps, chosen, ignored, scans)


