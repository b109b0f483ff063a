"""Run every student notebook (``notebooks/NN_*.ipynb``) top to bottom, as a student who
has written nothing yet would, and check that it fails only where it should.

A student notebook passes when
- the only errors are ``NotImplementedError`` (from the unfilled exercises);
- the Colab set-up cell and every cell before the first exercise run without error, and
  the set-up cell prints nothing (outside Colab it does nothing);
- every cell that calls a ``check_*`` function prints a "not implemented yet" verdict
  and raises nothing (checkers never raise).

Notebooks 07 and 09 run with their demonstrations shortened as in the other notebook runs
(tests/notebook_runs.py's ``SHORTER``): the same cells on less data.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_runs import SHORTER, shortened

from course_tools import build
from course_tools.kernels import run_notebook

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CELL_TIMEOUT = 120  # seconds per cell

CHECK_CALL = re.compile(r"^(?!\s*def\s).*\bcheck_\w+\s*\(", re.MULTILINE)
NOT_IMPLEMENTED_VERDICT = re.compile(r"not implemented yet", re.IGNORECASE)


def execute(nb, cwd: Path):
    """Run all cells of ``nb`` in place, errors allowed, in a kernel using ``sys.executable``
    (this checkout's course_utils first on the path; figures drawn inline, so that a plotting
    error shows: under Agg figures are never drawn)."""
    return run_notebook(nb, cwd, CELL_TIMEOUT, allow_errors=True)


# --------------------------------------------------------------------------- classification


def errors(cell) -> list[tuple[str, str]]:
    """``(ename, evalue)`` of every error output of a cell."""
    return [(o.ename, o.evalue) for o in cell.get("outputs", []) if o.output_type == "error"]


def output_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        for mime in ("text/plain", "text/markdown", "text/html"):
            parts.append(output.get("data", {}).get(mime, ""))
    return "\n".join(parts)


def is_exercise(cell) -> bool:
    return cell.cell_type == "code" and all(s in cell.source for s in build.CODE_STUB)


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(CHECK_CALL.search(cell.source))


def notebook_problems(nb) -> list[str]:
    """What is wrong with an executed student notebook (empty list: nothing)."""
    problems = []
    cells = nb.cells

    def where(i):
        first = cells[i].source.strip().split("\n")[0][:60]
        return f"cell {i} ({first!r})"

    setup = [i for i, c in enumerate(cells) if build.SETUP_TAG in c.metadata.get("tags", [])]
    if not setup:
        problems.append(f"no cell tagged {build.SETUP_TAG}")
    first_exercise = next((i for i, c in enumerate(cells) if is_exercise(c)), None)
    if first_exercise is None:
        problems.append("no exercise cell (`# YOUR CODE HERE` / `raise NotImplementedError()`)")

    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        cell_errors = errors(cell)
        for ename, evalue in cell_errors:
            if ename != "NotImplementedError":
                problems.append(f"{where(i)}: {ename}: {evalue}")
            elif first_exercise is None or i < first_exercise:
                problems.append(f"{where(i)}: NotImplementedError before the first exercise")
        if i in setup and cell.get("outputs"):
            problems.append(f"{where(i)}: the set-up cell printed something outside Colab")
        if is_check_cell(cell):
            if cell_errors:
                problems.append(f"{where(i)}: a cell calling a checker raised {cell_errors[0][0]}")
            elif not NOT_IMPLEMENTED_VERDICT.search(output_text(cell)):
                problems.append(f"{where(i)}: calls a checker but printed no 'not implemented yet' verdict")
    return problems


# --------------------------------------------------------------------------- the classifier itself


def executed(*cells):
    """A notebook as if executed: ``cells`` are (source, outputs, tags)."""
    nb = nbformat.v4.new_notebook()
    for source, outputs, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.outputs = [nbformat.v4.new_output(**o) for o in outputs]
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


SETUP_OK = ("import sys", [], ["colab-setup"])
EXERCISE = ("def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()", [], None)
NIE = {"output_type": "error", "ename": "NotImplementedError", "evalue": "", "traceback": []}
NAME_ERROR = {"output_type": "error", "ename": "NameError", "evalue": "name 'f' is not defined", "traceback": []}
VERDICT = {"output_type": "stream", "name": "stdout", "text": "check_f: not implemented yet.\n"}
PASSED = {"output_type": "stream", "name": "stdout", "text": "check_f: passed.\n"}


@pytest.mark.parametrize(
    "cells, expected",
    [
        ((SETUP_OK, EXERCISE, ("check_f(f)", [VERDICT], None), ("f()", [NIE], None)), []),
        ((SETUP_OK, EXERCISE, ("checks.check_f(f)", [VERDICT], None)), []),
        ((SETUP_OK, EXERCISE, ("g(f)", [NAME_ERROR], None)), ["cell 2 ('g(f)'): NameError: name 'f' is not defined"]),
        ((SETUP_OK, ("x = 1", [NAME_ERROR], None), EXERCISE), ["cell 1 ('x = 1'): NameError"]),
        ((SETUP_OK, ("f()", [NIE], None), EXERCISE), ["cell 1 ('f()'): NotImplementedError before the first exercise"]),
        ((("import sys", [NAME_ERROR], ["colab-setup"]), EXERCISE), ["cell 0 ('import sys'): NameError",
                                                                    "the set-up cell printed something"]),
        ((("import sys", [VERDICT], ["colab-setup"]), EXERCISE), ["the set-up cell printed something"]),
        ((("import sys", [], None), EXERCISE), ["no cell tagged colab-setup"]),
        ((SETUP_OK, ("f = 1", [], None)), ["no exercise cell"]),
        ((SETUP_OK, EXERCISE, ("check_f(f)", [PASSED], None)), ["cell 2 ('check_f(f)'): calls a checker but printed no"]),  # noqa: E501
        ((SETUP_OK, EXERCISE, ("check_f(f)", [NIE], None)), ["cell 2 ('check_f(f)'): a cell calling a checker raised NotImplementedError"]),  # noqa: E501
        ((SETUP_OK, EXERCISE, ("check_f(f)", [VERDICT, NAME_ERROR], None)), ["NameError", "a cell calling a checker raised NameError"]),  # noqa: E501
        # defining a checker is not calling one
        ((SETUP_OK, ("def check_f(f):\n    pass", [], None), EXERCISE), []),
    ],
)
def test_notebook_problems_classifies_outputs(cells, expected):
    problems = notebook_problems(executed(*cells))
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem, (problem, fragment)


def build_fixture(tmp_path: Path, folder: str):
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    shutil.copytree(FIXTURES / folder, solutions)
    assert build.main(["--solutions", str(solutions), "--notebooks", str(notebooks)]) == 0
    (path,) = build.notebook_files(notebooks)
    return path


def test_fixture_student_notebook_fails_only_where_it_should(tmp_path):
    path = build_fixture(tmp_path, "solutions")
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)"))
    execute(nb, path.parent)

    assert notebook_problems(nb) == []
    # the kernel ran in this environment
    assert nb.cells[-1].outputs[0].text.strip() == sys.prefix
    # ... and the run did hit the stubs: an exercise stub raised, and the checker said so
    by_id = {cell.id: cell for cell in nb.cells}
    # (the stub's message names the exercise: see build.stub_message)
    assert errors(by_id["0a1b2c3d"]) == [("NotImplementedError", build.stub_message("Stats"))]
    assert "pi = 3.1416" in output_text(by_id["0a1b2c3d"])
    assert "check_mean: not implemented yet." in output_text(by_id["c4d5e6f7"])
    assert by_id["colab-setup"].outputs == []


def test_fixture_with_a_name_error_is_reported(tmp_path):
    # The `def` line sits inside the solution block, so the student version defines nothing.
    path = build_fixture(tmp_path, "solutions_bad")
    nb = execute(nbformat.read(path, as_version=4), path.parent)
    problems = notebook_problems(nb)
    assert problems == [
        "cell 5 ('check_double(double)'): NameError: name 'double' is not defined",
        "cell 5 ('check_double(double)'): a cell calling a checker raised NameError",
    ]


# --------------------------------------------------------------------------- the repository

NOTEBOOKS = build.notebook_files(REPO / "notebooks") if (REPO / "notebooks").is_dir() else []


# Notebook 07's switch between training (about 1.5 minutes) and loading the pretrained
# checkpoint. The solution notebook trains under nbval; the student copy runs with
# TRAIN = False, which covers the other branch and keeps CI short.
TRAIN_SWITCH = re.compile(r"^TRAIN = True\b", re.MULTILINE)


def load_pretrained_instead(nb) -> int:
    """Set ``TRAIN = False`` in the cell that chooses; returns the number of cells changed."""
    changed = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and TRAIN_SWITCH.search(cell.source):
            cell.source = TRAIN_SWITCH.sub("TRAIN = False", cell.source)
            changed += 1
    return changed


def test_load_pretrained_instead_flips_only_the_switch():
    nb = executed(("TRAIN = True  # False: load the checkpoint", [], None), ("if TRAIN:\n    TRAIN = True", [], None))
    assert load_pretrained_instead(nb) == 1
    assert nb.cells[0].source == "TRAIN = False  # False: load the checkpoint"
    assert nb.cells[1].source == "if TRAIN:\n    TRAIN = True"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_student_notebook_fails_only_on_exercises(path):
    nb = shortened(nbformat.read(path, as_version=4), **SHORTER.get(path.name, {}))
    switches = load_pretrained_instead(nb)
    assert switches == (1 if path.name.startswith("07") else 0), f"{path.name}: {switches} `TRAIN = True` cells"
    nb = execute(nb, path.parent)
    problems = notebook_problems(nb)
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)
    if switches:
        assert any("loaded the pretrained model" in output_text(cell) for cell in nb.cells), "the checkpoint was not loaded"  # noqa: E501


# --------------------------------------------------------------------------- what students read

# The course's test tools and markers: students do not have them, so no cell speaks of them
# (markers live in cell metadata tags, which notebooks do not show).
TEST_TOOL = re.compile(r"nbval|pytest|NBVAL_|nbdime|the course's tests|\btagged\b", re.IGNORECASE)
SOLUTIONS = build.notebook_files(REPO / "solutions") if (REPO / "solutions").is_dir() else []


def test_tool_mentions_are_found():
    for text in ("# Tagged nbval-ignore-output", "# NBVAL_SKIP", "run pytest", "not compared by the course's tests"):
        assert TEST_TOOL.search(text), text
    assert not TEST_TOOL.search("# the progress bar shows times that differ on every run")


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS + SOLUTIONS])  # noqa: E501
def test_no_cell_speaks_of_the_test_tools(path):
    nb = nbformat.read(path, as_version=4)
    found = [
        f"cell {i} ({cell.cell_type}): {line.strip()!r}"
        for i, cell in enumerate(nb.cells)
        for line in cell.source.split("\n")
        if TEST_TOOL.search(line)
    ]
    assert not found, f"{path.name} mentions the course's test tools:\n  " + "\n  ".join(found)
