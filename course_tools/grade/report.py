"""Stage: the report. One table per assignment (students x the assignment's official exercises,
symbols explained below it), then one line per problem, flag and ignored cell
(:func:`format_report`); one CSV row per student x exercise (:func:`write_csv`); everything as
a dict for JSON (:func:`report_dict`)."""

from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

from .common import ERROR, FAILED, INVALID, NOT_RUN, NOTEBOOK_STATUSES, REFERENCE, REVIEW, SYMBOLS, WRONG
from .verdicts import NotebookGrade

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


