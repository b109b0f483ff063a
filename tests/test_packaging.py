"""Packaging and set-up: pyproject.toml vs environment.yml, check_env, the contract's
top-level names, and course.py (no side effects for --help, the pip-skipping stamp)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from course_tools import check_env
from course_tools.check_env import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
ENVIRONMENT = ROOT / "environment.yml"

# conda-forge name for each PyPI name that differs.
PIP_TO_CONDA = {"torch": "pytorch"}


# ------------------------------------------------------ pyproject.toml vs environment.yml


def _canonical(name: str) -> str:
    name = re.sub(r"[-_.]+", "-", name).lower()
    return PIP_TO_CONDA.get(name, name)


def _norm_version(text: str) -> str:
    """'2.2.0' -> '2.2' so that equal versions compare equal as text."""
    parts = text.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)


def pip_clauses(specifier: str) -> frozenset[str]:
    """'>=2.2.0,<3' -> {'>=2.2', '<3'}."""
    out = set()
    for clause in filter(None, specifier.replace(" ", "").split(",")):
        op = re.match(r"(~=|==|!=|<=|>=|<|>)", clause).group(1)
        version = clause[len(op):]
        star = version.endswith(".*")
        version = _norm_version(version[:-2] if star else version)
        out.add(f"{op}{version}{'.*' if star else ''}")
    return frozenset(out)


def conda_spec(item: str) -> tuple[str, frozenset[str]]:
    """A conda MatchSpec in pip's terms: 'pytorch>=2.2' -> ('pytorch', {'>=2.2'});
    'python=3.10' -> ('python', {'==3.10.*'}) because conda's single '=' means 3.10.*;
    'numpy 1.26.*' -> ('numpy', {'==1.26.*'}); a build string ('=1.2=h123') is dropped."""
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(.*)", item.strip())
    name, spec = match.group(1), match.group(2).strip()
    clauses = set()
    for clause in filter(None, spec.replace(" ", "").split(",")):
        if clause.startswith("=") and not clause.startswith("=="):
            version = clause[1:].split("=")[0]  # '=1.2=build' -> '1.2'
            clauses.add(f"=={_norm_version(version.removesuffix('.*'))}.*")
        elif clause[0].isdigit():  # 'name 1.2.*' or 'name 1.2'
            clauses |= pip_clauses("==" + clause)
        else:
            clauses |= pip_clauses(clause)
    return name.lower(), frozenset(clauses)


def disagreements(environment: dict, project: dict) -> list[str]:
    """Every way environment.yml's conda packages differ from pyproject.toml's
    requirements (required ones and every extra) and requires-python."""
    wanted: dict[str, frozenset[str]] = {"python": pip_clauses(project["requires-python"])}
    requirement_lists = [project["dependencies"], *project["optional-dependencies"].values()]
    for text in (r for group in requirement_lists for r in group):
        req = check_env.parse_requirement(text)
        name, clauses = _canonical(req.name), pip_clauses(req.specifier)
        if wanted.setdefault(name, clauses) != clauses:
            return [f"pyproject.toml gives {req.name} two different specifiers"]

    have: dict[str, frozenset[str]] = {}
    for item in environment["dependencies"]:
        if isinstance(item, str):
            name, clauses = conda_spec(item)
            if name != "pip":
                have[_canonical(name)] = clauses  # conda-forge spells jupyter_client with "_"

    problems = []
    for name in sorted(wanted.keys() - have.keys()):
        problems.append(f"{name} is in pyproject.toml but not in environment.yml")
    for name in sorted(have.keys() - wanted.keys()):
        problems.append(f"{name} is in environment.yml but not in pyproject.toml")
    for name in sorted(wanted.keys() & have.keys()):
        if wanted[name] != have[name]:
            problems.append(
                f"{name}: pyproject.toml says {sorted(wanted[name])}, "
                f"environment.yml says {sorted(have[name])}"
            )
    return problems


@pytest.fixture(scope="module")
def environment() -> dict:
    return yaml.safe_load(ENVIRONMENT.read_text())


@pytest.fixture(scope="module")
def project() -> dict:
    return check_env._parse_toml(PYPROJECT.read_text())["project"]


def test_environment_yml_matches_pyproject(environment, project):
    assert disagreements(environment, project) == []


def test_environment_yml_uses_conda_forge_and_installs_the_package(environment):
    assert environment["channels"] == ["conda-forge"]
    pip_sections = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict)]
    assert len(pip_sections) == 1
    assert any(re.fullmatch(r"(--no-deps\s+)?-e\s+\.", line) for line in pip_sections[0])


@pytest.mark.parametrize(
    "item, expected",
    [
        ("pytorch>=2.2", ("pytorch", {">=2.2"})),
        ("pytorch =2.2", ("pytorch", {"==2.2.*"})),  # conda's '=' is a prefix match
        ("python=3.10", ("python", {"==3.10.*"})),
        ("numpy==1.26.0", ("numpy", {"==1.26"})),
        ("numpy 1.26.*", ("numpy", {"==1.26.*"})),
        ("nbval>=0.11,<1", ("nbval", {">=0.11", "<1"})),
        ("tqdm", ("tqdm", set())),
    ],
)
def test_conda_spec(item, expected):
    name, clauses = conda_spec(item)
    assert (name, set(clauses)) == expected


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("pytorch>=2.2", "pytorch=2.2", "pytorch: pyproject.toml says ['>=2.2']"),
        ("pytorch>=2.2", "pytorch>=2.3", "pytorch: pyproject.toml says ['>=2.2']"),
        ("ipywidgets>=7.6", "ipywidgets", "ipywidgets: pyproject.toml says ['>=7.6']"),
        ("  - tqdm\n", "", "tqdm is in pyproject.toml but not in environment.yml"),
        ("  - tqdm\n", "  - tqdm\n  - pandas\n", "pandas is in environment.yml but not"),
        ("python>=3.10", "python>=3.9", "python: pyproject.toml says ['>=3.10']"),
    ],
)
def test_disagreements_are_caught(project, old, new, message):
    text = ENVIRONMENT.read_text()
    assert old in text
    problems = disagreements(yaml.safe_load(text.replace(old, new, 1)), project)
    assert any(p.startswith(message) for p in problems), problems


def test_torch_maps_to_pytorch(project):
    # Dropping torch from pyproject must show up as a pytorch mismatch, not be ignored.
    changed = dict(project, dependencies=[d for d in project["dependencies"] if "torch" not in d])
    problems = disagreements(yaml.safe_load(ENVIRONMENT.read_text()), changed)
    assert problems == ["pytorch is in environment.yml but not in pyproject.toml"]


# ------------------------------------------------------------------ pyproject.toml itself


def test_minimal_toml_parser_agrees_with_tomllib():
    tomllib = pytest.importorskip("tomllib")
    text = PYPROJECT.read_text()
    full = tomllib.loads(text)["project"]
    mini = check_env.parse_toml_minimal(text)["project"]
    for key in ("name", "requires-python", "dependencies", "optional-dependencies"):
        assert mini[key] == full[key], key


def test_pyproject_declares_the_package_and_its_bounds(project):
    assert project["name"] == "transformer-course"
    reqs = {r.name: r.specifier for r in map(check_env.parse_requirement, project["dependencies"])}
    assert reqs == {
        "torch": ">=2.2", "numpy": "", "matplotlib": "", "tqdm": "",
        "ipywidgets": ">=7.6", "regex": "",
    }
    assert set(project["optional-dependencies"]) == {"tools", "dev", "lab", "browser", "site"}


def test_tools_extra_declares_what_the_tools_import_and_dev_includes_it(project):
    """Every third-party module that a course_tools module imports at its top is in the
    `tools` extra (or a dependency of the package); dev holds all of tools (course.py test
    installs dev, not tools). Imports inside functions are optional ones (packaging, tomli)
    or the model (course_utils, torch)."""
    extras = project["optional-dependencies"]
    tools = {_canonical(check_env.parse_requirement(r).name) for r in extras["tools"]}
    dev = {_canonical(check_env.parse_requirement(r).name) for r in extras["dev"]}
    assert tools <= dev
    assert tools == {"nbformat", "nbclient", "jupyter-client", "ipykernel", "traitlets"}
    imported = set()
    for path in (ROOT / "course_tools").rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"__future__", "course_utils", "course_tools"}
    declared = tools | {_canonical(check_env.parse_requirement(r).name) for r in project["dependencies"]}
    as_distribution = {_canonical(module) for module in third_party}
    assert as_distribution <= declared, sorted(as_distribution - declared)
    assert as_distribution == tools  # and each of them is used


def _installed_from() -> Path | None:
    """The folder an editable or local install of the package came from (PEP 610)."""
    import importlib.metadata
    import json
    from urllib.parse import unquote, urlparse

    try:
        raw = importlib.metadata.distribution("transformer-course").read_text("direct_url.json")
        url = urlparse(json.loads(raw)["url"])
    except (importlib.metadata.PackageNotFoundError, TypeError, ValueError, KeyError):
        return None
    return Path(unquote(url.path)).resolve() if url.scheme == "file" else None


def test_installed_metadata_matches_pyproject():
    """When the package is installed (course.py installs it editable), check_env reads the
    metadata: it must say what pyproject.toml says."""
    found = check_env.requirements_from_metadata()
    if found is None:
        pytest.skip("transformer-course is not installed in this environment")
    source = _installed_from()
    if source is not None and source != ROOT.resolve():
        pytest.skip(f"transformer-course is installed from another checkout ({source})")
    from_metadata, python_meta = found
    from_file, python_file = check_env.requirements_from_pyproject(PYPROJECT)

    def as_set(reqs):
        return {(_canonical(r.name), pip_clauses(r.specifier), r.extra) for r in reqs}

    assert as_set(from_metadata) == as_set(from_file)
    assert pip_clauses(python_meta) == pip_clauses(python_file)


# ------------------------------------------------------------------------------- check_env

LINE = re.compile(r"\[(OK|FAIL|INFO)\] \S.*")


def test_check_env_reports_every_requirement_and_passes():
    done = subprocess.run(
        [sys.executable, "-m", "course_tools.check_env", "--extra", "dev"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(LINE.fullmatch(line) for line in lines[:-1]), lines
    assert lines[-1] == "Everything the course needs is installed."
    assert re.fullmatch(r"\[OK\] Python 3\.\d+\.\d+\S* \(needs >=3\.10\)", lines[0])
    assert any(re.fullmatch(r"\[OK\] torch 2\.\d+\S* \(needs >=2\.2\)", line) for line in lines)
    assert any(re.fullmatch(r"\[OK\] ipywidgets \S+ \(needs >=7\.6\)", line) for line in lines)
    assert any(re.fullmatch(r"\[OK\] numpy \S+ \(any version\)", line) for line in lines)
    assert any(re.fullmatch(r"\[INFO\] device: (CPU|CUDA) .*", line) for line in lines)
    names = [line.split()[1] for line in lines if line.startswith("[OK] ")]
    # what check_env reads: the installed metadata (test_installed_metadata_matches_pyproject
    # holds it to pyproject.toml when installed from this checkout), else pyproject.toml
    for req in check_env.load_requirements()[0]:
        if req.extra in (None, "dev"):  # only the extras asked for (--extra dev)
            assert req.name in names
    assert len(names) == len(set(names))  # ipykernel is in three groups, jupyterlab in two: once


def test_check_env_fails_on_unmet_requirements(monkeypatch, capsys):
    fake = [
        Requirement("torch", ">=999"),
        Requirement("surely-not-an-installed-package", ">=1.0"),
        Requirement("numpy", ""),
        Requirement("pytest", ">=1", extra="dev"),  # not asked for: not checked
    ]
    monkeypatch.setattr(check_env, "load_requirements", lambda: (fake, ">=3.10", "test"))
    assert check_env.main([]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"\[FAIL\] torch 2\.\S+ \(needs >=999\)", lines[1]), lines
    assert lines[2] == "[FAIL] surely-not-an-installed-package not installed (needs >=1.0)"
    assert re.fullmatch(r"\[OK\] numpy \S+ \(any version\)", lines[3])
    assert not any("pytest" in line for line in lines)
    assert not any("device:" in line for line in lines)  # torch failed: no device line
    assert lines[-1].startswith("2 problem(s).")


def test_check_env_runs_without_torch():
    """`python -m course_tools.check_env` must report a missing torch, not crash importing it:
    it imports neither torch nor course_utils (whose top level imports torch)."""
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
        "import runpy\n"
        "try:\n"
        "    runpy.run_module('course_tools.check_env', run_name='__main__')\n"
        "finally:\n"
        "    print('course_utils imported:', 'course_utils' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.splitlines()[-1] == "course_utils imported: False"
    assert any(line.startswith("[FAIL]") and "torch" in line for line in done.stdout.splitlines()), done.stdout


def test_check_env_fails_on_old_python(monkeypatch, capsys):
    monkeypatch.setattr(check_env, "load_requirements", lambda: ([], ">=99", "test"))
    assert check_env.main([]) == 1
    first = capsys.readouterr().out.split("\n")[0]
    assert re.fullmatch(r"\[FAIL\] Python \S+ \(needs >=99\)", first)


@pytest.mark.parametrize(
    "version, specifier, expected",
    [
        ("2.13.0+cpu", ">=2.2", True),
        ("2.1.2", ">=2.2", False),
        ("7.7.1", ">=7.6", True),
        ("0.10.0", ">=0.11", False),
        ("0.11", ">=0.11", True),
        ("2.2.1", "~=2.2", True),
        ("3.0", "~=2.2", False),
        ("2.13.0", "==2.*", True),
        ("3.1", ">=2,<3", False),
        ("1.0", "", True),
    ],
)
def test_version_comparison(version, specifier, expected):
    assert check_env._fallback_satisfies(version, specifier) is expected
    assert check_env.satisfies(version, specifier) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("torch>=2.2", Requirement("torch", ">=2.2")),
        ('pytest; extra == "dev"', Requirement("pytest", "", "dev")),
        ("nbval>=0.11; extra == 'dev'", Requirement("nbval", ">=0.11", "dev")),
        ("ipywidgets (>=7.6)", Requirement("ipywidgets", ">=7.6")),
        ("foo[bar] >= 1, < 2", Requirement("foo", ">=1,<2")),
    ],
)
def test_parse_requirement(text, expected):
    assert check_env.parse_requirement(text) == expected


# ------------------------------------------------------------------ the contract's names

CONTRACT = {  # notebook -> name -> parameters (name, default or inspect.Parameter.empty)
    "01": {
        "scaled_dot_product_attention": "query, key, value, mask=None",
        "causal_mask": "size, device=None",
        "padding_mask": "tokens, pad_id",
    },
    "02": {
        "split_heads": "x, num_heads",
        "merge_heads": "x",
        "MultiHeadAttention": "d_model, num_heads, dropout=0.0",
    },
    "03": {
        "sinusoidal_positional_encoding": "max_len, d_model",
        "PositionalEncoding": "d_model, max_len=5000, dropout=0.0",
        "TokenEmbedding": "vocab_size, d_model",
    },
    "04": {
        "LayerNorm": "d_model, eps=1e-05",
        "FeedForward": "d_model, d_ff, dropout=0.0, activation='relu'",
        "EncoderLayer": "d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation='relu'",
        "Encoder": "num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation='relu'",
    },
    "05": {
        "DecoderLayer": "d_model, num_heads, d_ff, dropout=0.0, norm_first=False",
        "Decoder": "num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False",
    },
    "06": {
        "Transformer": "src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, "
        "num_layers=6, d_ff=2048, dropout=0.1, max_len=5000, norm_first=False",
    },
    "09": {
        "GPTBlock": "d_model, num_heads, d_ff, dropout=0.0",
        "GPT": "vocab_size, d_model=768, num_heads=12, num_layers=12, d_ff=3072, dropout=0.1, max_len=1024",
        "next_token_probs": "logits, temperature=1.0, top_k=None, top_p=None",
        "generate": "model, tokens, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None, "
        "use_cache=True, decode_step=None",
    },
    "10": {
        "RMSNorm": "d_model, eps=1e-06",
        "rotary_tables": "d_k, max_len, base=10000.0, device=None",
        "apply_rotary": "x, cos, sin, offset=0",
        "SwiGLU": "d_model, d_ff",
        "GroupedQueryAttention": "d_model, num_heads, n_kv_heads=None, bias=False",
    },
    "11": {
        "count_pairs": "words",
        "merge_pair": "ids, pair, new_id",
        "train_bpe": "text, vocab_size, special_tokens=()",
        "bpe_encode": "text, vocab, merges, special_tokens=()",
        "bpe_decode": "ids, vocab",
    },
}
CONTRACT_NAMES = [
    (notebook, name, params)
    for notebook, names in CONTRACT.items()
    for name, params in names.items()
]


@pytest.mark.parametrize("notebook, name, params", CONTRACT_NAMES)
def test_contract_name_imports_from_top_level(notebook, name, params):
    namespace: dict = {}
    exec(f"from course_utils import {name}", namespace)  # the exact line notebooks use
    obj = namespace[name]
    package = importlib.import_module("course_utils")
    assert name in package.__all__
    signature = inspect.signature(obj)
    shown = ", ".join(
        p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
        for p in signature.parameters.values()
    )
    assert shown == params, f"notebook {notebook}: {name}{signature}"


# ---------------------------------------------------------------------------- course.py

COURSE_PY = ROOT / "course.py"  # the entry: checks the Python version, then runs course_cli
COURSE_CLI = ROOT / "course_cli.py"  # the commands


def _load_course_module():
    spec = importlib.util.spec_from_file_location("course_script", COURSE_CLI)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", [COURSE_PY, COURSE_CLI], ids=lambda p: p.name)
def test_course_py_uses_only_the_standard_library(path):
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported, "no imports found: the check itself is broken"
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "course_cli"}, imported


def _copy_course_py(folder: Path) -> list[str]:
    for path in (COURSE_PY, COURSE_CLI):
        shutil.copy(path, folder / path.name)
    return sorted(p.name for p in folder.iterdir())


def test_course_py_help_has_no_side_effects(tmp_path):
    files = _copy_course_py(tmp_path)
    done = subprocess.run(
        [sys.executable, "course.py", "--help"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    for command in ("lab", "test", "setup"):
        assert command in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # no .venv, no __pycache__


def test_course_py_without_pyproject_fails_before_creating_a_venv(tmp_path):
    files = _copy_course_py(tmp_path)
    done = subprocess.run(
        [sys.executable, "course.py", "setup"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "pyproject.toml not found" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_course_py_unknown_command_is_a_usage_error(tmp_path):
    done = subprocess.run(
        [sys.executable, str(COURSE_PY), "bogus"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


@pytest.fixture
def fake_course(tmp_path, monkeypatch):
    """course.py pointed at a temporary project, with pip and the venv probe faked."""
    course = _load_course_module()
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.read_text())
    venv = tmp_path / ".venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /nowhere\n")
    monkeypatch.setattr(course, "ROOT", tmp_path)
    monkeypatch.setattr(course, "VENV", venv)
    monkeypatch.setattr(course, "STAMP", venv / ".course-stamp.json")
    monkeypatch.setattr(course, "PYPROJECT", tmp_path / "pyproject.toml")
    monkeypatch.delenv("TORCH_SPEC", raising=False)
    monkeypatch.delenv("TORCH_INDEX_URL", raising=False)
    course.installs = []
    course.probe = {"python": [3, 11, 0], "pip": "23.2.1", "torch": "2.13.0+cpu", "course": str(tmp_path)}
    monkeypatch.setattr(course, "probe_venv", lambda: course.probe)
    # the torch build: as on a Linux machine without a GPU whose pip has no index of its own
    monkeypatch.setattr(course.sys, "platform", "linux")
    monkeypatch.setattr(course, "nvidia_smi_present", lambda: False)
    monkeypatch.setattr(course, "pip_configured_index", lambda: None)
    course.reached = []
    monkeypatch.setattr(course, "reachable", lambda url: course.reached.append(url) or True)
    def fake_pip_install(args, what):
        course.installs.append(args)
        if args[0].startswith("torch"):  # what pip would have done
            course.probe["torch"] = args[0].split("==")[-1]

    monkeypatch.setattr(course, "pip_install", fake_pip_install)
    return course


ALL = ["-e", ".[browser,dev,lab,site]"]  # what every command installs: the union of the extras


@pytest.mark.parametrize("order", [("setup", "lab"), ("test", "lab"), ("lab", "test"), ("notebook", "setup", "test")])
def test_any_order_of_commands_installs_once_until_pyproject_changes(fake_course, monkeypatch, order):
    """`lab` after `test` (or any other order) must not run pip again: every command installs
    every extra the first time, and the stamp then skips pip for all of them."""
    course = fake_course
    runs = []
    monkeypatch.setattr(course, "run_in_venv", lambda cmd, env=None, server=False: runs.append(cmd) or 0)
    for command in order:
        assert course.main([command]) == 0
    assert course.installs == [ALL]  # torch 2.13 is there already: not reinstalled
    assert runs  # the commands ran after the install (or its skip)
    course.PYPROJECT.write_text(course.PYPROJECT.read_text() + "\n# changed\n")
    course.ensure_installed()
    assert course.installs == [ALL, ALL]


def test_stamp_decides_when_pip_runs(fake_course):
    course = fake_course
    assert not course.stamp_is_current(course.read_stamp())  # no stamp yet
    course.ensure_installed()
    stamp = course.read_stamp()
    assert stamp["extras"] == ["browser", "dev", "lab", "site"] and course.stamp_is_current(stamp)
    # a stamp written before every command installed the union (e.g. after `test` alone)
    assert not course.stamp_is_current({**stamp, "extras": ["browser", "dev"]})
    course.STAMP.write_text(json.dumps({**stamp, "extras": ["dev", "tools"]}))
    course.ensure_installed()
    assert course.installs[-1] == ["-e", ".[browser,dev,lab,site,tools]"]  # older extras are kept
    assert len(course.installs) == 2
    course.ensure_installed()
    assert len(course.installs) == 2  # stamp matches: no pip at all


def test_torch_is_installed_when_missing_or_too_old(fake_course, monkeypatch):
    course = fake_course
    course.probe["torch"] = "2.1.2"
    monkeypatch.setenv("TORCH_SPEC", "torch==2.5.1")
    monkeypatch.setenv("TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu")
    course.ensure_installed()
    assert course.installs == [
        ["torch==2.5.1", "--index-url", "https://download.pytorch.org/whl/cpu"],
        ALL,
    ]
    course.probe["torch"] = None
    monkeypatch.delenv("TORCH_SPEC")
    monkeypatch.delenv("TORCH_INDEX_URL")  # a different torch request invalidates the stamp
    course.ensure_installed()
    # Linux, no nvidia-smi: the CPU build by default
    assert course.installs[2] == ["torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"]


def test_broken_venv_is_recreated_but_foreign_folder_is_not_deleted(fake_course, monkeypatch):
    course = fake_course
    (course.VENV / "junk").write_text("x")
    created = []

    def fake_create():
        course.VENV.mkdir()
        created.append(True)
        monkeypatch.setattr(course, "probe_venv", lambda: course.probe)

    monkeypatch.setattr(course, "probe_venv", lambda: None)
    monkeypatch.setattr(course, "create_venv", fake_create)
    course.ensure_venv()
    assert created == [True]
    assert not (course.VENV / "junk").exists()  # the broken venv was removed first

    shutil.rmtree(course.VENV)
    course.VENV.mkdir()
    (course.VENV / "my-notes.txt").write_text("not a venv")
    monkeypatch.setattr(course, "probe_venv", lambda: None)
    with pytest.raises(SystemExit):
        course.ensure_venv()
    assert (course.VENV / "my-notes.txt").exists()


CPU = "https://download.pytorch.org/whl/cpu"


def _never(*args):
    raise AssertionError("asked although the answer was already known")


@pytest.mark.parametrize(
    "environ, platform, smi, configured, reach, index, note",
    [
        # TORCH_INDEX_URL wins everywhere, and nothing is probed
        ({"TORCH_INDEX_URL": "https://x/cu126"}, "linux", False, _never, _never, "https://x/cu126", None),
        ({"TORCH_INDEX_URL": "https://x/cu126"}, "darwin", False, _never, _never, "https://x/cu126", None),
        # Linux without nvidia-smi: the CPU index
        ({}, "linux", False, lambda: None, lambda url: True, CPU, "no NVIDIA GPU found (nvidia-smi absent)"),
        # ... unless pip's own configuration names an index (a mirror, a wheel folder) ...
        ({}, "linux", False, lambda: "global.index-url='https://mirror/simple'", _never, None,
         "your pip configuration sets global.index-url"),
        # ... or the CPU index cannot be reached (offline, with wheels found by pip's config)
        ({}, "linux", False, lambda: None, lambda url: False, None, "cannot be reached"),
        # a GPU: PyPI's default (CUDA) build; macOS and Windows: PyPI's default, no note
        ({}, "linux", True, _never, _never, None, "NVIDIA GPU found (nvidia-smi)"),
        ({}, "darwin", False, _never, _never, None, None),
        ({}, "win32", False, _never, _never, None, None),
    ],
)
def test_choose_torch_index(environ, platform, smi, configured, reach, index, note):
    course = _load_course_module()
    got_index, got_note = course.choose_torch_index(environ, platform, smi, configured, reach)
    assert got_index == index
    if note is None:
        assert got_note is None
    else:
        assert note in got_note
        assert "TORCH_INDEX_URL" in got_note or "pip configuration" in got_note  # says how to choose


def test_pip_configured_index_sees_pip_config_and_variables(monkeypatch, tmp_path):
    course = _load_course_module()
    monkeypatch.setattr(course, "venv_python", lambda: Path(sys.executable))
    for name in ("PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "pip.conf"
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    config.write_text("[global]\nextra-index-url = https://extra/simple\nfind-links = /opt/wheels\n")
    assert course.pip_configured_index() is None  # extra indexes and wheel folders add, not replace
    config.write_text("[global]\nindex-url = https://mirror/simple\n")
    assert "index-url='https://mirror/simple'" in course.pip_configured_index()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert course.pip_configured_index() == "PIP_NO_INDEX=1"


def test_reachable_gives_up_quickly():
    course = _load_course_module()
    import time

    start = time.monotonic()
    assert course.reachable("https://no-such-host.invalid/whl/cpu", timeout=2.0) is False
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"torch": None}, "torch is not installed or does not import"),
        ({"course": None}, "the course package (course_utils) does not import"),
        ({"course": "/somewhere/else"}, "the course package is installed from /somewhere/else"),
    ],
)
def test_ready_only_when_torch_and_the_course_package_import(fake_course, change, problem, capsys):
    """A matching stamp is not enough: torch removed from .venv (or the course package gone
    or installed from another clone) means pip runs again."""
    course = fake_course
    course.ensure_installed()
    assert len(course.installs) == 1
    course.probe.update(change)

    def repairing_pip(args, what):
        course.installs.append(args)
        course.probe.update(torch="2.13.0", course=str(course.ROOT))

    course.pip_install = repairing_pip
    course.ensure_installed()
    out = capsys.readouterr().out
    assert f"needs repair: {problem}" in out
    assert "skipping pip" not in out.split("needs repair")[1]
    assert course.installs[-1] == ALL
    if change.get("torch", "x") is None:
        assert course.installs[-2][0] == "torch==2.13.0"


def test_install_that_still_does_not_import_fails_clearly(fake_course, capsys):
    course = fake_course
    course.probe["course"] = None  # and pip does not fix it
    with pytest.raises(SystemExit):
        course.ensure_installed()
    err = capsys.readouterr().err
    assert "after installing, the course package (course_utils) does not import" in err
    assert "Delete .venv/" in err
    assert not course.STAMP.exists()


def test_probe_venv_reports_an_uninstalled_torch_and_course_package(monkeypatch, tmp_path):
    """The real probe, run with this Python: torch imports; with torch blocked, None."""
    course = _load_course_module()
    monkeypatch.setattr(course, "venv_python", lambda: Path(sys.executable))
    monkeypatch.setattr(course, "VENV", tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    info = course.probe_venv()
    assert info["torch"] and info["course"] and Path(info["course"]).resolve() == ROOT.resolve()
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{__import__('os').pathsep}{ROOT}")
    assert course.probe_venv()["torch"] is None


# What course.py may contain, so that every Python (2.7 included) parses it and reaches the
# version check: statements and expressions whose syntax and meaning are the same in
# Python 2 and 3. No f-strings, annotations, keyword-only arguments, starred arguments,
# `print` or `exec` (statements in Python 2), `nonlocal`, `raise ... from`, walrus.
PY2_SAFE_NODES = (
    ast.Module, ast.Expr, ast.Constant, ast.Import, ast.alias, ast.If, ast.Compare, ast.Lt,
    ast.Tuple, ast.Name, ast.Load, ast.Store, ast.Attribute, ast.Call, ast.Assign, ast.BinOp,
    ast.Mod, ast.Subscript, ast.Raise, ast.Eq,
)


def _old_pythons() -> list[str]:
    """Pythons older than 3.10 found on this machine (PATH, or pyenv's versions)."""
    import glob
    import os

    names = ["python2", "python2.7"] + [f"python3.{minor}" for minor in range(4, 10)]
    found = [shutil.which(name) for name in names]
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found += sorted(glob.glob(os.path.join(pyenv, "versions", "[23].*", "bin", "python[23]")))
    old = {}
    for python in filter(None, found):
        try:  # a pyenv shim of a version that is not selected fails here
            done = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                                  capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        version = done.stdout.strip()
        if done.returncode == 0 and version and tuple(map(int, version.split(".")[:2])) < (3, 10):
            old.setdefault(version, python)
    return sorted(old.values())


def test_course_py_version_check_is_readable_by_any_python():
    """Any Python, 2.7 included, must reach the version check and print one line, not a
    SyntaxError: course.py is ASCII, uses only syntax that Python 2 and 3 read alike and
    checks the version before importing course_cli (which needs 3.10+)."""
    source = COURSE_PY.read_text(encoding="utf-8")
    assert source.isascii(), "Python 2 rejects non-ASCII source without a coding line"
    tree = ast.parse(source)
    unsafe = sorted({type(n).__name__ for n in ast.walk(tree) if not isinstance(n, PY2_SAFE_NODES)})
    assert unsafe == [], f"course.py uses syntax that Python 2 may not read: {unsafe}"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"print", "exec", "nonlocal"}, names
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert all(isinstance(c, (str, int)) for c in constants), constants  # (bool is an int)
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert isinstance(body[0], ast.Import) and [a.name for a in body[0].names] == ["sys"]
    assert isinstance(body[1], ast.If) and "version_info" in ast.unparse(body[1].test)
    # and the check itself, as Python 3.6 would run it
    code = (
        "import sys\n"
        "sys.version_info = (3, 6, 9, 'final', 0); sys.version = '3.6.9 (default)'\n"
        f"exec(compile(open({str(COURSE_PY)!r}).read(), 'course.py', 'exec'), {{'__name__': '__main__'}})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("[course] ERROR: Python 3.10+ is needed; this is 3.6.9.")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_course_py_says_what_is_needed_under_real_old_pythons(tmp_path):
    """Where old Pythons are installed (2.7, 3.6-3.9), run course.py with each of them."""
    pythons = _old_pythons()
    if not pythons:
        pytest.skip("no Python older than 3.10 on this machine")
    for python in pythons:
        done = subprocess.run([python, str(COURSE_PY), "setup"], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 1, (python, done.stderr)
        assert done.stderr.startswith("[course] ERROR: Python 3.10+ is needed; this is "), (python, done.stderr)
        assert "Traceback" not in done.stderr and "SyntaxError" not in done.stderr, (python, done.stderr)


# Stand-ins for the programs course.py runs, with their Ctrl+C behaviour: Jupyter asks
# "Shut down this Jupyter server (y/[n])?" and keeps running (it stops on SIGTERM);
# pytest stops by itself with a summary.
FAKE_SERVER = '''
import signal, sys, time
def ask(*_):
    print("Shut down this Jupyter server (y/[n])? ", end="", flush=True)
def stop(*_):
    print("fake server: shutting down", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, ask)
signal.signal(signal.SIGTERM, stop)
print("fake server: ready", flush=True)
for _ in range(600):
    time.sleep(0.1)
print("fake server: never stopped", flush=True)
'''
FAKE_PYTEST = '''
import time
print("fake server: ready", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("fake pytest: interrupted, 3 passed", flush=True)
    raise SystemExit(2)
'''
DRIVER = '''
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("course_script", sys.argv[1])
course = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course)
course.ensure_installed = lambda: None
course.venv_python = lambda: Path(sys.executable)
course.WORK = Path(sys.argv[2])
raise SystemExit(course.main(sys.argv[3:]))
'''


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
@pytest.mark.parametrize(
    "command, module, fake, last_line",
    [
        ("lab", "jupyterlab", FAKE_SERVER, "[course] JupyterLab stopped (Ctrl+C); your notebooks are saved in my_work/."),  # noqa: E501
        ("notebook", "notebook", FAKE_SERVER, "[course] Jupyter Notebook stopped (Ctrl+C); your notebooks are saved in my_work/."),  # noqa: E501
        ("test", "pytest", FAKE_PYTEST, "[course] tests stopped (Ctrl+C) after"),
    ],
)
def test_ctrl_c_ends_with_one_clear_line(tmp_path, command, module, fake, last_line):
    import os
    import signal
    import time

    fakes = tmp_path / "fakes"
    (fakes / module).mkdir(parents=True)
    (fakes / module / "__init__.py").write_text("")
    (fakes / module / "__main__.py").write_text(fake)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ, PYTHONPATH=f"{fakes}{os.pathsep}{ROOT}", PYTHONUNBUFFERED="1")
    driver = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(COURSE_CLI), str(tmp_path / "my_work"), command],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the child runs, as a user would
        line = driver.stdout.readline()
        lines.append(line)
        if "fake server: ready" in line or not line:
            break
    time.sleep(0.3)
    os.killpg(driver.pid, signal.SIGINT)  # Ctrl+C in a terminal goes to the whole group
    try:
        rest, _ = driver.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        raise
    out = "".join(lines) + rest
    assert driver.returncode == 130, out
    assert "Traceback" not in out and "never stopped" not in out, out
    assert out.rstrip("\n").splitlines()[-1].startswith(last_line), out


def test_ctrl_c_during_setup_is_one_line_not_a_traceback(monkeypatch, capsys):
    course = _load_course_module()

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(course, "ensure_installed", interrupted)
    assert course.main(["setup"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "[course] interrupted (Ctrl+C): 'setup' stopped; run it again to carry on."


@pytest.mark.parametrize("ci, compiles", [("true", False), ("", True)])
def test_pip_skips_byte_compiling_only_under_ci(monkeypatch, ci, compiles):
    course = _load_course_module()
    commands = []
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(course.subprocess, "run", lambda cmd, **kw: commands.append(cmd) or subprocess.CompletedProcess(cmd, 0))  # noqa: E501
    course.pip_install(["pytest"], "pytest")
    (cmd,) = commands
    assert cmd[-1] == "pytest" and cmd[1:4] == ["-m", "pip", "install"]
    assert ("--no-compile" not in cmd) == compiles, cmd


def test_tests_may_cache_byte_code_even_where_the_environment_forbids_it(monkeypatch):
    # pip installs without compiling under CI; the suite's many processes must then share the
    # byte code the first one compiles, not compile torch again each (PYTHONDONTWRITEBYTECODE)
    course = _load_course_module()
    runs = []
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(course, "ensure_installed", lambda: None)
    monkeypatch.setattr(course, "run_in_venv", lambda cmd, env=None, server=False: runs.append((cmd, env)) or 0)
    assert course.main(["test", "-k", "nothing"]) == 0
    ((cmd, env),) = runs
    assert cmd[:2] == ["-m", "pytest"] and cmd[-2:] == ["-k", "nothing"], cmd
    assert "-rfEs" in cmd  # skips are listed with their reasons (failures and errors as by default)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
