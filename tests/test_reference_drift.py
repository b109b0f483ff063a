"""The package's references and the solution cells are one text (issue 24: no drift).

Where a reference in ``course_utils`` carries the marker ``# from here on, the solution cell
of notebook NN``, the statements after it must be the last statements of the same
function (or method) in ``solutions/NN_*.ipynb``, compared through ``ast`` (comments and
formatting do not count). The few deliberate differences are declared in ``DIFFERENCES``,
each with its reason; any other difference, or a marker whose solution is gone, fails.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"#\s*from here on, the solution cell of notebook (\d\d)")

# (module, qualified name) -> (the package's text -> the solution's, the solution's statements the
# package makes before its marker, why): replacements in the package's unparsed statements before
# comparing ("" drops a package-only statement).
DIFFERENCES: dict[tuple[str, str], tuple[dict[str, str], tuple[str, ...], str]] = {
    ("decoder.py", "DecoderLayer.forward"): (
        {"self.dropout1(": "self.dropout(", "self.dropout2(": "self.dropout(", "self.dropout3(": "self.dropout("}, (),
        "one dropout module per sub-layer (the cached decoder in decoding.py reads each); dropout has no state, "
        "so the numbers are the same"),
    ("layers.py", "LayerNorm.forward"): (
        {"return (x_hat * self.weight + self.bias).to(dtype)": "return x_hat * self.weight + self.bias"}, (),
        "float16 input is normalised in float32 and cast back (the dtype rule); a no-op for float32"),
    ("layers.py", "FeedForward.forward"): (
        {"self.activation(": "torch.relu("}, (),
        "the activation is a choice (ReLU, GELU for BERT, tanh-GELU for GPT-2); notebook 04 writes ReLU"),
    ("training.py", "masked_cross_entropy"): (
        {"safe = targets.masked_fill(~real, 0)": "", "safe.unsqueeze(-1)": "targets.unsqueeze(-1)"},
        ("real = targets != pad_id",),
        "the package also takes a pad id outside [0, V) (Hugging Face's -100), which gather cannot index, and "
        "computes `real` before the marker, for its argument checks"),
}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """``{name or Class.method: node}`` of the module's top-level functions and methods."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.update({f"{node.name}.{m.name}": m for m in node.body if isinstance(m, ast.FunctionDef)})
        elif isinstance(node, ast.FunctionDef):
            found[node.name] = node
    return found


def _solution_functions(notebook: str) -> dict[str, ast.FunctionDef]:
    [path] = REPO.glob(f"solutions/{notebook}_*.ipynb")
    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        source = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        try:
            found.update(_functions(ast.parse(source)))
        except SyntaxError:
            continue
    return found


def _marked() -> list[tuple[str, str, str, list[str]]]:
    """``(module, qualified name, notebook, the statements after the marker)`` for every marker."""
    out = []
    for path in sorted((REPO / "course_utils").glob("*.py")):
        text = path.read_text()
        marks = [(i + 1, m[1]) for i, line in enumerate(text.splitlines()) if (m := MARKER.search(line))]
        if not marks:
            continue
        functions = _functions(ast.parse(text))
        for line, notebook in marks:
            name, node = next((n, f) for n, f in functions.items() if f.lineno <= line <= f.end_lineno)
            out.append((path.name, name, notebook, [ast.unparse(s) for s in node.body if s.lineno > line]))
    return out


MARKED = _marked()


def test_the_markers_are_found():
    # the table below each marker names a function that exists: a renamed one must not be skipped silently
    assert len(MARKED) >= 5, MARKED
    assert {(m, n) for m, n, _, _ in MARKED} >= set(DIFFERENCES), "a declared difference has no marker"


@pytest.mark.parametrize(("module", "name", "notebook", "tail"), MARKED, ids=[f"{m}:{n}" for m, n, _, _ in MARKED])
def test_the_reference_is_the_solution_cell(module, name, notebook, tail):
    solution = _solution_functions(notebook).get(name)
    assert solution is not None, f"{module}: {name} is marked as notebook {notebook}'s solution cell, which has none"
    replacements, before, _why = DIFFERENCES.get((module, name), ({}, (), ""))
    package = []
    for statement in tail:
        for old, new in replacements.items():
            statement = new if old == statement else statement.replace(old, new)
        if statement:
            package.append(statement)
    body = [s for s in solution.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    cell = [ast.unparse(s) for s in body if ast.unparse(s) not in before]
    cell = cell[len(cell) - len(package):]
    assert package == cell, f"{module}: {name} drifted from solutions/{notebook}'s cell"
