"""Grade a class: run students' notebooks and collect every check's verdict (instructors).

    python -m course_utils.grade PATH... [--timeout SECONDS] [--csv FILE] [--json FILE]
                                         [--jobs N] [--solutions DIR] [--assignment NAME]

``PATH`` is a student's notebook or a folder searched recursively for ``*.ipynb`` (files
and folders whose name starts with ``.``, such as ``.ipynb_checkpoints``, and
``__MACOSX`` are skipped). Each notebook is copied to a temporary folder and run there,
top to bottom, in a fresh kernel of this Python that imports this checkout's
``course_utils``; the student's file is only read. A first cell, added to the copy only,
records every :class:`~course_utils.checks._core.CheckResult` that the notebook's
``check_*`` calls return (through ``course_utils.checks._core._RESULT_LISTENERS``), so
grading never parses printed text. Cells go on running after an exception, as "Run All"
with errors allowed would, so one broken cell does not hide the checks after it.

Who and what
    *student*: the parent folder's name when the file is named like a course notebook
    (``alice/01_attention.ipynb`` -> ``alice``), otherwise the file's stem
    (``alice.ipynb`` -> ``alice``; then pass ``--assignment 01_attention`` to say which
    notebook those files are). *exercises*: those whose ``check_*`` call appears in the
    solution of the same name (``--solutions DIR``, default ``solutions``), in order;
    without a solution, those the students' own notebooks check. A verdict for another
    exercise (a check the student added) gets a column too.

Per exercise
    ``passed``; ``failed`` (the checker's diagnosis); ``not attempted`` (the checker said
    "not implemented": the stub still raises); ``error`` (the student's code raised inside
    the check); ``not run`` (no verdict: the notebook stopped before the check, its check
    cell raised, or the notebook has no check call for it). When a check ran more than
    once, the last verdict counts.

Per notebook
    ``ok`` (no exception but the stubs' ``NotImplementedError``); ``crashed`` (a cell raised
    another exception, and the first is named, with later cells still run; or the kernel
    died); ``timed out`` (its cells took more than ``--timeout`` seconds in all, kernel
    start-up not counted: the kernel is killed and grading goes on with the next notebook);
    ``invalid notebook`` (the file is not a notebook, e.g. not JSON).

Output: one table per assignment on stdout (students x exercises, symbols explained
below it), then one line per problem. ``--csv FILE``: one row per student x exercise;
``--json FILE``: everything. ``--jobs N`` runs N notebooks at a time. The exit status is
0 when the run completed, whatever the students' results, 2 for a usage error, and 130
when interrupted (Ctrl-C stops the run and kills its kernels; nothing is written).

This is not a sandbox: the students' code runs with your permissions, as it would if you
opened their notebooks in Jupyter.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ipykernel.kernelspec
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.reader import NotJSONError
from traitlets import default

from .build import NOTEBOOK_NAME

# The folder that holds this course_utils: kernels import it from there.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT = 300.0  # seconds for all the cells of one notebook
STARTUP_TIMEOUT = 60  # seconds for a kernel to start (not counted in the notebook's time)

# Notebook statuses.
OK, CRASHED, TIMED_OUT, INVALID = "ok", "crashed", "timed out", "invalid notebook"
# Exercise statuses, and their symbols in the table.
PASSED, FAILED, NOT_ATTEMPTED, ERROR, NOT_RUN = "passed", "failed", "not attempted", "error", "not run"
SYMBOLS = {PASSED: "OK", FAILED: "X", NOT_ATTEMPTED: "-", ERROR: "E", NOT_RUN: "?"}
LEGEND = (
    "OK passed, X failed, - not attempted (the stub still raises NotImplementedError), "
    "E error (the code raised inside the check), ? not run (no verdict)"
)
FROM_VERDICT = {"passed": PASSED, "failed": FAILED, "not implemented": NOT_ATTEMPTED, "error": ERROR}

CHECK_CALL = re.compile(r"\b(check_\w+)\s*\(")
CSV_COLUMNS = [
    "student", "assignment", "path", "notebook_status", "exercise", "status", "mistake", "message", "feedback",
]


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


# --------------------------------------------------------------------------- kernels


class CurrentEnvKernelSpecManager(KernelSpecManager):
    """Every kernel name means ipykernel in *this* Python (not whatever a user-level
    ``python3`` kernelspec, which Jupyter looks up first, points to)."""

    def get_kernel_spec(self, kernel_name):
        return self.kernel_spec_class(
            resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
        )


class CurrentEnvKernelManager(AsyncKernelManager):
    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self):
        return CurrentEnvKernelSpecManager(data_dir=self.data_dir)


def kernel_env(mpl_backend: str | None = None) -> dict[str, str]:
    """The environment of a kernel: this one, with this checkout's ``course_utils`` first
    on the path; ``MPLBACKEND`` set to ``mpl_backend``, or unset (ipykernel then draws
    figures inline, as Jupyter does)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env.pop("MPLBACKEND", None)
    if mpl_backend:
        env["MPLBACKEND"] = mpl_backend
    return env


# --------------------------------------------------------------------------- running one notebook

HOOK_CELL_ID = "course-grade-hook"
_HOOK_SOURCE = '''\
# Added by course_utils.grade to its copy of the notebook: record every check's verdict.
def _course_grade_hook(path=RESULTS_PATH):
    import json

    from course_utils.checks import _core

    def record(result):
        verdict = {"exercise": result.exercise, "passed": bool(result.passed), "status": result.status,
                   "feedback": result.feedback, "mistake": result.mistake}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(verdict, default=str) + "\\n")

    _core._RESULT_LISTENERS.append(record)


_course_grade_hook()
del _course_grade_hook
'''


def hook_source(results: Path) -> str:
    """Source of the cell put first in the copy: appends each verdict, as one JSON line,
    to ``results``."""
    return _HOOK_SOURCE.replace("RESULTS_PATH", repr(str(results)))


@dataclass
class Run:
    """What running one notebook gave.

    ``cells``: the student's cells as executed (the added cell removed; empty when the file
    could not be read). ``results``: every verdict recorded, in order, each a dict with the
    CheckResult's fields and ``cell``, the index of the cell that produced it. ``stopped``:
    ``None`` when every cell ran, else why not (``"timed out"``, ``"kernel died"``,
    ``"invalid notebook"``, ``"grading failed"``), with ``stopped_cell`` (the cell running
    then) and ``detail``.
    """

    cells: list = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    stopped: str | None = None
    stopped_cell: int | None = None
    detail: str = ""
    seconds: float = 0.0


class _OutOfTime(Exception):
    """The notebook's time ran out between two cells."""


class _GradingClient(NotebookClient):
    """Runs the cells within one time limit for the whole notebook (counted from the moment
    the kernel is ready: start-up has its own limit), and files each recorded verdict under
    the cell that produced it."""

    def __init__(self, nb, limit: float, results_path: Path, **kwargs: Any):
        super().__init__(nb, **kwargs)
        self.limit = limit
        self.deadline = math.inf
        self.current: int | None = None  # index (in the copy) of the cell running or last run
        self.results_path = results_path
        self.results: list[dict] = []
        self._offset = 0

    @asynccontextmanager
    async def async_setup_kernel(self, **kwargs: Any):
        """nbclient's, less its SIGINT/SIGTERM handlers: those shut down the current kernel and
        let the run go on, so Ctrl-C could not stop a class run. Here Ctrl-C cancels the run,
        and this ``finally`` kills the kernel."""
        if self.km is None:
            self.km = self.create_kernel_manager()
        try:
            if not self.km.has_kernel:
                await self.async_start_new_kernel(**kwargs)
            if self.kc is None:
                await self.async_start_new_kernel_client()
            yield
        finally:
            await self._async_cleanup_kernel()

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        self.deadline = time.monotonic() + self.limit
        return kc

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if cell.cell_type == "code" and cell.source.strip():
            self.current = cell_index
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise _OutOfTime()
            self.timeout = max(1, math.ceil(remaining))  # this cell gets what is left
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            self.collect(cell_index)

    def collect(self, cell_index: int | None) -> None:
        """Read the verdicts written since the last call; they came from ``cell_index``."""
        try:
            with open(self.results_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # whole lines only
        self._offset += end
        for line in data[:end].splitlines():
            try:
                verdict = json.loads(line)
            except ValueError:
                continue
            if isinstance(verdict, dict) and isinstance(verdict.get("exercise"), str):
                verdict["cell"] = cell_index
                self.results.append(verdict)


def _first_line(text: Any) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def read_student_notebook(data: bytes):
    """The notebook in ``data`` (nbformat v4, converted if older); raises if it is not one."""
    return nbformat.reads(data.decode("utf-8"), as_version=4, capture_validation_error={})


async def run_notebook(path: Path, timeout: float = DEFAULT_TIMEOUT) -> Run:
    """Run a copy of the notebook at ``path`` in a fresh kernel, in a temporary folder
    (its working directory), within ``timeout`` seconds for all its cells."""
    start = time.monotonic()
    try:
        data = Path(path).read_bytes()
        nb = read_student_notebook(data)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    except NotJSONError:
        return Run(stopped=INVALID, detail="the file is not JSON (cut short, or not a notebook?)")
    except Exception as exc:  # noqa: BLE001 - whatever the file is, it is not a notebook we can run
        return Run(stopped=INVALID, detail=f"{type(exc).__name__}: {_first_line(exc)[:120]}")

    run = Run()
    with tempfile.TemporaryDirectory(prefix="course-grade-", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp) / "notebook"
        workdir.mkdir()
        (workdir / Path(path).name).write_bytes(data)  # the copy the student's code sees
        results = Path(tmp) / "results.jsonl"  # outside the working directory
        hook = nbformat.v4.new_code_cell(hook_source(results))
        hook.id = HOOK_CELL_ID
        nb.cells.insert(0, hook)
        client = _GradingClient(
            nb,
            limit=timeout,
            results_path=results,
            timeout=max(1, math.ceil(timeout)),
            startup_timeout=STARTUP_TIMEOUT,
            kernel_name="python3",
            kernel_manager_class=CurrentEnvKernelManager,
            allow_errors=True,
            shutdown_kernel="immediate",  # kill it: it may be stuck in a loop
            record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
        )
        try:
            # Agg: figures are never drawn, which saves time; grading needs no pictures.
            # The kernel's own stdout and stderr (not the cells' outputs) are only noise here.
            execution = client.async_execute(
                env=kernel_env("agg"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            # a backstop in case something other than a cell hangs
            await asyncio.wait_for(execution, timeout + STARTUP_TIMEOUT + 60)
        except (CellTimeoutError, _OutOfTime, asyncio.TimeoutError):
            run.stopped, run.detail = TIMED_OUT, f"after {timeout:g} s"
        except DeadKernelError:
            run.stopped, run.detail = "kernel died", "the kernel died"
        except Exception as exc:  # noqa: BLE001 - e.g. a kernel that cannot start: reported, not raised
            run.stopped, run.detail = "grading failed", f"{type(exc).__name__}: {_first_line(exc)}"
        client.collect(client.current)

    hook_errors = [o for o in nb.cells[0].get("outputs", []) if o.get("output_type") == "error"]
    if hook_errors and run.stopped is None:
        error = hook_errors[0]
        run.stopped = "grading failed"
        run.detail = f"the grader's set-up cell raised {error.get('ename')}: {_first_line(error.get('evalue', ''))}"
    run.cells = nb.cells[1:]
    if client.current is not None and run.stopped is not None:
        run.stopped_cell = client.current - 1 if client.current > 0 else None
    run.results = [{**r, "cell": None if r["cell"] in (None, 0) else r["cell"] - 1} for r in client.results]
    run.seconds = time.monotonic() - start
    return run


# --------------------------------------------------------------------------- finding exercises


def checker_exercises() -> dict[str, str]:
    """``{checker function name: exercise}`` for every checker in ``course_utils.checks``."""
    from . import checks  # imports torch: only when grading

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


# --------------------------------------------------------------------------- grading


@dataclass
class Submission:
    """A notebook to grade: whose (``student``) and which course notebook (``assignment``,
    a file name such as ``01_attention.ipynb``; ``""`` when unknown)."""

    path: Path
    student: str
    assignment: str


@dataclass
class ExerciseGrade:
    exercise: str
    status: str  # passed, failed, not attempted, error, not run
    message: str = ""  # one line: the verdict without its "[X] name: " prefix, or why not run
    feedback: str = ""  # the checker's full feedback
    mistake: str | None = None
    cell: int | None = None  # the cell whose check gave the verdict
    runs: int = 0  # how many verdicts the notebook produced for this exercise


@dataclass
class NotebookGrade:
    path: str
    student: str
    assignment: str
    status: str  # ok, crashed, timed out, invalid notebook
    problem: str | None  # what went wrong, in one line (None when ok)
    errors: list[dict]  # every exception other than NotImplementedError: cell, source, exception, message
    exercises: list[ExerciseGrade]
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(e.status == PASSED for e in self.exercises)


def _code_line(source: str) -> str:
    """The first line that is not blank or a comment (else the first line)."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("#")), lines[0] if lines else "")


def _describe(cells, index: int | None) -> str:
    """``cell 3 (`import torch`)``: the index in the student's notebook and its first code line."""
    if index is None or not 0 <= index < len(cells):
        return "the grader's set-up" if index is None else f"cell {index}"
    source = _code_line(cells[index].get("source", ""))
    if len(source) > 60:
        source = source[:57] + "..."
    return f"cell {index} (`{source}`)"


def cell_errors(cells) -> list[dict]:
    """Every exception a cell raised other than NotImplementedError (an unfinished stub)."""
    found = []
    for i, cell in enumerate(cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if output.get("output_type") == "error" and output.get("ename") != "NotImplementedError":
                found.append({
                    "cell": i,
                    "source": _code_line(cell.get("source", "")),
                    "exception": output.get("ename", ""),
                    "message": _first_line(output.get("evalue", "")),
                })
    return found


def _verdict_message(feedback: str, exercise: str) -> str:
    first = _first_line(feedback)
    return re.sub(r"^\[(OK|X| )\]\s*" + re.escape(exercise) + r":\s*", "", first)


def _not_run_reason(exercise: str, run: Run, calls: list[tuple[int, str]]) -> str:
    if run.stopped == INVALID:
        return "the notebook could not be read"
    cells = [i for i, name in calls if name == exercise]
    if not cells:
        return "the notebook has no check call for it"
    index = cells[-1]
    where = _describe(run.cells, index)
    if run.stopped in (TIMED_OUT, "kernel died") and run.stopped_cell is not None and index >= run.stopped_cell:
        if index == run.stopped_cell:
            if run.stopped == TIMED_OUT:
                return f"its check, {where}, was still running {run.detail}"
            return f"its check, {where}, was running when the kernel died"
        stop = _describe(run.cells, run.stopped_cell)
        how = "timed out" if run.stopped == TIMED_OUT else "stopped: the kernel died"
        return f"the notebook {how} in {stop}, before its check in cell {index}"
    if run.stopped is not None and run.stopped_cell is None:
        return f"the notebook stopped before its check ({run.detail})"
    errors = [e for e in cell_errors(run.cells) if e["cell"] == index]
    if errors:
        return f"its check, {where}, raised {errors[0]['exception']}: {errors[0]['message']}"
    if run.cells[index].get("execution_count") is None:
        return f"its check, {where}, did not run"
    return f"its check, {where}, gave no verdict"


def grade_run(sub: Submission, run: Run, exercises: list[str], checkers: dict[str, str]) -> NotebookGrade:
    """Turn what running a notebook gave into its grade (pure: no kernel)."""
    errors = cell_errors(run.cells)
    if run.stopped == INVALID:
        status, problem = INVALID, f"not a notebook: {run.detail}"
    elif run.stopped == TIMED_OUT:
        status = TIMED_OUT
        problem = f"still running {_describe(run.cells, run.stopped_cell)} {run.detail}"
    elif run.stopped == "kernel died":
        status, problem = CRASHED, f"the kernel died in {_describe(run.cells, run.stopped_cell)}"
    elif run.stopped is not None:
        status, problem = CRASHED, f"grading failed: {run.detail}"
    elif errors:
        first = errors[0]
        status = CRASHED
        problem = f"{_describe(run.cells, first['cell'])} raised {first['exception']}: {first['message']}"
        if len(errors) > 1:
            problem += f" (and {len(errors) - 1} more cell error(s))"
    else:
        status, problem = OK, None

    calls = check_calls(run.cells, checkers)
    names = _unique([*exercises, *(r["exercise"] for r in run.results)])
    grades = []
    for name in names:
        verdicts = [r for r in run.results if r["exercise"] == name]
        if verdicts:
            last = verdicts[-1]
            feedback = str(last.get("feedback", ""))
            grades.append(ExerciseGrade(
                exercise=name,
                status=FROM_VERDICT.get(last.get("status"), ERROR),
                message=_verdict_message(feedback, name),
                feedback=feedback,
                mistake=last.get("mistake"),
                cell=last.get("cell"),
                runs=len(verdicts),
            ))
        else:
            grades.append(ExerciseGrade(name, NOT_RUN, message=_not_run_reason(name, run, calls)))
    return NotebookGrade(
        path=str(sub.path), student=sub.student, assignment=sub.assignment, status=status,
        problem=problem, errors=errors, exercises=grades, seconds=round(run.seconds, 1),
    )


# --------------------------------------------------------------------------- discovery


def student_name(path: Path) -> str:
    """The parent folder's name for a file named like a course notebook, else the stem."""
    if NOTEBOOK_NAME.match(path.name):
        return path.resolve().parent.name or path.stem
    return path.stem


def _skipped(part: str) -> bool:
    return part.startswith(".") or part == "__MACOSX"


def find_notebooks(paths: Iterable[Path], assignment: str | None = None) -> list[Submission]:
    """The notebooks to grade, in the order given (folders: sorted, recursively)."""
    if assignment and not assignment.endswith(".ipynb"):
        assignment += ".ipynb"
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found.extend(sorted(
                p for p in path.rglob("*.ipynb")
                if p.is_file() and not any(_skipped(part) for part in p.relative_to(path).parts)
            ))
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"no such file or folder: {path}")
    seen, subs = set(), []
    for path in found:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        name = assignment or (path.name if NOTEBOOK_NAME.match(path.name) else "")
        subs.append(Submission(path, student_name(path), name))
    return subs


def grade_all(
    subs: list[Submission], runs: list[Run], solutions: Path, checkers: dict[str, str]
) -> tuple[list[NotebookGrade], dict[str, dict]]:
    """Grades, and per assignment the solution used and the exercises (table columns)."""
    assignments: dict[str, dict] = {}
    for sub, run in zip(subs, runs):
        info = assignments.setdefault(sub.assignment, {"solution": None, "exercises": [], "from_students": []})
        info["from_students"].extend(e for _, e in check_calls(run.cells, checkers))
    for name, info in assignments.items():
        solution = Path(solutions) / name if name else None
        if solution is not None and solution.is_file():
            info["solution"] = str(solution)
            info["exercises"] = solution_exercises(solution, checkers)
        else:
            info["exercises"] = _unique(info["from_students"])
        del info["from_students"]
    grades = [grade_run(sub, run, assignments[sub.assignment]["exercises"], checkers) for sub, run in zip(subs, runs)]
    for name, info in assignments.items():
        # a check some student added gets a column too
        added = (e.exercise for g in grades if g.assignment == name for e in g.exercises)
        info["exercises"] = _unique([*info["exercises"], *added])
    return grades, assignments


# --------------------------------------------------------------------------- reports


def _labels(grades: list[NotebookGrade]) -> list[str]:
    """Row labels: the student's name, or the path when two rows share a name."""
    counts: dict[str, int] = {}
    for g in grades:
        counts[g.student] = counts.get(g.student, 0) + 1
    return [g.student if counts[g.student] == 1 else g.path for g in grades]


def format_report(grades: list[NotebookGrade], assignments: dict[str, dict]) -> str:
    """The tables (one per assignment), the legend, then one line per problem."""
    out: list[str] = []
    for name, info in assignments.items():
        rows = [g for g in grades if g.assignment == name]
        exercises = info["exercises"]
        title = name or "notebooks not named NN_*.ipynb (no --assignment)"
        source = (
            f"solution {info['solution']}" if info["solution"]
            else "no solution found: exercises from the students' check calls"
        )
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
    problems = []
    for label, g in zip(_labels(grades), grades):
        if g.problem:
            problems.append(f"  {label}: {g.status}: {g.problem}")
        for e in g.exercises:
            if e.status in (FAILED, ERROR, NOT_RUN) and g.status != INVALID:
                problems.append(f"  {label}: {e.exercise} {e.status}: {e.message}")
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
            base = {"student": g.student, "assignment": g.assignment, "path": g.path, "notebook_status": g.status}
            if not g.exercises:
                writer.writerow({**base, "message": g.problem or ""})
            for e in g.exercises:
                writer.writerow({
                    **base, "exercise": e.exercise, "status": e.status, "mistake": e.mistake or "",
                    "message": e.message, "feedback": e.feedback,
                })


def report_dict(grades: list[NotebookGrade], assignments: dict[str, dict], timeout: float) -> dict:
    return {
        "timeout": timeout,
        "statuses": {"notebook": [OK, CRASHED, TIMED_OUT, INVALID], "exercise": list(SYMBOLS)},
        "assignments": [{"assignment": name, **info} for name, info in assignments.items()],
        "notebooks": [{**asdict(g), "passed": g.passed, "total": len(g.exercises)} for g in grades],
    }


# --------------------------------------------------------------------------- command line


async def run_all(
    subs: list[Submission], timeout: float, jobs: int = 1, progress: Callable[[str], None] | None = None
) -> list[Run]:
    """Run every notebook, ``jobs`` at a time; results in the order of ``subs``."""
    limit = asyncio.Semaphore(jobs)
    done = 0
    loop = asyncio.get_running_loop()

    def quiet_dead_kernels(loop, context):
        # nbclient turns the cancellation of a cell (Ctrl-C) into a DeadKernelError nobody awaits
        if not isinstance(context.get("exception"), DeadKernelError):
            loop.default_exception_handler(context)

    loop.set_exception_handler(quiet_dead_kernels)

    async def one(sub: Submission) -> Run:
        nonlocal done
        async with limit:
            run = await run_notebook(sub.path, timeout)
        done += 1
        if progress is not None:
            state = run.stopped or (CRASHED if cell_errors(run.cells) else OK)
            progress(f"[{done}/{len(subs)}] {sub.path}: {state} ({run.seconds:.1f} s)")
        return run

    return list(await asyncio.gather(*(one(sub) for sub in subs)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.grade",
        description="Run students' notebooks in fresh kernels and tabulate every check's verdict.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, or folders of them")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit for all the cells of one notebook (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write one row per student x exercise")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every detail")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="notebooks run at a time (default 1)")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), metavar="DIR",
                        help="solution notebooks, which say each notebook's exercises (default: solutions)")
    parser.add_argument("--assignment", metavar="NAME",
                        help="grade every file as this course notebook (e.g. 01_attention), "
                             "for files named after students")
    args = parser.parse_args(argv)
    try:
        if not args.timeout > 0:
            raise UsageError("--timeout must be positive")
        if args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        for option, path in (("--csv", args.csv), ("--json", args.json)):
            if path is not None and not path.resolve().parent.is_dir():
                raise UsageError(f"{option}: no folder {path.parent}")
        subs = find_notebooks(args.paths, args.assignment)
        if not subs:
            raise UsageError("no notebooks found in " + ", ".join(map(str, args.paths)))
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    checkers = checker_exercises()
    try:
        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        runs = asyncio.run(run_all(subs, args.timeout, args.jobs, progress))
    except KeyboardInterrupt:
        print("interrupted: no report written", file=sys.stderr)
        return 130
    grades, assignments = grade_all(subs, runs, args.solutions, checkers)
    print(format_report(grades, assignments))
    if args.csv is not None:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report_dict(grades, assignments, args.timeout), f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
