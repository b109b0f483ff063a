"""Grade a class: run the students' exercise cells and check them (instructors).

    python -m course_tools.grade PATH... [--timeout SECONDS] [--csv FILE] [--json FILE]
                                         [--jobs N] [--solutions DIR] [--assignment NAME]
                                         [--sandbox | --no-sandbox] [--check-time-limit SECONDS]
                                         [--gradescope FILE] [--points [EXERCISE=]POINTS ...]
                                         [--require-pass EXERCISE ...] [--cache DIR]

``PATH`` is a student's notebook or a folder searched recursively for ``*.ipynb`` (files
and folders whose name starts with ``.``, such as ``.ipynb_checkpoints``, and
``__MACOSX`` are skipped). The students' files are read once, at the start, and never
changed (a file that changes during grading is put back and reported).

Only answers are graded
    The unit of an answer is the *exercise cell*: the cell that defines the exercise's
    function or class (found by its cell id, else as the last cell that defines that
    name). The grader builds the notebook to run from the course's own student notebook
    of the same assignment (made from ``--solutions DIR``, default ``solutions``), puts
    the student's exercise cells in place of the stubs, and runs it top to bottom in a
    fresh kernel, in a temporary folder. Every other cell of the submission is ignored
    (the report lists the changed or added cells it ignored). After each exercise cell
    the grader calls the course's checker itself on the name the exercise defines; check
    calls in the notebook count for nothing.

How a verdict travels
    A first cell, run before any student code, imports the checkers (so they capture
    what they compare with), snapshots ``torch``, ``course_utils`` and the builtins, and
    installs a Python audit hook. The hook is the only holder of a key that the grader
    made for this run and passed in a file deleted at once; it runs each check when the
    grader's check cell raises an audit event naming a fresh nonce, undoes any change
    to the snapshot first, and publishes the verdict signed (HMAC-SHA256) with that key
    and nonce. The grader keeps only a verdict whose signature and nonce are right,
    from the check cell that asked for it. The same hook refuses, and reports, what
    graded code has no reason to do: start processes, send signals, load C libraries,
    walk frames or the garbage collector, trace, open the network, or read or write files
    outside its own folder. The checkers' ``course_utils`` then leaves ``sys.modules``: the
    notebook gets a public copy in which its own references, every later notebook's, and
    their helpers are guards that only the course's own code gets through, and the real
    objects' own code is gated the same way (:mod:`.hide_references`).

Per exercise
    ``passed``; ``failed`` (the checker's diagnosis); ``not attempted`` (the stub still
    raises NotImplementedError); ``error`` (the student's code raised inside the check);
    ``not run`` (no verdict: the notebook stopped first, or the exercise cell raised
    before defining the name); ``used the reference`` (the answer is the course's own
    reference: the same object, an alias, a wrapper, a subclass, the cell imports that
    name from ``course_utils``, or the code asked for the reference or a helper of it,
    hidden while grading; other references, such as earlier notebooks', are allowed); ``review`` (the exercise cell does something graded code has no reason to
    do, named with its line; a human should look. A ``review`` is never counted as
    passed, whatever the checker said).

Per notebook
    ``ok``; ``crashed`` (a cell raised, named, later cells still run; or the kernel died);
    ``timed out`` (its cells took more than ``--timeout`` seconds in all, kernel start-up
    not counted); ``invalid notebook`` (not a notebook); ``wrong assignment`` (the
    notebook is another course notebook, recognised from its header link and its
    exercise cells, or no course notebook at all): nothing is run.

Output: one table per assignment on stdout (students x the assignment's official
exercises, symbols explained below it), then one line per problem, flag and ignored
cell. ``--csv FILE``: one row per student x exercise; ``--json FILE``: everything.
``--jobs N`` runs N notebooks at a time. The exit status is 0 when the run completed,
whatever the students' results, 2 for a usage error, and 130 when interrupted.

Platforms: ``--gradescope FILE`` writes Gradescope's results for one submission (one test per
exercise worth ``--points``, default 1; an ``R`` or ``!`` exercise scores 0 and its test is
hidden from the student, see docs/instructors/gradescope.md); ``--require-pass EXERCISE``
makes the exit status 1 unless that exercise passed (GitHub Classroom's command grader, see
docs/instructors/github-classroom.md); ``--cache DIR`` reuses a run's grades when the same
notebooks, solutions and options come again.

Isolation: every process a notebook starts is killed when its turn ends, detached ones
too (on Linux the grader adopts orphans as a child subreaper and kills every
descendant); the kernel's command line and environment hold no path of the
submissions. Each kernel imports its own read-only copy of the course package, hashed
after its turn; the class's files, the solutions and the instructor's course are
compared with their state at the start after each turn, put back, and the change laid
on the notebook whose turn it was (:mod:`course_tools.guard`). Where ``bwrap``
(Debian's ``bubblewrap``) works, each kernel runs in its sandbox unless
``--no-sandbox``: no network, its own process list, the submissions and the course's
files hidden, everything read-only but its own folder. Without it, students' code runs
with your permissions, and only the audit hook and those hashes (which cover only the
files named) stand between it and your files.


Stages (as nbgrader's preprocessors are), each a module of this package, in the order a
notebook meets them:

=========================  ======================================================
:mod:`.plan`               the course's assignments and exercises; which one a notebook is;
                           the cells to run (the course's notebook, the student's exercise cells)
:mod:`.scan`               each exercise cell read without running it: flags and the reference
:mod:`.sandbox`            the kernel's environment, ``bwrap``, killing what a turn left running
:mod:`.kernel_side`        the set-up sent into the kernel as source: audit hook, signed verdicts
:mod:`.hide_references`    the graded notebook's references out of reach in the kernel
:mod:`.run`                one notebook run in a fresh kernel; the signed verdicts kept
:mod:`.verdicts`           what a run gave turned into the notebook's grade
:mod:`.pipeline`           the whole class through the stages, with the file guard
:mod:`.report`             the tables, the CSV and the JSON
:mod:`.cli`                the command line
=========================  ======================================================

Every name of the grader is importable from ``course_tools.grade``, as it was when the grader
was one module.
"""  # noqa: E501

from __future__ import annotations

from ..guard import FileGuard, PackageCopy
from .cli import main
from .common import (AUDIT_EVENT, CHECK_SOURCE, CRASHED, DEFAULT_TIMEOUT, END_SOURCE, ERROR, FAILED, FROM_VERDICT,
                     INVALID, NOT_ATTEMPTED, NOT_RUN, NOTEBOOK_STATUSES, OK, PASSED, REFERENCE, REVIEW,
                     STARTUP_TIMEOUT, SYMBOLS, TIMED_OUT, VERDICT_MIME, WRONG, UsageError, first_line)
from .kernel_side import ipykernel_file_name, kernel_setup_source, sign, uses_reference
from .pipeline import find_notebooks, grade_class, read_student_notebook, restore_changed_files, student_name
from .plan import (CHECK_CALL, HEADER_LINK, CourseNotebook, Exercise, Plan, Step, check_calls, checker_exercises,
                   header_assignment, load_course, plan_run, recognise, solution_exercises, which_assignment)
from .report import (CSV_COLUMNS, LEGEND, format_report, from_report_dict, gradescope_results, report_dict,
                     unpassed, write_csv)
from .run import RUNNING, GradingClient, Run, run_plan
from .sandbox import (CHECK_TIME_LIMIT_VARIABLE, PR_SET_CHILD_SUBREAPER, become_subreaper, child_processes,
                      grading_env, kill_descendants, launch_chain, sandbox_prefix, sandbox_problem)
from .scan import (ALLOWED_IMPORTS, BASE_ALIASES, DANGEROUS_ATTRS, DYNAMIC_CALLS, PROTECTED_ROOTS, CellScan,
                   defined_names, import_aliases, parse_cell, scan_exercise_cell)
from .verdicts import (SYSTEM_REFUSALS, ExerciseGrade, NotebookGrade, Submission, cell_errors, deduplicated,
                           flag_text, grade_run, leading_blank_lines, not_graded, review_all, system_refusals,
                           wrote_outside)

# The names the grader's tests and benchmarks knew when it was one module, whose stage now
# exports them publicly.
_children, _RUNNING, _GradingClient, _flag_text, _uses_reference = (
    child_processes, RUNNING, GradingClient, flag_text, uses_reference)
