"""Colab readiness: the package installs from a git URL into a fresh environment where
everything else is preinstalled, and every student notebook's set-up and import cells run
there, from a folder outside the repository.

How the fresh environment is made, cheaply and offline
------------------------------------------------------
* ``python -m venv --without-pip`` (0.1 s). Colab preinstalls torch, numpy, matplotlib,
  ipywidgets, ipykernel...; here the same role is played by an *overlay* folder of symlinks
  to every entry of this test run's own site-packages **except** the course package
  (its dist-info, its editable-install finder, ``course_utils`` and all ``.pth`` files),
  added to the new venv with one ``.pth`` line. So nothing is downloaded or copied (no
  second 800 MB torch), the new venv's own site-packages comes first on ``sys.path``, and
  pip sees "transformer-course" as not installed, exactly as in a fresh Colab runtime.
  (``--system-site-packages`` would not do: the outer environment is itself a venv.)
* The repository is snapshotted into a temporary git repository: the files
  ``git ls-files --cached --others --exclude-standard`` lists (so uncommitted edits and new,
  not yet ignored files are included, and ignored ones such as ``.venv`` are not) in one
  commit. pip then installs ``transformer-course @ git+file://localhost/<snapshot>`` (pip
  23.2 rejects ``git+file:///path``), which goes through the same git clone and wheel build
  as Colab's ``git+https://...@REF``. In CI the working tree is a fresh clone, so the
  snapshot is the commit itself. A file that is on disk but not yet ``git add``-ed is in
  the snapshot; CI's fresh clone is what catches a forgotten ``git add``.
* ``--no-index``: pip must find every dependency already installed (nothing large is
  reinstalled on Colab either), and the test asserts that the course package is the only
  one pip installs. The wheel is built with ``--no-build-isolation`` when this environment
  has a setuptools that can (>= 70.1, or >= 64 with ``wheel``); otherwise pip fetches the
  build backend from the index into its isolated build environment (network needed: CI has
  it, since it just installed the dependencies).
* Kernels run the venv's own python through a kernelspec written into the temporary folder,
  with a clean environment (no ``PYTHONPATH``) and a working directory outside the
  repository, so nothing can be imported from the checkout.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import nbformat
import pytest

from course_tools import build

ROOT = Path(__file__).resolve().parent.parent
STUDENT_NOTEBOOKS = build.notebook_files(ROOT / "notebooks")
ALL_NOTEBOOKS = STUDENT_NOTEBOOKS + build.notebook_files(ROOT / "solutions")
KERNEL_NAME = "course-fresh-venv"
IMPORTS_COURSE_UTILS = re.compile(r"^[ \t]*(from[ \t]+course_utils[ \t.]|import[ \t]+course_utils\b)", re.M)
OUTER_PREFIX = Path(sys.prefix).resolve()  # the environment running the tests


def _ids(paths):
    return [f"{p.parent.name}/{p.name}" for p in paths]


def first_cells(nb) -> list:
    """The cells a student runs first: up to and including the first code cell that
    imports course_utils (the Colab set-up cell is cell 1, the imports come after it)."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and IMPORTS_COURSE_UTILS.search(cell.source):
            return nb.cells[: index + 1]
    raise AssertionError("no code cell imports course_utils")


# ------------------------------------------------------------------- static checks


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=_ids(ALL_NOTEBOOKS))
def test_setup_cell_installs_the_published_package_at_the_pinned_ref(path):
    nb = nbformat.read(path, as_version=4)
    cell = nb.cells[1]
    assert cell.cell_type == "code" and build.SETUP_TAG in cell.metadata.get("tags", [])
    assert cell.source == build.header_sources(path.parent.name, path.name)[1]
    assert f'"{build.PACKAGE_NAME} @ git+{build.REPO_URL}@{build.REF}"' in cell.source
    assert cell.source.startswith("#") and "google.colab" in cell.source
    if path.parent.name == "notebooks":
        assert cell.outputs == [] and cell.execution_count is None


class _RecordingShell:
    """Stands in for IPython's shell: records the magics a cell would run."""

    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line, _stack_depth=1):
        self.magics.append((name, line))

    def run_cell_magic(self, name, line, cell):
        self.magics.append((name, line, cell))

    def system(self, command):
        self.magics.append(("!", command))

    getoutput = system


def _run_setup_cell(source: str) -> list:
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(source)  # %pip -> get_ipython().run_line_magic
    shell = _RecordingShell()
    exec(compile(code, "<colab-setup>", "exec"), {"get_ipython": lambda: shell})
    return shell.magics


@pytest.mark.parametrize("path", STUDENT_NOTEBOOKS, ids=_ids(STUDENT_NOTEBOOKS))
def test_setup_cell_does_nothing_outside_colab_and_installs_in_colab(path, monkeypatch):
    source = nbformat.read(path, as_version=4).cells[1].source
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert _run_setup_cell(source) == []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    expected = f'install -q "{build.PACKAGE_NAME} @ git+{build.REPO_URL}@{build.REF}"'
    assert _run_setup_cell(source) == [("pip", expected)]


# A code line that reads a file by a path relative to the working directory, or names a
# repository folder: in my_work/ or in Colab that file is not there. (Data the notebooks
# need comes from the package, e.g. course_utils.data.load_split, which finds its files
# from its own location, or regenerates them.)
RELATIVE_PATH_PATTERNS = [
    # open("x"), torch.load("x"), np.load("x"), pd.read_csv("x"), Path("x"), imread("x") ...
    re.compile(
        r"""\b(open|load|loadtxt|genfromtxt|read_csv|read_table|read_json|read_text|read_bytes"""
        r"""|imread|Path|load_state_dict_from_url)\(\s*[rbfuRBFU]*["'](?![/\\]|[A-Za-z]:\\|https?:)"""
    ),
    # "data/...", "./...", "../...", "notebooks/..." anywhere in a string literal
    re.compile(r"""["'](\.{1,2}[/\\]|(data|notebooks|solutions|course_utils|my_work|tests)[/\\])"""),
    # a relative data file name: "numbers.tsv", "weights.pt" (writing figures is fine)
    re.compile(r"""["'][^"'\s/\\:]+\.(tsv|csv|npy|npz|pt|pth|pkl|json|txt)["']"""),
]

PACKAGE_ANCHORS = ("__file__", "__path__", "importlib.resources", "resources.files(")


def relative_path_reads(source: str) -> list[str]:
    """Lines of a code cell that look like they read a file by a relative path."""
    hits = []
    for line in source.splitlines():
        code = line.strip()
        if not code or code.startswith("#") or "savefig(" in code or "save(" in code:
            continue
        if any(anchor in code for anchor in PACKAGE_ANCHORS):
            continue  # a path built from the package's own location
        if any(p.search(code) for p in RELATIVE_PATH_PATTERNS):
            hits.append(code)
    return hits


@pytest.mark.parametrize(
    "line",
    [
        'pairs = open("data/numbers_train.tsv").read()',
        "state = torch.load('model.pt')",
        'rows = Path("numbers_valid.tsv").read_text()',
        'df = pd.read_csv("../data/x.csv")',
        'DATA = "data/"',
        "vocab = json.loads(Path('vocab.json').read_text())",
    ],
)
def test_relative_path_scanner_catches_reads(line):
    assert relative_path_reads(line) == [line]


@pytest.mark.parametrize(
    "line",
    [
        "train = load_split('train')",
        'plt.savefig("attention.png")',
        "x = open(os.path.join(course_utils.__path__[0], 'vocab.txt'))",
        'print("01_attention: done")',
        'vocab = (importlib.resources.files("course_utils") / "vocab.json").read_text()',
        'text = Path(course_utils.__file__).with_name("vocab.txt").read_text()',
        '# open("data/x.tsv") in a comment',
    ],
)
def test_relative_path_scanner_lets_package_reads_through(line):
    assert relative_path_reads(line) == []


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=_ids(ALL_NOTEBOOKS))
def test_no_cell_reads_files_by_a_relative_path(path):
    """Notebooks run from my_work/ (course.py lab) and from Colab, never from the repo."""
    nb = nbformat.read(path, as_version=4)
    hits = [
        f"cell {i}: {line}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for line in relative_path_reads(cell.source)
    ]
    assert hits == []


# ------------------------------------------------------ the fresh environment (slow-ish)


def _can_build_offline() -> bool:
    """Can this environment build the wheel without pip's isolated build environment?"""
    try:
        version = build_tuple(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        return False
    if version >= (70, 1):  # bdist_wheel is part of setuptools from 70.1 on
        return True
    try:
        importlib.metadata.version("wheel")
    except importlib.metadata.PackageNotFoundError:
        return False
    return version >= (64,)


def build_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


# Variables that would let the checkout or the outer environment leak into the fresh one.
_UNWANTED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV", "MPLBACKEND")


def _clean_env(**extra: str) -> dict:
    env = {
        k: v for k, v in os.environ.items()
        if k not in _UNWANTED_ENV
        and not k.startswith("COVERAGE_")
    }
    env.update(extra)
    return env


def _is_course_package_entry(name: str) -> bool:
    lower = name.lower()
    return (
        lower.endswith(".pth")
        or lower.startswith(("__editable__", "transformer_course", "transformer-course", "course_utils", "course_tools"))  # noqa: E501
        or lower == "__pycache__"
    )


def _snapshot_repository(dest: Path) -> None:
    listed = subprocess.run(
        # safe.directory: CI containers may check the repository out as another user.
        ["git", "-c", f"safe.directory={ROOT}", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode("utf-8").split("\0")
    for name in filter(None, listed):
        path = ROOT / name
        if path.is_file():  # a tracked file deleted in the working tree is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / name)
    git = [
        "git", "-c", "user.name=course test", "-c", "user.email=test@example.invalid",
        "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null",
    ]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "snapshot"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the course")
    tmp = tmp_path_factory.mktemp("colab")
    assert ROOT not in tmp.resolve().parents, "the temporary folder must lie outside the repository"
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site_packages = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip())

    # The "preinstalled" packages: this environment's, minus the course.
    overlay = tmp / "preinstalled"
    overlay.mkdir()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    for folder in sorted(outer):
        for entry in Path(folder).iterdir():
            if not _is_course_package_entry(entry.name) and not (overlay / entry.name).exists():
                try:
                    (overlay / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
                except OSError as error:  # e.g. Windows without symlink rights
                    pytest.skip(f"cannot create symlinks here: {error}")
    (site_packages / "preinstalled.pth").write_text(f"{overlay}\n")

    snapshot = tmp / "course-repo"
    _snapshot_repository(snapshot)

    outside = tmp / "student"  # the kernels' working folder: not the repository
    outside.mkdir()
    # pip 23.2 rejects git+file:///path; file://localhost/path is the same URL.
    url = "git+" + snapshot.resolve().as_uri().replace("file:///", "file://localhost/", 1)
    cmd = [str(python), "-m", "pip", "install", "--no-input", "--no-cache-dir", "--progress-bar", "off"]
    cmd += ["--no-index", "--no-build-isolation"] if _can_build_offline() else []
    cmd.append(f"{build.PACKAGE_NAME} @ {url}")
    done = subprocess.run(
        cmd, cwd=outside, capture_output=True, text=True, timeout=600,
        env=_clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CONFIG_FILE=os.devnull),
    )
    assert done.returncode == 0, f"pip install from git failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"

    kernels = tmp / "kernels"
    (kernels / KERNEL_NAME).mkdir(parents=True)
    (kernels / KERNEL_NAME / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fresh venv (Colab-like)",
        "language": "python",
    }))
    return types.SimpleNamespace(
        tmp=tmp, venv=venv, python=python, site_packages=site_packages, snapshot=snapshot,
        outside=outside, kernels=kernels, pip_output=done.stdout,
    )


def test_pip_installs_only_the_course_package(fresh_venv):
    """Everything else is already there (as in Colab): nothing big is reinstalled."""
    installed = [line for line in fresh_venv.pip_output.splitlines() if line.startswith("Successfully installed")]
    assert len(installed) == 1, fresh_venv.pip_output[-3000:]
    assert re.fullmatch(r"Successfully installed transformer-course-\S+", installed[0].strip())


@pytest.mark.parametrize("package", ["course_utils", "course_tools"])
def test_installed_package_has_every_file(fresh_venv, package):
    """Modules, subpackages and package data (vocabularies, weights...): every file under
    course_utils/ and course_tools/ in the repository must be in the installed
    distribution, byte for byte."""
    source = fresh_venv.snapshot / package
    installed = fresh_venv.site_packages / package
    wanted = sorted(
        p.relative_to(source).as_posix() for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    # subpackages too: the checkers, and the grader's stages
    expected = {"course_utils": {"__init__.py", "checks/__init__.py"},
                "course_tools": {"__init__.py", "grade/__init__.py", "grade/kernel_side.py"}}
    assert expected[package] <= set(wanted)
    missing = [name for name in wanted if not (installed / name).is_file()]
    assert missing == [], "not installed by pip (package-data in pyproject.toml?): " + ", ".join(missing)
    differ = [name for name in wanted if (installed / name).read_bytes() != (source / name).read_bytes()]
    assert differ == []


def test_check_env_passes_in_the_fresh_environment(fresh_venv):
    """The installed metadata's requirements are met by the preinstalled packages."""
    done = subprocess.run(
        [str(fresh_venv.python), "-m", "course_tools.check_env"],
        cwd=fresh_venv.outside, capture_output=True, text=True, timeout=300, env=_clean_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Everything the course needs is installed."


PROBE = """\
import json as _json, os as _os, sys as _sys
import course_utils as _course_utils
print(_json.dumps({
    "course_utils": _course_utils.__file__,
    "prefix": _sys.prefix,
    "cwd": _os.getcwd(),
    "sys_path": _sys.path,
    "files": sorted({str(getattr(_m, "__file__", None) or "") for _m in list(_sys.modules.values())} - {""}),
    "course_modules": sorted(_name for _name in _sys.modules if _name.split(".")[0] == "course_utils"),
}))
"""


def _inside(path: str | Path, folder: Path) -> bool:
    resolved = Path(path).resolve()
    return resolved == folder or folder in resolved.parents


RESET = "%reset -f"  # between two notebooks: no name of the previous one's cells is left
RESET_PROBE = ("import torch\nx = 1", RESET, "print('torch' in dir(), 'x' in dir())")  # names defined, then reset


@pytest.fixture(scope="module")
def first_cells_run(fresh_venv):
    """Every student notebook's first cells (badge, set-up, imports) and then PROBE, run in
    ONE kernel of the fresh environment, with the namespace reset before each notebook: as
    strict as a kernel per notebook for what these cells may use (their own names only), at
    the cost of one kernel start instead of nine. First, in the same kernel, :data:`RESET_PROBE`
    (what :func:`test_the_reset_between_notebooks_forgets_names` reads, under ``RESET``).
    Returns {notebook name: its executed cells}."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in RESET_PROBE])
    spans = {RESET: (0, len(nb.cells))}
    for path in STUDENT_NOTEBOOKS:
        cells = [*first_cells(nbformat.read(path, as_version=4)), nbformat.v4.new_code_cell(PROBE)]
        assert build.SETUP_TAG in cells[1].metadata.get("tags", []), path.name
        nb.cells.append(nbformat.v4.new_code_cell(RESET))
        spans[path.name] = (len(nb.cells), len(nb.cells) + len(cells))
        nb.cells.extend(cells)
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": KERNEL_NAME, "language": "python"}
    km = KernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(fresh_venv.kernels)]),
    )
    client = NotebookClient(
        nb, km=km, kernel_name=KERNEL_NAME, timeout=300, allow_errors=True,
        resources={"metadata": {"path": str(fresh_venv.outside)}},
    )
    client.execute(env=_clean_env(
        IPYTHONDIR=str(fresh_venv.tmp / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    ))
    return {name: nb.cells[a:b] for name, (a, b) in spans.items()}


def test_the_reset_between_notebooks_forgets_names(first_cells_run):
    """The one-kernel run is only as strict as a kernel per notebook if %reset -f forgets
    what the previous notebook's cells defined (run first in that kernel: no second start)."""
    cells = first_cells_run[RESET]
    assert [c.source for c in cells] == list(RESET_PROBE)
    assert cells[-1].outputs[0].text == "False False\n"


@pytest.mark.parametrize("path", STUDENT_NOTEBOOKS, ids=_ids(STUDENT_NOTEBOOKS))
def test_setup_and_import_cells_run_in_the_fresh_environment(fresh_venv, first_cells_run, path):
    cells = first_cells_run[path.name]
    for cell in cells:
        if cell.cell_type == "code":
            errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
            assert errors == [], cell.source
    assert cells[1].outputs == [], "the set-up cell must do nothing outside Colab"

    probe = json.loads("".join(o.text for o in cells[-1].outputs if o.output_type == "stream"))
    site_packages = fresh_venv.site_packages.resolve()
    assert Path(probe["prefix"]).resolve() == fresh_venv.venv.resolve()
    assert Path(probe["cwd"]).resolve() == fresh_venv.outside.resolve()
    assert Path(probe["course_utils"]).resolve() == site_packages / "course_utils" / "__init__.py"
    assert len(probe["course_modules"]) > 1  # the imports cell loaded more than the top level
    # Nothing at all comes from the checkout (this test run's own environment may sit
    # inside it, as .venv/ does, and provides the preinstalled packages).
    from_checkout = [
        f for f in probe["files"] + probe["sys_path"]
        if os.path.isabs(f) and _inside(f, ROOT) and not _inside(f, OUTER_PREFIX)
    ]
    assert from_checkout == []
    course_files = [f for f in probe["files"] if "course_utils" in Path(f).parts]
    assert course_files and all(_inside(f, site_packages / "course_utils") for f in course_files)


def test_student_notebooks_are_all_checked():
    assert STUDENT_NOTEBOOKS, "no notebooks/NN_*.ipynb found"
    for path in STUDENT_NOTEBOOKS:  # the helper finds the imports cell in each
        cells = first_cells(nbformat.read(path, as_version=4))
        assert len(cells) >= 3 and IMPORTS_COURSE_UTILS.search(cells[-1].source)
        ast.parse(cells[-1].source)  # plain Python: runs the same in Colab and Jupyter
