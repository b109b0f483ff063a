"""Gradescope: a course notebook's autograder bundle, and what the bundle runs for each submission.

    python -m course_tools.gradescope NN [-o autograder.zip] [--points [EXERCISE=]POINTS ...]
                                         [--timeout SECONDS] [--torch VERSION] [--solutions DIR]
    python -m course_tools.gradescope --autograde ROOT      (the bundle's run_autograder runs this)

``NN`` names the course notebook (``01``, ``01_attention``). The zip (upload it as a programming
assignment's autograder) holds, at its root:

``setup.sh``          run once by Gradescope when it builds the image: installs Python (the
                      image's ``python3``, 3.10 or later), PyTorch's CPU build pinned to
                      ``--torch`` (default: the version installed here), and the course from
                      ``course/`` (editable), then checks both versions. Nothing is cloned.
``run_autograder``    run for every submission: grades the notebook in ``ROOT/submission``
                      with the course's own grader into ``ROOT/results/results.json``
                      (``ROOT``: its first argument, else ``$AUTOGRADER_ROOT``, else
                      ``/autograder``; the Python: ``$COURSE_PYTHON``, else the one
                      ``setup.sh`` made). If nothing else could write a result, it writes
                      one itself: score 0 and what went wrong.
``config.json``       the assignment, its exercises and their points, the time limit, the
                      versions pinned.
``course/``           this course's source at this version (the package, ``data/``, every
                      solution): the bundle grades with its own copy, whatever happens upstream.

For each submission (:func:`autograde`): the one notebook submitted (any name; with several,
the one named like the assignment) is graded as the assignment by ``python -m
course_tools.grade --gradescope`` (one test per exercise, the checker's feedback as its output;
an exercise that used the reference or is up for review scores 0 and its test is hidden from
the student, shown to the instructor). No notebook, several, a notebook that is not one, or a
grader that stops: a result with score 0 that says so, never a missing ``results.json``. The
grader's full report goes to Gradescope's stdout, which only instructors see.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from .platforms import PlatformError, course_notebook, exercises, points_of, torch_pin

SOURCE_PARTS = ("course_utils", "course_tools", "data")  # what a grader runs from, as in a checkout
SOURCE_FILES = ("pyproject.toml", "README.md")  # what `pip install` of the course reads
SKIPPED = ("__pycache__", ".ipynb_checkpoints")
VENV = "/opt/course-venv"  # where setup.sh puts the course's Python
DEFAULT_TIMEOUT = 300.0

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (network on).
# Pinned: PyTorch @TORCH@ (CPU build) and transformer-course @VERSION@ from ./course, the
# bundle's own copy of the course (nothing is cloned or downloaded from the course's repository).
set -euo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="@VENV@"
TORCH_VERSION="@TORCH@"
COURSE_VERSION="@VERSION@"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# bubblewrap: the grader's sandbox, used where the container allows it (else the grader says so)
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap
python3 - <<'PY'
import sys

if sys.version_info < (3, 10):
    sys.exit(f"the course needs Python 3.10 or later, this image has {sys.version.split()[0]}: choose a newer base image")
PY
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --no-cache-dir --upgrade pip
"$VENV/bin/python" -m pip install --no-cache-dir "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu
"$VENV/bin/python" -m pip install --no-cache-dir -e "$SOURCE/course[tools]"
"$VENV/bin/python" - "$TORCH_VERSION" "$COURSE_VERSION" <<'PY'
import sys

import course_utils
import torch

torch_version, course_version = sys.argv[1:]
assert torch.__version__.split("+")[0] == torch_version, f"torch {torch.__version__}, not {torch_version}"
assert course_utils.__version__ == course_version, f"course {course_utils.__version__}, not {course_version}"
print(f"installed: torch {torch.__version__}, transformer-course {course_utils.__version__}")
PY
"""  # noqa: E501

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission. ROOT: the first argument, else $AUTOGRADER_ROOT,
# else /autograder; the Python: $COURSE_PYTHON, else the one setup.sh installed.
set -u
ROOT="${1:-${AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${COURSE_PYTHON:-@VENV@/bin/python}"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
# from the bundle's own copy of the course: its course_tools, its checkers
(cd "$ROOT/source/course" && "$PYTHON" -m course_tools.gradescope --autograde "$ROOT")
status=$?
if [ ! -s "$RESULTS" ]; then  # the course's Python could not even start: a result all the same
  cat > "$RESULTS" <<EOF
{"score": 0, "execution_time": 0, "stdout_visibility": "hidden", "tests": [],
 "output": "The autograder could not grade this submission: it stopped (status $status) before writing a result. Your instructor can see why in the autograder's output."}
EOF
fi
exit 0
"""  # noqa: E501


# --------------------------------------------------------------------------- the bundle


def course_version(root: Path) -> str:
    """``course_utils.__version__`` as written in the source under ``root`` (not imported)."""
    text = (root / "course_utils" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not match:
        raise PlatformError(f"no __version__ in {root / 'course_utils' / '__init__.py'}")
    return match.group(1)


def source_files(root: Path, solutions: Path) -> list[tuple[Path, str]]:
    """``(file, path in the bundle's course/)``: the package and its data, the files ``pip
    install`` reads, and every solution (the grader hides the references of the notebooks after
    the graded one, so it needs them all)."""
    for name in SOURCE_FILES:
        if not (root / name).is_file():
            raise PlatformError(f"no {name} in {root}: run this from a checkout of the course")
    found = [(root / name, name) for name in SOURCE_FILES]
    for folder, name in [*((root / part, part) for part in SOURCE_PARTS), (Path(solutions), "solutions")]:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if not path.is_file() or any(p in SKIPPED for p in rel.parts) or path.suffix == ".pyc":
                continue
            if name == "solutions" and (len(rel.parts) > 1 or path.suffix != ".ipynb"):
                continue
            found.append((path, f"{name}/{rel.as_posix()}"))
    return found


def _script(text: str, **values: str) -> str:
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def build_bundle(name: str, output: Path, solutions: Path = Path("solutions"), points: list[str] = (),
                 timeout: float = DEFAULT_TIMEOUT, torch: str | None = None) -> dict:
    """Write the autograder zip of course notebook ``name`` to ``output``; returns its config."""
    from .kernels import PACKAGE_ROOT

    if not timeout > 0:
        raise PlatformError(f"--timeout: expected a positive number of seconds, got {timeout}")
    if not Path(output).resolve().parent.is_dir():
        raise PlatformError(f"-o: no folder {Path(output).parent}")
    notebook = course_notebook(solutions, name)
    names = exercises(solutions, notebook)
    config = {
        "assignment": notebook.name,
        "exercises": names,
        "points": points_of(list(points), names),
        "timeout": timeout,
        "torch": torch_pin(torch),
        "course_version": course_version(PACKAGE_ROOT),
    }
    values = {"TORCH": config["torch"], "VERSION": config["course_version"], "VENV": VENV}
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, text, mode in (("setup.sh", _script(SETUP_SH, **values), 0o755),
                                 ("run_autograder", _script(RUN_AUTOGRADER, **values), 0o755),
                                 ("config.json", json.dumps(config, indent=2) + "\n", 0o644)):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16  # the scripts executable once unzipped
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, text)
        for path, rel in source_files(PACKAGE_ROOT, solutions):
            bundle.write(path, f"course/{rel}")
    return config


# --------------------------------------------------------------------------- each submission


def _submitted(folder: Path) -> list[Path]:
    """The notebooks under ``folder``, as the grader finds them (checkpoints and ``__MACOSX`` skipped)."""
    return sorted(p for p in folder.rglob("*.ipynb")
                  if p.is_file() and not any(part.startswith(".") or part == "__MACOSX"
                                             for part in p.relative_to(folder).parts))


def failed_result(config: dict, message: str) -> dict:
    """A result when nothing could be graded: every exercise 0 of its points, and why."""
    tests = [{"name": name, "number": str(i + 1), "score": 0.0, "max_score": float(config["points"][name]),
              "status": "failed", "output": f"Not graded: {message}", "visibility": "visible"}
             for i, name in enumerate(config["exercises"])]
    return {"score": 0.0, "execution_time": 0, "output": f"Not graded: {message}", "stdout_visibility": "hidden",
            "tests": tests}


def _write(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def autograde(root: Path, python: str = sys.executable) -> int:
    """Grade the submission under ``root`` (Gradescope's ``/autograder`` layout) into
    ``root/results/results.json``; always writes a result. Returns the grader's exit status
    (0 when there was nothing to run)."""
    source, results = root / "source", root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    assignment = config["assignment"]
    found = _submitted(root / "submission") if (root / "submission").is_dir() else []
    named = [p for p in found if p.name == assignment]
    chosen = named if named else found
    if len(chosen) != 1:
        listed = ", ".join(str(p.relative_to(root / "submission")) for p in found[:5])
        why = (f"no notebook (.ipynb) in the submission; upload your {assignment}" if not found else
               f"{len(found)} notebooks in the submission ({listed}) and not one named {assignment}; "
               "upload only that one")
        print(why)
        _write(results, failed_result(config, why))
        return 0
    points = [f"{name}={value:g}" for name, value in config["points"].items()]
    command = [python, "-m", "course_tools.grade", str(chosen[0]), "--assignment", assignment,
               "--solutions", str(source / "course" / "solutions"), "--timeout", f"{config['timeout']:g}",
               "--gradescope", str(results), *(f"--points={p}" for p in points)]
    print("running:", " ".join(command), flush=True)
    status = subprocess.run(command, cwd=source / "course", check=False).returncode
    if not results.is_file():
        _write(results, failed_result(
            config, f"the grader stopped (status {status}) before writing a result; your instructor can see why"))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools.gradescope",
                                     description="Build a course notebook's Gradescope autograder (a zip).")
    parser.add_argument("notebook", nargs="?", metavar="NN", help="the course notebook: 01, 01_attention, ...")
    parser.add_argument("-o", "--output", type=Path, default=Path("autograder.zip"), metavar="ZIP",
                        help="the bundle to write (default autograder.zip)")
    parser.add_argument("--points", action="append", default=[], metavar="[EXERCISE=]POINTS",
                        help="an exercise's points (repeatable); a bare number sets every exercise's (default 1)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit for all the cells of a submission (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--torch", metavar="VERSION", help="the PyTorch release to install (default: this one's)")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), metavar="DIR",
                        help="the solution notebooks (default: solutions)")
    parser.add_argument("--autograde", type=Path, metavar="ROOT",
                        help="grade the submission in ROOT (Gradescope's /autograder layout): what run_autograder does")
    args = parser.parse_args(argv)
    if args.autograde is not None:
        return autograde(args.autograde.resolve())
    try:
        if args.notebook is None:
            raise PlatformError("name the course notebook (NN), or give --autograde ROOT")
        config = build_bundle(args.notebook, args.output, args.solutions, args.points, args.timeout, args.torch)
    except PlatformError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    total = sum(config["points"].values())
    print(f"wrote {args.output}: {config['assignment']}, {len(config['exercises'])} exercises ({total:g} points), "
          f"torch {config['torch']}, transformer-course {config['course_version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
