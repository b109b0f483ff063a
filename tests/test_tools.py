"""The tools live apart from the model: `import course_utils` loads none of the tools' packages,
and no tool's file is longer than a reader can hold (the grader is a package of stages). Their
import graph is tests/test_import_graph.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS_DIR = ROOT / "course_tools"
MAX_LINES = 600


def test_no_tool_file_is_over_600_lines():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in TOOLS_DIR.rglob("*.py")}
    assert "course_tools/grade/kernel_side.py" in lengths
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


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
