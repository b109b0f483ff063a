"""The names every stage of the grader shares: the statuses and their symbols, the grader's own
cells (the check and end cells whose source the kernel side recognises), the verdict's MIME
type and audit event, the time limits, and the usage error of the command line."""

from __future__ import annotations

from typing import Any

DEFAULT_TIMEOUT = 300.0  # seconds for all the cells of one notebook
STARTUP_TIMEOUT = 60  # seconds for a kernel to start (not counted in the notebook's time)

# Notebook statuses.
OK, CRASHED, TIMED_OUT, INVALID, WRONG = "ok", "crashed", "timed out", "invalid notebook", "wrong assignment"
NOTEBOOK_STATUSES = [OK, CRASHED, TIMED_OUT, INVALID, WRONG]
# Exercise statuses, and their symbols in the table.
PASSED, FAILED, NOT_ATTEMPTED, ERROR, NOT_RUN = "passed", "failed", "not attempted", "error", "not run"
REFERENCE, REVIEW = "used the reference", "review"
SYMBOLS = {PASSED: "OK", FAILED: "X", NOT_ATTEMPTED: "-", ERROR: "E", NOT_RUN: "?", REFERENCE: "R", REVIEW: "!"}
FROM_VERDICT = {"passed": PASSED, "failed": FAILED, "not implemented": NOT_ATTEMPTED, "error": ERROR}

VERDICT_MIME = "application/vnd.course-grade.verdict+json"
AUDIT_EVENT = "course-grade"
# The grader's own cells. The kernel accepts a request only from a cell with exactly this
# source (it compares the file name ipykernel gives the cell's code).
CHECK_SOURCE = '__import__("sys").audit("course-grade", "check", "{nonce}", "{name}")'
END_SOURCE = '__import__("sys").audit("course-grade", "end", "{nonce}", "")'


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


def first_line(text: Any) -> str:
    """The first line of ``text`` once stripped ('' when there is none)."""
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""

