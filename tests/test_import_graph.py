"""The import graph of course_tools and course_utils, built with `ast` from the source: no
import cycle, and no module importing another module's private name (`from x import _y`, or
`x._y` on a module it imported). A private name belongs to its module, and a private module to
its package (`checks/_core.py` is shared by the checkers, not by the course).

`python tests/test_import_graph.py` prints every finding.

Every import counts, wherever it is in the file: an import inside a function closes a cycle at
run time just the same.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course_tools", "course_utils")
ENFORCED = PACKAGES  # the packages whose findings fail the test


def module_files(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of ``packages`` under ``root`` (a
    package is its ``__init__.py``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def owner(module: str) -> str:
    """The package whose modules alone may import ``module``, a dotted path with a private
    part (``course_utils.checks._core``: ``course_utils.checks``); "" when no part is private."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if is_private(part):
            return ".".join(parts[:i])  # the package holding the private module
    return ""


def inside(module: str, scope: str) -> bool:
    return module == scope or module.startswith(scope + ".")


@dataclass(frozen=True)
class Finding:
    module: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.module} line {self.line}: {self.text}"


def read_imports(module: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], list[Finding]]:
    """The modules of the graph that ``module`` imports, and its imports of private names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    here = module if is_package else module.rpartition(".")[0]
    targets: set[str] = set()
    private: list[Finding] = []
    bound: dict[str, str] = {}  # a name this module binds to a module of the graph -> that module

    def known(dotted: str) -> str | None:  # the module itself, else its longest known parent
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def check_path(dotted: str, line: int) -> None:
        scope = owner(dotted)
        if scope and not inside(module, scope):
            private.append(Finding(module, line, f"imports {dotted}, private to {scope}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    check_path(alias.name, node.lineno)
                    if (target := known(alias.name)) is not None:
                        targets.add(target)
                        # `import a.b as m` binds m to a.b; `import a.b` binds a
                        name = alias.asname or alias.name.split(".")[0]
                        if (bound_to := target if alias.asname else known(name)) is not None:
                            bound[name] = bound_to
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] not in PACKAGES:
                continue
            check_path(source, node.lineno)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in modules:  # `from . import build`: a module
                    targets.add(sub)
                    bound[alias.asname or alias.name] = sub
                    check_path(sub, node.lineno)
                else:
                    if (target := known(source)) is not None:
                        targets.add(target)
                    if is_private(alias.name) and module != source and not (
                            source in modules and modules[source].name == "__init__.py" and inside(module, source)):
                        private.append(Finding(module, node.lineno, f"imports {alias.name} from {source}"))
    for node in ast.walk(tree):  # `module._name` on a module it imported
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and is_private(node.attr):
            target = bound.get(node.value.id)
            if target is not None and target != module and not (
                    modules[target].name == "__init__.py" and inside(module, target)):
                private.append(Finding(module, node.lineno, f"uses {target}.{node.attr}"))
    targets.discard(module)
    return targets, private


def import_graph(root: Path = ROOT, packages=PACKAGES) -> tuple[dict[str, set[str]], list[Finding]]:
    modules = module_files(root, packages)
    graph, private = {}, []
    for name, path in modules.items():
        graph[name], found = read_imports(name, path, modules)
        private += found
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` that hold a cycle (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of ``component`` (one of :func:`cycles`), as
    a path ``[a, b, ..., a]``: what to read first to break it."""
    start, members = component[0], set(component)
    paths, seen = [[start]], set()
    while paths:
        path = paths.pop(0)
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == start:
                return [*path, start]
            if nxt in members and nxt not in seen:
                seen.add(nxt)
                paths.append([*path, nxt])
    return []


def enforced(name: str) -> bool:
    return name.split(".")[0] in ENFORCED


# --------------------------------------------------------------------------- the tools themselves


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"a"}}, [["a"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["c", "d"], ["a", "b"]]),
])
def test_cycles(graph, expected):
    assert sorted(cycles(graph)) == sorted(expected)
    for component in cycles(graph):
        cycle = shortest_cycle(graph, component)
        assert cycle[0] == cycle[-1] == component[0] and all(b in graph[a] for a, b in zip(cycle, cycle[1:]))


def test_read_imports_resolves_every_form_and_names_private_ones(tmp_path):
    files = {
        "course_tools/__init__.py": "",
        "course_tools/kernels.py": "",
        "course_tools/grade/__init__.py": "from .cli import main\nfrom . import _helpers\n",
        "course_tools/grade/_helpers.py": "",
        "course_tools/grade/cli.py": (
            "from .. import kernels\nfrom ..kernels import _private\nimport course_tools.grade._helpers\n"
            "def f():\n    from course_utils.checks import _core\n    from course_utils import attention\n"
            "    return kernels._hidden, attention.__doc__\n"
        ),
        "course_utils/__init__.py": "",
        "course_utils/attention.py": "from ._validate import check\n",
        "course_utils/_validate.py": "",
        "course_utils/checks/__init__.py": "from ._core import CheckResult\nfrom .._validate import check\n",
        "course_utils/checks/_core.py": "from .. import attention\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph, private = import_graph(tmp_path)
    assert graph["course_tools.grade.cli"] == {
        "course_tools.kernels", "course_tools.grade._helpers", "course_utils.checks._core", "course_utils.attention"}
    assert graph["course_tools.grade"] == {"course_tools.grade.cli", "course_tools.grade._helpers"}
    assert graph["course_utils.checks"] == {"course_utils.checks._core", "course_utils._validate"}
    assert graph["course_utils.checks._core"] == {"course_utils.attention"}
    assert sorted(map(str, private)) == [
        "course_tools.grade.cli line 2: imports _private from course_tools.kernels",
        "course_tools.grade.cli line 5: imports course_utils.checks._core, private to course_utils.checks",
        "course_tools.grade.cli line 7: uses course_tools.kernels._hidden",
    ]  # a package's own private modules are its modules' to share


def test_no_import_cycle():
    graph, _ = import_graph()
    assert {"course_tools.build", "course_tools.kernels", "course_tools.grade", "course_tools.grade.cli"} <= set(graph)
    assert graph["course_tools.build"] >= {"course_tools.kernels"}  # the reader sees them
    assert graph["course_tools.grade.plan"] >= {"course_tools.build", "course_tools.grade.scan"}
    assert graph["course_utils.checks.training"] >= {"course_utils.training"}  # course_utils is read too
    found = [shortest_cycle(graph, c) for c in cycles(graph) if any(enforced(m) for m in c)]
    assert found == []
    # start and check_env run before anything else is installed: no tool's dependencies
    assert graph["course_tools.start"] == graph["course_tools.check_env"] == set()
    # the model and training code never imports the checkers (only student_functions looks them up)
    assert [m for m, targets in graph.items() if m.startswith("course_utils.") and not m.startswith(
        ("course_utils.checks", "course_utils.student_functions")) and any(t.startswith("course_utils.checks")
                                                                           for t in targets)] == []


def test_no_module_imports_a_private_name_of_another():
    _, private = import_graph()
    assert [str(f) for f in private if enforced(f.module)] == []


def test_the_readme_layout_names_every_course_utils_module():
    """The README's project layout has a line for each module and folder of course_utils: where a
    newcomer looks first. A folder counts when it holds a file outside ``__pycache__`` (a package,
    or data such as pretrained/): a removed package's stale ``__pycache__`` left in a checkout does not."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("course_utils/         "):readme.index("course_tools/         ")]
    listed = {line.split()[0] for line in layout.splitlines()[1:] if line.startswith("  ") and line[2] != " "}
    package = ROOT / "course_utils"
    present = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    present |= {p.name + "/" for p in package.iterdir() if p.is_dir() and not p.name.startswith("__")
                and any(f.is_file() and "__pycache__" not in f.relative_to(p).parts for f in p.rglob("*"))}
    assert sorted(present - listed) == [] and sorted(listed - present) == []


if __name__ == "__main__":  # every finding
    graph, private = import_graph()
    for component in cycles(graph):
        print(f"cycle among {len(component)} modules, e.g.:", " -> ".join(shortest_cycle(graph, component)))
    print("private names:", *([str(f) for f in private] or ["none"]), sep="\n  ")
    sys.exit(0)
