"""The course as an nbgrader course (course_tools.nbgrader), with real nbgrader: notebook 01 laid
out, `nbgrader generate_assignment` gives the exercise cells of notebooks/01_attention.ipynb,
and `nbgrader autograde` gives a submission made from the solutions full points and the
untouched student notebook zero, read from nbgrader's gradebook. One layout, one
generate_assignment and one autograde of both students (module fixture) serve every test of
the real run; the test cell's rule (points only on a passed verdict) is tested in this process."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

import course_utils
from course_tools import nbgrader as course_nbgrader
from course_utils import checks

ROOT = Path(__file__).resolve().parent.parent
NAME = "01_attention"
EXERCISES = ["scaled_dot_product_attention", "causal_mask", "padding_mask"]
# --points 2 --points causal_mask=3: the default per exercise, and one exercise's own
POINTS = {"check_scaled_dot_product_attention": 2.0, "check_causal_mask": 3.0, "check_padding_mask": 2.0}


def nbgrader_command(course: Path, *args: str) -> None:
    env = dict(os.environ)
    # nbgrader runs `alembic` from PATH; Jupyter's user folders stay out of the test
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(JUPYTER_DATA_DIR=str(course / ".jupyter-data"), JUPYTER_CONFIG_DIR=str(course / ".jupyter-config"),
               JUPYTER_PLATFORM_DIRS="1")
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """``(course folder, {student: (score, max score, {test cell: score})})``."""
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (the dev extra installs it)")
    from nbgrader.api import Gradebook

    course = tmp_path_factory.mktemp("nbgrader-course")
    status = course_nbgrader.main([str(course), "01", "--solutions", str(ROOT / "solutions"),
                                   "--points", "2", "--points", "causal_mask=3"])
    assert status == 0
    nbgrader_command(course, "generate_assignment", NAME)
    release = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    source = {c.id: c for c in nbformat.read(course / "source" / NAME / f"{NAME}.ipynb", as_version=4).cells}
    solved = copy.deepcopy(release)
    for cell in solved.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = source[cell.id].source
    for student, nb in (("solved", solved), ("untouched", release)):
        path = course / "submitted" / student / NAME / f"{NAME}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    nbgrader_command(course, "autograde", NAME)
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in ("solved", "untouched"):
            submission = gradebook.find_submission(NAME, student)
            grades = {g.name: g.score for nb in submission.notebooks for g in nb.grades}
            scores[student] = (submission.score, submission.max_score, grades)
    return course, scores


def test_generate_assignment_gives_the_student_notebooks_exercise_cells(graded):
    course, _ = graded
    release = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    student = {c.id: c for c in nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells}
    assert [c.id for c in release.cells] == list(student)
    meta = {c.id: c.metadata.get("nbgrader", {}) for c in release.cells}
    answers = [c for c in release.cells if meta[c.id].get("solution")]
    assert [c.metadata["nbgrader"]["grade_id"] for c in answers] == EXERCISES
    for cell in answers:
        assert cell.source == student[cell.id].source and "raise NotImplementedError(" in cell.source
    tests = [c for c in release.cells if meta[c.id].get("grade")]
    assert {meta[c.id]["grade_id"]: meta[c.id]["points"] for c in tests} == POINTS
    # every other cell is the student notebook's: prose read-only, the course's code as it is
    others = [c for c in release.cells if c not in answers and c not in tests]
    assert all(c.source == student[c.id].source for c in others)
    assert all(meta[c.id]["locked"] for c in others if c.cell_type == "markdown")
    assert all(meta[c.id] == {} and c.metadata.get("editable", True) for c in others if c.cell_type == "code")
    assert not any(c.get("outputs") for c in release.cells)


def test_autograde_gives_the_solutions_full_points_and_the_untouched_notebook_zero(graded):
    _, scores = graded
    total = sum(POINTS.values())
    assert scores["solved"] == (total, total, POINTS)
    assert scores["untouched"] == (0.0, total, dict.fromkeys(POINTS, 0.0))


def test_every_notebook_gets_valid_metadata_one_test_per_exercise_and_prose_read_only():
    """Without running nbgrader: every solution laid out in memory passes nbgrader's own
    metadata validator, with one autograded answer and one test cell (1 point) per exercise,
    prose read-only and the course's other code cells ordinary cells; the configured
    ClearSolutions turns its answers into the cells of notebooks/."""
    validator = pytest.importorskip("nbgrader.nbgraderformat", reason="nbgrader is not installed").MetadataValidator()
    from nbgrader.preprocessors import ClearSolutions

    from course_tools import build
    from course_tools.grade import checker_exercises, load_course

    [clear] = [p for p in course_nbgrader.generate_assignment_preprocessors() if issubclass(p, ClearSolutions)]
    course = load_course(ROOT / "solutions", checker_exercises())
    assert len(course) == 11
    for name, course_nb in course.items():
        solution, _ = build.read_notebook(ROOT / "solutions" / name)
        nb = course_nbgrader.nbgrader_notebook(solution, course_nb)
        validator.validate_nb(nb)
        released, _ = clear().preprocess(copy.deepcopy(nb), {})
        student = {c.id: c.source for c in nbformat.read(ROOT / "notebooks" / name, as_version=4).cells}
        assert {c.id: c.source for c in released.cells if c.id not in course_nb.check_cells} == {
            i: source for i, source in student.items() if i not in course_nb.check_cells}, name
        meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
        exercises = [e.name for e in course_nb.exercises]
        assert [m["grade_id"] for m in meta if m.get("solution")] == exercises, name
        assert [(m["grade_id"], m["points"], m["locked"]) for m in meta if m.get("grade")] == [
            (e.checker, 1.0, True) for e in course_nb.exercises], name
        assert all(m["locked"] and not m["grade"] for c, m in zip(nb.cells, meta) if c.cell_type == "markdown")
        assert sum(m == {} for m in meta) == sum(c.cell_type == "code" for c in nb.cells) - 2 * len(exercises)


# --------------------------------------------------------------------------- the test cell's rule


def _stub(size, device=None):
    raise NotImplementedError("causal_mask is not written yet")


def _upper(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()  # the wrong triangle


def _crashes(size, device=None):
    return [][size]


def _wrapper(size, device=None):
    return course_utils.causal_mask(size, device)


def _noisy(size, device=None):
    print("building a mask", file=sys.stderr)
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


class _Subclass(course_utils.MultiHeadAttention):
    pass


def _cell(helper_returns: str):
    """``causal_mask`` calling a helper of another cell, both compiled as ipykernel compiles a
    notebook's cells (the helpers the reference test follows are the notebook's own)."""
    from ipykernel.compiler import get_file_name

    namespace = {"course_utils": course_utils, "torch": torch}
    for source in (f"def helper(size, device=None):\n    return {helper_returns}\n",
                   "def causal_mask(size, device=None):\n    return helper(size, device)\n"):
        exec(compile(source, get_file_name(source), "exec"), namespace)
    return namespace["causal_mask"]


@pytest.mark.parametrize("checker, answer, problem", [
    ("check_causal_mask", _noisy, None),
    ("check_causal_mask", _stub, "verdict is 'not implemented'"),
    ("check_causal_mask", _upper, "verdict is 'failed'"),
    ("check_causal_mask", _crashes, "verdict is 'error'"),
    ("check_causal_mask", course_utils.causal_mask, "it is course_utils.causal_mask"),
    ("check_causal_mask", _wrapper, "uses course_utils.causal_mask"),
    ("check_multi_head_attention", _Subclass, "subclasses course_utils.MultiHeadAttention"),
    ("check_causal_mask", _cell("torch.ones(size, size, dtype=torch.bool, device=device).tril()"), None),
    ("check_causal_mask", _cell("course_utils.causal_mask(size, device)"), "it uses course_utils.causal_mask"),
], ids=["passed", "not-implemented", "failed", "error", "reference", "wrapper", "subclass", "own-helper",
        "helper-reference"])
def test_the_test_cell_raises_exactly_when_the_verdict_is_not_passed(checker, answer, problem, capsys):
    if problem is None:
        course_nbgrader.assert_passed(checker, answer)
        out = capsys.readouterr()
        assert "[OK] causal_mask" in out.out and out.err == ""  # nbgrader scores stderr output as a failure
        assert ("building a mask" in out.out) == (answer is _noisy)
    else:
        with pytest.raises(AssertionError, match=problem):
            course_nbgrader.assert_passed(checker, answer)


def test_the_test_cell_refuses_a_replaced_checker_and_names_an_unknown_one(monkeypatch):
    def forged(fn):
        return checks.CheckResult("causal_mask", True, "[OK] causal_mask", "passed")

    for replacement in (forged, functools.wraps(checks.check_causal_mask)(forged)):
        monkeypatch.setattr(checks, "check_causal_mask", replacement)
        with pytest.raises(AssertionError, match="not the course's checker"):
            course_nbgrader.assert_passed("check_causal_mask", _stub)
    with pytest.raises(ValueError, match="no checker 'check_nothing'"):
        course_nbgrader.assert_passed("check_nothing", _stub)


@pytest.mark.parametrize("args, message", [
    (["99"], "no solution of that name"),
    (["01", "--points", "-1"], "expected N or NAME=N"),
    (["01", "--points", "gelu=2"], "no exercise gelu in the chosen notebooks"),
])
def test_the_command_names_bad_input(tmp_path, capsys, args, message):
    assert course_nbgrader.main([str(tmp_path), *args, "--solutions", str(ROOT / "solutions")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "source").exists()
