"""The tools live apart from the model: course_tools has no import cycle, `import
course_utils` loads none of the tools' packages, and the old `python -m course_utils.<tool>`
commands still run the tools, saying where they moved."""

from __future__ import annotations

import ast
import contextlib
import io
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from course_tools import _moved

ROOT = Path(__file__).resolve().parent.parent
TOOLS_DIR = ROOT / "course_tools"


# --------------------------------------------------------------------------- no import cycle


def tool_imports(path: Path) -> set[str]:
    """The course_tools modules that the module at ``path`` imports, anywhere in it (an
    import inside a function closes a cycle at run time just the same)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1 or module.split(".")[0] == "course_tools":
                inner = module.removeprefix("course_tools").lstrip(".") if node.level == 0 else module
                # `from . import build` names modules; `from .kernels import x` names one module
                found |= {inner} if inner else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("course_tools.")}
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once explored

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":  # back on the current path: that is the cycle
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


@pytest.mark.parametrize(
    "graph, cycle",
    [
        ({"build": {"kernels"}, "grade": {"build", "kernels"}, "kernels": set()}, None),
        ({"build": {"grade"}, "grade": {"build"}}, ["build", "grade", "build"]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"a"}}, ["a", "a"]),
    ],
)
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


def test_tool_imports_reads_every_form(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "from . import build, grade\nfrom .kernels import run_notebook\nimport course_tools.start\n"
        "def f():\n    from course_tools.check_env import main\n    from course_tools import _moved\n"
        "import course_utils\nfrom course_utils import checks\n"
    )
    assert tool_imports(path) == {"build", "grade", "kernels", "start", "check_env", "_moved"}


def test_course_tools_has_no_import_cycle():
    graph = {path.stem: tool_imports(path) - {path.stem} for path in TOOLS_DIR.glob("*.py")}
    assert {"build", "grade", "kernels", "start", "check_env", "_moved"} <= set(graph)
    assert graph["grade"] >= {"build", "kernels"} and graph["build"] >= {"kernels"}  # the reader sees them
    assert find_cycle(graph) is None
    # start and check_env run before anything else is installed: no tool's dependencies
    assert graph["start"] == graph["check_env"] == set()


# --------------------------------------------------------------------------- course_utils alone


def test_import_course_utils_gives_every_name_and_loads_no_tool():
    code = (
        "import sys, course_utils\n"
        "missing = [n for n in course_utils.__all__ if n not in vars(course_utils)]\n"
        "tools = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "    {'course_tools', 'nbformat', 'nbclient', 'jupyter_client', 'jupyter_core', 'ipykernel', 'traitlets'})\n"
        "print(missing, tools)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []"


# --------------------------------------------------------------------------- the old names


def run_old_name(tool: str, *args: str) -> tuple[int, str, str]:
    """``python -m course_utils.<tool> ARGS`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = [f"course_utils.{tool}", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stop:
            runpy.run_module(f"course_utils.{tool}", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv
    return stop.value.code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("tool", _moved.TOOLS)
@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # the test imported the tool already
def test_old_name_forwards_help_with_one_line_on_stderr(tool, capsys):
    code, out, err = run_old_name(tool, "--help")
    assert code == 0
    assert err == f"note: {_moved.notice(tool)}\n"
    assert f"course_tools.{tool} has moved" not in out
    new = __import__(f"course_tools.{tool}", fromlist=["main"])
    with pytest.raises(SystemExit):
        new.main(["--help"])
    assert out == capsys.readouterr().out  # stdout is the tool's own, unchanged
    assert f"usage: python -m course_tools.{tool}" in out


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
def test_old_name_passes_the_arguments_and_the_exit_status():
    code, out, err = run_old_name("start", "--no-such-option")
    assert code == 2
    assert err.startswith(f"note: {_moved.notice('start')}\nusage: python -m course_tools.start")
    assert "unrecognized arguments: --no-such-option" in err


def test_python_m_old_name_runs_the_tool():
    """The command itself, in a fresh Python: `python -m course_utils.build --help`."""
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.build", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"note: {_moved.notice('build')}\n"
    assert done.stdout.startswith("usage: python -m course_tools.build")


def test_old_import_finds_the_tools_names_with_a_deprecation_warning():
    from course_tools import grade

    with pytest.warns(DeprecationWarning, match="course_utils.grade has moved to course_tools.grade"):
        from course_utils.grade import grade_class
    assert grade_class is grade.grade_class
    import course_utils.build as old

    with pytest.raises(AttributeError):
        old.__no_such_dunder__  # noqa: B018 - the import machinery's probes are not forwarded
