"""Notebook 07's attention explorer works with ipywidgets 7 (Colab's 7.7.1, pyproject's lower
bound) and 8 (the course environment's).

The explorer cell (solutions/07, id nb07-083) runs in an IPython shell in a subprocess, on
random attention maps; then a control is changed (the figure is redrawn in place) and a number
the vocabulary cannot spell is typed (the message says so). ipywidgets 7.7.1 is installed on
first use into a folder of the virtual environment (``<venv>/ipywidgets-7.7.1``), put first on
``sys.path``; the test skips, saying why, when pip cannot fetch it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD = "7.7.1"
OLD_DIR = Path(sys.prefix) / f"ipywidgets-{OLD}"

SCRIPT = r'''
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
import matplotlib
matplotlib.use("Agg")
import ipywidgets
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
SETUP = """
import matplotlib.pyplot as plt
import torch
from IPython.display import display
from course_utils import plotting

def attention_for(text):
    if not text[:1].isdigit():
        raise ValueError(f"cannot spell {text!r}")
    L, T = len(text), 3
    g = torch.Generator().manual_seed(0)
    maps = {"encoder self-attention": torch.rand(2, 4, L, L, generator=g).softmax(-1),
            "decoder self-attention": torch.rand(2, 4, T, T, generator=g).softmax(-1),
            "cross-attention": torch.rand(2, 4, T, L, generator=g).softmax(-1)}
    return maps, list(text), ["<bos>", "one", "two"], ["one", "two", "<eos>"]

maps = attention_for("23,416,905.7")[0]
"""
CHANGE = """
controls["head"].value = 1
controls["kind"].value = "encoder self-attention"
assert message.value == "", message.value
controls["text"].value = "abc"
assert message.value == "cannot spell 'abc'", message.value
"""
for code in (SETUP, sys.argv[2], CHANGE):
    shell.run_cell(code).raise_error()
print("ipywidgets", ipywidgets.__version__, "explorer ok")
'''


def explorer_source() -> str:
    nb = json.loads((ROOT / "solutions" / "07_training.ipynb").read_text())
    return "".join(next(c for c in nb["cells"] if c.get("id") == "nb07-083")["source"])


def old_ipywidgets() -> Path:
    """The folder holding ipywidgets 7.7.1 (installed once, without touching the environment)."""
    marker = OLD_DIR / ".complete"
    if not marker.exists():
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(OLD_DIR),
             f"ipywidgets=={OLD}", "ipython_genutils==0.2.0"],
            capture_output=True, text=True, timeout=300,
        )
        if pip.returncode != 0:
            pytest.skip(f"could not install ipywidgets {OLD}: {pip.stderr.strip().splitlines()[-1:]}")
        marker.write_text("ok\n")
    return OLD_DIR


@pytest.mark.parametrize("version", ["installed", OLD])
def test_the_attention_explorer_runs(version):
    pytest.importorskip("ipywidgets")
    first = [str(old_ipywidgets())] if version == OLD else []
    result = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(first), explorer_source()],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    expected = f"ipywidgets {OLD} explorer ok" if version == OLD else "explorer ok"
    assert expected in result.stdout, result.stdout
