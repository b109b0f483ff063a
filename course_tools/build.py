"""Build the student notebooks in ``notebooks/`` from the solution notebooks in ``solutions/``.

The solution notebooks are the single source: complete, executed, with outputs. The
student notebooks are generated from them and never edited by hand.

Instructor workflow
-------------------
1. Edit ``solutions/NN_name.ipynb`` (``NN`` = two digits) in Jupyter and run it top to
   bottom, so the stored outputs are the ones students will compare with (or run
   ``python -m course_tools.build --execute NN_name``, which also does step 3).
2. Mark what students write:

   * in a code cell, put the answer between two lines ``### BEGIN SOLUTION`` and
     ``### END SOLUTION`` (any indentation; several blocks per cell are fine). The
     student version replaces the block, at the indentation of the ``BEGIN`` line, by
     ``# YOUR CODE HERE`` and a ``raise NotImplementedError("...")`` whose message names
     the exercise (the cell's top-level ``def``/``class``) and, when ``course_utils``
     exports that name, the import that continues with the reference. Code after the block in
     the same cell becomes unreachable for the student: end an exercise cell with the
     block and put the ``check_*`` call in the next cell;
   * in a markdown cell, put the answer between ``<!-- BEGIN SOLUTION -->`` and
     ``<!-- END SOLUTION -->`` lines; the student sees ``*Your answer here.*``.

3. Run ``python -m course_tools.build``. It writes ``notebooks/NN_name.ipynb`` for every
   solution (outputs and execution counts cleared, cell ids kept, solution metadata
   dropped), deletes student notebooks whose solution is gone, and puts the two header
   cells (tagged ``colab-header`` and ``colab-setup``, built from :data:`REPO_URL` and
   :data:`REF`) first in *both* notebooks, rewriting the solution's header cells if they
   are missing or stale (their sources only; no other cell of the solution changes).
4. Commit ``solutions/`` and ``notebooks/`` together. CI runs
   ``python -m course_tools.build --check``, which writes nothing and exits 1, listing
   the stale, missing or extra files, when step 3 was forgotten.

To publish from another repository or tag, change :data:`REPO_URL` or :data:`REF` here
(the only place that defines them) and run step 3.

Every notebook the build writes (a solution it updates, a student notebook, a solution
it ran) is normalised (:func:`course_tools.kernels.normalise`): the kernelspec and
``language_info`` a current ipykernel writes (the full Python version, as the kernel reports
it), and consecutive stream outputs merged, so that an unchanged rerun gives an unchanged file. ``--normalise FILE ...``
does only that, to any notebooks.

Options: ``--solutions DIR`` and ``--notebooks DIR`` (defaults ``solutions`` and
``notebooks`` under the current directory), ``--check``, ``--execute [NAME ...]``: first
run the named solutions (``01_attention``, ``01_attention.ipynb`` or ``01``; default all)
in place, top to bottom, in a fresh kernel of this Python (working directory: the
solutions folder; at most :data:`EXECUTE_CELL_TIMEOUT` seconds a cell), then build. A
solution that raises is left as it was, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from .kernels import normalise, run_notebook

# Placeholder: the course's public repository (to be replaced when it is published).
REPO_URL = "https://github.com/transformer-course/transformer-from-scratch"
# Git tag or branch the badges open and the Colab set-up cell installs from.
REF = "main"
# Distribution name in pyproject.toml; pip rejects a `name @ url` whose name differs.
PACKAGE_NAME = "transformer-course"

HEADER_TAG = "colab-header"
SETUP_TAG = "colab-setup"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"

NOTEBOOK_NAME = re.compile(r"^\d{2}_[^/\\]+\.ipynb$")
SOLUTION_TAGS = frozenset({"solution"})  # cell tags that mark a solution cell
# Cell metadata that marks solutions or records a run whose outputs we clear.
DROPPED_CELL_METADATA = ("nbgrader", "execution", "ExecuteTime")
# Notebook metadata: nbgrader's marks, and widget state (an output).
DROPPED_NOTEBOOK_METADATA = ("nbgrader", "widgets")
CONTRACT = Path("docs") / "course-contract.md"  # its lists of named mistakes are generated (--contract)

CODE_BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[ \t]*$")
CODE_END = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
MD_BEGIN = re.compile(r"^(?P<indent>[ \t]*)<!-- BEGIN SOLUTION -->[ \t]*$")
MD_END = re.compile(r"^[ \t]*<!-- END SOLUTION -->[ \t]*$")
ANY_MARKER = re.compile(r"(BEGIN|END) SOLUTION")
# What every student stub contains (the raise carries a message, see code_stub).
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError(")
DEFINITION = re.compile(r"^(?:async\s+)?(?:def|class)\s+(?P<name>\w+)")
MARKDOWN_STUB = ("*Your answer here.*",)


class BuildError(Exception):
    """A solution notebook the build cannot turn into a student notebook."""


# --------------------------------------------------------------------------- header


def _github_path() -> str:
    """``org/repo`` from :data:`REPO_URL`."""
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", REPO_URL)
    if match is None:
        raise BuildError(f"REPO_URL must be https://github.com/<org>/<repo>, got {REPO_URL!r}")
    return f"{match.group(1)}/{match.group(2)}"


def colab_url(folder: str, filename: str) -> str:
    """Colab link that opens ``<folder>/<filename>`` at :data:`REF`."""
    return f"https://colab.research.google.com/github/{_github_path()}/blob/{REF}/{folder}/{filename}"


def header_sources(folder: str, filename: str) -> tuple[str, str]:
    """Sources of the two header cells: (badge markdown, Colab set-up code)."""
    badge = f"[![Open In Colab]({COLAB_BADGE})]({colab_url(folder, filename)})"
    setup = (
        "# Set-up: in Colab, install the course's helper package (does nothing elsewhere).\n"
        "import sys\n"
        'if "google.colab" in sys.modules:\n'
        f'    %pip install -q "{PACKAGE_NAME} @ git+{REPO_URL}@{REF}"'
    )
    return badge, setup


def _tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


def _has_tag(cell, tag: str) -> bool:
    return tag in _tags(cell)


def _header_cell(existing, cell_type: str, source: str, tag: str, cell_id: str):
    """The header cell, reusing an existing cell's id and metadata when it has one."""
    if cell_type == "markdown":
        cell = nbformat.v4.new_markdown_cell(source)
    else:
        cell = nbformat.v4.new_code_cell(source)
    cell.id = cell_id
    if existing is not None:
        cell.id = existing.get("id", cell_id)
        cell.metadata = copy.deepcopy(existing.get("metadata", {}))
        if cell_type == "code" and existing.cell_type == "code":
            cell.execution_count = existing.get("execution_count")  # a rerun is not staleness
    tags = [t for t in _tags(cell) if t not in (HEADER_TAG, SETUP_TAG)]
    cell.metadata["tags"] = [tag, *tags]
    return cell


def with_header(nb, folder: str, filename: str) -> tuple[object, list[str]]:
    """Copy of ``nb`` whose first two cells are the current header cells.

    Returns ``(notebook, reasons)``; ``reasons`` says what had to change (empty when the
    header was already current). Cells other than the header cells are not touched.
    """
    badge, setup = header_sources(folder, filename)
    cells = nb.cells
    header_idx = [i for i, c in enumerate(cells) if _has_tag(c, HEADER_TAG)]
    setup_idx = [i for i, c in enumerate(cells) if _has_tag(c, SETUP_TAG) and i not in header_idx]
    reasons = []
    for tag, idx, position in ((HEADER_TAG, header_idx, 0), (SETUP_TAG, setup_idx, 1)):
        if not idx:
            reasons.append(f"no cell tagged {tag}")
        elif len(idx) > 1:
            reasons.append(f"{len(idx)} cells tagged {tag}")
        elif idx[0] != position:
            reasons.append(f"{tag} cell is cell {idx[0]}, not cell {position}")
    old_header = cells[header_idx[0]] if header_idx else None
    old_setup = cells[setup_idx[0]] if setup_idx else None
    if old_header is not None and (old_header.cell_type != "markdown" or old_header.source != badge):
        reasons.append(f"{HEADER_TAG} cell out of date")
    if old_setup is not None:
        if old_setup.cell_type != "code" or old_setup.source != setup:
            reasons.append(f"{SETUP_TAG} cell out of date")
        elif old_setup.outputs:
            reasons.append(f"{SETUP_TAG} cell has stored output")

    new = copy.deepcopy(nb)
    new.cells = [
        _header_cell(old_header, "markdown", badge, HEADER_TAG, HEADER_TAG),
        _header_cell(old_setup, "code", setup, SETUP_TAG, SETUP_TAG),
    ] + [copy.deepcopy(c) for i, c in enumerate(cells) if i not in header_idx and i not in setup_idx]
    return new, reasons


# --------------------------------------------------------------------------- solutions


def stub_message(name: str | None) -> str:
    """What a student's unfinished exercise says when a later cell calls it: the exercise,
    and the way on (the reference, when ``course_utils`` exports one of that name)."""
    if name is None:
        return "this exercise is not written yet: fill in its cell"
    text = f"{name} is not written yet: fill in its exercise cell"
    if name in course_exports():
        text += f", or continue with the reference: from course_utils import {name}"
    return text


@functools.cache
def course_exports() -> frozenset[str]:
    """``course_utils.__all__``, read from the package's source rather than imported: the
    build then runs without importing the model (and torch), in about a second."""
    import importlib.util

    spec = importlib.util.find_spec("course_utils")
    if spec is None or spec.origin is None:
        raise BuildError("course_utils is not importable: install the course package (pip install -e .)")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    raise BuildError(f"{spec.origin} has no literal __all__ list")


def code_stub(name: str | None) -> tuple[str, str]:
    """The two lines that replace a solution block inside the definition of ``name``
    (the cell's top-level ``def``/``class``; ``None`` outside one)."""
    return CODE_STUB[0], f'raise NotImplementedError("{stub_message(name)}")'  # no quotes inside


def _strip_block_markers(source: str, cell_type: str, where: str, warnings: list[str]) -> str:
    """Replace every marked solution block of one cell by the student stub."""
    if cell_type == "code":
        begin, end, stub = CODE_BEGIN, CODE_END, CODE_STUB
        expected = "### BEGIN SOLUTION / ### END SOLUTION"
    elif cell_type == "markdown":
        begin, end, stub = MD_BEGIN, MD_END, MARKDOWN_STUB
        expected = "<!-- BEGIN SOLUTION --> / <!-- END SOLUTION -->"
    else:
        for number, line in enumerate(source.split("\n"), start=1):
            if ANY_MARKER.search(line):
                raise BuildError(f"{where}: line {number}: solution markers work only in code and markdown cells")
        return source

    out: list[str] = []
    defining = None  # the top-level def/class the current line belongs to
    open_line = None  # line number of the open BEGIN marker
    top_level_end = None  # line number of the END of a block at indentation 0
    for number, line in enumerate(source.split("\n"), start=1):
        if not ANY_MARKER.search(line):
            if open_line is None:
                out.append(line)
                if cell_type == "code" and line[:1].strip() and line[0] not in "#@)]}":
                    definition = DEFINITION.match(line)  # any other top-level statement ends it
                    defining = definition.group("name") if definition else None
                stripped = line.strip()
                if top_level_end is not None and stripped and not stripped.startswith("#"):
                    warnings.append(
                        f"{where}: line {number} follows a top-level solution block in the same "
                        "cell, so it never runs in the student version (move it to the next cell)"
                    )
                    top_level_end = None
            continue
        if match := begin.match(line):
            if open_line is not None:
                raise BuildError(
                    f"{where}: line {number}: BEGIN SOLUTION inside the block opened on line "
                    f"{open_line} (blocks cannot nest)"
                )
            open_line = number
            indent = match.group("indent")
            lines = code_stub(defining if indent else None) if cell_type == "code" else stub
            out.extend(indent + s for s in lines)
            top_level_end = None
        elif end.match(line):
            if open_line is None:
                raise BuildError(f"{where}: line {number}: END SOLUTION without a BEGIN SOLUTION")
            if cell_type == "code" and indent == "":
                top_level_end = number
            open_line = None
        else:
            raise BuildError(
                f"{where}: line {number}: malformed solution marker {line.strip()!r} "
                f"(expected a line that is exactly {expected})"
            )
    if open_line is not None:
        raise BuildError(f"{where}: line {open_line}: BEGIN SOLUTION without an END SOLUTION")
    return "\n".join(out)


def strip_solutions(source: str, cell_type: str = "code", where: str = "cell") -> str:
    """Student version of one cell's source (``where`` names the cell in errors)."""
    return _strip_block_markers(source, cell_type, where, [])


def _student_cell(cell, where: str, warnings: list[str]):
    cell = copy.deepcopy(cell)
    cell.source = _strip_block_markers(cell.source, cell.cell_type, where, warnings)
    for key in DROPPED_CELL_METADATA:
        cell.metadata.pop(key, None)
    if "tags" in cell.metadata:
        tags = [t for t in cell.metadata["tags"] if t not in SOLUTION_TAGS]
        if tags:
            cell.metadata["tags"] = tags
        else:
            del cell.metadata["tags"]
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
    return cell


def student_notebook(solution, filename: str, warnings: list[str] | None = None):
    """Student version of a solution notebook (``filename`` is used in links and errors).

    Markers are checked in every cell of ``solution`` as given; cell indices in errors
    are those of ``solution``. The result starts with the student header cells.
    """
    warnings = [] if warnings is None else warnings
    stripped = copy.deepcopy(solution)
    stripped.cells = [
        _student_cell(cell, f"{filename}: cell {i} ({cell.cell_type})", warnings)
        for i, cell in enumerate(solution.cells)
    ]
    student, _ = with_header(stripped, "notebooks", filename)
    for key in DROPPED_NOTEBOOK_METADATA:
        student.metadata.pop(key, None)
    return student


# --------------------------------------------------------------------------- files


def read_notebook(path: Path) -> tuple[object, list[str]]:
    """Read a v4 notebook deterministically: ``(notebook, repairs)``.

    nbformat would give cells without an id a random one; here they get an id derived
    from their position and source, and ``repairs`` says so.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise BuildError(f"{path}: cannot read notebook: {error}") from error
    if raw.get("nbformat") != 4:
        raise BuildError(f"{path}: nbformat {raw.get('nbformat')} is not supported (need v4)")
    # What nbformat.reads does, minus the random ids.
    nb = nbformat.v4.rwbase.strip_transient(nbformat.v4.rwbase.rejoin_lines(nbformat.from_dict(raw)))
    repairs = []
    if nb.nbformat_minor < 5:
        nb.nbformat_minor = 5
        repairs.append("upgraded to nbformat 4.5 (cell ids)")
    seen: set[str] = set()
    for i, cell in enumerate(nb.cells):
        cell_id = cell.get("id")
        if not cell_id or cell_id in seen:
            digest = hashlib.sha1(f"{i}\n{cell.source}".encode()).hexdigest()
            cell_id = digest[:8]
            while cell_id in seen:
                cell_id = hashlib.sha1(cell_id.encode()).hexdigest()[:8]
            cell.id = cell_id
            repairs.append(f"cell {i}: new id {cell_id}")
        seen.add(cell_id)
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as error:
        raise BuildError(f"{path}: invalid notebook: {error.message}") from error
    return nb, repairs


def render(nb) -> str:
    """The exact text written for a notebook (Jupyter's own format, trailing newline)."""
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


@dataclass
class Plan:
    """What a build would write: ``{path: text}`` for files that differ, and deletions."""

    solution_updates: dict[Path, str] = field(default_factory=dict)
    solution_reasons: dict[Path, list[str]] = field(default_factory=dict)
    missing: dict[Path, str] = field(default_factory=dict)
    stale: dict[Path, str] = field(default_factory=dict)
    extra: list[Path] = field(default_factory=list)
    up_to_date: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.solution_updates or self.missing or self.stale or self.extra)


def notebook_files(folder: Path) -> list[Path]:
    """The course notebooks ``NN_*.ipynb`` in ``folder``, sorted."""
    return sorted(p for p in Path(folder).glob("*.ipynb") if NOTEBOOK_NAME.match(p.name))


def plan_build(solutions_dir: Path, notebooks_dir: Path) -> Plan:
    """Compare what the build produces with what is on disk; writes nothing."""
    solutions_dir, notebooks_dir = Path(solutions_dir), Path(notebooks_dir)
    if not solutions_dir.is_dir():
        raise BuildError(
            f"solutions directory not found: {solutions_dir} "
            "(run from the repository root or pass --solutions)"
        )
    plan = Plan()
    solutions = notebook_files(solutions_dir)
    for path in solutions:
        as_read, repairs = read_notebook(path)
        # Cell indices in marker errors are those of the file as read.
        student = student_notebook(as_read, path.name, plan.warnings)
        normalise(student)  # the metadata a current ipykernel writes, as in the solution
        solution, reasons = with_header(as_read, "solutions", path.name)
        reasons += normalise(solution)
        if repairs or reasons:
            plan.solution_updates[path] = render(solution)
            plan.solution_reasons[path] = repairs + reasons
        try:
            nbformat.validate(student)
        except nbformat.ValidationError as error:
            raise BuildError(f"{path.name}: student version is invalid: {error.message}") from error
        text = render(student)
        target = notebooks_dir / path.name
        if not target.exists():
            plan.missing[target] = text
        elif target.read_text(encoding="utf-8") != text:
            plan.stale[target] = text
        else:
            plan.up_to_date.append(target)
    names = {p.name for p in solutions}
    plan.extra = [p for p in notebook_files(notebooks_dir) if p.name not in names]
    return plan


# --------------------------------------------------------------------------- --execute

EXECUTE_CELL_TIMEOUT = 600  # seconds per cell when running solutions


def select_solutions(solutions_dir: Path, names: list[str]) -> list[Path]:
    """The solutions named (file name, stem or ``NN`` prefix); all when ``names`` is empty."""
    available = notebook_files(solutions_dir)
    if not names:
        return available
    chosen: list[Path] = []
    for name in names:
        matches = [p for p in available if name in (p.name, p.stem, p.name[:2])]
        if len(matches) != 1:
            known = ", ".join(p.stem for p in available) or "none"
            what = "no solution" if not matches else f"{len(matches)} solutions"
            raise BuildError(f"--execute {name}: {what} of that name in {solutions_dir} (there are: {known})")
        if matches[0] not in chosen:
            chosen.append(matches[0])
    return chosen


def execute_solution(path: Path, timeout: int = EXECUTE_CELL_TIMEOUT) -> str | None:
    """Run the solution at ``path`` top to bottom and write it back with its new outputs.

    Returns ``None``, or what went wrong (then the file is left as it was). Cells tagged
    ``raises-exception`` may raise.
    """
    nb, _ = read_notebook(path)
    current = {"cell": None}
    try:
        run_notebook(nb, path.parent, timeout, on_cell_execute=lambda index: current.update(cell=index))
    except CellExecutionError as error:
        return f"cell {current['cell']} raised {error.ename}: {error.evalue}"
    except (CellTimeoutError, DeadKernelError) as error:
        return f"cell {current['cell']}: {type(error).__name__}: {str(error).strip().splitlines()[0]}"
    normalise(nb)
    _write(path, render(nb))
    return None


def normalise_files(paths: list[Path]) -> int:
    """``--normalise``: :func:`normalise` each notebook in place; 2 if one cannot be read."""
    status = 0
    for path in paths:
        try:
            nb, repairs = read_notebook(path)
        except BuildError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 2
            continue
        changes = repairs + normalise(nb)
        if changes:
            _write(path, render(nb))
            print(f"normalised {_show(path)} ({'; '.join(changes)})")
        else:
            print(f"unchanged  {_show(path)}")
    return status


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.build",
        description="Write notebooks/NN_*.ipynb (student versions) from solutions/NN_*.ipynb.",
    )
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), help="solution notebooks")
    parser.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="student notebooks")
    parser.add_argument(
        "--check", action="store_true",
        help="write nothing; exit 1 and list what is out of date if a build would change anything",
    )
    parser.add_argument(
        "--execute", nargs="*", metavar="NAME",
        help="first run these solutions (default: all) in place with a fresh kernel, then build",
    )
    parser.add_argument(
        "--contract", action="store_true",
        help="only rewrite docs/course-contract.md's generated lists of named mistakes from the checkers' tables "
        "(with --check: exit 1 if they are stale)",
    )
    parser.add_argument(
        "--normalise", nargs="+", type=Path, metavar="NOTEBOOK",
        help="only give these notebooks the metadata a current ipykernel writes and merged stream "
        "outputs, in place (a build does this to every notebook it writes)",
    )
    args = parser.parse_args(argv)
    if args.contract:
        from course_utils.checks import catalogue  # imports torch: only for this command

        return catalogue.rewrite_contract(CONTRACT, check=args.check)
    if args.normalise:
        return normalise_files(args.normalise)
    failed = False
    if args.execute is not None:
        if args.check:
            print("error: --execute and --check do not go together", file=sys.stderr)
            return 2
        try:
            chosen = select_solutions(args.solutions, args.execute)
        except BuildError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        for path in chosen:
            print(f"running {_show(path)} ...", flush=True)
            try:
                problem = execute_solution(path)
            except BuildError as error:  # an unreadable solution
                problem = str(error)
            if problem is None:
                print(f"ran     {_show(path)}")
            else:
                failed = True
                print(f"error: {_show(path)}: {problem} (file left as it was)", file=sys.stderr)
    try:
        plan = plan_build(args.solutions, args.notebooks)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    count = len(plan.missing) + len(plan.stale) + len(plan.up_to_date)

    if args.check:
        if plan.clean:
            print(f"OK: {count} student notebook(s) match their solutions.")
            return 0
        print("Out of date (run `python -m course_tools.build`):")
        for path, reasons in plan.solution_reasons.items():
            print(f"  solution: {_show(path)} ({'; '.join(reasons)})")
        for path in plan.missing:
            print(f"  missing: {_show(path)}")
        for path in plan.stale:
            print(f"  stale:   {_show(path)}")
        for path in plan.extra:
            print(f"  extra:   {_show(path)} (no {_show(args.solutions / path.name)})")
        return 1

    for path, text in plan.solution_updates.items():
        _write(path, text)
        print(f"updated {_show(path)} ({'; '.join(plan.solution_reasons[path])})")
    for path, text in {**plan.missing, **plan.stale}.items():
        _write(path, text)
        print(f"wrote   {_show(path)}")
    for path in plan.extra:
        path.unlink()
        print(f"removed {_show(path)} (its solution is gone)")
    print(f"{count} student notebook(s) up to date.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
