"""Run a solution notebook top to bottom in a Jupyter kernel with some cells changed.

The harness behind tests/test_contract_only_runs.py (issue 22: "the student's model must work
in every cell"). :func:`prepared` copies a notebook with

* every exercise cell (one with ``### BEGIN SOLUTION``) whose top-level definitions the test
  writes itself replaced by the test's code (``exercises``: name -> source), or by the
  student notebook's stub (``stubs``: names whose exercise cell is left unwritten);
* top-level settings such as ``TRAIN = False`` rewritten (``settings``: name -> source of
  the new value), each of which must appear exactly once;
* extra cells inserted after a cell (``after``: cell id -> source), e.g. to shorten the data;
* one string of a cell replaced (``shorten``: cell id -> (old, new)), e.g. a demo's step count.

:func:`one_kernel` chains several such notebooks into one, so that they run in one kernel
(one start-up and one import of torch instead of one per variant).

:func:`run` executes it with ``nbclient`` and fails with the cell's id, source and
traceback at the first cell that raises.
"""

from __future__ import annotations

import ast
import copy
import re
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def defined_names(source: str) -> list[str]:
    """The functions and classes a cell defines at its top level."""
    tree = ast.parse(source)
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def exercise_cells(nb: nbformat.NotebookNode) -> dict[str, list[str]]:
    """Cell id -> the names each exercise cell of a solution notebook defines."""
    return {cell.id: defined_names(cell.source) for cell in nb.cells
            if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source}


def prepared(
    notebook: str,
    *,
    exercises: dict[str, str] | None = None,
    stubs: tuple[str, ...] = (),
    settings: dict[str, str] | None = None,
    after: dict[str, str] | None = None,
    shorten: dict[str, tuple[str, str]] | None = None,
) -> tuple[nbformat.NotebookNode, dict[str, list[str]]]:
    """The solution notebook ``solutions/<notebook>`` changed as the module docstring says.

    Returns the notebook and, for the record, ``{"replaced": [...], "stubbed": [...],
    "kept": [...]}``: the exercise names written by the test, left as stubs, and kept as the
    solution (an exercise the test has no code for, e.g. one added after it was written).
    """
    exercises, settings = exercises or {}, settings or {}
    nb = nbformat.read(ROOT / "solutions" / notebook, as_version=4)
    student = {c.id: c for c in nbformat.read(ROOT / "notebooks" / notebook, as_version=4).cells}
    record: dict[str, list[str]] = {"replaced": [], "stubbed": [], "kept": []}
    for cell_id, names in exercise_cells(nb).items():
        cell = next(c for c in nb.cells if c.id == cell_id)
        if set(names) & set(stubs):
            cell.source = student[cell_id].source
            assert "NotImplementedError" in cell.source, f"the student notebook's {cell_id} is no stub"
            record["stubbed"] += names
        elif names and all(name in exercises for name in names):
            cell.source = "\n\n".join(exercises[name] for name in names)
            record["replaced"] += names
        else:
            assert not set(names) & set(exercises), f"{cell_id} defines {names}: write all of them or none"
            record["kept"] += names
    missing = (set(exercises) - set(record["replaced"])) | (set(stubs) - set(record["stubbed"]))
    assert not missing, f"no exercise cell of {notebook} defines {sorted(missing)}"
    for name, value in settings.items():
        pattern = re.compile(rf"^{re.escape(name)} = [^\n#]*", re.M)
        hits = [c for c in nb.cells if c.cell_type == "code" and pattern.search(c.source)]
        assert len(hits) == 1 and len(pattern.findall(hits[0].source)) == 1, (
            f"{notebook}: expected one top-level line `{name} = ...`, found it in {len(hits)} cells")
        hits[0].source = pattern.sub(f"{name} = {value}", hits[0].source)
    shortened(nb, shorten=shorten, after=after)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb, record


# Test-only shortenings of demonstrations (``shorten`` and ``after`` of :func:`shortened`), for the
# runs that reach them (tests/test_contract_only_runs.py, tests/test_student_notebooks.py): the same
# cells on less data or fewer steps, where no test asserts on the length.
SHORTER = {
    # Short evaluation splits (decoding an untrained model runs every sequence to max_len) and short
    # demonstrations of section 2 and 5; the cells are otherwise the notebook's.
    "07_training.ipynb": dict(
        after={"nb07-005": 'splits = {name: pairs if name == "train" else pairs[:150] for name, pairs in splits.items()}'},  # noqa: E501
        shorten={"nb07-019": ("steps=150", "steps=5"), "nb07-040": ("range(60)", "range(20)")},
    ),
    # Shorter samples of section 6 (six generations, the slowest cell of either run): 130 characters
    # after the 7 of the prompt still pass both models' context (64 and the checkpoint's 128), so
    # generate's cropped window is exercised as with 300.
    # Section 6's measures of the knobs on 4 samples per setting instead of 24 (the same code on
    # fewer rows; 7 settings, each generating with the cache up to the context).
    # Section 7's timing of the cache on a batch of 2 instead of 8: the same code (a batch of several,
    # filling the context, without the cache and with it) on fewer rows; without the cache each step
    # runs the whole prefix of every row.
    "09_gpt.ipynb": dict(shorten={
        "3279de65": ("n=300", "n=130"), "e54a6a15": ("n_samples=24", "n_samples=4"),
        "d34862ee": ("prompt_ids.repeat(8, 1)", "prompt_ids.repeat(2, 1)")}),
}


def shortened(nb: nbformat.NotebookNode, *, shorten: dict[str, tuple[str, str]] | None = None,
              after: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """``nb`` changed in place: in each cell of ``shorten`` (cell id -> (old, new)) its one ``old``
    replaced, e.g. a demonstration's number of steps; after each cell of ``after`` (cell id ->
    source) a cell inserted, e.g. one that cuts the data."""
    for cell_id, (old, new) in (shorten or {}).items():
        cell = next(c for c in nb.cells if c.id == cell_id)
        assert cell.source.count(old) == 1, f"{cell_id} has no single {old!r}"
        cell.source = cell.source.replace(old, new)
    for cell_id, source in (after or {}).items():
        index = next(i for i, c in enumerate(nb.cells) if c.id == cell_id)
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source, id=f"{cell_id}-test"))
    return nb


# A figure is built but not drawn: `plt.show()` closes it. Drawing (the inline backend's PNG) cost
# 3 of a notebook 07 stub run's 12 CPU-s; the figures are the same code on the same kind of data as
# in the test's first variant, which draws them, and as nbval's run of the solution.
UNDRAWN = """import matplotlib.pyplot as plt
plt.show = lambda *args, **kwargs: plt.close("all")"""


def one_kernel(variants: dict[str, nbformat.NotebookNode], drawn: int = 1) -> nbformat.NotebookNode:
    """The cells of every variant in turn (ids suffixed ``--<tag>``), as one notebook: every
    variant re-runs every cell, so each starts from its own definitions, as "Run All" does. The
    first ``drawn`` variants draw their figures; the later ones build them without drawing."""
    chained = nbformat.v4.new_notebook(metadata=next(iter(variants.values())).metadata)
    for i, (tag, nb) in enumerate(variants.items()):
        if i == drawn:
            chained.cells.append(nbformat.v4.new_code_cell(UNDRAWN, id="undrawn"))
        for cell in nb.cells:
            cell = copy.deepcopy(cell)
            cell.id = f"{cell.id}--{tag}"
            chained.cells.append(cell)
    return chained


def run(nb: nbformat.NotebookNode, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    """Execute ``nb`` in a fresh kernel (cwd: ``solutions/``), shut down after; return it and the
    seconds taken. The first cell that raises fails the calling test with its id and traceback."""
    from jupyter_client import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = copy.deepcopy(nb)
    km = KernelManager(kernel_name="python3")
    km.kernel_spec.argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]  # this env's
    client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "solutions")}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        failed = next((c for c in nb.cells if c.cell_type == "code"
                       and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        where = f"cell {failed.id}:\n{failed.source}\n" if failed is not None else ""
        raise AssertionError(f"{where}{error}") from None
    finally:  # nbclient leaves a kernel it did not create running: it would stay until pytest ends
        if km.has_kernel:
            km.shutdown_kernel()
    return nb, time.perf_counter() - start


def slowest(nb: nbformat.NotebookNode, n: int = 5) -> str:
    """The ``n`` slowest cells of an executed notebook, as ``id: seconds`` (nbclient's timing)."""
    from datetime import datetime

    def seconds(cell):
        timing = cell.metadata.get("execution", {})
        begin, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if not (begin and end):
            return 0.0
        parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
        return (parse(end) - parse(begin)).total_seconds()

    cells = sorted((c for c in nb.cells if c.cell_type == "code"), key=seconds, reverse=True)[:n]
    return ", ".join(f"{c.id}: {seconds(c):.1f} s" for c in cells)


def text_of(nb: nbformat.NotebookNode, cell_id: str) -> str:
    """The plain text a cell printed (streams and text/plain results)."""
    cell = next(c for c in nb.cells if c.id == cell_id)
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)
