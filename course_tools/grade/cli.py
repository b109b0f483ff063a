"""Stage: the command line, ``python -m course_tools.grade PATH... [options]``: checks the
options (a usage error exits with status 2), chooses the isolation (the sandbox where ``bwrap``
works unless ``--no-sandbox``), grades the class, puts back any student's file that changed,
prints the report and writes ``--csv``, ``--json`` and ``--gradescope``. Exit status 0 when the run
completed, whatever the students' results (except with ``--require-pass``: 1 unless each exercise
named passed); 130 when interrupted."""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import time
from pathlib import Path

from .. import build
from .common import DEFAULT_TIMEOUT, UsageError
from .pipeline import find_notebooks, grade_class, restore_changed_files
from .report import format_report, from_report_dict, gradescope_results, report_dict, unpassed, write_csv
from .sandbox import sandbox_problem


def main(argv: list[str] | None = None) -> int:
    """The command: ``argv`` (default ``sys.argv[1:]``) in, the exit status out."""
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.grade",
        description="Run students' exercise cells in the course's notebooks, in fresh kernels, and tabulate "
                    "the checkers' verdicts.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, or folders of them")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit for all the cells of one notebook (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write one row per student x exercise")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every detail")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="notebooks run at a time (default 1)")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), metavar="DIR",
                        help="solution notebooks, from which the course's notebooks and exercises are made "
                             "(default: solutions)")
    parser.add_argument("--assignment", metavar="NAME",
                        help="grade every file as this course notebook (e.g. 01_attention), "
                             "for files named after students")
    parser.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=None,
                        help="run each kernel under bwrap: no network, the submissions and the course's files "
                             "hidden, read-only but its own folder (default: on where bwrap works; --no-sandbox "
                             "turns it off)")
    parser.add_argument("--check-time-limit", type=float, metavar="SECONDS",
                        help="time limit of one check inside a graded kernel (default: the checkers' own, 60)")
    parser.add_argument("--gradescope", type=Path, metavar="FILE",
                        help="write Gradescope's autograder results (results.json) for the notebook(s) graded, "
                             "one submission: one test per exercise")
    parser.add_argument("--points", action="append", default=[], metavar="[EXERCISE=]POINTS",
                        help="points of an exercise in --gradescope (repeatable); a bare number sets every "
                             "exercise's (default 1)")
    parser.add_argument("--require-pass", action="append", default=[], metavar="EXERCISE",
                        help="exit with status 1 unless EXERCISE passed in every notebook graded (repeatable; "
                             "GitHub Classroom's command grader)")
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="keep this run's grades in DIR and reuse them when the same notebooks (the same "
                             "bytes) are graded again with the same solutions and options (one job's commands)")
    args = parser.parse_args(argv)
    try:
        if not args.timeout > 0:
            raise UsageError("--timeout must be positive")
        if args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        default_points, points = parse_points(args.points)
        for option, path in (("--csv", args.csv), ("--json", args.json), ("--gradescope", args.gradescope)):
            if path is not None and not path.resolve().parent.is_dir():
                raise UsageError(f"{option}: no folder {path.parent}")
        if not (args.solutions.is_dir() and build.notebook_files(args.solutions)):
            raise UsageError(f"--solutions: no course notebooks NN_*.ipynb in {args.solutions}")
        subs = find_notebooks(args.paths, args.assignment)
        if not subs:
            raise UsageError("no notebooks found in " + ", ".join(map(str, args.paths)))
        if args.check_time_limit is not None and not args.check_time_limit > 0:
            raise UsageError("--check-time-limit must be positive")
        problem = sandbox_problem() if args.sandbox is not False else None
        if args.sandbox and problem:
            raise UsageError(problem)
        if args.cache is not None:
            try:
                args.cache.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise UsageError(f"--cache: cannot make the folder {args.cache}: {error.strerror}") from error
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # a grader started in the background by a shell or a script inherits SIGINT ignored: it
    # would then run on through `kill -INT` (and Ctrl-C in a terminal that brings it back)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    sandbox = args.sandbox if args.sandbox is not None else problem is None
    mode = ("sandbox: each kernel ran under bwrap (--no-sandbox to turn it off)" if sandbox else
            "no sandbox: " + ("turned off with --no-sandbox" if args.sandbox is False else problem or "")
            + "; the kernels ran with your permissions (see docs/instructors/index.md)")
    progress(f"Isolation: {mode}")
    hidden = [p.resolve() for p in args.paths]
    start = time.monotonic()
    cached = args.cache / f"{cache_key(subs, args, sandbox)}.json" if args.cache is not None else None
    reused = read_cache(cached) if cached is not None else None
    if reused is not None:
        grades, assignments = reused
        progress(f"reused the grades in {cached} (the same notebooks, solutions and options)")
    else:
        try:
            grades, assignments = grade_class(subs, args.solutions, args.timeout, args.jobs, sandbox,
                                              hidden, progress, args.check_time_limit)
        except KeyboardInterrupt:
            restore_changed_files(subs)
            print("interrupted: no report written", file=sys.stderr)
            return 130
    by_path = {g.path: g for g in grades}
    for sub in restore_changed_files(subs):  # the grader's hashes put back every change: a last resort
        by_path[str(sub.path)].flags.append(
            "its file was changed while grading ran, not by its own notebook; put back, and graded as it was read")
    if cached is not None and reused is None:  # (over whatever a graded notebook may have put there)
        cached.write_text(json.dumps(report_dict(grades, assignments, args.timeout)), encoding="utf-8")
    print(format_report(grades, assignments, mode))
    if args.csv is not None:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**report_dict(grades, assignments, args.timeout), "sandbox": sandbox}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    known = {e for info in assignments.values() for e in info["exercises"]}
    for option, names in (("--points", points), ("--require-pass", args.require_pass)):
        unknown = sorted(set(names) - known)
        if unknown:
            print(f"error: {option}: {', '.join(unknown)}: not an exercise of the notebook(s) graded "
                  f"(they have: {', '.join(sorted(known)) or 'none'})", file=sys.stderr)
            return 2
    if args.gradescope is not None:
        results = gradescope_results(grades, points, default_points, time.monotonic() - start)
        with open(args.gradescope, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        print(f"wrote {args.gradescope}")
    if args.require_pass:
        missing = unpassed(grades, args.require_pass)
        for line in missing:
            print(f"NOT PASSED: {line}")
        if missing:
            return 1
        print(f"passed: {', '.join(args.require_pass)}")
    return 0


def cache_key(subs, args, sandbox: bool) -> str:
    """What ``--cache`` keys a run by: every notebook's bytes, the solutions' and the options
    that change a grade."""
    digest = hashlib.sha256()
    for sub in subs:
        sub.data = sub.data if sub.data is not None else sub.path.read_bytes()  # read once: grading uses it
        digest.update(f"{sub.path.resolve()}\0{sub.assignment}\0".encode() + hashlib.sha256(sub.data).digest())
    for path in build.notebook_files(args.solutions):
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    digest.update(repr((args.timeout, args.check_time_limit, sandbox)).encode())
    return digest.hexdigest()[:32]


def read_cache(path: Path):
    """The grades and assignments kept in ``path`` (``--cache``); None when there are none."""
    try:
        return from_report_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_points(specs: list[str]) -> tuple[float, dict[str, float]]:
    """``--points`` values: ``(every exercise's points, {exercise: points})``; a bad one is a
    :class:`UsageError` naming it."""
    default, points = 1.0, {}
    for spec in specs:
        name, _, value = spec.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not number >= 0 or number == float("inf"):
            raise UsageError(f"--points: expected [EXERCISE=]POINTS with POINTS a number >= 0, got {spec!r}")
        if name:
            points[name] = number
        else:
            default = number
    return default, points

