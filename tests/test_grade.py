"""Tests of course_utils.grade (grading a class's notebooks) and of the result listeners it
relies on in course_utils.checks._core.

The fixture course (tests/fixtures/grading) has one solution, ``01_masks.ipynb``
(exercises ``causal_mask`` and ``padding_mask``), and six students' copies of it: alice
solved it (padding_mask written another way), bob left it untouched, carol planted a
mistake (the upper triangle), dave's notebook never finishes (``while True: pass``), erin's
set-up cell raises (a typo in a module's name), and frank's file is cut short (not JSON).
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from course_utils import build, grade
from course_utils.checks import _core, check_causal_mask, check_padding_mask

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "grading"
SOLUTIONS = FIXTURES / "solutions"
STUDENTS = FIXTURES / "students"
NOTEBOOK = "01_masks.ipynb"
CLASS_TIMEOUT = 15  # seconds per notebook: dave's loop costs this much, the others need a few


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


# --------------------------------------------------------------------------- a whole class, end to end


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade a copy of the fixture class once, through the command line; the tests below
    read its table, CSV and JSON."""
    tmp = tmp_path_factory.mktemp("class")
    students = tmp / "students"
    shutil.copytree(STUDENTS, students)
    # Jupyter's autosave copy: must be skipped (it hangs, like dave's notebook)
    checkpoints = students / "alice" / ".ipynb_checkpoints"
    checkpoints.mkdir()
    shutil.copy(STUDENTS / "dave" / NOTEBOOK, checkpoints / "01_masks-checkpoint.ipynb")
    before = snapshot(students)
    out_csv, out_json = tmp / "grades.csv", tmp / "grades.json"
    result = subprocess.run(
        [
            sys.executable, "-m", "course_utils.grade", str(students),
            "--solutions", str(SOLUTIONS), "--timeout", str(CLASS_TIMEOUT), "--jobs", "2",
            "--csv", str(out_csv), "--json", str(out_json),
        ],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=600,
    )
    return {
        "result": result,
        "students": students,
        "before": before,
        "after": snapshot(students),
        "csv": list(csv.DictReader(out_csv.open(encoding="utf-8", newline=""))) if out_csv.exists() else None,
        "json": json.loads(out_json.read_text(encoding="utf-8")) if out_json.exists() else None,
    }


def test_class_run_completes_with_exit_status_0(graded):
    result = graded["result"]
    assert result.returncode == 0, result.stdout + result.stderr
    # one progress line per notebook, the checkpoint copy not among them
    progress = [line for line in result.stderr.splitlines() if re.match(r"\[\d/6\] ", line)]
    assert len(progress) == 6, result.stderr
    assert ".ipynb_checkpoints" not in result.stderr + result.stdout
    assert any("dave" in line and ": timed out (" in line for line in progress)


def test_student_files_are_unchanged(graded):
    assert graded["after"] == graded["before"]  # same files, same bytes, same mtimes
    assert len(graded["before"]) == 7


def test_table_shows_each_student_and_exercise(graded):
    out = graded["result"].stdout
    assert f"{NOTEBOOK}: 6 notebook(s); solution {SOLUTIONS / NOTEBOOK}" in out
    rows = {
        "alice": r"alice\s+ok\s+OK\s+OK\s+2/2",  # solved
        "bob": r"bob\s+ok\s+-\s+-\s+0/2",  # untouched: nothing attempted, and no crash
        "carol": r"carol\s+ok\s+X\s+OK\s+1/2",  # one planted mistake
        "dave": r"dave\s+timed out\s+OK\s+\?\s+1/2",  # the check before the loop counts
        "erin": r"erin\s+crashed\s+\?\s+\?\s+0/2",
        "frank": r"frank\s+invalid notebook\s+\?\s+\?\s+0/2",
    }
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("student"))
    assert re.fullmatch(r"student\s+notebook\s+causal_mask\s+padding_mask\s+passed", lines[header])
    for offset, (name, pattern) in enumerate(rows.items(), start=2):
        assert re.fullmatch(pattern, lines[header + offset]), (name, lines[header + offset])
    assert "Legend: OK passed, X failed, - not attempted" in out


def test_problem_lines_name_the_mistake_the_cell_and_the_exception(graded):
    out = graded["result"].stdout
    problems = out[out.index("Problems:"):]
    assert "carol: causal_mask failed: causal_mask(" in problems
    assert "True above the diagonal instead of below it" in problems
    assert f"dave: timed out: still running cell 6 (`while True:`) after {CLASS_TIMEOUT} s" in problems
    assert "dave: padding_mask not run: the notebook timed out in cell 6" in problems
    crash = r"erin: crashed: cell 3 \(`.+`\) raised ModuleNotFoundError: No module named 'course_utils\.chekcs'"
    assert re.search(crash, problems)
    assert (
        "erin: causal_mask not run: its check, cell 5 (`check_causal_mask(causal_mask)`), raised NameError" in problems
    )
    assert "frank: invalid notebook: not a notebook: the file is not JSON" in problems
    # neither a clean notebook nor an exercise not attempted is a problem
    assert not re.search(r"^  (alice|bob):", problems, re.MULTILINE)


def test_csv_has_one_row_per_student_and_exercise(graded):
    rows = graded["csv"]
    assert rows is not None
    assert list(rows[0]) == grade.CSV_COLUMNS
    got = {(r["student"], r["exercise"]): (r["notebook_status"], r["status"]) for r in rows}
    assert got == {
        ("alice", "causal_mask"): ("ok", "passed"),
        ("alice", "padding_mask"): ("ok", "passed"),
        ("bob", "causal_mask"): ("ok", "not attempted"),
        ("bob", "padding_mask"): ("ok", "not attempted"),
        ("carol", "causal_mask"): ("ok", "failed"),
        ("carol", "padding_mask"): ("ok", "passed"),
        ("dave", "causal_mask"): ("timed out", "passed"),
        ("dave", "padding_mask"): ("timed out", "not run"),
        ("erin", "causal_mask"): ("crashed", "not run"),
        ("erin", "padding_mask"): ("crashed", "not run"),
        ("frank", "causal_mask"): ("invalid notebook", "not run"),
        ("frank", "padding_mask"): ("invalid notebook", "not run"),
    }
    assert len(rows) == 12
    (carol,) = [r for r in rows if r["student"] == "carol" and r["exercise"] == "causal_mask"]
    assert carol["mistake"] == "upper triangle"
    assert carol["message"].startswith("causal_mask(") and "True above the diagonal" in carol["message"]
    assert carol["feedback"].startswith("[X] causal_mask: causal_mask(")
    assert carol["path"] == str(graded["students"] / "carol" / NOTEBOOK)
    (bob,) = [r for r in rows if r["student"] == "bob" and r["exercise"] == "padding_mask"]
    assert bob["mistake"] == "not implemented" and bob["feedback"].startswith("[ ] padding_mask: not implemented yet")


def test_json_has_every_detail(graded):
    report = graded["json"]
    assert report is not None
    assert report["timeout"] == CLASS_TIMEOUT
    assert report["assignments"] == [
        {"assignment": NOTEBOOK, "solution": str(SOLUTIONS / NOTEBOOK), "exercises": ["causal_mask", "padding_mask"]}
    ]
    notebooks = {n["student"]: n for n in report["notebooks"]}
    assert sorted(notebooks) == ["alice", "bob", "carol", "dave", "erin", "frank"]

    alice = notebooks["alice"]
    summary = (alice["status"], alice["problem"], alice["errors"], alice["passed"], alice["total"])
    assert summary == ("ok", None, [], 2, 2)
    assert [(e["exercise"], e["status"], e["cell"], e["runs"]) for e in alice["exercises"]] == [
        ("causal_mask", "passed", 5, 1),
        ("padding_mask", "passed", 7, 1),
    ]
    assert alice["exercises"][0]["feedback"].startswith("[OK] causal_mask: all checks passed")
    assert alice["seconds"] > 0

    assert [e["status"] for e in notebooks["bob"]["exercises"]] == ["not attempted", "not attempted"]
    assert notebooks["bob"]["errors"] == []  # the stubs' NotImplementedError is no crash

    erin = notebooks["erin"]
    assert erin["errors"][0] == {
        "cell": 3, "source": "import torch", "exception": "ModuleNotFoundError",
        "message": "No module named 'course_utils.chekcs'",
    }
    assert [e["exception"] for e in erin["errors"]] == ["ModuleNotFoundError", "NameError", "NameError"]

    dave = notebooks["dave"]
    assert dave["status"] == "timed out" and "cell 6" in dave["problem"]
    assert dave["exercises"][1]["message"].startswith("the notebook timed out in cell 6")
    assert notebooks["frank"]["exercises"][0]["message"] == "the notebook could not be read"


def test_untouched_fixture_is_the_built_student_notebook():
    """bob's notebook is what `python -m course_utils.build` makes of the solution (so the
    fixture course is a real one), and the others differ from it only where they should."""
    solution, _ = build.read_notebook(SOLUTIONS / NOTEBOOK)
    built = build.student_notebook(solution, NOTEBOOK)
    bob = nbformat.read(STUDENTS / "bob" / NOTEBOOK, as_version=4)
    assert [(c.id, c.source) for c in bob.cells[2:]] == [(c.id, c.source) for c in built.cells[2:]]
    assert [c.id for c in bob.cells[:2]] == ["colab-header", "colab-setup"]
    for name, changed in {"alice": {"causal", "padding"}, "carol": {"causal", "padding"},
                          "erin": {"imports", "causal", "padding"}, "dave": {"causal", "padding", "loop"}}.items():
        nb = nbformat.read(STUDENTS / name / NOTEBOOK, as_version=4)
        bob_sources = {c.id: c.source for c in bob.cells}
        assert {c.id for c in nb.cells if bob_sources.get(c.id) != c.source} == changed, name


# --------------------------------------------------------------------------- one notebook


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc").is_dir():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_notebook_that_never_finishes_is_stopped_and_its_kernel_killed(tmp_path):
    pid_file = tmp_path / "kernel.pid"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f"import os\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))"),
        nbformat.v4.new_code_cell("while True:\n    pass"),
        nbformat.v4.new_code_cell("print('never reached')"),
    ])
    path = tmp_path / "student" / "01_hang.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)

    run = asyncio.run(grade.run_notebook(path, timeout=8))
    assert (run.stopped, run.stopped_cell, run.detail) == (grade.TIMED_OUT, 1, "after 8 s")
    assert run.cells[2].outputs == []
    assert 8 <= run.seconds < 60
    pid = int(pid_file.read_text())
    assert pid != os.getpid()
    assert not _running(pid), "the kernel of a timed-out notebook is still running"
    # the student's folder holds only the student's file: the notebook ran elsewhere
    assert sorted(p.name for p in path.parent.iterdir()) == ["01_hang.ipynb"]


# --------------------------------------------------------------------------- grading without kernels

CHECKERS = {"check_causal_mask": "causal_mask", "check_padding_mask": "padding_mask",
            "check_multi_head_attention": "MultiHeadAttention"}


def cells(*specs):
    """Executed cells from ``(source, outputs)`` pairs (outputs: dicts for new_output)."""
    made = []
    for n, (source, outputs) in enumerate(specs, start=1):
        cell = nbformat.v4.new_code_cell(source)
        cell.execution_count = n
        cell.outputs = [nbformat.v4.new_output(**o) for o in outputs]
        made.append(cell)
    return made


def error(ename, evalue=""):
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}


def verdict(exercise, status, feedback, cell, mistake=None):
    return {"exercise": exercise, "passed": status == "passed", "status": status, "feedback": feedback,
            "mistake": mistake, "cell": cell}


SUB = grade.Submission(Path("x/alice/01_masks.ipynb"), "alice", NOTEBOOK)


def test_grade_run_maps_verdicts_and_keeps_the_last_one():
    run = grade.Run(
        cells=cells(
            ("def causal_mask(size): ...", []),
            ("check_causal_mask(causal_mask)", []),
            ("check_padding_mask(padding_mask)", []),
            ("check_causal_mask(causal_mask)  # again, after a fix", []),
            ("check_multi_head_attention(MultiHeadAttention)", []),
        ),
        results=[
            verdict("causal_mask", "failed", "[X] causal_mask: the diagonal is excluded.\n    more", 1,
                    "diagonal excluded"),
            verdict("padding_mask", "error", "[X] padding_mask: your code raised TypeError: bad\n    at line 2: x", 2),
            verdict("causal_mask", "passed", "[OK] causal_mask: all checks passed.", 3),
            verdict("MultiHeadAttention", "not implemented", "[ ] MultiHeadAttention: not implemented yet.", 4,
                    "not implemented"),
        ],
    )
    g = grade.grade_run(SUB, run, ["padding_mask", "causal_mask"], CHECKERS)
    assert (g.status, g.problem, g.errors) == ("ok", None, [])
    assert [(e.exercise, e.status, e.cell, e.runs) for e in g.exercises] == [
        ("padding_mask", "error", 2, 1),
        ("causal_mask", "passed", 3, 2),  # the last verdict counts
        ("MultiHeadAttention", "not attempted", 4, 1),  # a check the solution lacks gets a column
    ]
    assert g.exercises[0].message == "your code raised TypeError: bad"
    assert g.exercises[0].feedback.endswith("at line 2: x")
    assert g.passed == 1


def test_grade_run_explains_why_a_check_did_not_run():
    run = grade.Run(cells=cells(
        ("import torch", []),
        ("check_causal_mask(causal_mask)", [error("NameError", "name 'causal_mask' is not defined")]),
        ("def check_padding_mask(fn):\n    pass\n# check_padding_mask(padding_mask)", []),
        ("x = undefined_name", [error("NameError", "name 'undefined_name' is not defined")]),
        ("f()", [error("NotImplementedError")]),
    ))
    g = grade.grade_run(SUB, run, ["causal_mask", "padding_mask"], CHECKERS)
    assert g.status == "crashed"
    assert g.problem == (
        "cell 1 (`check_causal_mask(causal_mask)`) raised NameError: name 'causal_mask' is not defined "
        "(and 1 more cell error(s))"
    )
    assert [e["cell"] for e in g.errors] == [1, 3]  # NotImplementedError is a stub's, not a crash
    (causal, padding) = g.exercises
    assert (causal.status, causal.message) == (
        "not run", "its check, cell 1 (`check_causal_mask(causal_mask)`), raised NameError: "
                   "name 'causal_mask' is not defined")
    # a definition and a comment are not calls
    assert (padding.status, padding.message) == ("not run", "the notebook has no check call for it")


def test_grade_run_kernel_death_and_timeouts():
    died = grade.Run(cells=cells(("import os; os._exit(1)", []), ("check_causal_mask(causal_mask)", [])),
                     stopped="kernel died", stopped_cell=0, detail="the kernel died")
    g = grade.grade_run(SUB, died, ["causal_mask"], CHECKERS)
    assert (g.status, g.problem) == ("crashed", "the kernel died in cell 0 (`import os; os._exit(1)`)")
    assert g.exercises[0].message == (
        "the notebook stopped: the kernel died in cell 0 (`import os; os._exit(1)`), before its check in cell 1"
    )
    hung = grade.Run(cells=cells(("check_causal_mask(causal_mask)", [])), stopped=grade.TIMED_OUT, stopped_cell=0,
                     detail="after 5 s")
    g = grade.grade_run(SUB, hung, ["causal_mask"], CHECKERS)
    assert (g.status, g.problem) == ("timed out", "still running cell 0 (`check_causal_mask(causal_mask)`) after 5 s")
    assert g.exercises[0].message == "its check, cell 0 (`check_causal_mask(causal_mask)`), was still running after 5 s"
    early = grade.Run(cells=cells(("check_causal_mask(causal_mask)", [])), stopped=grade.TIMED_OUT, detail="after 5 s")
    g = grade.grade_run(SUB, early, ["causal_mask"], CHECKERS)
    assert (g.status, g.problem) == ("timed out", "still running the grader's set-up after 5 s")
    assert g.exercises[0].message == "the notebook stopped before its check (after 5 s)"


def test_check_calls_and_solution_exercises():
    found = grade.check_calls(cells(
        ("from course_utils.checks import check_causal_mask, check_padding_mask", []),
        ("check_padding_mask(padding_mask)\nresult = check_causal_mask(causal_mask)", []),
        ("    # check_causal_mask(causal_mask)\ndef check_mine(x):\n    return check_unknown(x)", []),
    ), CHECKERS)
    assert found == [(1, "padding_mask"), (1, "causal_mask")]
    assert grade.solution_exercises(SOLUTIONS / NOTEBOOK, grade.checker_exercises()) == ["causal_mask", "padding_mask"]


def test_checker_exercises_covers_every_course_checker():
    from course_utils import checks

    names = grade.checker_exercises()
    assert {n for n in checks.__all__ if n.startswith("check_")} <= set(names)
    assert names["check_multi_head_attention"] == "MultiHeadAttention"
    assert names["check_scaled_dot_product_attention"] == "scaled_dot_product_attention"


def test_find_notebooks_names_students_and_skips_checkpoints(tmp_path):
    for rel in ["alice/01_attention.ipynb", "alice/.ipynb_checkpoints/01_attention-checkpoint.ipynb",
                "bob/work/01_attention.ipynb", "carol.ipynb", "__MACOSX/alice/._01_attention.ipynb",
                ".hidden/01_attention.ipynb", "notes.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}", encoding="utf-8")
    subs = grade.find_notebooks([tmp_path, tmp_path / "carol.ipynb"])  # carol twice: graded once
    assert [(s.path.relative_to(tmp_path).as_posix(), s.student, s.assignment) for s in subs] == [
        ("alice/01_attention.ipynb", "alice", "01_attention.ipynb"),
        ("bob/work/01_attention.ipynb", "work", "01_attention.ipynb"),  # the parent folder's name
        ("carol.ipynb", "carol", ""),  # the stem; which notebook it is, is unknown
    ]
    subs = grade.find_notebooks([tmp_path / "carol.ipynb"], assignment="01_attention")
    assert [(s.student, s.assignment) for s in subs] == [("carol", "01_attention.ipynb")]
    with pytest.raises(grade.UsageError, match="no such file or folder"):
        grade.find_notebooks([tmp_path / "nope"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/nope"], "no such file or folder"),
        (["{tmp}/empty"], "no notebooks found"),
        (["{tmp}/a.ipynb", "--timeout", "0"], "--timeout must be positive"),
        (["{tmp}/a.ipynb", "--jobs", "0"], "--jobs must be at least 1"),
        (["{tmp}/a.ipynb", "--csv", "{tmp}/missing/grades.csv"], "--csv: no folder"),
        (["{tmp}/a.ipynb", "--json", "{tmp}/missing/grades.json"], "--json: no folder"),
    ],
)
def test_usage_errors_exit_2_before_running_anything(tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.ipynb").write_text("{}", encoding="utf-8")
    assert grade.main([a.format(tmp=tmp_path) for a in args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    with pytest.raises(SystemExit) as exit_info:
        grade.main([])
    assert exit_info.value.code == 2


def test_report_labels_students_who_share_a_name_by_path():
    runs = [grade.Run(cells=cells(("check_causal_mask(causal_mask)", [])),
                      results=[verdict("causal_mask", "passed", "[OK] causal_mask: all checks passed.", 0)]),
            grade.Run(stopped=grade.INVALID, detail="the file is not JSON")]
    subs = [grade.Submission(Path("a/x/01_masks.ipynb"), "x", NOTEBOOK),
            grade.Submission(Path("b/x/01_masks.ipynb"), "x", NOTEBOOK)]
    grades, assignments = grade.grade_all(subs, runs, SOLUTIONS, CHECKERS)
    assert assignments == {
        NOTEBOOK: {"solution": str(SOLUTIONS / NOTEBOOK), "exercises": ["causal_mask", "padding_mask"]}
    }
    text = grade.format_report(grades, assignments)
    assert re.search(r"^a/x/01_masks\.ipynb\s+ok\s+OK\s+\?\s+1/2$", text, re.MULTILINE), text
    assert re.search(r"^b/x/01_masks\.ipynb\s+invalid notebook\s+\?\s+\?\s+0/2$", text, re.MULTILINE), text
    # without a solution, the exercises are those the students' notebooks check
    _, assignments = grade.grade_all(subs, runs, SOLUTIONS / "none", CHECKERS)
    assert assignments[NOTEBOOK] == {"solution": None, "exercises": ["causal_mask"]}


# --------------------------------------------------------------------------- the hook in checks._core


def correct_causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def upper_causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()


def test_checkers_name_their_exercise():
    assert check_causal_mask.exercise == "causal_mask"
    assert check_padding_mask.exercise == "padding_mask"


def test_result_listeners_get_every_verdict_and_cannot_break_a_check(monkeypatch, capsys):
    seen = []

    def broken(result):
        raise RuntimeError("a listener's bug")

    monkeypatch.setattr(_core, "_RESULT_LISTENERS", [seen.append, broken, seen.append])
    ok = check_causal_mask(correct_causal_mask)
    wrong = check_causal_mask(upper_causal_mask)
    assert ok.passed and not wrong.passed
    assert seen == [ok, ok, wrong, wrong]  # the broken listener neither raised nor stopped the next
    assert (wrong.status, wrong.mistake) == ("failed", "upper triangle")
    assert "[OK] causal_mask" in capsys.readouterr().out  # the verdict is still printed


def test_hook_cell_records_verdicts_as_json_lines(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(_core, "_RESULT_LISTENERS", [])
    results = tmp_path / "results.jsonl"
    namespace: dict = {}
    exec(compile(grade.hook_source(results), "<hook>", "exec"), namespace)  # noqa: S102
    assert set(namespace) == {"__builtins__"}  # it leaves nothing in the student's namespace
    assert len(_core._RESULT_LISTENERS) == 1
    check_causal_mask(upper_causal_mask)
    check_padding_mask(lambda tokens, pad_id: (tokens != pad_id).unsqueeze(1))
    lines = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    assert [(r["exercise"], r["status"], r["passed"], r["mistake"]) for r in lines] == [
        ("causal_mask", "failed", False, "upper triangle"),
        ("padding_mask", "passed", True, None),
    ]
    assert lines[0]["feedback"].startswith("[X] causal_mask: ")
