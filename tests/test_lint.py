"""The house rules as a tool: ``ruff check`` is clean (pyflakes, import order, lines of at most
120 characters; the settings are ``[tool.ruff]`` in pyproject.toml).

A test rather than a step of ``course.py test``: the same cost (ruff reads the whole tree in
well under a second), one place for every failure, and ``pytest tests/test_lint.py`` runs it
alone. ``ruff check --fix`` repairs the import order; a long line is wrapped by hand.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("course_utils", "course_tools", "tests", "benchmarks", "course.py", "course_cli.py")


def test_ruff_check_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *PATHS], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert "No module named ruff" not in result.stderr, "ruff is in the dev extra: python3 course.py setup installs it"
    assert result.returncode == 0, result.stdout + result.stderr
