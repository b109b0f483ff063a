"""Stage: the report. One table per assignment (students x the assignment's official exercises,
symbols explained below it), then one line per problem, flag and ignored cell
(:func:`format_report`); one CSV row per student x exercise (:func:`write_csv`); everything as
a dict for JSON (:func:`report_dict`); one submission in Gradescope's results format
(:func:`gradescope_results`); whether named exercises passed (:func:`unpassed`)."""

from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

from ..kernels import PACKAGE_ROOT
from .common import (
    ERROR,
    FAILED,
    INVALID,
    NOT_ATTEMPTED,
    NOT_RUN,
    NOTEBOOK_STATUSES,
    OK,
    PASSED,
    REFERENCE,
    REVIEW,
    SYMBOLS,
    WRONG,
)
from .verdicts import ExerciseGrade, NotebookGrade

LEGEND = (
    "OK passed, X failed, - not attempted (the stub still raises NotImplementedError), "
    "E error (the code raised inside the check), ? not run (no verdict), "
    "R used the reference (the course's own code, not counted), "
    "! review (the exercise cell does something graded code should not; not counted)"
)
CSV_COLUMNS = [
    "student", "assignment", "path", "notebook_status", "exercise", "status", "mistake", "message", "feedback",
    "flags", "ignored_cells",
]


def _labels(grades: list[NotebookGrade]) -> list[str]:
    """Row labels: the student's name, or the path when two rows share a name."""
    counts: dict[str, int] = {}
    for g in grades:
        counts[g.student] = counts.get(g.student, 0) + 1
    return [g.student if counts[g.student] == 1 else g.path for g in grades]


def format_report(grades: list[NotebookGrade], assignments: dict[str, dict], mode: str = "") -> str:
    """The tables (one per assignment), the legend, then one line per problem; ``mode`` (how
    the kernels were isolated) first when given."""
    out: list[str] = [f"Isolation: {mode}", ""] if mode else []
    for name, info in assignments.items():
        rows = [g for g in grades if g.assignment == name]
        exercises = info["exercises"]
        title = name or "notebooks not named NN_*.ipynb and not recognised"
        source = f"solution {info['solution']}" if info["solution"] else "no solution found"
        out.append(f"{title}: {len(rows)} notebook(s); {source}")
        header = ["student", "notebook", *exercises, "passed"]
        table = [header]
        for label, g in zip(_labels(rows), rows):
            by_name = {e.exercise: e for e in g.exercises}
            marks = [SYMBOLS[by_name[e].status] if e in by_name else "" for e in exercises]
            table.append([label, g.status, *marks, f"{g.passed}/{len(exercises)}"])
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        for r, row in enumerate(table):
            out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if r == 0:
                out.append("  ".join("-" * w for w in widths))
        out.append("")
    out.append(f"Legend: {LEGEND}.")
    out.append("Only exercise cells are graded: the grader runs the course's notebook with each student's "
               "exercise cells in place and calls the checkers itself.")
    problems = []
    for label, g in zip(_labels(grades), grades):
        if g.problem:
            problems.append(f"  {label}: {g.status}: {g.problem}")
        if g.ignored_cells:
            cells = ", ".join(map(str, g.ignored_cells))
            problems.append(f"  {label}: ignored {len(g.ignored_cells)} cell(s) that are not exercise cells: {cells}")
        for f in g.flags:
            problems.append(f"  {label}: review: {f}")
        for e in g.exercises:
            if e.status in (FAILED, ERROR) or (e.status == NOT_RUN and g.status not in (INVALID, WRONG)):
                problems.append(f"  {label}: {e.exercise} {e.status}: {e.message}")
            elif e.status == REFERENCE:
                problems.append(f"  {label}: {e.exercise} {e.status}: {e.reference}")
            elif e.status == REVIEW:
                problems.extend(f"  {label}: {e.exercise} review: {f}" for f in e.flags)
                if e.reference:
                    problems.append(f"  {label}: {e.exercise} also used the reference: {e.reference}")
    if problems:
        out.append("")
        out.append("Problems:")
        out.extend(problems)
    return "\n".join(out)


def write_csv(grades: list[NotebookGrade], path: Path) -> None:
    """One row per student x exercise (a notebook without exercises: one row, exercise empty)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for g in grades:
            base = {"student": g.student, "assignment": g.assignment, "path": g.path, "notebook_status": g.status,
                    "ignored_cells": " ".join(map(str, g.ignored_cells))}
            if not g.exercises:
                writer.writerow({**base, "message": g.problem or "", "flags": " | ".join(g.flags)})
            for e in g.exercises:
                writer.writerow({
                    **base, "exercise": e.exercise, "status": e.status, "mistake": e.mistake or "",
                    "message": e.message, "feedback": e.feedback, "flags": " | ".join(e.flags + g.flags),
                })


def report_dict(grades: list[NotebookGrade], assignments: dict[str, dict], timeout: float) -> dict:
    return {
        "timeout": timeout,
        "statuses": {"notebook": NOTEBOOK_STATUSES, "exercise": list(SYMBOLS)},
        "assignments": [{"assignment": name, **info} for name, info in assignments.items()],
        "notebooks": [{**asdict(g), "passed": g.passed, "total": len(g.exercises)} for g in grades],
    }


def from_report_dict(report: dict) -> tuple[list[NotebookGrade], dict[str, dict]]:
    """The grades and assignments that :func:`report_dict` wrote (``--cache``)."""
    grades = []
    for d in report["notebooks"]:
        fields = {k: v for k, v in d.items() if k not in ("passed", "total")}
        fields["exercises"] = [ExerciseGrade(**e) for e in fields["exercises"]]
        grades.append(NotebookGrade(**fields))
    assignments = {a["assignment"]: {k: v for k, v in a.items() if k != "assignment"} for a in report["assignments"]}
    return grades, assignments


# Gradescope shows instructors every test and students only those not "hidden" (its autograder
# specification); a student who has a hidden test does not see the total either, which suits a
# submission held for review. The grader's own report goes to run_autograder's stdout, which
# Gradescope shows only to instructors ("stdout_visibility" hidden).
HELD = (REFERENCE, REVIEW)


def _gradescope_output(e, g: NotebookGrade) -> str:
    """A test's text: the checker's feedback for the student; for a held exercise (R or !),
    everything the instructor needs (the test is hidden from the student)."""
    if e.status in HELD:
        lines = [f"FOR THE INSTRUCTOR (this test is hidden from the student): {e.status}.",
                 f"The checker's own verdict: {e.verdict or 'none'}."]
        if e.reference:
            lines.append(f"Used the course's reference: {e.reference}")
        lines += [f"Review: {f}" for f in e.flags + [f for f in g.flags if f not in e.flags]]
        return "\n".join(lines + (["", e.feedback] if e.feedback else []))
    if e.status == NOT_ATTEMPTED:
        return "Not attempted: the exercise cell still raises NotImplementedError."
    if e.status == NOT_RUN:
        return f"Not graded: {e.message}"
    if e.status == ERROR:
        return f"Your code raised an error inside the check: {e.message}" + (f"\n\n{e.feedback}" if e.feedback else "")
    return e.feedback or e.message


def gradescope_results(grades: list[NotebookGrade], points: dict[str, float], default_points: float = 1.0,
                       seconds: float = 0.0) -> dict:
    """One submission (``grades``: its notebooks, normally one) in Gradescope's autograder
    results format: one test per exercise worth ``points.get(exercise, default_points)``, its
    output the checker's feedback. An exercise that used the reference (R) or is up for review
    (!) scores 0, and its test, which says why, is hidden from the student."""
    tests, notes, held = [], [], 0
    for g in grades:
        prefix = f"{Path(g.path).name}: " if len(grades) > 1 else ""
        name = g.assignment or Path(g.path).name
        if g.status != OK:
            notes.append(f"{name}: {g.status}: {g.problem}")
        if g.ignored_cells:
            cells = ", ".join(map(str, g.ignored_cells))
            notes.append(f"{name}: {len(g.ignored_cells)} cell(s) you changed or added are not exercise cells and were "
                         f"not run (cells {cells}): keep helper code inside the exercise cells.")
        for e in g.exercises:
            worth = float(points.get(e.exercise, default_points))
            passed = e.status == PASSED
            held += e.status in HELD
            tests.append({
                "name": f"{prefix}{e.exercise}", "number": str(len(tests) + 1),
                "score": worth if passed else 0.0, "max_score": worth,
                "status": "passed" if passed else "failed",
                "output": _gradescope_output(e, g),
                "visibility": "hidden" if e.status in HELD else "visible",
            })
    score = sum(t["score"] for t in tests)
    total = sum(t["max_score"] for t in tests)
    summary = [f"{sum(t['status'] == 'passed' for t in tests)} of {len(tests)} exercise(s) passed "
               f"({score:g}/{total:g} points). Only your exercise cells were graded: the course's notebook "
               "was run with them in place, and the course's checkers called on each."]
    if held:
        summary.append(f"{held} exercise(s) are held for your instructor to look at; they score 0 unless your "
                       "instructor decides otherwise.")
    summary += notes
    return {
        "score": score,
        "execution_time": round(seconds),
        "output": "\n".join(summary),
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {  # stored by Gradescope, not shown: which copy of the course graded, and each status
            "course": str(PACKAGE_ROOT),
            "notebooks": [{"path": g.path, "assignment": g.assignment, "status": g.status,
                           "exercises": {e.exercise: e.status for e in g.exercises}} for g in grades],
        },
    }


def unpassed(grades: list[NotebookGrade], exercises: list[str]) -> list[str]:
    """For each of ``exercises`` not passed in a graded notebook that has it, why (one line
    each); empty when all passed."""
    return [f"{name}: {e.status}: {e.message}" for name in exercises for g in grades for e in g.exercises
            if e.exercise == name and e.status != PASSED]
