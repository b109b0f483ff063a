"""Tests of course_tools.grade (grading a class's notebooks).

The fixture course (tests/fixtures/grading/solutions) has two assignments: ``01_masks``
(exercises ``causal_mask`` and ``padding_mask``) and ``02_targets`` (``shift_targets``).
The fixture students hand in ``01_masks``: alice solved it (padding_mask written another
way), bob left it untouched, carol planted a mistake (the upper triangle), dave's
padding_mask cell never finishes, erin broke a cell that is not an exercise cell (a typo
in a module's name, which grading ignores), frank's file is cut short (not JSON).

The rest of the class is made here, from bob's notebook, by :data:`ATTACKS`: students who
try to get marks without writing the code (trudy's cells, which name files, by
:func:`trudy`), hal who solved it importing ``sys`` and ``warnings``, and nora's solved
notebook in nbformat 4.4 (no cell ids). The whole class is graded once per test module,
through the command line, with ``--jobs 2``, in the grader's default mode (the sandbox where
bwrap works); a smaller class with the file-system and promise attackers once more in the
other mode (:func:`graded_other`).
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
import textwrap
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import nbformat
import pytest

from course_tools import build, grade

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "grading"
SOLUTIONS = FIXTURES / "solutions"
STUDENTS = FIXTURES / "students"
NOTEBOOK = "01_masks.ipynb"
# seconds for a notebook's cells (its kernel's start-up not counted): dave's loop costs this much;
# the others' cells took at most 6 s with a load average of 6 on 2 cores
CLASS_TIMEOUT = 15
MARK = f"course-grade-attack-{uuid.uuid4().hex[:8]}"  # in every process an attack tries to start

UPPER = "def causal_mask(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool, device=device).triu()\n"  # noqa: E501
INVERTED = "def padding_mask(tokens, pad_id):\n    return (tokens == pad_id).unsqueeze(1)\n"

# student -> {cell id: new source, or "+": cells added at the end, "^": cells added first}
ATTACKS: dict[str, dict] = {
    # every trick in cells that are not exercise cells: all ignored
    "mallory": {
        "causal": UPPER,
        "^": ["import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True"],
        "+": [
            "open('../results.jsonl', 'a').write('{\"exercise\": \"causal_mask\", \"passed\": true, "
            "\"status\": \"passed\", \"feedback\": \"[OK]\", \"mistake\": null}\\n')",
            "from course_utils.checks import _core\n"
            "for f in list(getattr(_core, '_RESULT_LISTENERS', [])):\n"
            "    f(_core.CheckResult('causal_mask', True, '[OK] causal_mask: all checks passed.', 'passed'))",
            "import course_utils\ncheck_causal_mask(course_utils.causal_mask)\ncheck_padding_mask(course_utils.padding_mask)",  # noqa: E501
            "from course_utils.checks._core import checker\n\n@checker('BONUS')\ndef check_bonus(x):\n"
            "    return None\n\ncheck_bonus(1)",
            "from course_utils import shift_targets\nfrom course_utils.checks import check_shift_targets\n"
            "check_shift_targets(shift_targets)",
        ],
    },
    # the course's reference: an alias of an import, and a wrapper
    "rita": {
        "causal": "from course_utils import causal_mask as _theirs\n\ncausal_mask = _theirs\n",
        "padding": "import course_utils\n\n\ndef padding_mask(tokens, pad_id):\n"
                   "    return course_utils.padding_mask(tokens, pad_id)\n",
    },
    # the reference only when a checker calls; torch's comparisons patched in an exercise cell
    "sam": {
        "causal": "import inspect\n\nimport course_utils as cu\n\n\ndef causal_mask(size, device=None):\n"
                  "    if any('checks' in f.filename for f in inspect.stack()):\n"
                  "        return cu.causal_mask(size, device)\n"
                  "    return torch.ones(size, size, dtype=torch.bool, device=device).triu()\n",
        "padding": "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                   "torch.testing.assert_close = lambda *a, **k: None\n\n\n" + INVERTED,
    },
    # files outside its folder: the results file, and classmates' notebooks found through /proc
    "ivan": {
        "causal": UPPER + "\n\nopen('../../results.jsonl', 'a').write('passed\\n')\n",
        "padding": INVERTED + textwrap.dedent("""
            import os

            found = []
            for attempt in (lambda: os.listdir('/proc'), lambda: open(f'/proc/{os.getppid()}/cmdline').read()):
                try:
                    found.append(attempt())
                except Exception as error:
                    print('refused:', error)
            for text in map(str, found):
                for path in text.replace('\\0', ' ').split():
                    if os.path.isdir(path):
                        for root, _, files in os.walk(path):
                            for name in files:
                                if name.endswith('.ipynb'):
                                    open(os.path.join(root, name), 'w').write('overwritten')
            """),
    },
    # processes: a detached one, a forked one through ctypes, and signals to the grader
    "oscar": {
        "causal": UPPER + textwrap.dedent(f"""
            import subprocess
            import sys

            try:
                subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)  # {MARK}'],
                                 start_new_session=True)
            except Exception as error:
                print('refused:', error)
            """),
        "padding": INVERTED + textwrap.dedent("""
            import ctypes
            import os

            try:
                libc = ctypes.CDLL(None)
                if libc.fork() == 0:
                    libc.setsid()
                    libc.sleep(120)
                    os._exit(0)
            except Exception as error:
                print('refused:', error)
            try:
                os.kill(os.getppid(), 0)
            except Exception as error:
                print('refused:', error)
            """),
    },
    # a forged verdict, sent before each of the grader's cells; and the grader's cell broken
    "fiona": {
        "causal": UPPER + textwrap.dedent("""
            import re

            from IPython.display import publish_display_data


            def _forge(info):
                match = re.search(r'"check", "(\\w+)", "(\\w+)"', info.raw_cell)
                if match:
                    verdict = {"status": "passed", "passed": True, "mistake": None, "feedback": "[OK]"}
                    payload = repr({"action": "check", "exercise": match.group(2), "verdict": verdict,
                                    "reference": None, "flags": []})
                    publish_display_data({"application/vnd.course-grade.verdict+json":
                                          {"payload": payload, "mac": "0" * 64}})


            get_ipython().events.register("pre_run_cell", _forge)
            """),
        "padding": "__import__ = lambda *args, **kwargs: None\n\n\n" + INVERTED,
    },
    # promises: a forged verdict sent from the exercise cell itself, torch.Tensor.__eq__ patched,
    # one refused write repeated (one flag, with a count), and a KeyboardInterrupt raised
    "uma": {
        "causal": textwrap.dedent("""
            from IPython.display import publish_display_data

            verdict = {"status": "passed", "passed": True, "mistake": None, "feedback": "[OK]"}
            publish_display_data({"application/vnd.course-grade.verdict+json": {"payload": repr(
                {"action": "check", "exercise": "causal_mask", "verdict": verdict, "reference": None, "flags": []}),
                "mac": "0" * 64}})
            torch.Tensor.__eq__ = lambda self, other: True
            for attempt in range(5):
                try:
                    open('/' + 'results.jsonl', 'a')
                except Exception:
                    pass


            def causal_mask(size, device=None):
                return torch.ones(size, size, dtype=torch.bool, device=device).triu()
            """),
        "padding": "def padding_mask(tokens, pad_id):\n    raise KeyboardInterrupt\n",
    },
    # the checkers' internals and the builtins
    "xena": {
        "causal": "from course_utils.checks import _core\n\n_core.fail = lambda *a, **k: None\n\n\n" + UPPER,
        "padding": "import builtins\n\nfrom course_utils.checks import _core\n\n"
                   "builtins.print = lambda *args, **kwargs: None\n\n\n"
                   "def padding_mask(tokens, pad_id):\n"
                   "    _core._close = lambda *args, **kwargs: True  # only while the checker runs\n"
                   "    return (tokens == pad_id).unsqueeze(1)\n",
    },
}


# honest students made the same way: hal solved both, importing sys and warnings
HONEST: dict[str, dict] = {
    "hal": {
        "causal": "import sys\nimport warnings\n\n\ndef causal_mask(size, device=None):\n"
                  "    warnings.warn('just a note', stacklevel=2)\n    assert sys.version_info >= (3, 8)\n"
                  "    return torch.ones(size, size, dtype=torch.bool, device=device).tril()\n",
        "padding": "import sys\n\n\ndef padding_mask(tokens, pad_id):\n    print('masking', file=sys.stderr)\n"
                   "    return (tokens != pad_id).unsqueeze(1)\n",
    },
}


def trudy(victim: Path, outside: Path, sandbox: bool, checkout: Path) -> dict:
    """Files outside her folder through torch's own file I/O (``from_file``, which no audit
    hook sees): her kernel's copy of the course's checkers, the instructor's checkout, a
    classmate's notebook (``victim``) and a file outside the class (``outside``); each through
    the function torch exports (which the grader checks like ``open``) and through
    ``torch._C``'s (which nothing in the kernel sees). The second route goes only where the
    grader's hashes reach unless the sandbox runs: outside the sandbox, nothing can put back
    an arbitrary file (the README says so). Her padding cell ends with an uncaught write
    through ``torch._C``: without the sandbox to a classmate (found by hash and put back), in
    the sandbox to the outside file (refused by the read-only system, and flagged). ``checkout``:
    the course the grader runs from, a copy of this one (see :func:`copy_checkout`)."""
    course = checkout / "course_utils" / "checks" / "__init__.py"
    hidden_route = [str(course), str(victim)] + ([str(outside)] if sandbox else [])
    return {
        "causal": UPPER + textwrap.dedent(f"""

            import os

            import course_utils


            def _write(path, route):
                try:
                    t = route(path)
                    t[:8] = torch.tensor(list(b'POISONED'), dtype=torch.uint8)
                    del t
                    print('wrote', path)
                except Exception as error:
                    print('refused:', error)


            _exported = lambda p: torch.from_file(p, shared=True, size=64, dtype=torch.uint8)
            _hidden = lambda p: torch._C._VariableFunctions.from_file(p, True, 64, dtype=torch.uint8)
            _copy = os.path.join(os.path.dirname(course_utils.__file__), 'checks', '__init__.py')
            for _path in [_copy, {str(course)!r}, {str(victim)!r}, {str(outside)!r}]:
                _write(_path, _exported)
            for _path in [_copy, *{hidden_route!r}]:
                _write(_path, _hidden)
            try:
                print(bytes(torch.from_file({str(victim)!r}, shared=False, size=16, dtype=torch.uint8).tolist()))
            except Exception as error:
                print('refused:', error)
            """),
        "padding": INVERTED + textwrap.dedent(f"""

            _t = torch._C._VariableFunctions.from_file({str(outside if sandbox else victim)!r}, True, 64, dtype=torch.uint8)
            _t[:8] = 0
            """),  # noqa: E501
    }


def nora(folder: Path) -> None:
    """Her solved notebook, saved by an older Jupyter: nbformat 4.4, no cell ids."""
    nb = json.loads((STUDENTS / "alice" / NOTEBOOK).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    (folder / "nora").mkdir()
    (folder / "nora" / NOTEBOOK).write_text(json.dumps(nb, indent=1), encoding="utf-8")


SANDBOX = grade.sandbox_problem() is None  # the grader's default mode here

# What each student must get: notebook status, then one symbol per exercise.
EXPECTED = {
    "alice": ("ok", "OK", "OK"),
    "bob": ("ok", "-", "-"),
    "carol": ("ok", "X", "OK"),
    "dave": ("timed out", "OK", "?"),
    "erin": ("ok", "OK", "OK"),  # her broken cell is not an exercise cell: ignored
    "frank": ("invalid notebook", "?", "?"),
    "mallory": ("ok", "X", "-"),
    "rita": ("ok", "R", "R"),
    "sam": ("ok", "!", "!"),
    "ivan": ("crashed", "!", "!"),
    "oscar": ("ok", "!", "!"),
    "fiona": ("crashed", "!", "!"),  # the grader's cells raise: she broke __import__
    "xena": ("ok", "!", "!"),
    "uma": ("ok", "!", "E"),  # her KeyboardInterrupt is an error of her code, not the end of the run
    "hal": ("ok", "OK", "OK"),
    "nora": ("ok", "OK", "OK"),
    "wendy": ("wrong assignment", "?", "?"),
    "gus": ("wrong assignment", "?", "?"),
}


def expected(student: str, sandbox: bool) -> tuple[str, str, str]:
    if student == "trudy":  # the sandbox refuses her last write, and the cell raises
        return ("crashed" if sandbox else "ok", "!", "!")
    return EXPECTED[student]


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


def make_student(base, changes: dict) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(json.loads(json.dumps(base)))
    for cell in nb.cells:
        if cell.get("id") in changes:
            cell.source = changes[cell.id]
    first = [nbformat.v4.new_code_cell(s) for s in changes.get("^", [])]
    nb.cells = nb.cells[:2] + first + nb.cells[2:] + [nbformat.v4.new_code_cell(s) for s in changes.get("+", [])]
    return nb


def make_class(folder: Path, outside: Path, sandbox: bool, checkout: Path, only: Iterable[str] | None = None) -> None:
    """The fixture students, the attackers of :data:`ATTACKS` and :func:`trudy`, nora, and two
    notebooks of the other assignment handed in as 01 (wendy's as built, gus's without its
    header); ``only``: just these (alice, the victim, always)."""
    keep = None if only is None else {"alice", *only}
    shutil.copytree(STUDENTS, folder, ignore=None if keep is None else (
        lambda path, names: [n for n in names if Path(path) == STUDENTS and n not in keep]))
    bob = nbformat.read(STUDENTS / "bob" / NOTEBOOK, as_version=4)
    attacks = {**ATTACKS, **HONEST, "trudy": trudy(folder / "alice" / NOTEBOOK, outside, sandbox, checkout)}
    for name, changes in attacks.items():
        if keep is None or name in keep:
            (folder / name).mkdir()
            nbformat.write(make_student(bob, changes), folder / name / NOTEBOOK)
    if keep is None or "nora" in keep:
        nora(folder)
    if keep is not None:
        return
    solution, _ = build.read_notebook(SOLUTIONS / "02_targets.ipynb")
    other = build.student_notebook(solution, "02_targets.ipynb")
    other.cells[2 + 2].source = "def shift_targets(tgt):\n    return tgt[:, :-1], tgt[:, 1:]\n"  # solved
    for name, cells in (("wendy", other.cells), ("gus", other.cells[2:])):
        (folder / name).mkdir()
        nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=other.metadata), folder / name / NOTEBOOK)


def processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


# --------------------------------------------------------------------------- a whole class, end to end


COURSE_PARTS = ("course_utils", "course_tools", "data")
COURSE_FILES = [*(REPO / part for part in COURSE_PARTS), SOLUTIONS]


def copy_checkout(folder: Path) -> Path:
    """A copy of the course's code and data for the grader to run from: trudy's writes reach the
    checkout the grader runs from (until it puts them back, after her turn), and in this one
    they would break every test that imports the checkers meanwhile (xdist runs them beside)."""
    for part in COURSE_PARTS:
        shutil.copytree(REPO / part, folder / part, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def grade_class_cli(tmp: Path, sandbox: bool, only: Iterable[str] | None = None, flag: bool = False) -> dict:
    """Make the class in ``tmp`` and grade it through the command line (``--sandbox`` or
    ``--no-sandbox`` when ``flag``, else the default); what the tests read: its table, CSV,
    JSON, and every protected file before and after."""
    students, checkout = tmp / "students", copy_checkout(tmp / "checkout")
    outside = Path.home() / f".course-grade-outside-{uuid.uuid4().hex[:8]}.txt"  # outside /tmp: seen in the sandbox
    outside.write_text("a file outside the class folder, which no student may change\n" * 3)
    try:
        make_class(students, outside, sandbox, checkout, only)
        if only is None:  # Jupyter's autosave copy: must be skipped (it hangs, like dave's notebook)
            checkpoints = students / "alice" / ".ipynb_checkpoints"
            checkpoints.mkdir()
            shutil.copy(STUDENTS / "dave" / NOTEBOOK, checkpoints / "01_masks-checkpoint.ipynb")
        before = snapshot(students)
        protected = {str(p): p.read_bytes() for root in [*COURSE_FILES, *(checkout / part for part in COURSE_PARTS)]
                     for p in sorted(root.rglob("*"))
                     if p.is_file() and "__pycache__" not in p.parts}
        protected[str(outside)] = outside.read_bytes()
        out_csv, out_json = tmp / "grades.csv", tmp / "grades.json"
        mode = (["--sandbox"] if sandbox else ["--no-sandbox"]) if flag else []
        result = subprocess.run(
            [
                sys.executable, "-m", "course_tools.grade", str(students), *mode,
                "--solutions", str(SOLUTIONS), "--timeout", str(CLASS_TIMEOUT), "--jobs", "2",
                "--csv", str(out_csv), "--json", str(out_json),
            ],
            cwd=checkout, capture_output=True, text=True, check=False, timeout=900,
        )
        after = {p: Path(p).read_bytes() for p in protected if Path(p).exists()}
    finally:
        outside.unlink()
    return {
        "result": result,
        "sandbox": sandbox,
        "tmp": tmp,
        "students": students,
        "checkout": checkout,
        "before": before,
        "after": snapshot(students),
        "protected": protected,
        "protected_after": after,
        "left": processes_with(MARK),
        "csv": list(csv.DictReader(out_csv.open(encoding="utf-8", newline=""))) if out_csv.exists() else None,
        "json": json.loads(out_json.read_text(encoding="utf-8")) if out_json.exists() else None,
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the class once, through the command line, in the default mode; the tests below
    read its table, CSV and JSON."""
    return grade_class_cli(tmp_path_factory.mktemp("class"), SANDBOX)


@pytest.fixture(scope="module")
def graded_other(tmp_path_factory):
    """The file-system and promise attackers, the victim and an honest student, graded in the
    mode the default is not (without the sandbox where it works; else skipped: the sandbox
    cannot run here)."""
    if not SANDBOX:
        pytest.skip(f"the other mode is the sandbox, which cannot run here: {grade.sandbox_problem()}")
    return grade_class_cli(tmp_path_factory.mktemp("other"), False, ["trudy", "uma", "hal"], flag=True)


@pytest.fixture(params=["graded", "graded_other"])
def each_mode(request):
    """Each run: the class in the default mode, then the small class in the other."""
    return request.getfixturevalue(request.param)


def notebooks(graded) -> dict[str, dict]:
    return {n["student"]: n for n in graded["json"]["notebooks"]}


def exercise(graded, student: str, name: str) -> dict:
    return next(e for e in notebooks(graded)[student]["exercises"] if e["exercise"] == name)


def test_class_run_completes_with_exit_status_0(graded):
    result = graded["result"]
    assert result.returncode == 0, result.stdout + result.stderr
    # one progress line per notebook run (not frank's, wendy's, gus's: nothing to run)
    progress = [line for line in result.stderr.splitlines() if re.match(r"\[\d+/16\] ", line)]
    assert len(progress) == 16, result.stderr
    assert ".ipynb_checkpoints" not in result.stderr + result.stdout
    assert any("dave" in line and ": timed out (" in line for line in progress)


def test_table_gives_every_student_exactly_what_they_earned(graded):
    out = graded["result"].stdout
    assert f"{NOTEBOOK}: 19 notebook(s); solution {SOLUTIONS / NOTEBOOK}" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("student"))
    # one assignment, one set of columns: no BONUS, no shift_targets
    assert re.fullmatch(r"student\s+notebook\s+causal_mask\s+padding_mask\s+passed", lines[header])
    rows = {line.split()[0]: line for line in lines[header + 2:header + 3 + len(EXPECTED)]}
    assert set(rows) == {*EXPECTED, "trudy"}
    for name in rows:
        status, causal, padding = expected(name, graded["sandbox"])
        passed = [causal, padding].count("OK")
        pattern = rf"{name}\s+{re.escape(status)}\s+{re.escape(causal)}\s+{re.escape(padding)}\s+{passed}/2"
        assert re.fullmatch(pattern, rows[name]), rows[name]
    assert "R used the reference" in out and "! review" in out
    assert "Only exercise cells are graded" in out


def test_no_attack_passes_a_single_exercise(graded):
    for name in [*ATTACKS, "trudy", "wendy", "gus"]:
        statuses = [e["status"] for e in notebooks(graded)[name]["exercises"]]
        assert "passed" not in statuses, (name, statuses)


def test_student_files_are_unchanged_and_no_process_is_left(graded):
    assert graded["after"] == graded["before"]  # same files, same bytes, same mtimes
    assert not (graded["tmp"] / "results.jsonl").exists()
    assert graded["left"] == []
    # the attempts were refused, not undone afterwards
    assert "was changed while grading ran" not in graded["result"].stdout


def test_the_output_says_which_isolation_ran(each_mode):
    out, sandbox = each_mode["result"].stdout, each_mode["sandbox"]
    if sandbox:
        assert out.startswith("Isolation: sandbox: each kernel ran under bwrap (--no-sandbox to turn it off)"), out
    else:
        assert out.startswith("Isolation: no sandbox: "), out
    assert each_mode["json"]["sandbox"] is sandbox


def test_every_file_outside_a_notebooks_folder_is_byte_identical_after_grading(each_mode):
    """The course package (the instructor's checkout), the solutions, every classmate's file and a
    file outside the class are as they were, whatever trudy wrote (with and without the sandbox)."""
    assert each_mode["after"] == each_mode["before"]  # same files, same bytes, same mtimes
    changed = [p for p, data in each_mode["protected"].items() if each_mode["protected_after"].get(p) != data]
    assert changed == []
    assert each_mode["left"] == []


def flags_of(run: dict, student: str) -> str:
    nb = notebooks(run)[student]
    return "\n".join([*nb["flags"], *(f for e in nb["exercises"] for f in e["flags"])])


def test_writes_outside_its_folder_are_flagged_on_the_writer_not_the_victim(each_mode):
    sandbox, victim = each_mode["sandbox"], each_mode["students"] / "alice" / NOTEBOOK
    nbs = notebooks(each_mode)
    assert [e["status"] for e in nbs["trudy"]["exercises"]] == ["review", "review"]
    text = flags_of(each_mode, "trudy")
    course = each_mode["checkout"] / "course_utils" / "checks" / "__init__.py"
    # torch's exported function is checked in the kernel like open(), in both modes
    assert f"writes {course} (torch.from_file), outside its folder (refused)" in text
    assert f"writes {victim} (torch.from_file), outside its folder (refused)" in text
    assert f"reads {victim} (torch.from_file), outside its folder (refused)" in text
    if sandbox:  # the read-only system refused her last, uncaught write: flagged with its line
        assert re.search(r"line 5: was stopped by the system: RuntimeError: .*Read-only file system", text), text
    else:  # torch._C's function wrote: the grader's hashes found it, named her, and put it back
        assert "WROTE OUTSIDE ITS FOLDER" in text and f"changed {victim}" in text and f"changed {course}" in text
        # named on the terminal too (after she and whoever ran beside her were graded again alone, if need be)
        trudy_nb = each_mode["students"] / "trudy" / NOTEBOOK
        assert f"!! {trudy_nb}: WROTE OUTSIDE ITS FOLDER" in each_mode["result"].stderr
        if os.geteuid() == 0:  # (as any other user her copy of the course is read-only to her)
            assert "CHANGED THE COURSE PACKAGE while its notebook ran (changed course_utils/checks/__init__.py" in text
    assert "trudy: review: " in each_mode["result"].stdout or "trudy: causal_mask review: " in each_mode["result"].stdout  # noqa: E501
    # the victim: graded as she handed it in, nothing said against her
    alice = nbs["alice"]
    assert [e["status"] for e in alice["exercises"]] == ["passed", "passed"]
    assert flags_of(each_mode, "alice") == "" and "alice: review" not in each_mode["result"].stdout


def test_honest_students_pass_without_flags(each_mode):
    """hal imports sys and warnings; nora's notebook has no cell ids (nbformat 4.4); no honest
    notebook is said to leave processes running (the sandbox's own are not the notebook's)."""
    for name in ("alice", "hal", "nora", "erin"):
        nb = notebooks(each_mode).get(name)
        if nb is None:
            continue  # not in the smaller class
        assert [e["status"] for e in nb["exercises"]] == ["passed", "passed"], (name, nb)
        assert flags_of(each_mode, name) == "", name
    nora = notebooks(each_mode).get("nora")
    assert nora is None or nora["ignored_cells"] == []
    assert "process(es) running" not in "".join(f for n in each_mode["json"]["notebooks"] for f in n["flags"]
                                                if n["student"] != "oscar")


def test_promises_forged_verdicts_patched_equality_repeated_flags_keyboard_interrupt(each_mode):
    causal, padding = exercise(each_mode, "uma", "causal_mask"), exercise(each_mode, "uma", "padding_mask")
    # a forged verdict sent from the exercise cell itself: flagged (it used to be a silent X)
    assert causal["status"] == "review"
    assert "1 verdict message(s) not signed by the grader (forged) in cell 4" in "\n".join(causal["flags"])
    # flags found by reading the cell and by the kernel name the same lines (the cell opens with a blank line)
    assert "line 11: opens a file outside its folder (or at a computed path)" in "\n".join(causal["flags"])
    # torch.Tensor.__eq__ patched: undone before the check, which ran and failed her code
    assert "changed torch.Tensor.__eq__; undone before checking" in causal["flags"]
    assert (causal["verdict"], causal["mistake"]) == ("failed", "upper triangle")
    # five refused writes on one line: one flag, with its count
    repeated = [f for f in causal["flags"] if "writes /results.jsonl" in f]
    assert len(repeated) == 1 and repeated[0].endswith("(5 times)"), causal["flags"]
    assert repeated[0].startswith("line 11: writes /results.jsonl (open), outside its folder (refused)")
    # her own KeyboardInterrupt is her code's error, caught by the checker, not the end of the run
    assert (padding["status"], padding["flags"]) == ("error", [])
    assert "your code raised KeyboardInterrupt" in padding["message"]
    assert notebooks(each_mode)["uma"]["status"] == "ok"


def test_ignored_cells_are_reported(graded):
    nbs = notebooks(graded)
    # mallory's added cells (1 first, 5 last) and erin's broken import cell
    assert nbs["mallory"]["ignored_cells"] == [2, 9, 10, 11, 12, 13]
    assert nbs["erin"]["ignored_cells"] == [3]
    assert nbs["alice"]["ignored_cells"] == [] and nbs["bob"]["ignored_cells"] == []
    out = graded["result"].stdout
    assert "mallory: ignored 6 cell(s) that are not exercise cells: 2, 9, 10, 11, 12, 13" in out
    assert nbs["mallory"]["exercises"][0]["mistake"] == "upper triangle"  # graded as her own code
    assert [e["flags"] for e in nbs["mallory"]["exercises"]] == [[], []]


def test_reference_answers_are_used_the_reference(graded):
    causal, padding = exercise(graded, "rita", "causal_mask"), exercise(graded, "rita", "padding_mask")
    # the reference is out of reach while grading: calling it raised inside the check
    assert causal["verdict"] == padding["verdict"] == "error"
    assert "calls course_utils.causal_mask (hidden while grading, refused)" in causal["reference"]
    assert "it is course_utils.causal_mask" in causal["reference"]
    assert "from course_utils import causal_mask as _theirs" in causal["reference"]
    assert "it uses course_utils.padding_mask" in padding["reference"]
    assert causal["flags"] == [] and padding["flags"] == []
    assert "rita: causal_mask used the reference: " in graded["result"].stdout


@pytest.mark.parametrize("student, name, verdict, flags", [
    ("sam", "causal_mask", "error", ["imports inspect", "inspects the call stack"]),
    ("sam", "padding_mask", "failed", ["assigns to torch.allclose", "assigns to torch.equal",
                                       "assigns to torch.testing.assert_close", "changed torch.allclose"]),
    ("ivan", "causal_mask", "failed", ["opens a file outside its folder", "writes "]),
    ("ivan", "padding_mask", "failed", ["imports os", "reads /proc (os.listdir)", "/cmdline (open)"]),
    ("oscar", "causal_mask", "failed", ["imports subprocess", "subprocess.Popen", "(refused)"]),
    ("oscar", "padding_mask", "failed", ["imports ctypes", "ctypes.dlopen", "os.kill"]),
    ("fiona", "causal_mask", "failed", ["calls get_ipython()", "imports IPython.display",
                                        "not signed by the grader (forged)"]),
    ("fiona", "padding_mask", None, ["redefines __import__", "no verdict came back"]),
    ("xena", "causal_mask", "failed", ["imports course_utils.checks._core", "assigns to course_utils.checks._core.fail"]),  # noqa: E501
    # patched while the checker runs: the verdict may be fooled, the grade is not (the checkers'
    # module she patches is the graded kernel's stand-in: the real checkers are out of reach)
    ("xena", "padding_mask", "any", ["imports builtins", "assigns to builtins.print", "changed builtins.print",
                                     "assigns to course_utils.checks._core._close"]),
])
def test_each_attack_is_flagged_for_review_with_its_line(graded, student, name, verdict, flags):
    got = exercise(graded, student, name)
    assert got["status"] == "review"
    # the checker's own verdict, on the student's code with everything undone, is no pass
    if verdict != "any":
        assert got["verdict"] == (verdict or "not run")
    text = "\n".join(got["flags"])
    for expected in flags:
        assert expected in text, (expected, got["flags"])
    assert re.search(r"^line \d+: ", got["flags"][0]), got["flags"]
    assert f"{student}: {name} review: " in graded["result"].stdout


def test_wrong_assignment_is_recognised_and_not_run(graded):
    nbs = notebooks(graded)
    assert nbs["wendy"]["problem"] == "its header says it is 02_targets.ipynb, not 01_masks.ipynb"
    assert nbs["gus"]["problem"] == "its exercise cells are those of 02_targets.ipynb, not 01_masks.ipynb"
    assert [e["exercise"] for e in nbs["gus"]["exercises"]] == ["causal_mask", "padding_mask"]


def test_honest_details_in_json_and_csv(graded):
    report = graded["json"]
    assert report["statuses"] == {
        "notebook": ["ok", "crashed", "timed out", "invalid notebook", "wrong assignment"],
        "exercise": ["passed", "failed", "not attempted", "error", "not run", "used the reference", "review"],
    }
    assert report["assignments"] == [
        {"assignment": NOTEBOOK, "solution": str(SOLUTIONS / NOTEBOOK), "exercises": ["causal_mask", "padding_mask"]}
    ]
    alice = notebooks(graded)["alice"]
    assert (alice["status"], alice["problem"], alice["errors"], alice["passed"], alice["total"]) == (
        "ok", None, [], 2, 2)
    assert [(e["exercise"], e["status"], e["cell"], e["flags"]) for e in alice["exercises"]] == [
        ("causal_mask", "passed", 4, []), ("padding_mask", "passed", 6, [])]
    assert alice["exercises"][0]["feedback"].startswith("[OK] causal_mask: all checks passed")
    dave = notebooks(graded)["dave"]
    assert dave["problem"] == f"still running cell 6 (`while True:`) after {CLASS_TIMEOUT} s"
    assert dave["exercises"][1]["message"] == "the notebook timed out in cell 6 (`while True:`)"
    carol = exercise(graded, "carol", "causal_mask")
    assert (carol["status"], carol["mistake"]) == ("failed", "upper triangle")
    assert carol["message"].startswith("causal_mask(") and "True above the diagonal" in carol["message"]

    rows = graded["csv"]
    assert list(rows[0]) == grade.CSV_COLUMNS
    assert len(rows) == 2 * (len(EXPECTED) + 1)  # and trudy
    got = {(r["student"], r["exercise"]): r["status"] for r in rows}
    assert got[("rita", "causal_mask")] == "used the reference"
    assert got[("sam", "padding_mask")] == "review"
    (sam,) = [r for r in rows if r["student"] == "sam" and r["exercise"] == "padding_mask"]
    assert "assigns to torch.allclose" in sam["flags"]
    (mallory,) = [r for r in rows if r["student"] == "mallory" and r["exercise"] == "causal_mask"]
    assert mallory["ignored_cells"] == "2 9 10 11 12 13"
    (wendy,) = [r for r in rows if r["student"] == "wendy" and r["exercise"] == "causal_mask"]
    assert (wendy["notebook_status"], wendy["status"]) == ("wrong assignment", "not run")


def test_untouched_fixture_is_the_built_student_notebook():
    """bob's notebook is what `python -m course_tools.build` makes of the solution (so the
    fixture course is a real one), and the others differ from it only where they should."""
    solution, _ = build.read_notebook(SOLUTIONS / NOTEBOOK)
    built = build.student_notebook(solution, NOTEBOOK)
    bob = nbformat.read(STUDENTS / "bob" / NOTEBOOK, as_version=4)
    assert [(c.id, c.source) for c in bob.cells[2:]] == [(c.id, c.source) for c in built.cells[2:]]
    assert [c.id for c in bob.cells[:2]] == ["colab-header", "colab-setup"]
    for name, changed in {"alice": {"causal", "padding"}, "carol": {"causal", "padding"},
                          "erin": {"imports", "causal", "padding"}, "dave": {"causal", "padding"}}.items():
        nb = nbformat.read(STUDENTS / name / NOTEBOOK, as_version=4)
        bob_sources = {c.id: c.source for c in bob.cells}
        assert {c.id for c in nb.cells if bob_sources.get(c.id) != c.source} == changed, name


# --------------------------------------------------------------------------- one kernel, the grader's own cells


def course_plan(*sources: str) -> tuple[grade.Plan, grade.CourseNotebook]:
    """A plan that runs ``sources`` as the course's own cells (no exercise, no audit)."""
    steps = [grade.Step("course", s, i) for i, s in enumerate(sources)]
    steps.append(grade.Step("end", grade.END_SOURCE.format(nonce="0" * 32), nonce="0" * 32))
    course_nb = grade.CourseNotebook("00_none.ipynb", nbformat.v4.new_notebook(), [], set(), {})
    return grade.Plan(steps, {}, [], {}), course_nb


LAG_S = 5  # more than nbclient's default wait for a cell's outputs after its reply (4 s)
# the hanging notebook's limit: the lagging cell's LAG_S and room for the quick cells before
# it on a busy machine (they took 0.1 s with a load average of 5 on 2 cores; 4 s of room for CI);
# the hang itself then costs the rest (the test's seconds are this limit)
HANG_LIMIT = LAG_S + 4
# A cell whose output, and the "idle" status that ends it, leave the kernel LAG_S seconds
# after its reply (what a busy machine did to the grader's verdicts).
LAGGING_OUTPUT = textwrap.dedent(f"""
    import threading, time

    kernel = get_ipython().kernel
    send = kernel.session.send


    def lagging(stream, kind, content=None, *args, **kwargs):
        if kind != "status" or content != {{"execution_state": "idle"}}:
            return send(stream, kind, content, *args, **kwargs)
        kernel.session.send = send

        def later():
            time.sleep({LAG_S})
            send(stream, "stream", {{"name": "stdout", "text": "sent {LAG_S} s after the reply\\n"}},
                 parent=kwargs.get("parent"))
            send(stream, kind, content, *args, **kwargs)

        threading.Thread(target=later).start()


    kernel.session.send = lagging
    """)


def outputs(run: grade.Run, step: int) -> str:
    return "".join(o.get("text", "") for o in run.cells[step].get("outputs", []))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_hanging_notebook_is_stopped_and_every_process_it_started_is_killed(tmp_path):
    """Also: the kernel's command line, environment and folder name no submission; and a
    cell's output that reaches the grader seconds after the cell's reply (the kernel's output
    channel lagging, as on a busy machine) is kept, not dropped."""
    grade.become_subreaper()  # as the command line does: orphans come back to us
    secret = tmp_path / "submissions"
    plan, course_nb = course_plan(
        "import os, subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import os, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(120)  # {MARK}\"], "
        f"start_new_session=True); time.sleep(120)  # {MARK}'])\n"
        "print(os.getpid())",
        "print(open('/proc/self/cmdline').read(), os.getcwd(), *(f'{k}={v}' for k, v in os.environ.items()))",
        LAGGING_OUTPUT,
        "import time\nwhile True:  # hangs without burning the CPU the other tests share\n    time.sleep(0.2)",
        "print('never reached')",
    )
    os.environ["COURSE_GRADE_TEST_SUBMISSIONS"] = str(secret)
    try:
        run = asyncio.run(grade.run_plan(plan, course_nb, timeout=HANG_LIMIT, hidden=[secret]))
    finally:
        del os.environ["COURSE_GRADE_TEST_SUBMISSIONS"]
    assert (run.stopped, run.stopped_step, run.detail) == (grade.TIMED_OUT, 3, f"after {HANG_LIMIT} s")
    assert run.cells[4].outputs == []
    assert outputs(run, 2) == f"sent {LAG_S} s after the reply\n"
    kernel = int(outputs(run, 0))
    assert not Path(f"/proc/{kernel}").exists() or "Z" in Path(f"/proc/{kernel}/stat").read_text().split()[2]
    assert processes_with(MARK) == []
    # the child and its detached grandchild (the MARK check above); more when this process,
    # the subreaper, had adopted orphans of earlier tests in the same pytest worker
    assert run.killed >= 2
    seen = outputs(run, 1)
    assert "ipykernel" in seen and "/notebook " in seen
    assert str(secret) not in seen and "COURSE_GRADE_TEST_SUBMISSIONS" not in seen
    # no byte-code cache writes: a fresh clone's first kernels would otherwise compile lazily
    # imported modules into __pycache__ folders while an exercise is checked, which the audit
    # hook flagged on honest students (seen in a fresh-clone CI run)
    assert "PYTHONDONTWRITEBYTECODE=1" in seen.split()


def test_a_kernel_starting_while_another_turn_ends_is_not_taken_for_an_orphan():
    """With ``--jobs 2`` one notebook's turn can end while the next one's kernel is starting:
    the new kernel is known the moment its process exists, so the ending turn, which kills
    the orphans it adopted, spares it (killed, its notebook came out "crashed")."""

    def alive(pid: int) -> bool:
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"

    async def race() -> bool:
        client = grade._GradingClient(nbformat.v4.new_notebook(), limit=10, command_prefix=[], kernel_name="python3")
        km = client.create_kernel_manager()
        others = set(grade._children().get(os.getpid(), []))  # this worker's own children: not ours to kill
        starting = asyncio.create_task(client.async_start_new_kernel())
        while not km.has_kernel:  # run the start up to its first wait after the launch
            await asyncio.sleep(0)
        pid = km.provisioner.pid
        ended = subprocess.Popen(["true"])  # the kernel of the turn that ends now, already gone
        ended.wait()
        try:
            grade.kill_descendants(ended.pid, keep=grade._RUNNING | others)  # as that turn's end does
            survived = alive(pid)
            await starting
        finally:
            await km.shutdown_kernel(now=True)
            grade._RUNNING.discard(pid)
        return survived

    assert asyncio.run(race())


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed (Debian: apt-get install bubblewrap)")
def test_sandbox_hides_the_submissions_and_the_network(tmp_path):
    if (problem := grade.sandbox_problem()) is not None:
        pytest.skip(problem)
    submissions = Path.home() / f".course-grade-test-{uuid.uuid4().hex[:8]}"  # outside /tmp
    submissions.mkdir()
    try:
        (submissions / "alice.ipynb").write_text("{}")
        plan, course_nb = course_plan(
            "import os, socket\n"
            f"print(sorted(os.listdir({str(submissions)!r})))\n"
            "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\nexcept OSError as e:\n"
            "    print('no network')\n"
            "try:\n    open('/usr/sandbox-test', 'w')\nexcept OSError:\n    print('read-only')\n"
            "print(len([p for p in os.listdir('/proc') if p.isdigit()]) < 10)",
        )
        run = asyncio.run(grade.run_plan(plan, course_nb, timeout=60, sandbox=True, hidden=[submissions]))
    finally:
        shutil.rmtree(submissions)
    assert run.stopped is None, run.detail
    assert outputs(run, 0).split("\n")[:4] == ["[]", "no network", "read-only", "True"]


def test_a_check_that_sleeps_is_stopped_by_the_checkers_time_limit_and_generator_exit_is_caught(tmp_path):
    """The checkers' own time limit (60 s, here 3 s) stops a check in a graded kernel as it does
    in a notebook; a GeneratorExit the student's code raises is an error of that code."""
    path = tmp_path / "vic" / NOTEBOOK
    path.parent.mkdir()
    bob = nbformat.read(STUDENTS / "bob" / NOTEBOOK, as_version=4)
    nbformat.write(make_student(bob, {
        "causal": "import time\n\n\ndef causal_mask(size, device=None):\n    time.sleep(3600)\n",
        "padding": "def padding_mask(tokens, pad_id):\n    raise GeneratorExit\n",
    }), path)
    (vic,), _ = grade.grade_class([grade.Submission(path, "vic", NOTEBOOK)], SOLUTIONS, timeout=120,
                                  sandbox=SANDBOX, check_time_limit=3)  # in the default mode
    causal, padding = vic.exercises
    assert vic.status == "ok", vic.problem
    # `import time` is no reason to review: the status is the checker's own verdict
    assert (causal.status, causal.mistake) == (grade.ERROR, "time limit") and "within 3 s" in causal.feedback
    assert causal.flags == []
    assert padding.status == grade.ERROR and "your code raised GeneratorExit" in padding.message


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_grader_stops_on_sigint_to_its_own_pid_even_when_started_with_sigint_ignored():
    """A grader started in the background by a script inherits SIGINT ignored; ``kill -INT``
    stops it all the same (exit 130), and leaves no kernel behind."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "course_tools.grade", str(STUDENTS / "dave"), "--solutions", str(SOLUTIONS),
         "--no-sandbox", "--timeout", "120"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert proc.stderr.readline().startswith("Isolation: no sandbox")
        deadline = time.monotonic() + 120
        while not any(grade._children().get(proc.pid, [])) and time.monotonic() < deadline:
            time.sleep(0.2)  # until its kernel runs
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted: no report written" in err


def test_file_guard_puts_back_what_changed_and_names_it(tmp_path):
    (tmp_path / "class" / "alice").mkdir(parents=True)
    alice, notes = tmp_path / "class" / "alice" / "a.ipynb", tmp_path / "class" / "notes.txt"
    alice.write_bytes(b"{}")
    notes.write_text("notes")
    os.utime(alice, ns=(1_000_000_000, 1_000_000_000))
    guard = grade.FileGuard([tmp_path / "class"], known={alice: b"{}"})  # the submission's bytes, as read
    assert guard.check() == []
    alice.write_bytes(b"overwritten")
    notes.unlink()
    (tmp_path / "class" / "new").mkdir()
    (tmp_path / "class" / "new" / "x").write_text("x")
    found = sorted((Path(c.path).name, c.how, c.undone) for c in guard.check())
    assert found == [("a.ipynb", "changed", True), ("notes.txt", "removed", True), ("x", "added", True)]
    assert alice.read_bytes() == b"{}" and alice.stat().st_mtime_ns == 1_000_000_000
    assert notes.read_text() == "notes" and not (tmp_path / "class" / "new").exists()
    os.utime(alice)  # touched, same bytes: not a change, but its time is put back
    (tmp_path / "class" / "__pycache__").mkdir()  # byte code compiled by another process: nobody's write
    (tmp_path / "class" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert guard.check() == [] and alice.stat().st_mtime_ns == 1_000_000_000


def test_package_copy_is_private_read_only_and_hashed():
    from course_tools.guard import PackageCopy

    copy = PackageCopy()
    try:
        init = copy.package / "checks" / "__init__.py"
        assert init.read_bytes() == (REPO / "course_utils" / "checks" / "__init__.py").read_bytes()
        assert (copy.root / "data").is_dir() and not list(copy.root.rglob("__pycache__"))
        assert init.stat().st_mode & 0o222 == 0 and copy.changes() == []
        os.chmod(init, 0o644)  # as root may write it anyway
        init.write_text("poisoned")
        assert [(c.path, c.how) for c in copy.changes()] == [("course_utils/checks/__init__.py", "changed")]
    finally:
        copy.remove()
    assert not copy.root.exists()


def test_flags_are_counted_not_repeated():
    assert grade.deduplicated(["a", "b", "a", "a"]) == ["a (3 times)", "b"]


def test_cells_without_ids_are_known_by_their_source():
    """nbformat 4.4 (and v3) notebooks have no cell ids: an unchanged course cell is not "ignored"."""
    course = grade.load_course(SOLUTIONS, grade.checker_exercises())
    nb = json.loads((STUDENTS / "erin" / NOTEBOOK).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    plan = grade.plan_run(grade.read_student_notebook(json.dumps(nb).encode()), course[NOTEBOOK])
    assert plan.ignored == [3]  # her broken cell, as with ids
    assert plan.exercise_cells == {"causal_mask": 4, "padding_mask": 6}


# --------------------------------------------------------------------------- reading cells without a kernel


@pytest.mark.parametrize("source, flags, reference", [
    ("def causal_mask(size):\n    return torch.ones(size, size).tril().bool()", [], None),
    ("import math\nfrom torch import nn\nfrom course_utils import padding_mask\n\ndef causal_mask(s):\n    pass",
     [], None),  # another exercise's reference is allowed
    ("from course_utils.attention import causal_mask", [], "line 1"),
    ("import course_utils as cu\nf = cu.attention.causal_mask", [], "line 2"),
    ("x = getattr(course_utils, 'causal_mask')", [], "line 1"),
    ("torch.allclose = f", ["line 1: assigns to torch.allclose"], None),
    ("import torch.nn.functional as G\nG.softmax = f", ["line 2: assigns to torch.nn.functional.softmax"], None),
    ("setattr(torch, 'equal', f)", ["line 1: setattr on torch"], None),
    ("setattr(obj, name, f)", ["line 1: setattr with a computed name"], None),
    ("torch.Tensor.__eq__ = f", ["line 1: assigns to torch.Tensor.__eq__"], None),
    ("import sys\nsys._getframe(1)", ["line 2: uses ._getframe"], None),
    ("import sys\nimport warnings\nwarnings.warn('x')\nprint(sys.version_info, file=sys.stderr)", [], None),
    ("\n\nimport os\ntorch.Tensor.__eq__ = f", ["line 3: imports os: `import os`",
                                              "line 4: assigns to torch.Tensor.__eq__: `torch.Tensor.__eq__ = f`"], None),  # noqa: E501
    ("def f():\n    return inspect.currentframe().f_back", ["line 2: uses .f_back"], None),
    ("exec('x = 1')", ["line 1: calls exec()"], None),
    ("x = open('/etc/passwd').read()", ["line 1: opens a file outside its folder"], None),
    ("x = open('../results.jsonl', 'a')", ["line 1: opens a file outside its folder"], None),
    ("x = open('notes.txt', 'w')", [], None),
    ("!ls ..", ["line 1: runs an IPython magic or shell command"], None),
    ("from course_utils.checks import _core", ["line 1: imports course_utils.checks._core"], None),
    ("import course_tools.grade", ["line 1: imports course_tools.grade"], None),
    ("from course_tools import grade", ["line 1: imports course_tools"], None),
    ("import course_utils._validate", ["line 1: imports course_utils._validate (the course's internals)"], None),
    ("course_utils.checks._core.HINTS = {}", ["line 1: assigns to course_utils.checks._core.HINTS"], None),
    ("__builtins__['len'] = f", ["line 1: assigns to builtins"], None),
    ("def f(x):\n    self.w = x\n    x.y = 1", [], None),  # attributes of its own objects
])
def test_scan_exercise_cell(source, flags, reference):
    scan = grade.scan_exercise_cell(source, "causal_mask")
    got = [grade._flag_text(f) for f in scan.flags]
    for expected in flags:
        assert any(g.startswith(expected) for g in got), (expected, got)
    if not flags:
        assert got == []
    assert (scan.reference or "").startswith(reference or "") and bool(scan.reference) == bool(reference)


@pytest.mark.parametrize("source, name, expected", [
    ("from course_utils import causal_mask", "causal_mask", "it is course_utils.causal_mask"),
    ("import course_utils as cu\ncausal_mask = cu.attention.causal_mask", "causal_mask", "it is"),
    ("def causal_mask(n, device=None):\n    return course_utils.causal_mask(n, device)", "causal_mask", "it uses"),
    ("from course_utils import causal_mask as ref\n\ndef causal_mask(n, device=None):\n    return ref(n, device)",
     "causal_mask", "it calls"),
    ("from course_utils import causal_mask as ref\n\ndef _helper(n):\n    return ref(n)\n\n"
     "def causal_mask(n, device=None):\n    return _helper(n)", "causal_mask", "it calls"),
    ("import functools\ncausal_mask = functools.partial(course_utils.causal_mask)", "causal_mask", "it wraps"),
    ("def make(f):\n    def causal_mask(n, device=None):\n        return f(n, device)\n    return causal_mask\n\n"
     "causal_mask = make(course_utils.causal_mask)", "causal_mask", "it wraps"),
    ("def causal_mask(n, device=None, _f=course_utils.causal_mask):\n    return _f(n, device)", "causal_mask", "it uses"),  # noqa: E501
    ("class Encoder(course_utils.Encoder):\n    pass", "Encoder", "it subclasses course_utils.Encoder"),
    ("class Encoder(torch.nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n"
     "        self.inner = course_utils.Encoder(*args)", "Encoder", "it uses course_utils.Encoder"),
    # an object the reference made (a course cell's model): its class is the reference
    ("_made = course_utils.Encoder(1, 8, 2, 16)\n\nclass Encoder(torch.nn.Module):\n"
     "    def forward(self, x, mask=None):\n        return type(_made).forward(self, x, mask)", "Encoder",
     "it calls a course_utils.Encoder object"),
    # the student's own code; an earlier notebook's reference inside it is allowed
    ("def causal_mask(n, device=None):\n    return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
     "causal_mask", None),
    ("class Encoder(torch.nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
     "        self.attn = course_utils.MultiHeadAttention(d, 2)", "Encoder", None),
    ("from course_utils import causal_mask\n\ndef padding_mask(t, p):\n    return causal_mask(3)", "padding_mask", None),  # noqa: E501
])
def test_reference_detection_follows_aliases_wrappers_and_subclasses(source, name, expected):
    import torch

    import course_utils

    namespace = {"course_utils": course_utils, "torch": torch, "__name__": "__main__"}  # as in a notebook
    exec(compile(source, "<student cell>", "exec"), namespace)  # noqa: S102 - a student's cell
    got = grade._uses_reference(namespace[name], name, getattr(course_utils, name), {"<student cell>"})
    assert (got or "").startswith(expected or "") and bool(got) == bool(expected), got


def test_course_exercises_come_from_the_solutions():
    course = grade.load_course(SOLUTIONS, grade.checker_exercises())
    assert sorted(course) == ["01_masks.ipynb", "02_targets.ipynb"]
    masks = course[NOTEBOOK]
    assert [(e.name, e.checker, e.cell_id) for e in masks.exercises] == [
        ("causal_mask", "check_causal_mask", "causal"), ("padding_mask", "check_padding_mask", "padding")]
    assert masks.check_cells == {"check-causal", "check-padding"}
    bob = nbformat.read(STUDENTS / "bob" / NOTEBOOK, as_version=4)
    plan = grade.plan_run(bob, masks)
    assert [s.kind for s in plan.steps] == ["course", "course", "exercise", "check", "exercise", "check", "end"]
    assert plan.exercise_cells == {"causal_mask": 4, "padding_mask": 6} and plan.ignored == []
    # the real course: every exercise has its cell
    real = grade.load_course(REPO / "solutions", grade.checker_exercises())
    for name, nb in real.items():
        assert nb.exercises and len(nb.exercises) == len(grade.solution_exercises(REPO / "solutions" / name,
                                                                                  grade.checker_exercises()))


def test_which_assignment_reads_the_header_and_the_exercise_cells():
    course = grade.load_course(SOLUTIONS, grade.checker_exercises())
    bob = nbformat.read(STUDENTS / "bob" / NOTEBOOK, as_version=4)
    assert grade.which_assignment(bob, NOTEBOOK, course) == (NOTEBOOK, None)
    assert grade.which_assignment(bob, "", course) == (NOTEBOOK, None)  # alice.ipynb: recognised
    assert grade.which_assignment(bob, "02_targets.ipynb", course)[1] == (
        "its header says it is 01_masks.ipynb, not 02_targets.ipynb")
    empty = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    assert grade.which_assignment(empty, "", course)[1].startswith("not a notebook of this course")
    assert grade.which_assignment(empty, "07_nope.ipynb", course)[1] == "no course notebook 07_nope.ipynb in the solutions"  # noqa: E501


def test_checker_exercises_covers_every_course_checker():
    from course_utils import checks

    names = grade.checker_exercises()
    assert {n for n in checks.__all__ if n.startswith("check_")} <= set(names)
    assert names["check_multi_head_attention"] == "MultiHeadAttention"


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
        ("carol.ipynb", "carol", ""),  # the stem; which notebook it is, is recognised later
    ]
    subs = grade.find_notebooks([tmp_path / "carol.ipynb"], assignment="01_attention")
    assert [(s.student, s.assignment) for s in subs] == [("carol", "01_attention.ipynb")]
    with pytest.raises(grade.UsageError, match="no such file or folder"):
        grade.find_notebooks([tmp_path / "nope"])


def test_kill_descendants_finds_detached_orphans():
    """A process that double-forks into a new session and whose parent exits is still
    found: the grader adopts it as subreaper, and kills it when the turn ends. (In this
    process, as the hanging-notebook test does: no second Python importing the grader.)"""
    assert grade.become_subreaper()
    others = set(grade._children().get(os.getpid(), []))  # this worker's own children: spared
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, "
                              f"'-c', 'import time; time.sleep(60)  # {MARK}'], start_new_session=True)"])
    child.wait()  # its detached grandchild is now an orphan, adopted by this process
    adopted = set(grade._children().get(os.getpid(), [])) - others
    assert len(adopted) == 1 and processes_with(MARK) == list(adopted)
    assert grade.kill_descendants(child.pid, keep=others) == 1
    assert processes_with(MARK) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/nope"], "no such file or folder"),
        (["{tmp}/empty"], "no notebooks found"),
        (["{tmp}/a.ipynb", "--timeout", "0"], "--timeout must be positive"),
        (["{tmp}/a.ipynb", "--jobs", "0"], "--jobs must be at least 1"),
        (["{tmp}/a.ipynb", "--csv", "{tmp}/missing/grades.csv"], "--csv: no folder"),
        (["{tmp}/a.ipynb", "--json", "{tmp}/missing/grades.json"], "--json: no folder"),
        (["{tmp}/a.ipynb", "--solutions", "{tmp}/empty"], "--solutions: no course notebooks"),
        (["{tmp}/a.ipynb", "--check-time-limit", "0"], "--check-time-limit must be positive"),
        (["{tmp}/a.ipynb", "--gradescope", "{tmp}/missing/results.json"], "--gradescope: no folder"),
        (["{tmp}/a.ipynb", "--points", "causal_mask=two"], "--points: expected [EXERCISE=]POINTS"),
        (["{tmp}/a.ipynb", "--points", "-1"], "--points: expected [EXERCISE=]POINTS"),
        (["{tmp}/a.ipynb", "--cache", "{tmp}/a.ipynb/grades"], "--cache: cannot make the folder"),
    ],
)
def test_usage_errors_exit_2_before_running_anything(tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.ipynb").write_text("{}", encoding="utf-8")
    argv = [a.format(tmp=tmp_path) for a in args]
    if "--solutions" not in argv:
        argv += ["--solutions", str(SOLUTIONS)]
    assert grade.main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    with pytest.raises(SystemExit) as exit_info:
        grade.main([])
    assert exit_info.value.code == 2


def test_checkers_have_no_hook_a_notebook_could_call():
    from course_utils.checks import _core

    assert not hasattr(_core, "_RESULT_LISTENERS")


def test_report_labels_students_who_share_a_name_by_path(tmp_path):
    def row(path, status, marks):
        exercises = [grade.ExerciseGrade(n, s, message="m", flags=["line 1: x"] if s == grade.REVIEW else [],
                                         reference="it is course_utils.padding_mask" if s == grade.REFERENCE else None)
                     for n, s in zip(["causal_mask", "padding_mask"], marks)]
        return grade.NotebookGrade(path, "x", NOTEBOOK, status, None, [], exercises, ignored_cells=[7])
    grades = [row("a/x/01_masks.ipynb", "ok", [grade.PASSED, grade.REFERENCE]),
              row("b/x/01_masks.ipynb", "ok", [grade.REVIEW, grade.NOT_ATTEMPTED])]
    assignments = {NOTEBOOK: {"solution": "s/01_masks.ipynb", "exercises": ["causal_mask", "padding_mask"]}}
    text = grade.format_report(grades, assignments)
    assert re.search(r"^a/x/01_masks\.ipynb\s+ok\s+OK\s+R\s+1/2$", text, re.MULTILINE), text
    assert re.search(r"^b/x/01_masks\.ipynb\s+ok\s+!\s+-\s+0/2$", text, re.MULTILINE), text
    assert "  a/x/01_masks.ipynb: padding_mask used the reference: it is course_utils.padding_mask" in text
    assert "  b/x/01_masks.ipynb: causal_mask review: line 1: x" in text
    assert "  a/x/01_masks.ipynb: ignored 1 cell(s) that are not exercise cells: 7" in text
    grade.write_csv(grades, tmp_path / "g.csv")
    rows = list(csv.DictReader((tmp_path / "g.csv").open(encoding="utf-8", newline="")))
    assert [(r["status"], r["flags"], r["ignored_cells"]) for r in rows] == [
        ("passed", "", "7"), ("used the reference", "", "7"), ("review", "line 1: x", "7"), ("not attempted", "", "7")]


def test_stale_package_copies_of_a_killed_grader_are_removed_and_live_ones_kept(tmp_path):
    """A grader killed with SIGKILL leaves its kernels' package copies; the next one removes
    those whose grader is gone, and never one whose grader still runs."""
    from course_tools import guard

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    stale, live = tmp_path / f"course-grade-package-{gone}-abc", tmp_path / f"course-grade-package-{os.getpid()}-abc"
    for folder in (stale, live, tmp_path / "course-grade-package-old"):  # the last: no PID, left alone
        (folder / "course_utils").mkdir(parents=True)
        (folder / "course_utils" / "x.py").write_text("x = 1\n")
        os.chmod(folder / "course_utils", 0o555)
    assert guard.remove_stale_copies(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and (tmp_path / "course-grade-package-old").exists()
    for folder in (live, tmp_path / "course-grade-package-old"):
        os.chmod(folder / "course_utils", 0o755)
