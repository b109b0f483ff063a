"""Stage: the whole class. Finds the notebooks to grade (:func:`find_notebooks`) and takes every
submission through the stages (:func:`grade_class`): plan, run (``--jobs`` at a time), verdicts;
around each turn the file guard compares the class's files, the solutions and the instructor's
course with their state at the start, puts them back and lays a change on the notebook whose
turn it was (:mod:`course_tools.guard`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbformat.reader import NotJSONError

from .. import build
from ..guard import FileGuard, remove_stale_copies
from ..kernels import PACKAGE_ROOT
from .common import DEFAULT_TIMEOUT, INVALID, WRONG, UsageError, first_line
from .plan import Plan, checker_exercises, load_course, plan_run, which_assignment
from .run import run_plan
from .sandbox import become_subreaper
from .verdicts import NotebookGrade, Submission, grade_run, not_graded, review_all, wrote_outside


def read_student_notebook(data: bytes):
    """The notebook in ``data`` (nbformat v4, converted if older); raises if it is not one."""
    nb = nbformat.reads(data.decode("utf-8"), as_version=4, capture_validation_error={})
    if not isinstance(nb.get("cells"), list):
        raise ValueError("no list of cells")
    return nb


def student_name(path: Path) -> str:
    """The parent folder's name for a file named like a course notebook, else the stem."""
    if build.NOTEBOOK_NAME.match(path.name):
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
        name = assignment or (path.name if build.NOTEBOOK_NAME.match(path.name) else "")
        subs.append(Submission(path, student_name(path), name))
    return subs


def grade_class(
    subs: list[Submission], solutions: Path, timeout: float = DEFAULT_TIMEOUT, jobs: int = 1, sandbox: bool = False,
    hidden: Iterable[Path] = (), progress: Callable[[str], None] | None = None,
    check_time_limit: float | None = None,
) -> tuple[list[NotebookGrade], dict[str, dict]]:
    """Grade every submission; returns the grades (in the order of ``subs``) and, per
    assignment, its solution and exercises (the table's columns).

    Each kernel imports its own copy of the course package, checked after its turn; and after
    each turn every file of the class (``hidden``, else the submissions), the solutions and the
    instructor's course is compared with what it was at the start and put back. A change is
    laid at the door of the notebook whose turn it was; when other notebooks ran at the same
    time (``jobs`` > 1), each of them is graded again alone to find which one it was."""
    checkers = checker_exercises()
    course = load_course(solutions, checkers)
    remove_stale_copies()  # a grader killed (SIGKILL) before it could remove its kernels' copies
    for sub in subs:
        if sub.data is None:
            sub.data = sub.path.read_bytes()
    hidden = list(hidden) or [s.path for s in subs]
    course_files = [Path(solutions).resolve(), *(PACKAGE_ROOT / part for part in ("course_utils", "course_tools", "data"))]  # noqa: E501
    guard = FileGuard([*hidden, *course_files], known={s.path: s.data for s in subs if s.data is not None})
    hidden = [*hidden, *course_files]  # in the sandbox the instructor's course is out of sight too
    grades: list[NotebookGrade | None] = [None] * len(subs)
    jobs_to_run = []
    for i, sub in enumerate(subs):
        try:
            nb = read_student_notebook(sub.data)
        except NotJSONError:
            grades[i] = not_graded(sub, course.get(sub.assignment), INVALID,
                                   "not a notebook: the file is not JSON (cut short, or not a notebook?)")
            continue
        except Exception as exc:  # noqa: BLE001 - whatever the file is, it is not a notebook we can run
            grades[i] = not_graded(sub, course.get(sub.assignment), INVALID,
                                   f"not a notebook: {type(exc).__name__}: {first_line(exc)[:120]}")
            continue
        assignment, wrong = which_assignment(nb, sub.assignment, course)
        if assignment is None:
            grades[i] = not_graded(sub, course.get(sub.assignment), WRONG, wrong)
            continue
        sub.assignment = assignment
        jobs_to_run.append((i, sub, plan_run(nb, course[assignment])))

    async def run_all() -> None:
        limit = asyncio.Semaphore(jobs)
        done = 0
        loop = asyncio.get_running_loop()

        def quiet_dead_kernels(loop, context):
            # nbclient turns the cancellation of a cell (Ctrl-C) into a DeadKernelError nobody awaits
            if not isinstance(context.get("exception"), DeadKernelError):
                loop.default_exception_handler(context)

        loop.set_exception_handler(quiet_dead_kernels)

        active: set[int] = set()  # the notebooks running now
        window: set[int] = set()  # those that ran at some time since the files were last checked
        unclear: list[tuple[set[int], list[str]]] = []  # changes that more than one of them could have made
        blamed: set[int] = set()

        async def one(i: int, sub: Submission, plan: Plan, again: bool = False) -> None:
            nonlocal done
            async with limit:
                active.add(i)
                window.add(i)
                try:
                    run = await run_plan(plan, course[sub.assignment], timeout, sandbox, hidden, check_time_limit)
                finally:
                    active.discard(i)
                    changes = [str(c) for c in guard.check()]
                    suspects = set(window)
                    window.clear()
                    window.update(active)
            grades[i] = grade = grade_run(sub, plan, run, course[sub.assignment])
            if changes or run.package_changes:
                if suspects == {i}:
                    blamed.add(i)
                    if changes:
                        review_all(grade, wrote_outside(changes))
                    if progress is not None:
                        progress(f"!! {sub.path}: {', '.join(grade.flags[-1:])}")
                else:
                    unclear.append((suspects, changes + run.package_changes))
            if progress is not None:
                counter = "again, alone" if again else f"{done + 1}/{len(jobs_to_run)}"
                progress(f"[{counter}] {sub.path}: {grade.status} ({run.seconds:.1f} s)")
            done += not again

        await asyncio.gather(*(one(*job) for job in jobs_to_run))
        # a change that one of several notebooks running together made: each is run again alone
        # (a clean run: its grade replaces the first one), and the change is the one's that repeats it
        suspects = sorted(set().union(*(s for s, _ in unclear)))
        found = len(unclear)
        del unclear[:]
        by_index = {job[0]: job for job in jobs_to_run}
        for i in suspects:
            await one(*by_index[i], again=True)
        if found and not blamed & set(suspects):
            for i in suspects:  # nobody did it again: each of them stays under suspicion
                review_all(grades[i], "a file outside its folder changed while this notebook and others ran, and "
                                      "none of them changed it again when run alone")

    become_subreaper()
    asyncio.run(run_all())
    assignments: dict[str, dict] = {}
    for sub in subs:
        info = assignments.setdefault(sub.assignment, {"solution": None, "exercises": []})
        if sub.assignment in course:
            info["solution"] = str(Path(solutions) / sub.assignment)
            info["exercises"] = [e.name for e in course[sub.assignment].exercises]
    return [g for g in grades if g is not None], assignments


def restore_changed_files(subs: list[Submission]) -> list[Submission]:
    """Put back every student's file that changed while grading ran (a notebook found it);
    returns those submissions."""
    changed = []
    for sub in subs:
        if sub.data is None:
            continue
        try:
            same = sub.path.read_bytes() == sub.data
        except OSError:
            same = False
        if not same:
            sub.path.write_bytes(sub.data)
            changed.append(sub)
    return changed


