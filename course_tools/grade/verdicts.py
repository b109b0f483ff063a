"""Stage: verdicts. Turns what running a notebook gave (a :class:`.run.Run`) into its grade
(:func:`grade_run`, pure: no kernel): per exercise passed, failed, not attempted, error, not run,
used the reference or review, with the checker's diagnosis or why not; per notebook ok, crashed
or timed out, with every cell error and every flag (the scan's, the kernel side's, forged
verdicts, the system's refusals), each once."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .common import CRASHED, ERROR, FROM_VERDICT, NOT_RUN, OK, PASSED, REFERENCE, REVIEW, TIMED_OUT, first_line
from .plan import CourseNotebook, Plan
from .run import Run


@dataclass
class Submission:
    """A notebook to grade: whose (``student``), which course notebook it should be
    (``assignment``, a file name such as ``01_attention.ipynb``; ``""`` when its name does
    not say), and its bytes as read at the start (``data``)."""

    path: Path
    student: str
    assignment: str
    data: bytes | None = None


@dataclass
class ExerciseGrade:
    exercise: str
    status: str  # one of SYMBOLS
    message: str = ""  # one line: the verdict without its "[X] name: " prefix, or why not
    feedback: str = ""  # the checker's full feedback
    mistake: str | None = None
    cell: int | None = None  # the student's exercise cell (None: none found, the stub ran)
    verdict: str | None = None  # what the checker said, when the status is another
    reference: str | None = None  # how the answer uses the course's reference
    flags: list[str] = field(default_factory=list)  # what to review, each with its line


@dataclass
class NotebookGrade:
    path: str
    student: str
    assignment: str
    status: str  # one of NOTEBOOK_STATUSES
    problem: str | None  # what went wrong, in one line (None when ok)
    errors: list[dict]  # every exception other than NotImplementedError: cell, source, exception, message
    exercises: list[ExerciseGrade]
    ignored_cells: list[int] = field(default_factory=list)  # the student's cells not run
    flags: list[str] = field(default_factory=list)  # findings not tied to one exercise
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(e.status == PASSED for e in self.exercises)


def _code_line(source: str) -> str:
    """The first line that is not blank or a comment (else the first line)."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("#")), lines[0] if lines else "")


def _describe(run: Run, index: int | None) -> str:
    """``cell 3 (`def causal_mask(...`)`` for a student's cell, ``the course's cell 5
    (...)`` for the course's own, ``the grader's check of causal_mask`` for its own."""
    if index is None or not 0 <= index < len(run.steps):
        return "the grader's set-up"
    step = run.steps[index]
    source = _code_line(step.source)
    if len(source) > 60:
        source = source[:57] + "..."
    if step.kind == "exercise":
        return f"cell {step.index} (`{source}`)" if step.index is not None else f"the stub of {step.exercise}"
    if step.kind == "course":
        return f"the course's cell {step.index} (`{source}`)"
    return f"the grader's check of {step.exercise}" if step.kind == "check" else "the grader's last cell"


def cell_errors(run: Run) -> list[dict]:
    """Every exception a cell raised other than NotImplementedError (an unfinished stub)."""
    found = []
    for i, cell in enumerate(run.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") != "NotImplementedError":
                found.append({
                    "cell": run.steps[i].index if run.steps[i].kind == "exercise" else None,
                    "where": _describe(run, i),
                    "source": _code_line(run.steps[i].source),
                    "exception": output.get("ename", ""),
                    "message": first_line(output.get("evalue", "")),
                })
    return found


def _verdict_message(feedback: str, exercise: str) -> str:
    first = first_line(feedback)
    return re.sub(r"^\[(OK|X| )\]\s*" + re.escape(exercise) + r":\s*", "", first)


def flag_text(f: dict) -> str:
    where = f"line {f['line']}: " if f.get("line") else ""
    code = f" `{f['code']}`" if f.get("code") else ""
    return f"{where}{f['what']}{':' if code else ''}{code}"


def _not_run_reason(run: Run, step: int) -> str:
    if run.stopped in (TIMED_OUT, "kernel died") and run.stopped_step is not None and step >= run.stopped_step:
        how = "timed out" if run.stopped == TIMED_OUT else "stopped: the kernel died"
        if step - 1 <= run.stopped_step:  # in the exercise cell or its check
            return f"the notebook {how} in {_describe(run, run.stopped_step)}"
        return f"the notebook {how} in {_describe(run, run.stopped_step)}, before this exercise"
    if run.stopped is not None:
        return f"the notebook stopped before its check ({run.detail})"
    return "the grader's check gave no verdict"


def grade_run(sub: Submission, plan: Plan, run: Run, course_nb: CourseNotebook) -> NotebookGrade:
    """Turn what running a notebook gave into its grade (pure: no kernel)."""
    errors = cell_errors(run)
    if run.stopped == TIMED_OUT:
        status = TIMED_OUT
        problem = f"still running {_describe(run, run.stopped_step)} {run.detail}"
    elif run.stopped == "kernel died":
        status, problem = CRASHED, f"the kernel died in {_describe(run, run.stopped_step)}"
    elif run.stopped is not None:
        status, problem = CRASHED, f"grading failed: {run.detail}"
    elif errors:
        first = errors[0]
        status = CRASHED
        problem = f"{first['where']} raised {first['exception']}: {first['message']}"
        if len(errors) > 1:
            problem += f" (and {len(errors) - 1} more cell error(s))"
    else:
        status, problem = OK, None

    notebook_flags: list[str] = []
    runtime: dict[str, list[str]] = {}
    sources = {s.exercise: s.source for s in run.steps if s.kind == "exercise"}
    for i, messages in run.messages.items():
        for m in messages:
            for f in m.get("flags", []):
                if f.get("exercise") in plan.exercise_cells:
                    if f.get("line"):  # the kernel numbers the lines of the cell as IPython ran it
                        f = {**f, "line": f["line"] + leading_blank_lines(sources.get(f["exercise"], ""))}
                    runtime.setdefault(f["exercise"], []).append(flag_text(f))
                else:
                    notebook_flags.append(flag_text(f))
    if run.killed:
        notebook_flags.append(f"left {run.killed} process(es) running; killed when its turn ended")
    elsewhere = []  # forgeries in the course's own cells: sent by code an exercise cell left behind
    for i, step in enumerate(run.steps):
        forged = run.forged.get(i, 0) if step.kind not in ("check", "end") else 0
        if forged:
            where = runtime.setdefault(step.exercise, []) if step.kind == "exercise" else elsewhere
            where.append(f"{forged} verdict message(s) not signed by the grader (forged) in {_describe(run, i)}")
        if step.kind == "exercise" and i < len(run.cells):
            runtime.setdefault(step.exercise, []).extend(system_refusals(run.cells[i], step.source))

    grades = []
    for exercise in course_nb.exercises:
        name = exercise.name
        check = next(i for i, s in enumerate(run.steps) if s.kind == "check" and s.exercise == name)
        scan = plan.scans[name]
        flags = [flag_text(f) for f in scan.flags] + runtime.get(name, [])
        messages = run.messages.get(check, [])
        if run.forged.get(check):
            flags.append(f"{run.forged[check]} verdict message(s) not signed by the grader (forged)")
        if len(messages) > 1:
            flags.append(f"the grader's check was asked {len(messages)} times")
        grade = ExerciseGrade(name, NOT_RUN, cell=plan.exercise_cells[name])
        if messages:
            verdict = messages[-1]["verdict"]
            feedback = str(verdict.get("feedback", ""))
            grade.feedback, grade.mistake = feedback, verdict.get("mistake")
            if verdict.get("status") == "undefined":
                grade.message = f"{feedback}" + (f"; {errors[0]['where']} raised {errors[0]['exception']}"
                                                 if any(e["cell"] == grade.cell for e in errors) else "")
            else:
                grade.status = FROM_VERDICT.get(verdict.get("status"), ERROR)
                if grade.status == PASSED and verdict.get("passed") is not True:
                    grade.status = ERROR
                grade.message = _verdict_message(feedback, name)
            grade.reference = messages[-1].get("reference")
        else:
            grade.message = _not_run_reason(run, check)
            if run.stopped is None and run.cells[check].get("execution_count") is not None:
                flags.append("the grader's check ran but no verdict came back (its messages were blocked)")
        if scan.reference:
            grade.reference = f"{grade.reference}; " if grade.reference else ""
            grade.reference += f"the cell names it: {scan.reference}"
        grade.flags = flags = deduplicated(flags)
        if grade.status != NOT_RUN or flags or grade.reference:
            if grade.reference:
                grade.verdict, grade.status = grade.status, REFERENCE
                grade.message = f"answered with the course's reference ({grade.reference})"
            if flags:
                grade.verdict = grade.verdict or grade.status
                grade.status = REVIEW
                grade.message = f"to review: {flags[0]}" + (f" (and {len(flags) - 1} more)" if len(flags) > 1 else "")
        grades.append(grade)
    result = NotebookGrade(
        path=str(sub.path), student=sub.student, assignment=sub.assignment, status=status, problem=problem,
        errors=errors, exercises=grades, ignored_cells=plan.ignored, flags=deduplicated(notebook_flags),
        seconds=round(run.seconds, 1),
    )
    for flag in elsewhere:
        review_all(result, flag)
    if run.package_changes:
        shown = ", ".join(run.package_changes[:3]) + (f" and {len(run.package_changes) - 3} more"
                                                     if len(run.package_changes) > 3 else "")
        review_all(result, f"CHANGED THE COURSE PACKAGE while its notebook ran ({shown} in its private copy): its "
                           "verdicts cannot be trusted; the next notebook gets a fresh copy")
    return result


def review_all(grade: NotebookGrade, flag: str) -> None:
    """Add ``flag`` to the notebook, and put every exercise it has a verdict for up for review
    (what it did may have changed any verdict of its run)."""
    grade.flags = deduplicated([*grade.flags, flag])
    for e in grade.exercises:
        if e.status not in (NOT_RUN, REVIEW):
            e.verdict = e.verdict or e.status
            e.status = REVIEW
            e.message = f"to review: {flag}"


def deduplicated(flags: list[str]) -> list[str]:
    """Each flag once, in order, with how many times it came when more than once."""
    counts: dict[str, int] = {}
    for f in flags:
        counts[f] = counts.get(f, 0) + 1
    return [f if n == 1 else f"{f} ({n} times)" for f, n in counts.items()]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
SYSTEM_REFUSALS = ("Read-only file system", "Permission denied", "Operation not permitted")


def leading_blank_lines(source: str) -> int:
    """How many blank lines open a cell: IPython drops them before it runs the cell, so its line
    numbers are the cell's less these."""
    lines = source.splitlines()
    blank = next((i for i, line in enumerate(lines) if line.strip()), 0)
    return blank


def system_refusals(cell, source: str) -> list[str]:
    """A flag (with its line) for each error in an exercise cell's outputs that says the system
    refused a file operation: an attempt the sandbox (or the permissions) stopped."""
    flags = []
    lines = source.splitlines()
    for output in cell.get("outputs", []):
        if output.get("output_type") != "error":
            continue
        text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
        if not any(t in text for t in SYSTEM_REFUSALS) or "grading: not allowed" in text:
            continue  # (the audit hook's own refusals are flagged where they happen)
        match = re.search(r"Cell In\[\d+\], line (\d+)", _ANSI.sub("", "\n".join(output.get("traceback", []))))
        n = int(match.group(1)) + leading_blank_lines(source) if match else 0
        code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
        flags.append(flag_text({"line": n, "code": code,
                                 "what": f"was stopped by the system: {first_line(text)[:160]}"}))
    return flags


def wrote_outside(changes: list[str]) -> str:
    """The flag of a notebook in whose turn files outside its folder changed."""
    shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
    return f"WROTE OUTSIDE ITS FOLDER (found by the grader's hashes after its turn, and put back): {shown}"


def not_graded(sub: Submission, course_nb: CourseNotebook | None, status: str, problem: str) -> NotebookGrade:
    """The grade of a notebook that was not run (invalid, or the wrong assignment)."""
    exercises = [ExerciseGrade(e.name, NOT_RUN, message=problem) for e in (course_nb.exercises if course_nb else [])]
    return NotebookGrade(path=str(sub.path), student=sub.student, assignment=sub.assignment, status=status,
                         problem=problem, errors=[], exercises=exercises)


