"""The graded notebook's references out of reach (course_tools/_hide_references.py, issue 23).

A fixture course notebook, made here from the course's own solution cells, has four
exercises of notebooks 01, 08 and 09 (``scaled_dot_product_attention``,
``TransformerClassifier``, ``GPTBlock``, ``GPT``) and course cells that use those
references before the exercises and after them (the course's cells get the real ones).
An honest student must pass all four without a flag; students who reach the references
through computed names, helpers, the reference class's ``forward`` or ``add_module`` must
pass none, and each attempt is flagged (``R`` or ``!``) naming what it used. The class is
graded through the command line, with and without ``--sandbox``. A brute-force test
delegates every exercise of the course to every callable the public ``course_utils`` has.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from course_tools import build, grade

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "01_refs.ipynb"
EXERCISES = [  # (solution notebook, exercise, checker)
    ("01_attention.ipynb", "scaled_dot_product_attention", "check_scaled_dot_product_attention"),
    ("08_encoder_classifier.ipynb", "TransformerClassifier", "check_transformer_classifier"),
    ("09_gpt.ipynb", "GPTBlock", "check_gpt_block"),
    ("09_gpt.ipynb", "GPT", "check_gpt"),
]
IMPORTS = """\
import functools
import math
import operator

import torch
import torch.nn.functional as F
from torch import nn

import course_utils
from course_utils import (Encoder, FeedForward, LayerNorm, MultiHeadAttention, PositionalEncoding, TokenEmbedding,
                          causal_mask, masked_mean_pool, padding_mask)
from course_utils.checks import check_gpt, check_gpt_block, check_scaled_dot_product_attention, check_transformer_classifier
"""
# the course's own cells use the notebook's references: before the exercises (the real ones) ...
BEFORE = """\
w = course_utils.attention.attention_weights(torch.ones(1, 2, 4), torch.ones(1, 3, 4))  # (1, 2, 3)
out, _ = course_utils.scaled_dot_product_attention(torch.ones(1, 2, 4), torch.ones(1, 3, 4), torch.ones(1, 3, 4))
block = course_utils.GPTBlock(8, 2, 16)
print("before:", tuple(w.shape), tuple(out.shape), tuple(block(torch.ones(1, 3, 8)).shape))
"""
# ... and after them
AFTER = """\
model = course_utils.GPT(11, 8, 2, 1, 16, max_len=6)
print("after:", type(model).__module__, tuple(model(torch.zeros(1, 3, dtype=torch.long)).shape))
"""

# adopt(expr): a module that builds the reference `expr` and adopts its parts, forward included
ADOPT = """\
class {name}(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        ref = {expr}(*args, **kwargs)
        for part, child in ref.named_children():
            self.add_module(part, child)
        for key, value in vars(ref).items():
            if not key.startswith("_") and key != "training":
                setattr(self, key, value)
        self.ref_forward = type(ref).forward

    def forward(self, *args, **kwargs):
        return self.ref_forward(self, *args, **kwargs)
"""
DELEGATE_FORWARD = """\
class {name}(_Mine):
    def forward(self, *args, **kwargs):
        return {expr}.forward(self, *args, **kwargs)
"""


def solution_source(notebook: str, name: str) -> str:
    nb, _ = build.read_notebook(REPO / "solutions" / notebook)
    return next(c.source for c in nb.cells if c.cell_type == "code" and "BEGIN SOLUTION" in c.source
                and name in grade.defined_names(c.source))


def own_then(name: str, template: str, expr: str) -> str:
    """The course's solution renamed ``_Mine``, then ``name`` delegating its forward to ``expr``."""
    mine = solution_source(dict((e[1], e[0]) for e in EXERCISES)[name], name).replace(f"class {name}(", "class _Mine(")
    return mine + "\n\n" + template.format(name=name, expr=expr)


# student -> {exercise: its exercise cell}; every one uses the course's reference
ATTACKS = {
    "attr": {
        "scaled_dot_product_attention":
            'scaled_dot_product_attention = operator.attrgetter("scaled_dot_product_attention")(course_utils)\n',
        "TransformerClassifier": own_then("TransformerClassifier", DELEGATE_FORWARD,
                                          'getattr(course_utils, "Transformer" + "Classifier")'),
        "GPTBlock": ADOPT.format(name="GPTBlock", expr='functools.reduce(getattr, ["gpt", "GPTBlock"], course_utils)'),
        "GPT": ADOPT.format(name="GPT", expr='operator.attrgetter("gpt.GPT")(course_utils)'),
    },
    "helper": {
        "scaled_dot_product_attention": textwrap.dedent("""\
            from course_utils.attention import attention_weights


            def scaled_dot_product_attention(query, key, value, mask=None):
                w = attention_weights(query, key, mask)
                return w @ value, w
            """),
        "TransformerClassifier": own_then("TransformerClassifier", DELEGATE_FORWARD,
                                          "course_utils.TransformerClassifier"),
        "GPTBlock": '_Ref = vars(course_utils)["GPT" + "Block"]\n\n\nclass GPTBlock(_Ref, nn.Module):\n    pass\n',
        "GPT": ADOPT.format(name="GPT", expr='getattr(course_utils, "G" + "PT")'),
    },
    "concat": {
        "scaled_dot_product_attention": textwrap.dedent("""\
            def scaled_dot_product_attention(query, key, value, mask=None):
                return getattr(course_utils, "scaled_dot_" + "product_attention")(query, key, value, mask)
            """),
        "TransformerClassifier": ADOPT.format(
            name="TransformerClassifier", expr='functools.reduce(getattr, ["classifier", "Transformer" + "Classifier"], '
                                               'course_utils)'),
        "GPTBlock": own_then("GPTBlock", DELEGATE_FORWARD, 'getattr(course_utils.gpt, "GPT" + "Block")'),
        "GPT": own_then("GPT", DELEGATE_FORWARD, "course_utils.GPT"),
    },
    # the course's code run again, an object a course cell made with the reference, sys.modules
    "source": {
        "scaled_dot_product_attention": "import importlib\n\nimportlib.reload(course_utils.attention)\n"
                                        "scaled_dot_product_attention = course_utils.attention.scaled_dot_product_attention\n",
        "TransformerClassifier": textwrap.dedent("""\
            _ns = {"__name__": "course_utils.classifier", "__package__": "course_utils"}
            with open(course_utils.classifier.__file__) as _f:
                exec(_f.read(), _ns)
            TransformerClassifier = _ns["TransformerClassifier"]
            """),
        "GPTBlock": "class GPTBlock(type(block)):\n    pass\n",
        "GPT": "import sys\n\n" + ADOPT.format(name="GPT", expr='sys.modules["course_utils.gpt"].GPT'),
    },
}


def course_solution() -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_markdown_cell("# References out of reach (a grading fixture)", id="intro"),
             nbformat.v4.new_code_cell(IMPORTS, id="imports"), nbformat.v4.new_code_cell(BEFORE, id="before")]
    for notebook, name, checker in EXERCISES:
        cells.append(nbformat.v4.new_code_cell(solution_source(notebook, name), id=f"ex-{name}"))
        cells.append(nbformat.v4.new_code_cell(f"{checker}({name})", id=f"check-{name}"))
    cells.append(nbformat.v4.new_code_cell(AFTER, id="after"))
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                          "language": "python"}})


def make_class(folder: Path) -> Path:
    """The fixture course's solutions (returned) and the students: hana (honest: the
    solutions) and the attackers of :data:`ATTACKS`."""
    solutions = folder / "solutions"
    solutions.mkdir(parents=True)
    solution = course_solution()
    nbformat.write(solution, solutions / NOTEBOOK)
    student = build.student_notebook(solution, NOTEBOOK)
    for name, changes in {"hana": {}, **ATTACKS}.items():
        nb = nbformat.from_dict(json.loads(json.dumps(student)))
        for cell in nb.cells:
            exercise = cell.get("id", "").removeprefix("ex-")
            if name == "hana" and cell.get("id", "").startswith("ex-"):
                cell.source = next(c.source for c in solution.cells if c.id == cell.id)
            elif exercise in changes:
                cell.source = changes[exercise]
        (folder / "students" / name).mkdir(parents=True)
        nbformat.write(nb, folder / "students" / name / NOTEBOOK)
    return solutions


def run_grader(folder: Path, *options: str) -> dict:
    out = folder / "grades.json"
    result = subprocess.run(
        [sys.executable, "-m", "course_tools.grade", str(folder / "students"), "--solutions", str(folder / "solutions"),
         "--jobs", "2", "--json", str(out), *options],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=1800,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {n["student"]: n for n in json.loads(out.read_text(encoding="utf-8"))["notebooks"]} | {"_out": result.stdout}


SANDBOX = [pytest.param(False, id="plain"), pytest.param(True, id="sandbox", marks=pytest.mark.skipif(
    shutil.which("bwrap") is None or grade.sandbox_problem() is not None, reason="bwrap cannot run here"))]


@pytest.fixture(scope="module", params=SANDBOX)
def graded(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("refs")
    make_class(folder)
    return run_grader(folder, *(["--sandbox"] if request.param else []))


def test_honest_student_passes_every_exercise_and_the_course_cells_run(graded):
    hana = graded["hana"]
    assert hana["status"] == "ok", (hana["problem"], hana["errors"])  # BEFORE and AFTER ran
    assert [(e["exercise"], e["status"], e["flags"], e["reference"]) for e in hana["exercises"]] == [
        (name, "passed", [], None) for _, name, _ in EXERCISES]
    # bwrap's own processes left at the end are a known, separate false alarm (issue 23's
    # "--sandbox no longer puts 'left 2 process(es) running' on every honest notebook")
    assert [f for f in hana["flags"] if not f.startswith("left ")] == []


@pytest.mark.parametrize("student", list(ATTACKS))
def test_no_attack_on_the_reference_passes_and_each_is_flagged(graded, student):
    for e in graded[student]["exercises"]:
        assert e["status"] in ("used the reference", "review"), (student, e)
        said = " ".join([e["reference"] or "", *e["flags"]])
        assert "course_utils" in said, (student, e)
        assert f"{student}: {e['exercise']} " in graded["_out"]


def test_brute_force_no_callable_of_the_public_course_passes_any_exercise():
    """Every exercise of notebooks 01-09, delegated to every callable the public copy has."""
    script = REPO / "tests" / "hidden_brute_force.py"
    result = subprocess.run([sys.executable, str(script), str(REPO / "solutions")], cwd=REPO, capture_output=True,
                            text=True, check=False, timeout=3000)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["passed"] == []
    assert len(report["tried"]) == 9 and all(n > 50 for n in report["tried"].values()), report["tried"]


def test_brute_force_finds_the_references_when_nothing_is_hidden():
    """The control: with nothing hidden, the same harness finds the references (so it can)."""
    script = REPO / "tests" / "hidden_brute_force.py"
    result = subprocess.run([sys.executable, str(script), str(REPO / "solutions"), "--control", "01", "09"],
                            cwd=REPO, capture_output=True, text=True, check=False, timeout=3000)
    assert result.returncode == 0, result.stderr[-3000:]
    passed = json.loads(result.stdout.splitlines()[-1])["passed"]
    for name in ("scaled_dot_product_attention <- course_utils.scaled_dot_product_attention (",
                 "GPT <- course_utils.GPT (", "GPTBlock <- course_utils.GPTBlock (", "generate <- course_utils.generate ("):
        assert any(name in p for p in passed), (name, passed)
