"""GitHub Classroom: a template for a course notebook's assignment repository, autograded.

    python -m course_tools.classroom NN DIR [--points [EXERCISE=]POINTS ...] [--ref REF]
                                             [--torch VERSION] [--python X.Y] [--timeout MINUTES]
                                             [--solutions DIR] [--notebooks DIR]

``NN`` names the course notebook (``01``, ``01_attention``); ``DIR`` (new, or empty) becomes the
template: push it to GitHub, mark it a template repository, and choose it as the assignment's
starter code. It holds the student notebook (from ``notebooks/``), a README for the student,
and ``.github/workflows/classroom.yml``: GitHub Classroom's autograding pattern, one
``classroom-resources/autograding-command-grader@v1`` step per exercise (its ``max-score`` the
exercise's points), then ``classroom-resources/autograding-grading-reporter@v1``.

The workflow first installs Python, PyTorch's CPU build pinned to ``--torch`` (default: the
version installed here) and the course at ``--ref`` (a tag or commit of :data:`build.REPO_URL`,
default :data:`build.REF`; a branch moves, so pin a tag), outside the student's repository. Each
exercise's command then runs the course's own grader on the pushed notebook,
``python -m course_tools.grade NOTEBOOK --assignment NN_name --require-pass EXERCISE``,
which exits with status 0 only when that exercise passed (the grader's own verdict: used the
reference and review count as not passed). The first command runs the notebook; the others
reuse its grades (``--cache``, in the job's temporary folder: the same bytes, the same grades).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from .platforms import PlatformError, course_notebook, exercises, points_of, torch_pin

WORKFLOW = Path(".github") / "workflows" / "classroom.yml"
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
COURSE = "$RUNNER_TEMP/course"  # the course's checkout, outside the student's repository
CACHE = "$RUNNER_TEMP/grades"  # the first exercise's command grades, the others reuse its grades
DEFAULT_TIMEOUT = 10  # minutes per exercise's command (the command grader's unit)


def _quoted(text: str) -> str:
    """``text`` as a YAML single-quoted scalar."""
    return "'" + text.replace("'", "''") + "'"


def grade_command(assignment: str, exercise: str) -> str:
    """The shell command that passes (status 0) only when ``exercise`` passed."""
    return (f'cd "{COURSE}" && python -m course_tools.grade "$GITHUB_WORKSPACE/{assignment}" '
            f'--assignment {Path(assignment).stem} --require-pass {exercise} --cache "{CACHE}"')


def workflow(assignment: str, points: dict[str, float], ref: str, torch: str, python: str,
             timeout: int = DEFAULT_TIMEOUT) -> str:
    """The text of ``classroom.yml`` for ``assignment`` (its exercises, in order, with their points)."""
    from . import build

    lines = [
        "# GitHub Classroom's autograding: one command-grader step per exercise, then the reporter.",
        f"# Made by `python -m course_tools.classroom` for {assignment}. Each command runs the course's",
        "# grader on the pushed notebook and passes only when that exercise passed.",
        "name: Autograding Tests",
        "'on':",
        "  - push",
        "  - repository_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    steps:",
        "      - name: Checkout code",
        "        uses: actions/checkout@v4",
        "      - name: Set up Python",
        "        uses: actions/setup-python@v5",
        "        with:",
        f"          python-version: {_quoted(python)}",
        f"      - name: Install PyTorch {torch} (CPU) and the course at {ref}",
        "        run: |",
        f'          git init -q "{COURSE}"',
        f'          git -C "{COURSE}" fetch -q --depth 1 {build.REPO_URL} {_shell_word(ref)}',
        f'          git -C "{COURSE}" checkout -q FETCH_HEAD',
        f'          python -m pip install -q "torch=={torch}" --index-url https://download.pytorch.org/whl/cpu',
        f'          python -m pip install -q -e "{COURSE}[tools]"',
    ]
    for name, value in points.items():
        lines += [
            f"      - name: {name}",
            f"        id: {name}",
            f"        uses: {COMMAND_GRADER}",
            "        with:",
            f"          test-name: {name}",
            "          setup-command: ''",
            f"          command: {_quoted(grade_command(assignment, name))}",
            f"          timeout: {timeout}",
            f"          max-score: {value:g}",
        ]
    lines += [
        "      - name: Autograding Reporter",
        f"        uses: {REPORTER}",
        "        env:",
        *(f'          {name.upper()}_RESULTS: "${{{{steps.{name}.outputs.result}}}}"' for name in points),
        "        with:",
        f"          runners: {','.join(points)}",
    ]
    return "\n".join(lines) + "\n"


def _shell_word(text: str) -> str:
    if not re.fullmatch(r"[\w./-]+", text):
        raise PlatformError(f"--ref: expected a tag, branch or commit, got {text!r}")
    return text


README = """# {stem}

Your assignment is the notebook `{assignment}`: fill in its exercise cells (the cells that
raise `NotImplementedError`), run it, commit and push. Every push is graded by GitHub
Classroom's autograding (the **Actions** tab shows each run; the total is on the assignment's
page):

{table}

How it is graded: the course's own grader takes the course's notebook, puts your exercise
cells in place of its stubs, runs it top to bottom in a fresh kernel and calls the course's
checker on each exercise. Only the exercise cells count: keep any helper you write inside the
exercise cell. An exercise answered with the course's own reference (`from course_utils import
...`) scores 0, as does one whose cell does something graded code has no reason to do (your
instructor looks at those). Keep the notebook's name and place.
"""


def make_template(name: str, folder: Path, solutions: Path = Path("solutions"), notebooks: Path = Path("notebooks"),
                  points: list[str] = (), ref: str | None = None, torch: str | None = None,
                  python: str | None = None, timeout: int = DEFAULT_TIMEOUT) -> dict[str, float]:
    """Write the template repository of course notebook ``name`` into ``folder``; returns each
    exercise's points."""
    from . import build

    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise PlatformError(f"{folder} exists and is not an empty folder")
    if not 1 <= timeout <= 360:
        raise PlatformError(f"--timeout: expected 1 to 360 minutes, got {timeout}")
    python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    if not re.fullmatch(r"3\.\d+", python):
        raise PlatformError(f"--python: expected a version such as 3.11, got {python!r}")
    notebook = course_notebook(solutions, name)
    student = Path(notebooks) / notebook.name
    if not student.is_file():
        raise PlatformError(f"--notebooks: no {notebook.name} in {notebooks} (run python -m course_tools.build)")
    chosen = points_of(list(points), exercises(solutions, notebook))
    text = workflow(notebook.name, chosen, ref or build.REF, torch_pin(torch), python, timeout)
    (folder / WORKFLOW.parent).mkdir(parents=True, exist_ok=True)
    (folder / WORKFLOW).write_text(text, encoding="utf-8")
    shutil.copyfile(student, folder / notebook.name)
    table = "\n".join(f"- `{e}`: {p:g} point(s)" for e, p in chosen.items())
    (folder / "README.md").write_text(README.format(stem=notebook.stem, assignment=notebook.name, table=table),
                                      encoding="utf-8")
    (folder / ".gitignore").write_text(".ipynb_checkpoints/\n__pycache__/\n", encoding="utf-8")
    return chosen


def main(argv: list[str] | None = None) -> int:
    from . import build

    parser = argparse.ArgumentParser(prog="python -m course_tools.classroom",
                                     description="Make a GitHub Classroom assignment template for a course notebook.")
    parser.add_argument("notebook", metavar="NN", help="the course notebook: 01, 01_attention, ...")
    parser.add_argument("folder", type=Path, metavar="DIR", help="the template repository to write (new or empty)")
    parser.add_argument("--points", action="append", default=[], metavar="[EXERCISE=]POINTS",
                        help="an exercise's points (repeatable); a bare number sets every exercise's (default 1)")
    parser.add_argument("--ref", help=f"the course's tag or commit the workflow installs (default {build.REF})")
    parser.add_argument("--torch", metavar="VERSION", help="the PyTorch release to install (default: this one's)")
    parser.add_argument("--python", metavar="X.Y", help="the Python the workflow sets up (default: this one's)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, metavar="MINUTES",
                        help=f"time limit of each exercise's command (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), metavar="DIR")
    parser.add_argument("--notebooks", type=Path, default=Path("notebooks"), metavar="DIR")
    args = parser.parse_args(argv)
    try:
        points = make_template(args.notebook, args.folder, args.solutions, args.notebooks, args.points, args.ref,
                               args.torch, args.python, args.timeout)
    except PlatformError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.folder}: {len(points)} exercises ({sum(points.values()):g} points), {WORKFLOW}")
    ref = args.ref or build.REF
    if not re.fullmatch(r"v?\d[\w.]*|[0-9a-f]{40}", ref):
        print(f"note: the workflow installs the course at {ref!r}, which looks like a branch: its grader changes "
              "when the branch moves; pass --ref with a release tag or a commit", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
