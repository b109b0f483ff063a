"""Kernels of this Python and the notebooks they run: what build, grade and the tests share.

* :class:`CurrentEnvKernelManager`: ipykernel in *this* Python, whatever kernelspec a user
  installed under the name ``python3``; :func:`kernel_env`: its environment, with the
  ``course_utils`` beside this package first on the path.
* :func:`run_notebook`: run a notebook in place in such a kernel (``build --execute``, the
  student-notebook and display tests; the grader drives its own client, with one time
  limit for a whole notebook, on top of the same kernel manager).
* :func:`normalise`: the metadata a current ipykernel writes and merged stream outputs, so
  that an unchanged rerun stores an unchanged file (every notebook the build writes).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import ipykernel.kernelspec
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import List, Unicode, default

# The folder that holds course_utils (beside this package, in a checkout as when
# installed): kernels import it from there.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- kernels


class CurrentEnvKernelSpecManager(KernelSpecManager):
    """Every kernel name means ipykernel in *this* Python (not whatever a user-level
    ``python3`` kernelspec, which Jupyter looks up first, points to)."""

    def get_kernel_spec(self, kernel_name):
        return self.kernel_spec_class(
            resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
        )


class CurrentEnvKernelManager(AsyncKernelManager):
    """ipykernel in this Python; ``command_prefix`` (e.g. a sandbox's command) goes before it."""

    command_prefix = List(Unicode(), default_value=[])

    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self):
        return CurrentEnvKernelSpecManager(data_dir=self.data_dir)

    def format_kernel_cmd(self, extra_arguments=None):
        return [*self.command_prefix, *super().format_kernel_cmd(extra_arguments)]


def kernel_env(mpl_backend: str | None = None) -> dict[str, str]:
    """The environment of a kernel: this one, with this checkout's ``course_utils`` first
    on the path; ``MPLBACKEND`` set to ``mpl_backend``, or unset (ipykernel then draws
    figures inline, as Jupyter does)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env.pop("MPLBACKEND", None)
    if mpl_backend:
        env["MPLBACKEND"] = mpl_backend
    return env


def run_notebook(
    nb,
    cwd: Path,
    timeout: int,
    allow_errors: bool = False,
    on_cell_execute: Callable[[int], object] | None = None,
):
    """Run every cell of ``nb`` in place, top to bottom, in a fresh kernel of this Python
    (environment :func:`kernel_env` with figures inline; working folder ``cwd``; at most
    ``timeout`` seconds a cell) and return ``nb``. ``on_cell_execute(index)`` is called
    before each cell. Raises nbclient's ``CellExecutionError`` when a cell raises (unless
    ``allow_errors``; cells tagged ``raises-exception`` may), ``CellTimeoutError`` and
    ``DeadKernelError``."""
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        kernel_manager_class=CurrentEnvKernelManager,
        allow_errors=allow_errors,
        record_timing=False,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_execute=None if on_cell_execute is None else lambda cell, cell_index: on_cell_execute(cell_index),
    )
    client.execute(env=kernel_env(None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return nb


# --------------------------------------------------------------------------- stored notebooks

# What a current ipykernel writes into a notebook it runs, so that opening a notebook
# changes nothing. JupyterLab 4 writes the kernel's `language_info` into the notebook as
# soon as the kernel starts and marks it modified unless it is identical, version included:
# tried in Chromium, a stored "3.11", no version or no `language_info` all turned dirty
# against a 3.11.7 kernel, "3.11.7" did not. So the version is the full one the executing
# kernel reported (kept as stored; this Python's when there is none), and a solution opens
# unmodified wherever the Python is the one that last ran it. No stored value can match
# every Python: the copies that `course_tools.start` makes for a student carry that
# student's exact version instead.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
# the part of a line that a later carriage return overwrites (as Jupyter and nbval show it)
_OVERWRITTEN = re.compile(r"^.*\r(?=[^\n])", re.MULTILINE)


def language_info(version: str | None = None) -> dict:
    """ipykernel's ``language_info`` with ``version`` when it is a full Python version as a
    kernel reports it ("3.11.7", "3.13.0rc1"), else this Python's (``sys.version``'s)."""
    if not (isinstance(version, str) and re.fullmatch(r"\d+\.\d+\.\d+\w*", version)):
        version = sys.version.split()[0]
    return {**LANGUAGE_INFO, "version": version}


def merge_streams(outputs: list) -> list:
    """Consecutive stream outputs of one name (stdout, stderr) as one, with the text that a
    carriage return overwrote removed: what Jupyter shows and nbval compares. A kernel
    sends a cell's prints in chunks that differ from run to run; merged, a rerun that
    prints the same text stores the same output."""
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output.get("output_type") == "stream"
            and previous is not None
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] += output["text"]
        else:
            merged.append(copy.deepcopy(output))
    for output in merged:
        if output.get("output_type") == "stream":
            output["text"] = _OVERWRITTEN.sub("", output["text"])
    return merged


def normalise(nb) -> list[str]:
    """Give ``nb`` (in place) the metadata a current ipykernel writes (kernelspec
    "Python 3 (ipykernel)", ``language_info`` with the full version) and merged
    stream outputs; return what changed (empty when it already was so)."""
    changes = []
    if nb.metadata.get("kernelspec") != KERNELSPEC:
        nb.metadata["kernelspec"] = copy.deepcopy(KERNELSPEC)
        changes.append('kernelspec set to "Python 3 (ipykernel)"')
    stored = nb.metadata.get("language_info") or {}
    wanted = language_info(stored.get("version") if isinstance(stored, dict) else None)
    if stored != wanted:
        nb.metadata["language_info"] = wanted
        changes.append(f"language_info set to ipykernel's, version {wanted['version']}")
    merged_cells = []
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") == "code" and cell.get("outputs"):
            merged = merge_streams(cell.outputs)
            if merged != cell.outputs:
                cell.outputs = [nbformat.from_dict(o) for o in merged]
                merged_cells.append(str(i))
    if merged_cells:
        changes.append(f"stream outputs merged in cell(s) {', '.join(merged_cells)}")
    return changes
