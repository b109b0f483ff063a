"""Tests of course_tools.build (student notebooks from solutions) and of the repository's
notebooks: no solution leaks into notebooks/, and notebooks/ is up to date."""

from __future__ import annotations

import keyword
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from course_tools import build, kernels
from course_tools.build import BuildError, main, read_notebook, strip_solutions

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEMO = "01_demo.ipynb"

BADGE = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
COLAB = "https://colab.research.google.com/github/transformer-course/transformer-from-scratch/blob/main"
SETUP = (
    "# Set-up: in Colab, install the course's helper package (does nothing elsewhere).\n"
    "import sys\n"
    'if "google.colab" in sys.modules:\n'
    '    %pip install -q "transformer-course @ '
    'git+https://github.com/transformer-course/transformer-from-scratch@main"'
)


@pytest.fixture(autouse=True)
def _published_location(monkeypatch):
    """Pin the header constants, so these tests don't change when the course moves."""
    monkeypatch.setattr(build, "REPO_URL", "https://github.com/transformer-course/transformer-from-scratch")
    monkeypatch.setattr(build, "REF", "main")
    monkeypatch.setattr(build, "PACKAGE_NAME", "transformer-course")


def copy_fixture(tmp_path: Path, folder: str = "solutions") -> tuple[Path, Path]:
    solutions = tmp_path / "solutions"
    shutil.copytree(FIXTURES / folder, solutions)
    return solutions, tmp_path / "notebooks"


def run_build(solutions: Path, notebooks: Path, *extra: str) -> int:
    return main(["--solutions", str(solutions), "--notebooks", str(notebooks), *extra])


def snapshot(*folders: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for folder in folders if folder.exists() for p in sorted(folder.rglob("*"))}


# --------------------------------------------------------------------------- the student version

EXPECTED_EXERCISE = '''class Stats:
    """Summary statistics of a list of numbers."""

    def __init__(self, values):
        self.values = list(values)

    def mean(self):
        # YOUR CODE HERE
        raise NotImplementedError("Stats is not written yet: fill in its exercise cell")

    def spread(self):
        if not self.values:
            return 0.0
        else:
            # YOUR CODE HERE
            raise NotImplementedError("Stats is not written yet: fill in its exercise cell")'''


def test_fixture_student_notebook_is_exactly_as_expected(tmp_path):
    solutions, notebooks = copy_fixture(tmp_path)
    original = nbformat.read(FIXTURES / "solutions" / DEMO, as_version=4)
    check_source = original.cells[2].source  # the stand-in checker, copied verbatim

    assert run_build(solutions, notebooks) == 0
    student = nbformat.read(notebooks / DEMO, as_version=4)

    expected = [
        ("markdown", "colab-header", f"{BADGE}({COLAB}/notebooks/{DEMO})", {"tags": ["colab-header"]}),
        ("code", "colab-setup", SETUP, {"tags": ["colab-setup"]}),
        ("markdown", "d0c8a1f2", original.cells[0].source, {}),
        ("code", "5e7a2b10", "import math", {}),
        ("code", "9b1c44e7", check_source, {}),
        ("markdown", "77aa01bc", "## Exercise\n\nImplement `Stats.mean` and `Stats.spread`.", {}),
        # nbgrader metadata and the "solution" tag go; other tags stay.
        ("code", "3f0e9d21", EXPECTED_EXERCISE, {"tags": ["nbval-ignore-output"]}),
        ("code", "c4d5e6f7", "check_mean(lambda values: Stats(values).mean())", {}),
        # the timing record of the run goes with the outputs
        ("code", "0a1b2c3d", 'print(f"pi = {math.pi:.4f}")\nStats([1.0, 2.0, 6.0]).spread()', {}),
        ("markdown", "e1f2a3b4",
         "**Question:** why divide by `len(self.values)`?\n\n*Your answer here.*", {}),
    ]
    actual = [(c.cell_type, c.id, c.source, dict(c.metadata)) for c in student.cells]
    assert actual == expected
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.id
    assert student.metadata == original.metadata
    assert (student.nbformat, student.nbformat_minor) == (4, 5)
    nbformat.validate(student)
    # Jupyter's own format, one trailing newline
    text = (notebooks / DEMO).read_text(encoding="utf-8")
    assert text == nbformat.writes(student) + "\n"
    assert not text.endswith("\n\n")


def test_build_inserts_header_in_solution_and_leaves_other_cells_alone(tmp_path):
    solutions, notebooks = copy_fixture(tmp_path)
    original = nbformat.read(FIXTURES / "solutions" / DEMO, as_version=4)
    assert not any("colab-setup" in c.metadata.get("tags", []) for c in original.cells)

    assert run_build(solutions, notebooks) == 0
    solution = nbformat.read(solutions / DEMO, as_version=4)

    header, setup = solution.cells[:2]
    assert (header.cell_type, header.source) == ("markdown", f"{BADGE}({COLAB}/solutions/{DEMO})")
    assert (setup.cell_type, setup.source, setup.outputs) == ("code", SETUP, [])
    assert solution.cells[2:] == original.cells  # sources, outputs, counts, metadata, ids
    assert solution.metadata == original.metadata


def test_build_rewrites_a_stale_header_and_keeps_its_id_and_rerun_count(tmp_path):
    solutions, notebooks = copy_fixture(tmp_path)
    assert run_build(solutions, notebooks) == 0
    nb = nbformat.read(solutions / DEMO, as_version=4)
    nb.cells[1].source = nb.cells[1].source.replace("@main", "@v0.0.1")  # an old tag
    nb.cells[1].execution_count = 1  # the author ran it: that alone is not staleness
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="noise\n")]
    nb.cells.insert(5, nb.cells.pop(0))  # the badge moved down
    nbformat.write(nb, solutions / DEMO)

    assert run_build(solutions, notebooks, "--check") == 1
    assert run_build(solutions, notebooks) == 0
    fixed = nbformat.read(solutions / DEMO, as_version=4)
    assert [c.id for c in fixed.cells[:2]] == ["colab-header", "colab-setup"]
    assert fixed.cells[1].source == SETUP and fixed.cells[1].outputs == []
    assert fixed.cells[1].execution_count == 1
    original = nbformat.read(FIXTURES / "solutions" / DEMO, as_version=4)
    assert fixed.cells[2:] == original.cells
    assert run_build(solutions, notebooks, "--check") == 0


def test_build_is_deterministic_and_idempotent(tmp_path):
    solutions, notebooks = copy_fixture(tmp_path)
    assert run_build(solutions, notebooks) == 0
    first = snapshot(solutions, notebooks)
    assert run_build(solutions, notebooks) == 0
    assert snapshot(solutions, notebooks) == first
    # a second, independent build gives the same bytes
    other_solutions, other_notebooks = copy_fixture(tmp_path / "again")
    assert run_build(other_solutions, other_notebooks) == 0
    assert (other_notebooks / DEMO).read_bytes() == (notebooks / DEMO).read_bytes()
    assert (other_solutions / DEMO).read_bytes() == (solutions / DEMO).read_bytes()


def test_cells_without_ids_get_deterministic_ids(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("x = 1")])
    nb.nbformat_minor = 4
    for cell in nb.cells:
        del cell["id"]
    path = tmp_path / "01_old.ipynb"
    path.write_text(nbformat.writes(nb, version=nbformat.NO_CONVERT), encoding="utf-8")
    first, repairs = read_notebook(path)
    second, _ = read_notebook(path)
    ids = [c.id for c in first.cells]
    assert ids == [c.id for c in second.cells] and len(set(ids)) == 2
    assert repairs and first.nbformat_minor == 5
    # the repaired solution is written back, so the student notebook's ids exist in it too
    assert run_build(tmp_path, tmp_path / "out") == 0
    assert [c.id for c in nbformat.read(path, 4).cells[2:]] == ids
    assert [c.id for c in nbformat.read(tmp_path / "out" / path.name, 4).cells[2:]] == ids


# --------------------------------------------------------------------------- markers


def test_two_blocks_and_indentation():
    source = "def f(x):\n    if x:\n        ### BEGIN SOLUTION\n        return 1\n        ### END SOLUTION\n" \
             "    ### BEGIN SOLUTION\n    return 2\n    ### END SOLUTION"
    stub = 'raise NotImplementedError("f is not written yet: fill in its exercise cell")'
    assert strip_solutions(source) == (
        f"def f(x):\n    if x:\n        # YOUR CODE HERE\n        {stub}\n"
        f"    # YOUR CODE HERE\n    {stub}"
    )


@pytest.mark.parametrize(
    "source, message",
    [
        # an exported exercise: the message names the import that continues with the reference
        ("def padding_mask(tokens, pad_id):\n    \"\"\"Doc.\"\"\"\n    ### BEGIN SOLUTION\n    return tokens\n"
         "    ### END SOLUTION",
         "padding_mask is not written yet: fill in its exercise cell, or continue with the "
         "reference: from course_utils import padding_mask"),
        # a method: the class is the exercise
        ("import math\n\n\nclass LayerNorm(nn.Module):\n    def forward(self, x):\n        ### BEGIN SOLUTION\n"
         "        return x\n        ### END SOLUTION",
         "LayerNorm is not written yet: fill in its exercise cell, or continue with the "
         "reference: from course_utils import LayerNorm"),
        # a name the package does not export: no import to suggest
        ("@decorator\ndef helper():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
         "helper is not written yet: fill in its exercise cell"),
        # a block outside any definition, also after one
        ("def f():\n    pass\nfor i in range(3):\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
         "this exercise is not written yet: fill in its cell"),
    ],
)
def test_the_stub_names_the_exercise_and_the_way_on(source, message):
    *_, comment, stub = strip_solutions(source).split("\n")
    assert comment.strip() == "# YOUR CODE HERE"
    assert stub.strip() == f'raise NotImplementedError("{message}")'
    with pytest.raises(NotImplementedError) as raised:
        exec(stub.strip(), {})
    assert str(raised.value) == message


def test_markdown_block_keeps_surrounding_text():
    source = "Q?\n\n<!-- BEGIN SOLUTION -->\nA.\n\nMore.\n<!-- END SOLUTION -->\nAfter."
    assert strip_solutions(source, "markdown") == "Q?\n\n*Your answer here.*\nAfter."


@pytest.mark.parametrize(
    "source, cell_type, message",
    [
        ("x = 1\n### BEGIN SOLUTION\ny = 2", "code", "line 2: BEGIN SOLUTION without an END SOLUTION"),
        ("y = 2\n### END SOLUTION", "code", "line 2: END SOLUTION without a BEGIN SOLUTION"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION", "code",
         "line 2: BEGIN SOLUTION inside the block opened on line 1"),
        ("## BEGIN SOLUTION\ny = 2\n## END SOLUTION", "code", "line 1: malformed solution marker"),
        ("### BEGIN SOLUTION  # typo\ny = 2\n### END SOLUTION", "code", "line 1: malformed solution marker"),
        ("<!-- BEGIN SOLUTION -->\nanswer", "markdown", "line 1: BEGIN SOLUTION without an END SOLUTION"),
        ("### BEGIN SOLUTION\nanswer\n### END SOLUTION", "markdown", "line 1: malformed solution marker"),
        ("### BEGIN SOLUTION\n### END SOLUTION", "raw", "only in code and markdown cells"),
    ],
)
def test_bad_markers_raise_a_clear_error(source, cell_type, message):
    with pytest.raises(BuildError, match=re.escape(message)):
        strip_solutions(source, cell_type, where="01_x.ipynb: cell 3")


def test_unbalanced_markers_name_the_notebook_and_cell(tmp_path, capsys):
    solutions, notebooks = copy_fixture(tmp_path)
    nb = nbformat.read(solutions / DEMO, as_version=4)
    nb.cells[4].source = nb.cells[4].source.replace("            ### END SOLUTION", "")
    nbformat.write(nb, solutions / DEMO)
    assert run_build(solutions, notebooks) == 2
    assert "error: 01_demo.ipynb: cell 4 (code): line 17: BEGIN SOLUTION without an END SOLUTION" in (
        capsys.readouterr().err
    )
    assert not notebooks.exists()  # nothing written
    with pytest.raises(BuildError, match=r"01_demo\.ipynb: cell 4 \(code\)"):
        build.plan_build(solutions, notebooks)


def test_code_after_a_top_level_block_is_warned_about(tmp_path, capsys):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("### BEGIN SOLUTION\nscale = 2\n### END SOLUTION\n# a comment\nprint(scale)"),
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\nprint(f)"),
    ])
    nbformat.write(nb, tmp_path / "01_w.ipynb")
    assert run_build(tmp_path, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "warning: 01_w.ipynb: cell 0 (code): line 5 follows a top-level solution block" in err
    assert "cell 1" not in err  # code after an indented block runs (here: at definition time)


# --------------------------------------------------------------------------- --check


def test_check_reports_missing_stale_extra_and_passes_after_build(tmp_path, capsys):
    solutions, notebooks = copy_fixture(tmp_path)
    shutil.copy(FIXTURES / "solutions_bad" / "01_def_in_block.ipynb", solutions / "02_second.ipynb")

    before = snapshot(solutions)
    assert run_build(solutions, notebooks, "--check") == 1
    out = capsys.readouterr().out
    assert "missing: " in out and f"notebooks/{DEMO}" in out and "notebooks/02_second.ipynb" in out
    assert "solution: " in out and "no cell tagged colab-setup" in out
    assert snapshot(solutions) == before and not notebooks.exists()  # --check writes nothing

    assert run_build(solutions, notebooks) == 0
    capsys.readouterr()
    assert run_build(solutions, notebooks, "--check") == 0
    assert "OK: 2 student notebook(s)" in capsys.readouterr().out

    # stale: a hand edit; missing: a deleted one; extra: a notebook without a solution
    stale = notebooks / DEMO
    stale.write_text(stale.read_text(encoding="utf-8").replace("YOUR CODE HERE", "TODO"), encoding="utf-8")
    (notebooks / "02_second.ipynb").unlink()
    shutil.copy(stale, notebooks / "09_orphan.ipynb")
    (notebooks / "scratch.ipynb").write_text("not a course notebook", encoding="utf-8")
    before = snapshot(solutions, notebooks)
    assert run_build(solutions, notebooks, "--check") == 1
    out = capsys.readouterr().out
    assert re.search(r"stale: +\S*notebooks/01_demo\.ipynb", out)
    assert re.search(r"missing: +\S*notebooks/02_second\.ipynb", out)
    assert re.search(r"extra: +\S*notebooks/09_orphan\.ipynb", out)
    assert "scratch" not in out and "solution: " not in out
    assert snapshot(solutions, notebooks) == before

    assert run_build(solutions, notebooks) == 0
    assert not (notebooks / "09_orphan.ipynb").exists()
    assert (notebooks / "scratch.ipynb").exists()
    assert run_build(solutions, notebooks, "--check") == 0


def test_missing_solutions_dir_is_an_error(tmp_path, capsys):
    assert run_build(tmp_path / "nope", tmp_path / "notebooks", "--check") == 2
    assert "solutions directory not found" in capsys.readouterr().err


def test_cli_runs_as_a_module(tmp_path):
    solutions, notebooks = copy_fixture(tmp_path)
    args = [sys.executable, "-m", "course_tools.build", "--solutions", str(solutions), "--notebooks", str(notebooks)]
    check = subprocess.run([*args, "--check"], capture_output=True, text=True, cwd=REPO, check=False)
    assert check.returncode == 1, check.stderr
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert "1 student notebook(s) up to date." in done.stdout
    assert subprocess.run([*args, "--check"], capture_output=True, cwd=REPO, check=False).returncode == 0


# --------------------------------------------------------------------------- header cells


def test_colab_urls_follow_repo_url_and_ref(monkeypatch):
    assert build.colab_url("notebooks", "02_x.ipynb") == f"{COLAB}/notebooks/02_x.ipynb"
    monkeypatch.setattr(build, "REPO_URL", "https://github.com/someone/fork.git")
    monkeypatch.setattr(build, "REF", "v1.0")
    badge, setup = build.header_sources("solutions", "02_x.ipynb")
    assert "https://colab.research.google.com/github/someone/fork/blob/v1.0/solutions/02_x.ipynb" in badge
    assert '%pip install -q "transformer-course @ git+https://github.com/someone/fork.git@v1.0"' in setup
    monkeypatch.setattr(build, "REPO_URL", "https://gitlab.com/someone/fork")
    with pytest.raises(BuildError, match="REPO_URL"):
        build.colab_url("notebooks", "02_x.ipynb")


def test_setup_cell_installs_only_in_colab(monkeypatch):
    _, setup = build.header_sources("notebooks", "01_x.ipynb")
    assert setup == SETUP
    # IPython turns the indented magic into a call: this is what the kernel runs.
    python = TransformerManager().transform_cell(setup)
    install = 'install -q "transformer-course @ git+https://github.com/transformer-course/transformer-from-scratch@main"'
    assert f"    get_ipython().run_line_magic('pip', '{install}')" in python
    code = compile(python, "<colab-setup>", "exec")

    calls = []

    class FakeShell:
        def run_line_magic(self, name, line):
            calls.append((name, line))

    namespace = {"get_ipython": FakeShell}
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(code, dict(namespace))  # noqa: S102  (not in Colab: does nothing)
    assert calls == []
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    exec(code, dict(namespace))  # noqa: S102  (in Colab: one %pip install)
    assert calls == [("pip", install)]


# --------------------------------------------------------------------------- leaks

PUNCTUATION_ONLY = re.compile(r"^[\W_]*$")
MARKERS = re.compile(r"^\s*(### (BEGIN|END) SOLUTION|<!-- (BEGIN|END) SOLUTION -->)\s*$")


def is_trivial(line: str) -> bool:
    """A line too generic to count as leaked: blank, punctuation, ``return x``, ``else:``...

    Non-trivial = at least 8 characters and at least two distinct names that are not
    Python keywords (``return output, weights``, ``x = self.norm1(x)``).
    """
    stripped = line.strip()
    if len(stripped) < 8 or PUNCTUATION_ONLY.match(stripped):
        return True
    names = {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", stripped) if not keyword.iskeyword(w)}
    return len(names) < 2


def solution_lines(nb) -> set[str]:
    """Stripped non-trivial lines strictly between BEGIN/END SOLUTION markers, less those
    the solution notebook also shows outside its blocks (shown on purpose: not a leak)."""
    hidden, shown = set(), set()
    for cell in nb.cells:
        inside = False
        for line in cell.source.split("\n"):
            if MARKERS.match(line):
                inside = "BEGIN" in line
            elif not is_trivial(line):
                (hidden if inside else shown).add(line.strip())
    return hidden - shown


def all_lines(nb) -> set[str]:
    """Every stripped line of every cell's source and text outputs."""
    lines = set()
    for cell in nb.cells:
        texts = [cell.source]
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.extend(v for v in output.get("data", {}).values() if isinstance(v, str))
        for text in texts:
            lines.update(line.strip() for line in text.split("\n"))
    return lines


def leaked_lines(solution, student) -> list[str]:
    return sorted(solution_lines(solution) & all_lines(student))


def test_trivial_lines():
    for line in ["", "   ", ")", "]),", "return x", "else:", "pass", "return output", "x = x", "break"]:
        assert is_trivial(line), line
    for line in ["return output, weights", "x = self.norm1(x)", "scores = scores / math.sqrt(d_k)",
                 "Because the mean is the sum divided by the count."]:
        assert not is_trivial(line), line


def test_leak_detector_finds_a_leaked_line(tmp_path):
    solutions, notebooks = copy_fixture(tmp_path)
    assert run_build(solutions, notebooks) == 0
    solution = nbformat.read(solutions / DEMO, as_version=4)
    student = nbformat.read(notebooks / DEMO, as_version=4)
    assert solution_lines(solution) == {
        "total = sum(self.values)",
        "return total / len(self.values)",
        "return max(self.values) - min(self.values)",
        "Because the mean is the sum divided by how many values there are.",
    }
    assert leaked_lines(solution, student) == []
    # a line the author also shows outside a block is public, not hidden
    solution.cells[3].source += "\n\n```python\ntotal = sum(self.values)\n```"
    assert "total = sum(self.values)" not in solution_lines(solution)
    solution = nbformat.read(solutions / DEMO, as_version=4)
    student.cells[-1].source += "\n\nHint: `return max(self.values) - min(self.values)`"  # not a line match
    student.cells[-2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="   total = sum(self.values)\n")]
    assert leaked_lines(solution, student) == ["total = sum(self.values)"]


# --------------------------------------------------------------------------- nbval sanitize file


def test_nbval_sanitize_patterns():
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((Path(__file__).parent / "nbval_sanitize.cfg").read_text(encoding="utf-8"))
    assert len(patterns) == 5

    def sanitize(text):
        for regex, replace in patterns:  # nbval applies them in file order
            text = re.sub(regex, replace, text)
        return text

    same = [
        ("<torch._C.Generator at 0x7f3a2c1b9e10>", "<torch._C.Generator at 0x55d1e0a0c2f0>"),
        ("<torch._C.Generator object at 0x7f3a2c1b9e10>", "<torch._C.Generator object at 0x1234>"),
        ("<Foo object at 0x7F3A2C1B9E10>", "<Foo object at 0xdeadbeef>"),
        ("100%|##########| 50/50 [00:01<00:00, 31.41it/s]", "100%|##########| 50/50 [00:02<00:00, 20.03it/s]"),
        ("  0%|          | 0/50 [00:00<?, ?it/s]", "  0%|          | 0/50 [00:00<?, ?it/s]"),
        ("epoch: 100%|#| 3/3 [01:02:03, 1.23s/it, loss=0.512]", "epoch: 100%|#| 3/3 [00:59:00, 2.00s/it, loss=0.499]"),
        ("train: 100%|#| 9/9 [00:05<00:00, 1.2kbatch/s]", "train: 100%|#| 9/9 [00:04<00:00, 1.9kbatch/s]"),
        ("trained in 1.23 s", "trained in 12.5 s"),
        ("step took 0.5s", "step took 2s"),
        ("Wall time: 1.2 ms", "Wall time: 980 µs"),
        ("1.23 ms ± 45.6 µs per loop (mean ± std. dev. of 7 runs, 1,000 loops each)",
         "12.3 ms ± 4 µs per loop (mean ± std. dev. of 7 runs, 100 loops each)"),
    ]
    for a, b in same:
        assert sanitize(a) == sanitize(b), (a, b)
    kept = ["weights shape: (2, 4, 5, 7)", "loss 0.1234 after 3 steps", "8 heads of d_k = 64",
            "tensor([[0.2500, 0.7500]])", "max |difference| = 1.19e-07", "d_model=512, 6 layers"]
    for text in kept:
        assert sanitize(text) == text


# --------------------------------------------------------------------------- the repository

SOLUTIONS = build.notebook_files(REPO / "solutions") if (REPO / "solutions").is_dir() else []


def test_notebooks_mirror_solutions():
    """Every solution has its student notebook and every student notebook its solution."""
    solutions = {p.name for p in SOLUTIONS}
    notebooks = {p.name for p in build.notebook_files(REPO / "notebooks")} if (REPO / "notebooks").is_dir() else set()
    assert notebooks == solutions, (
        f"only in solutions/: {sorted(solutions - notebooks)}; only in notebooks/: {sorted(notebooks - solutions)} "
        "(run `python -m course_tools.build`)"
    )


@pytest.mark.parametrize("solution_path", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_no_solution_line_in_student_notebook(solution_path):
    student_path = REPO / "notebooks" / solution_path.name
    if not student_path.exists():
        pytest.fail(f"{student_path} is missing (run `python -m course_tools.build`)")
    solution = nbformat.read(solution_path, as_version=4)
    student = nbformat.read(student_path, as_version=4)
    leaks = leaked_lines(solution, student)
    assert not leaks, f"lines of solution blocks found in {student_path.name}: {leaks}"


def test_repo_notebooks_are_up_to_date():
    """`python -m course_tools.build --check` passes on the repository."""
    if not (REPO / "solutions").is_dir():
        # Nothing to build from; then nothing may have been generated either.
        assert not (REPO / "notebooks").is_dir() or not build.notebook_files(REPO / "notebooks")
        return
    result = subprocess.run(
        [sys.executable, "-m", "course_tools.build", "--check"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- --execute


def test_execute_runs_solutions_in_place_then_builds(tmp_path, capsys):
    solutions, notebooks = copy_fixture(tmp_path)
    nb = nbformat.read(solutions / DEMO, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, solutions / DEMO)
    broken = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                             nbformat.v4.new_code_cell("raise ValueError('broken solution')")])
    nbformat.write(broken, solutions / "02_broken.ipynb")

    # usage errors run nothing
    assert run_build(solutions, notebooks, "--execute", "09") == 2
    assert "--execute 09: no solution of that name" in capsys.readouterr().err
    assert run_build(solutions, notebooks, "--execute", "--check") == 2
    assert "--execute and --check do not go together" in capsys.readouterr().err
    assert not notebooks.exists()

    assert run_build(solutions, notebooks) == 0  # the header cells go in first
    broken_bytes = (solutions / "02_broken.ipynb").read_bytes()
    assert run_build(solutions, notebooks, "--execute") == 1  # all of them; one raises
    captured = capsys.readouterr()
    assert "02_broken.ipynb: cell 3 raised ValueError: broken solution (file left as it was)" in captured.err
    ran = nbformat.read(solutions / DEMO, as_version=4)
    by_id = {cell.id: cell for cell in ran.cells}
    assert by_id["0a1b2c3d"].outputs[0].text == "pi = 3.1416\n"  # run, in a kernel of this Python
    assert by_id["0a1b2c3d"].execution_count is not None
    assert (solutions / "02_broken.ipynb").read_bytes() == broken_bytes
    # ... then built: student notebooks for both, and the header in the solution
    assert sorted(p.name for p in notebooks.iterdir()) == [DEMO, "02_broken.ipynb"]
    assert [c.id for c in ran.cells[:2]] == ["colab-header", "colab-setup"]
    assert run_build(solutions, notebooks, "--check") == 0


def test_a_generated_stub_gets_the_checkers_friendly_verdict(capsys):
    from course_utils.checks import check_causal_mask, check_make_tgt_mask

    stub = strip_solutions("def causal_mask(size, device=None):\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION")  # noqa: E501
    solved_later = "def make_tgt_mask(tgt, pad_id):\n    return causal_mask(tgt.size(1)) & (tgt != pad_id).unsqueeze(1)"
    namespace: dict = {}
    for source in (stub, solved_later):
        exec(compile(source, "<student cell>", "exec"), namespace)  # noqa: S102 - as a notebook cell runs
    result = check_causal_mask(namespace["causal_mask"])
    assert result.status == "not implemented" and "[ ] causal_mask: not implemented yet" in result.feedback
    # a later exercise that calls the unfinished one: the verdict names it and the import
    result = check_make_tgt_mask(namespace["make_tgt_mask"])
    assert result.status == "not implemented", result.feedback
    assert "your `causal_mask`" in result.feedback and "from course_utils import causal_mask" in result.feedback
    capsys.readouterr()


# --------------------------------------------------------------------------- normalised notebooks


def _stream(name, text):
    return nbformat.v4.new_output("stream", name=name, text=text)


def test_normalise_sets_ipykernel_metadata_and_merges_streams():
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "version": "3.12.4"},
        "course": {"kept": True},  # other metadata is left alone
    }
    display = nbformat.v4.new_output("display_data", data={"text/plain": "shown"})
    nb.cells = [
        nbformat.v4.new_code_cell("a", outputs=[
            _stream("stdout", "1\n"), _stream("stdout", "2\n"), _stream("stderr", "warn\n"),
            _stream("stderr", "more\n"), _stream("stdout", "3\n"), display, _stream("stdout", "4\n"),
        ]),
        # a progress bar: what a carriage return overwrote is dropped, as Jupyter shows it
        nbformat.v4.new_code_cell("b", outputs=[_stream("stderr", " 10%\r"), _stream("stderr", " 50%\r100%\n")]),
        nbformat.v4.new_code_cell("c", outputs=[_stream("stdout", "alone\n")]),
        nbformat.v4.new_markdown_cell("text"),
    ]
    changes = kernels.normalise(nb)
    assert nb.metadata["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}  # noqa: E501
    assert nb.metadata["language_info"] == {
        "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py", "mimetype": "text/x-python",
        "name": "python", "nbconvert_exporter": "python", "pygments_lexer": "ipython3", "version": "3.12.4",
    }
    assert nb.metadata["course"] == {"kept": True}
    assert [(o.output_type, o.get("name"), o.get("text")) for o in nb.cells[0].outputs] == [
        ("stream", "stdout", "1\n2\n"), ("stream", "stderr", "warn\nmore\n"), ("stream", "stdout", "3\n"),
        ("display_data", None, None), ("stream", "stdout", "4\n"),
    ]
    assert [o.text for o in nb.cells[1].outputs] == ["100%\n"]
    assert [o.text for o in nb.cells[2].outputs] == ["alone\n"]
    assert len(changes) == 3 and "stream outputs merged in cell(s) 0, 1" in changes
    nbformat.validate(nb)
    assert kernels.normalise(nb) == []  # idempotent


HERE = sys.version.split()[0]  # what ipykernel reports as language_info.version


@pytest.mark.parametrize("stored, version", [
    ("3.11.7", "3.11.7"), ("3.13.0rc1", "3.13.0rc1"),  # a kernel's full version is kept
    ("3.10", HERE), ("3", HERE), ("garbage", HERE), (None, HERE), (3.11, HERE),  # else this Python's
])
def test_language_info_keeps_the_full_version_a_kernel_reports(stored, version):
    """JupyterLab marks a notebook modified unless the stored version is the kernel's own,
    to the patch level (tests/test_browser.py opens a solution to prove it)."""
    assert kernels.language_info(stored)["version"] == version


def test_merged_streams_compare_equal_under_nbval():
    """nbval merges a cell's streams itself before comparing, so notebooks stored before
    normalising and after compare the same."""
    plugin = pytest.importorskip("nbval.plugin")
    outputs = [_stream("stdout", "a\n"), _stream("stdout", "b 1%\rb 2%\n"), _stream("stderr", "w\n")]
    merged = [nbformat.from_dict(o) for o in kernels.merge_streams(outputs)]
    theirs = plugin.coalesce_streams(copy_outputs(outputs))
    assert [(o.name, o.text) for o in plugin.coalesce_streams(merged)] == [(o.name, o.text) for o in theirs]


def copy_outputs(outputs):
    return [nbformat.from_dict(dict(o)) for o in outputs]


def test_build_normalises_solution_and_student_and_normalise_cli(tmp_path, capsys):
    solutions, notebooks = copy_fixture(tmp_path)
    nb = nbformat.read(solutions / DEMO, as_version=4)
    nb.metadata["kernelspec"]["display_name"] = "Python 3"
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    nb.cells[-2].outputs = [_stream("stdout", "pi = "), _stream("stdout", "3.1416\n")] + nb.cells[-2].outputs[1:]
    nbformat.write(nb, solutions / DEMO)
    assert run_build(solutions, notebooks, "--check") == 1
    assert "kernelspec set to" in capsys.readouterr().out
    assert run_build(solutions, notebooks) == 0
    for path in (solutions / DEMO, notebooks / DEMO):
        written = nbformat.read(path, as_version=4)
        assert written.metadata["kernelspec"] == kernels.KERNELSPEC
        assert written.metadata["language_info"]["version"] == "3.11.7"  # as the kernel reported it
    solution = nbformat.read(solutions / DEMO, as_version=4)
    assert solution.cells[-2].outputs[0].text == "pi = 3.1416\n"
    assert run_build(solutions, notebooks, "--check") == 0

    other = tmp_path / "elsewhere.ipynb"
    nbformat.write(nb, other)
    capsys.readouterr()
    assert main(["--normalise", str(other), str(tmp_path / "missing.ipynb")]) == 2
    captured = capsys.readouterr()
    assert "normalised" in captured.out and "cannot read notebook" in captured.err
    assert kernels.normalise(nbformat.read(other, as_version=4)) == []
    assert main(["--normalise", str(other)]) == 0
    assert "unchanged" in capsys.readouterr().out


def test_execute_twice_gives_the_same_file(tmp_path):
    """A kernel sends prints in chunks that vary from run to run; stored merged, an
    unchanged rerun is an unchanged file (an instructor's git diff shows real changes only)."""
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys, time\n"
        "for i in range(40):\n"
        "    print(i, flush=True)\n"
        "    if i % 7 == 0:\n"
        "        print('e', i, file=sys.stderr, flush=True)\n"
        "    time.sleep(0.002)\n"
    )])
    path = solutions / "01_chunks.ipynb"
    nbformat.write(nb, path)
    assert build.execute_solution(path) is None
    first = path.read_bytes()
    ran = nbformat.read(path, as_version=4)
    assert ran.metadata["kernelspec"] == kernels.KERNELSPEC
    streams = [(o.name, o.text) for o in ran.cells[0].outputs]
    assert all(a[0] != b[0] for a, b in zip(streams, streams[1:]))  # no two in a row of one name
    assert "".join(t for n, t in streams if n == "stdout") == "".join(f"{i}\n" for i in range(40))
    assert build.execute_solution(path) is None
    assert path.read_bytes() == first


NOTEBOOKS = sorted((REPO / "solutions").glob("[0-9][0-9]_*.ipynb")) + sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))  # noqa: E501


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS])
def test_committed_notebooks_are_normalised(path):
    """Every committed notebook has the metadata a current ipykernel writes ("Python 3
    (ipykernel)", the full language version of the kernel that ran it) and merged streams.
    (`python -m course_tools.build` normalises them all.)"""
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec") == kernels.KERNELSPEC
    assert nb.metadata.get("language_info") == kernels.language_info(nb.metadata["language_info"].get("version"))
    assert re.fullmatch(r"3\.\d+\.\d+\w*", nb.metadata["language_info"]["version"])
    assert kernels.normalise(nb) == []


def test_course_exports_read_from_the_source_equal_the_imported_ones():
    """The build reads course_utils.__all__ from its source (so it never imports torch)."""
    import course_utils

    assert build.course_exports() == frozenset(course_utils.__all__)
