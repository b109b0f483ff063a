"""Tests of the grading platforms' tools: Gradescope (course_tools.gradescope and the grader's
``--gradescope``) and GitHub Classroom (course_tools.classroom and the grader's ``--require-pass``
and ``--cache``), on notebook 01, the cheapest to grade.

The Gradescope bundle is built once; its ``run_autograder`` runs on a temporary folder laid out
as Gradescope's ``/autograder`` (``source/`` the unzipped bundle, ``submission/``, ``results/``),
once per submission: the solution, the untouched student notebook, a submission that forges
(the reference imported, a verdict forged) and crashes (a cell raises), none, and a broken
Python. The Classroom template is made once, and each exercise's command of its workflow is run
as GitHub's command grader runs it, in a copy of the template with the solution and in one with
the stub; the course it grades with is the bundle's copy (what the workflow's install step
checks out).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
import yaml

from course_tools import classroom, gradescope
from course_tools.grade import ExerciseGrade, NotebookGrade, cli, gradescope_results, report_dict
from course_utils import __version__ as COURSE_VERSION

REPO = Path(__file__).resolve().parents[1]
SOLUTION = REPO / "solutions" / "01_attention.ipynb"
STUDENT = REPO / "notebooks" / "01_attention.ipynb"
EXERCISES = ["scaled_dot_product_attention", "causal_mask", "padding_mask"]
POINTS = {"scaled_dot_product_attention": 1.0, "causal_mask": 2.0, "padding_mask": 1.0}
TORCH = metadata.version("torch").split("+")[0]

# Gradescope's autograder results format (gradescope-autograders.readthedocs.io, "Autograder
# Specifications"): the keys it knows, and the types of those the course writes.
TOP_KEYS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
            "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST_KEYS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
             "visibility", "extra_data"}
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


def check_results(results: dict) -> None:
    """``results`` is valid Gradescope results: the required keys with their types, scores
    within their maxima, the total the sum of the tests'."""
    assert set(results) <= TOP_KEYS, set(results) - TOP_KEYS
    assert isinstance(results["score"], (int, float)) and not isinstance(results["score"], bool)
    assert isinstance(results["execution_time"], (int, float))
    assert isinstance(results["output"], str) and results["output"]
    assert results.get("stdout_visibility", "hidden") in VISIBILITIES
    assert isinstance(results["tests"], list)
    for test in results["tests"]:
        assert set(test) <= TEST_KEYS, set(test) - TEST_KEYS
        for key, kind in (("name", str), ("output", str), ("number", str)):
            assert isinstance(test[key], kind), (key, test)
        for key in ("score", "max_score"):
            assert isinstance(test[key], (int, float)) and not isinstance(test[key], bool), (key, test)
        assert 0 <= test["score"] <= test["max_score"], test
        assert test["status"] in ("passed", "failed") and (test["status"] == "passed") == (
            test["score"] == test["max_score"] > 0), test
        assert test["visibility"] in VISIBILITIES
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]))


def student_sees(results: dict) -> str:
    """Everything of ``results`` that Gradescope shows the student (hidden tests and stdout are not)."""
    return "\n".join([results["output"], *(f"{t['name']}\n{t['output']}" for t in results["tests"]
                                           if t["visibility"] != "hidden")])


def submission_from_student(changes: dict[str, str]) -> nbformat.NotebookNode:
    """The student notebook with the exercise cells named (by the function they define) replaced."""
    nb = nbformat.read(STUDENT, as_version=4)
    for cell in nb.cells:
        for name, source in changes.items():
            if cell.cell_type == "code" and cell.source.startswith(f"def {name}("):
                cell.source = source
    return nb


# the reference imported (R); a verdict forged from the exercise cell (!); an exercise cell that
# raises before it defines its function
FORGED = {
    "causal_mask": "from course_utils import causal_mask\n",
    "scaled_dot_product_attention": (
        "from IPython.display import publish_display_data\n\n"
        "verdict = {'status': 'passed', 'passed': True, 'mistake': None, 'feedback': '[OK]'}\n"
        "publish_display_data({'application/vnd.course-grade.verdict+json': {'payload': repr(\n"
        "    {'action': 'check', 'exercise': 'scaled_dot_product_attention', 'verdict': verdict,\n"
        "     'reference': None, 'flags': []}), 'mac': '0' * 64}})\n\n\n"
        "def scaled_dot_product_attention(query, key, value, mask=None):\n"
        "    weights = torch.softmax(query @ key.transpose(-2, -1), dim=-1)  # unscaled\n"
        "    return weights @ value, weights\n"),
    "padding_mask": "1 / 0\n\n\ndef padding_mask(tokens, pad_id):\n    return (tokens != pad_id).unsqueeze(1)\n",
}


# --------------------------------------------------------------------------- Gradescope


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The bundle of notebook 01 (causal_mask worth 2), unzipped as Gradescope's /autograder/source."""
    tmp = tmp_path_factory.mktemp("gradescope")
    zipped = tmp / "autograder.zip"
    assert gradescope.main(["01", "-o", str(zipped), "--points", "causal_mask=2",
                            "--solutions", str(REPO / "solutions")]) == 0
    root = tmp / "autograder"
    with zipfile.ZipFile(zipped) as z:
        z.extractall(root / "source")
        for info in z.infolist():  # zipfile does not restore modes: set them as unzip does
            mode = info.external_attr >> 16 & 0o777
            if mode:
                os.chmod(root / "source" / info.filename, mode)
    return root


def autograde(root: Path, files: dict[str, bytes], python: str = sys.executable) -> tuple[dict, str]:
    """Run the bundle's run_autograder on ``files`` as the submission: (results.json, its output)."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    for name, data in files.items():
        (root / "submission" / name).write_bytes(data)
    env = {**os.environ, "COURSE_PYTHON": python}
    env.pop("AUTOGRADER_ROOT", None)
    result = subprocess.run([str(root / "source" / "run_autograder"), str(root)], capture_output=True, text=True,
                            env=env, cwd=root, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8")), result.stdout + result.stderr


@pytest.fixture(scope="module")
def autograded(bundle) -> dict[str, tuple[dict, str]]:
    """Each submission's results and run_autograder's output (what Gradescope shows instructors as stdout)."""
    forged = nbformat.writes(submission_from_student(FORGED)).encode()
    return {
        "solution": autograde(bundle, {"my attention.ipynb": SOLUTION.read_bytes()}),
        "stub": autograde(bundle, {"01_attention.ipynb": STUDENT.read_bytes(), "notes.txt": b"hello"}),
        "forged": autograde(bundle, {"01_attention.ipynb": forged}),
        "none": autograde(bundle, {"01_attention.py": b"print('not a notebook')\n"}),
        "no python": autograde(bundle, {"01_attention.ipynb": SOLUTION.read_bytes()},
                               python=str(bundle / "no-such-python")),
        "grader stops": grader_stops(bundle),
    }


def grader_stops(root: Path) -> tuple[dict, str]:
    """What run_autograder's Python part writes when the grader exits without a result (here a
    "Python" that only exits with status 1 runs it)."""
    assert gradescope.autograde(root, python="false") == 1
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8")), ""


def test_the_bundle_holds_the_scripts_and_its_own_course(bundle):
    source = bundle / "source"
    for script in ("setup.sh", "run_autograder"):
        assert os.access(source / script, os.X_OK), script
        check = subprocess.run(["bash", "-n", str(source / script)], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stderr
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    assert config == {"assignment": "01_attention.ipynb", "exercises": EXERCISES, "points": POINTS,
                      "timeout": 300.0, "torch": TORCH, "course_version": COURSE_VERSION}
    for part in ("pyproject.toml", "course_utils/__init__.py", "course_tools/grade/cli.py", "data/fables.txt",
                 *(f"solutions/{p.name}" for p in (REPO / "solutions").glob("[0-9][0-9]_*.ipynb"))):
        assert (source / "course" / part).is_file(), part


def test_setup_pins_python_torch_and_the_bundles_course(bundle):
    setup = (bundle / "source" / "setup.sh").read_text(encoding="utf-8")
    assert f'TORCH_VERSION="{TORCH}"' in setup and '"torch==$TORCH_VERSION"' in setup
    assert "--index-url https://download.pytorch.org/whl/cpu" in setup
    assert f'COURSE_VERSION="{COURSE_VERSION}"' in setup
    assert '-e "$SOURCE/course[tools]"' in setup  # the bundle's own copy, nothing fetched
    assert "git clone" not in setup and "git+" not in setup
    assert "python3 python3-venv" in setup and "sys.version_info < (3, 10)" in setup
    assert 'assert torch.__version__.split("+")[0] == torch_version' in setup


def test_gradescope_results_are_valid(autograded):
    for case, (results, output) in autograded.items():
        check_results(results)


def test_solution_scores_full_marks_with_the_bundles_own_course(autograded, bundle):
    results, output = autograded["solution"]
    assert results["score"] == sum(POINTS.values()) == 4
    assert [(t["name"], t["max_score"], t["status"], t["visibility"]) for t in results["tests"]] == [
        (name, POINTS[name], "passed", "visible") for name in EXERCISES]
    assert all(t["output"].startswith(f"[OK] {t['name']}:") for t in results["tests"])
    assert results["output"].startswith("3 of 3 exercise(s) passed (4/4 points)")
    assert results["stdout_visibility"] == "hidden"
    assert Path(results["extra_data"]["course"]) == (bundle / "source" / "course").resolve()
    assert re.search(r"my attention\s+ok\s+OK\s+OK\s+OK\s+3/3", output)  # the grader's table: instructors' stdout


def test_stub_scores_zero(autograded):
    results, _ = autograded["stub"]
    assert results["score"] == 0
    assert [(t["name"], t["status"]) for t in results["tests"]] == [(name, "failed") for name in EXERCISES]
    assert all(t["output"].startswith("Not attempted") for t in results["tests"])


def test_forgeries_are_held_and_hidden_from_the_student_and_the_crash_is_named(autograded):
    results, output = autograded["forged"]
    tests = {t["name"]: t for t in results["tests"]}
    for name, what in (("causal_mask", "Used the course's reference"), ("scaled_dot_product_attention", "forged")):
        assert tests[name]["visibility"] == "hidden" and tests[name]["score"] == 0, tests[name]
        assert tests[name]["output"].startswith("FOR THE INSTRUCTOR") and what in tests[name]["output"], tests[name]
    padding = tests["padding_mask"]
    assert padding["visibility"] == "visible" and padding["output"].startswith("Not graded") and \
        "ZeroDivisionError" in padding["output"], padding
    assert results["score"] == 0
    seen = student_sees(results)
    assert "2 exercise(s) are held for your instructor" in seen
    assert "crashed" in seen and "ZeroDivisionError" in seen  # the crash, named for the student
    for secret in ("reference", "forged", "review", "FOR THE INSTRUCTOR"):
        assert secret not in seen, secret
    assert re.search(r"submission\s+crashed\s+!\s+R\s+\?\s+0/3", output)  # the flags, in instructors' stdout


def test_no_notebook_no_python_or_no_grader_gives_a_result_that_says_so(autograded):
    results, _ = autograded["none"]
    assert results["score"] == 0 and "no notebook (.ipynb) in the submission" in results["output"]
    assert [(t["name"], t["max_score"]) for t in results["tests"]] == list(POINTS.items())
    results, _ = autograded["no python"]
    assert results["score"] == 0 and results["tests"] == []
    assert "could not grade this submission" in results["output"] and "status 127" in results["output"]
    results, _ = autograded["grader stops"]
    assert results["score"] == 0 and "the grader stopped (status 1) before writing a result" in results["output"]
    assert [(t["name"], t["max_score"], t["visibility"]) for t in results["tests"]] == [
        (name, points, "visible") for name, points in POINTS.items()]


def test_grades_kept_by_cache_come_back_as_they_were(tmp_path):
    exercise = ExerciseGrade("causal_mask", "review", "to review: line 1", "[X] causal_mask: ...", "upper", 3,
                             "failed", None, ["line 1: assigns torch.allclose"])
    grade = NotebookGrade("a/01_attention.ipynb", "a", "01_attention.ipynb", "crashed", "cell 3 raised", [
        {"cell": 3, "exception": "ValueError"}], [exercise], [5], ["left 1 process(es) running"], 2.5)
    assignments = {"01_attention.ipynb": {"solution": "solutions/01_attention.ipynb", "exercises": ["causal_mask"]}}
    (tmp_path / "kept.json").write_text(json.dumps(report_dict([grade], assignments, 300)))
    assert cli.read_cache(tmp_path / "kept.json") == ([grade], assignments)
    (tmp_path / "broken.json").write_text('{"notebooks": [{"path": 1}]}')
    assert cli.read_cache(tmp_path / "broken.json") is None and cli.read_cache(tmp_path / "none.json") is None


def test_gradescope_results_of_several_notebooks_name_them_and_say_what_was_ignored():
    def grade(path, statuses, **kw):
        return NotebookGrade(path, "ann", "01_attention.ipynb", "ok", None, [],
                             [ExerciseGrade(name, status, verdict="passed" if status == "review" else None,
                                            flags=["line 2: assigns torch.allclose"] if status == "review" else [])
                              for name, status in statuses.items()], **kw)

    results = gradescope_results(
        [grade("a/one.ipynb", {"causal_mask": "passed", "padding_mask": "failed"}, ignored_cells=[4, 9]),
         grade("a/two.ipynb", {"causal_mask": "review"}, flags=["left 1 process(es) running"])],
        {"causal_mask": 3.0}, default_points=0.5)
    check_results(results)
    assert [(t["name"], t["score"], t["max_score"], t["visibility"]) for t in results["tests"]] == [
        ("one.ipynb: causal_mask", 3, 3, "visible"), ("one.ipynb: padding_mask", 0, 0.5, "visible"),
        ("two.ipynb: causal_mask", 0, 3, "hidden")]
    held = results["tests"][2]["output"]
    assert "checker's own verdict: passed" in held and "Review: line 2: assigns torch.allclose" in held
    assert "Review: left 1 process(es) running" in held
    seen = student_sees(results)
    assert "2 cell(s) you changed or added are not exercise cells and were not run (cells 4, 9)" in seen
    assert "1 exercise(s) are held" in seen and "torch.allclose" not in seen and "process" not in seen


def test_bad_points_and_names_are_usage_errors(tmp_path, capsys):
    assert gradescope.main(["01", "-o", str(tmp_path / "a.zip"), "--points", "causal_mask=two"]) == 2
    assert "--points: expected [EXERCISE=]POINTS" in capsys.readouterr().err
    assert gradescope.main(["01", "-o", str(tmp_path / "a.zip"), "--points", "causal=2"]) == 2
    assert "causal: not an exercise of this notebook" in capsys.readouterr().err
    assert gradescope.main(["99", "-o", str(tmp_path / "a.zip")]) == 2
    assert "no solution of that name" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- GitHub Classroom


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("classroom") / "template"
    assert classroom.main(["01", str(folder), "--points", "causal_mask=2", "--ref", "v0.1.0", "--python", "3.11",
                           "--solutions", str(REPO / "solutions"), "--notebooks", str(REPO / "notebooks")]) == 0
    return folder


def workflow_steps(template: Path) -> list[dict]:
    return yaml.safe_load((template / ".github" / "workflows" / "classroom.yml").read_text())[
        "jobs"]["run-autograding-tests"]["steps"]


def test_the_workflow_follows_classrooms_pattern(template):
    workflow = yaml.safe_load((template / ".github" / "workflows" / "classroom.yml").read_text())
    assert set(workflow["on"]) == {"push", "repository_dispatch"}
    steps = workflow_steps(template)
    assert [s.get("uses") for s in steps[:2]] == ["actions/checkout@v4", "actions/setup-python@v5"]
    assert steps[1]["with"]["python-version"] == "3.11"
    install = steps[2]["run"]
    assert f"torch=={TORCH}" in install and "download.pytorch.org/whl/cpu" in install
    assert "--depth 1 https://github.com/" in install and " v0.1.0\n" in install
    graders = steps[3:-1]
    assert [s["id"] for s in graders] == EXERCISES
    for step in graders:
        assert step["uses"] == "classroom-resources/autograding-command-grader@v1"
        assert step["with"]["test-name"] == step["id"] and step["with"]["max-score"] == POINTS[step["id"]]
        assert f"--require-pass {step['id']}" in step["with"]["command"]
    reporter = steps[-1]
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    assert reporter["with"]["runners"] == ",".join(EXERCISES)
    assert reporter["env"] == {f"{e.upper()}_RESULTS": f"${{{{steps.{e}.outputs.result}}}}" for e in EXERCISES}
    assert (template / "01_attention.ipynb").read_bytes() == STUDENT.read_bytes()
    assert "causal_mask`: 2 point(s)" in (template / "README.md").read_text()


def run_commands(template: Path, course: Path, tmp: Path, notebook: Path) -> dict:
    """Each exercise's command, in a copy of the template with ``notebook`` pushed, as the command
    grader runs it: a shell in the repository, the runner's variables set, the course installed.
    Returns the runs, and the repository and environment they ran in."""
    repo, runner = tmp / "repo", tmp / "runner"
    shutil.copytree(template, repo)
    shutil.copyfile(notebook, repo / "01_attention.ipynb")
    runner.mkdir()
    (runner / "course").symlink_to(course)
    env = {**os.environ, "GITHUB_WORKSPACE": str(repo), "RUNNER_TEMP": str(runner),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    runs = [run_command(step["with"]["command"], repo, env) for step in workflow_steps(template)[3:-1]]
    return {"runs": runs, "repo": repo, "env": env}


def run_command(command: str, repo: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.fixture(scope="module")
def classroom_runs(template, bundle, tmp_path_factory) -> dict[str, dict]:
    course = bundle / "source" / "course"  # the course at a pinned version, as the install step leaves it
    return {case: run_commands(template, course, tmp_path_factory.mktemp(case), notebook)
            for case, notebook in (("solution", SOLUTION), ("stub", STUDENT))}


def test_every_command_passes_on_the_solution(classroom_runs):
    for exercise, run in zip(EXERCISES, classroom_runs["solution"]["runs"]):
        assert run.returncode == 0, (exercise, run.stdout[-2000:], run.stderr[-2000:])
        assert f"passed: {exercise}" in run.stdout


def test_every_command_fails_on_the_stub(classroom_runs):
    for exercise, run in zip(EXERCISES, classroom_runs["stub"]["runs"]):
        assert run.returncode == 1, (exercise, run.stdout[-2000:], run.stderr[-2000:])
        assert f"NOT PASSED: {exercise}: not attempted" in run.stdout


def test_the_notebook_runs_once_and_later_commands_reuse_its_grades(classroom_runs):
    for case in classroom_runs.values():
        first, *later = case["runs"]
        assert "reused the grades" not in first.stderr and "[1/1]" in first.stderr
        for run in later:
            assert "reused the grades" in run.stderr and "[1/1]" not in run.stderr


def test_require_pass_of_an_unknown_exercise_is_a_usage_error(classroom_runs):
    case = classroom_runs["stub"]  # its grades are in the cache: this runs no notebook
    command = case["runs"][0].args[2].replace("--require-pass scaled_dot_product_attention", "--require-pass attention")
    run = run_command(command, case["repo"], case["env"])
    assert run.returncode == 2 and "--require-pass: attention: not an exercise" in run.stderr
    assert "reused the grades" in run.stderr
