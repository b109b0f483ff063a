"""Stage: the command line, ``python -m course_tools.grade PATH... [options]``: checks the
options (a usage error exits with status 2), chooses the isolation (the sandbox where ``bwrap``
works unless ``--no-sandbox``), grades the class, puts back any student's file that changed,
prints the report and writes ``--csv`` and ``--json``. Exit status 0 when the run completed,
whatever the students' results; 130 when interrupted."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from .. import build
from .common import DEFAULT_TIMEOUT, UsageError
from .pipeline import find_notebooks, grade_class, restore_changed_files
from .report import format_report, report_dict, write_csv
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
    args = parser.parse_args(argv)
    try:
        if not args.timeout > 0:
            raise UsageError("--timeout must be positive")
        if args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        for option, path in (("--csv", args.csv), ("--json", args.json)):
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
    print(format_report(grades, assignments, mode))
    if args.csv is not None:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**report_dict(grades, assignments, args.timeout), "sandbox": sandbox}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0

