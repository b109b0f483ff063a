"""The graded notebook's references out of reach (course_tools/grade/hide_references.py, issue 23).

A fixture course notebook, made here from the course's own solution cells, has four
exercises of notebooks 01, 08 and 09 (``scaled_dot_product_attention``,
``TransformerClassifier``, ``GPTBlock``, ``GPT``) and course cells that use those
references before the exercises and after them (the course's cells get the real ones).
An honest student must pass all four without a flag; students who
reach the references through computed names, helpers, the reference class's ``forward``,
``add_module``, a checker's hook's ``__globals__``,
``nn.Module.__subclasses__()``, the garbage collector, ``functools.partial`` or a copy of a
course cell's model must pass none, and each attempt is flagged (``R`` or ``!``) naming
what it used. The class is graded through the command line, with and without
``--sandbox``. A brute-force test delegates every exercise of the course to a fixed
sample of the callables a graded kernel reaches (benchmarks/hidden_brute_force.py runs
them all). A later notebook's reference is hidden too: a notebook 01 whose attention is
notebook 02's ``MultiHeadAttention`` with identity projections, and whose padding mask is
notebook 06's ``make_src_mask``, is graded against the course's own solutions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterable
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
"""  # noqa: E501
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
            name="TransformerClassifier", expr='functools.reduce(getattr, ["classifier", "Transformer" + "Classifier"], '  # noqa: E501
                                               'course_utils)'),
        "GPTBlock": own_then("GPTBlock", DELEGATE_FORWARD, 'getattr(course_utils.gpt, "GPT" + "Block")'),
        "GPT": own_then("GPT", DELEGATE_FORWARD, "course_utils.GPT"),
    },
    # reached, not named: a partial, a checker's hook's __globals__, nn.Module.__subclasses__()
    "reach": {
        "scaled_dot_product_attention": "scaled_dot_product_attention = functools.partial(\n"
                                        "    vars(course_utils.attention)['scaled_dot_product_attention'])\n",
        "TransformerClassifier": own_then("TransformerClassifier", textwrap.dedent("""\
            class {name}(_Mine):
                def forward(self, *args, **kwargs):
                    hooks = [*nn.modules.module._global_parameter_registration_hooks.values(),
                             *nn.modules.module._global_forward_pre_hooks.values()]
                    for m in self.modules():
                        hooks += [*m._forward_pre_hooks.values(), *m._forward_hooks.values()]
                    for hook in hooks:  # a checker's hook: its module's globals hold the reference
                        found = getattr(hook, "__globals__", {{}}).get("{name}")
                        if found is not None:
                            return found.forward(self, *args, **kwargs)
                    return super().forward(*args, **kwargs)
            """), ""),
        "GPTBlock": textwrap.dedent("""\
            def _course_class(name):
                todo = [nn.Module]
                while todo:
                    cls = todo.pop()
                    if cls.__name__ == name and cls.__module__ == "course_utils.gpt":
                        return cls
                    todo += cls.__subclasses__()


            class GPTBlock(_course_class("GPTBlock")):
                pass
            """),
        "GPT": "_found = [nn.Module]\nwhile _found[-1].__name__ != 'GPT' or _found[-1].__module__ != 'course_utils.gpt':\n"  # noqa: E501
               "    _found += _found.pop().__subclasses__()\n\n" + ADOPT.format(name="GPT", expr="_found[-1]"),
    },
    # the garbage collector; the reference as a partial; a copy of a course cell's model; its class's forward
    "reach2": {
        "scaled_dot_product_attention": "import gc\n\nscaled_dot_product_attention = next(\n"
                                        "    o for o in gc.get_objects() if getattr(o, '__name__', '') == "
                                        "'scaled_dot_product_attention' and getattr(o, '__module__', '') == "
                                        "'course_utils.attention')\n",
        "TransformerClassifier": "_found = [nn.Module]\nwhile _found[-1].__name__ != 'TransformerClassifier':\n"
                                 "    _found += _found.pop().__subclasses__()\n"
                                 "TransformerClassifier = functools.partial(_found[-1])\n",
        "GPTBlock": textwrap.dedent("""\
            import copy


            class GPTBlock(nn.Module):
                def __init__(self, *args, **kwargs):
                    super().__init__()
                    self.inner = copy.deepcopy(block)

                def forward(self, x, *args, **kwargs):
                    return self.inner(x, *args, **kwargs)
            """),
        "GPT": own_then("GPT", DELEGATE_FORWARD, "type(block)"),
    },
    # the course's code run again, an object a course cell made with the reference, sys.modules
    "source": {
        "scaled_dot_product_attention": "import importlib\n\nimportlib.reload(course_utils.attention)\n"
                                        "scaled_dot_product_attention = course_utils.attention.scaled_dot_product_attention\n",  # noqa: E501
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


def make_class(folder: Path, students: Iterable[str] | None = None) -> Path:
    """The fixture course's solutions (returned) and the students: hana (honest: the
    solutions) and the attackers of :data:`ATTACKS`."""
    solutions = folder / "solutions"
    solutions.mkdir(parents=True)
    solution = course_solution()
    nbformat.write(solution, solutions / NOTEBOOK)
    student = build.student_notebook(solution, NOTEBOOK)
    for name, changes in {"hana": {}, **ATTACKS}.items():
        if students is not None and name not in students:
            continue
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


SANDBOX_STUDENTS = ("hana", "attr", "reach", "reach2")
SANDBOX = [pytest.param(False, id="plain"), pytest.param(True, id="sandbox", marks=pytest.mark.skipif(
    shutil.which("bwrap") is None or grade.sandbox_problem() is not None, reason="bwrap cannot run here"))]


@pytest.fixture(scope="module", params=SANDBOX)
def graded(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("refs")
    # under --sandbox (the same hook, in bwrap) the students who reach the real objects only:
    # the suite's time is shared
    make_class(folder, SANDBOX_STUDENTS if request.param else None)
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
    if student not in graded:
        pytest.skip(f"{student} is graded without --sandbox only")
    for e in graded[student]["exercises"]:
        assert e["status"] in ("used the reference", "review"), (student, e)
        said = " ".join([e["reference"] or "", *e["flags"]])
        assert "course_utils" in said, (student, e)
        assert f"{student}: {e['exercise']} " in graded["_out"]


# what the reaching attacks met: the reference's own code refused them (the path was real)
REACHED = {
    ("reach", "scaled_dot_product_attention"): "course_utils.scaled_dot_product_attention",
    ("reach", "TransformerClassifier"): "course_utils.TransformerClassifier.forward (hidden while grading, refused)",
    ("reach", "GPTBlock"): "course_utils.GPTBlock.__init__ (hidden while grading, refused)",
    ("reach", "GPT"): "course_utils.GPT.__init__ (hidden while grading, refused)",
    ("reach2", "scaled_dot_product_attention"): "gc.get_objects",
    ("reach2", "TransformerClassifier"): "course_utils.TransformerClassifier",
    ("reach2", "GPTBlock"): "course_utils.GPTBlock.__setstate__ (hidden while grading, refused)",
    ("reach2", "GPT"): "course_utils.GPTBlock",
}


@pytest.mark.parametrize(("student", "name"), list(REACHED))
def test_a_reached_reference_refuses_to_run_for_the_student(graded, student, name):
    if student not in graded:
        pytest.skip(f"{student} is graded without --sandbox only")
    e = next(e for e in graded[student]["exercises"] if e["exercise"] == name)
    said = " ".join([e["reference"] or "", *e["flags"]])
    assert REACHED[student, name] in said, (student, e)


BRUTE_FORCE = REPO / "benchmarks" / "hidden_brute_force.py"
SAMPLE = "40"  # candidates an exercise: all that name a hidden object, then a fixed spread of the others
# the notebooks whose checks are quick (a function, classes, a later notebook's classes):
# 06, 07 and 09's checks decode or train, minutes for a sample (see the script)
BRUTE_FORCE_NOTEBOOKS = ("01", "04", "08")


def brute_force(*args: str) -> dict:
    result = subprocess.run([sys.executable, str(BRUTE_FORCE), str(REPO / "solutions"), "--sample", SAMPLE, *args],
                            cwd=REPO, capture_output=True, text=True, check=False, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_brute_force_no_callable_within_reach_passes_any_exercise():
    """Every exercise of notebooks 01, 04 and 08, delegated to a fixed sample of the
    callables a graded kernel reaches (the public copy, the checkers' modules, nn.Module's
    subclasses): none is counted as passed. The full run: benchmarks/hidden_brute_force.py."""
    report = brute_force(*BRUTE_FORCE_NOTEBOOKS)
    assert report["passed"] == []
    assert len(report["tried"]) == 3 and all(n > 200 for n in report["tried"].values()), report["tried"]


def test_brute_force_finds_the_references_when_nothing_is_hidden():
    """The control: with nothing hidden, the same harness and sample find the references
    (so it can), a later notebook's included (06's make_src_mask is 01's padding_mask)."""
    passed = brute_force("--control", "01")["passed"]
    for name in ("scaled_dot_product_attention <- course_utils.scaled_dot_product_attention (",
                 "padding_mask <- course_utils.make_src_mask ("):
        assert any(name in p for p in passed), (name, passed)


LATER = {  # notebook 01's answers computed by later notebooks' references
    "scaled_dot_product_attention": textwrap.dedent("""\
        import course_utils


        def scaled_dot_product_attention(query, key, value, mask=None):
            D = query.shape[-1]
            mha = course_utils.MultiHeadAttention(D, 1, dropout=0.0).eval()
            with torch.no_grad():
                for linear in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
                    linear.weight.copy_(torch.eye(D))
                    linear.bias.zero_()
            out, w = mha(query, key, value, None if mask is None else mask.unsqueeze(1))
            return out, w[:, 0]
        """),
    "padding_mask": "import course_utils\n\n\ndef padding_mask(tokens, pad_id):\n"
                    "    return course_utils.make_src_mask(tokens, pad_id)\n",
}


def test_a_later_notebooks_reference_is_hidden_too(tmp_path):
    """Grading notebook 01 (plain: the sandbox runs the same hook), MultiHeadAttention (02)
    and make_src_mask (06) are out of reach: both answers are R, naming what they asked for."""
    course = grade.load_course(REPO / "solutions", grade.checker_exercises())["01_attention.ipynb"]
    cells = {e.cell_id: LATER[e.name] for e in course.exercises if e.name in LATER}
    nb = nbformat.from_dict(json.loads(json.dumps(course.notebook)))
    for cell in nb.cells:
        cell.source = cells.get(cell.get("id"), cell.source)
    (tmp_path / "students" / "lena").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "students" / "lena" / "01_attention.ipynb")
    out = tmp_path / "grades.json"
    result = subprocess.run([sys.executable, "-m", "course_tools.grade", str(tmp_path / "students"), "--solutions",
                             str(REPO / "solutions"), "--no-sandbox", "--json", str(out)],
                            cwd=REPO, capture_output=True, text=True, check=False, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    got = {e["exercise"]: e for e in json.loads(out.read_text(encoding="utf-8"))["notebooks"][0]["exercises"]}
    for name, asked in (("scaled_dot_product_attention", "MultiHeadAttention"), ("padding_mask", "make_src_mask")):
        assert got[name]["status"] == "used the reference", got[name]
        assert f"calls course_utils.{asked} (hidden while grading, refused)" in got[name]["reference"], got[name]
