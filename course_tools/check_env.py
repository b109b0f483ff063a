"""Check that this Python environment has what the course needs (all notebooks, 01-07).

    python -m course_tools.check_env              # the packages every notebook needs
    python -m course_tools.check_env --extra dev  # also the instructor's and test tools

Prints one line per requirement, e.g. ``[OK] torch 2.13.0+cpu (needs >=2.2)`` or
``[FAIL] ipywidgets not installed (needs >=7.6)``, then the Python version and the device
PyTorch will use, and exits with status 1 when a requirement is not met.

The requirements have one source of truth, ``pyproject.toml``: they are read from the
installed distribution's metadata (``importlib.metadata``) and, when the package is not
installed (a plain checkout on ``sys.path``), from ``pyproject.toml`` itself. Versions are
compared with ``packaging`` when it is importable, else with a simple fallback that knows
the operators used in ``pyproject.toml`` (``>=``, ``>``, ``<=``, ``<``, ``==``, ``!=``,
``~=``) and ignores environment markers other than ``extra``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DIST_NAME = "transformer-course"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

_OPERATORS = ("~=", "==", "!=", "<=", ">=", "<", ">")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


@dataclass
class Requirement:
    """One requirement: a distribution name, a specifier such as ``>=2.2`` ('' = any
    version) and the extra it belongs to (None = always required)."""

    name: str
    specifier: str
    extra: str | None = None


@dataclass
class Line:
    """One checked requirement; ``ok`` is False when it is missing or too old."""

    ok: bool
    text: str


# ---------------------------------------------------------------------------- reading


def parse_requirement(text: str) -> Requirement:
    """``'pytest; extra == "dev"'`` -> Requirement('pytest', '', 'dev'). Without ``packaging``
    only the ``extra`` marker is understood; other markers count as true."""
    text, _, marker = text.partition(";")
    match = _EXTRA_MARKER.search(marker)
    extra = match.group(1) if match else None
    text = text.split("@")[0].strip()  # drop a direct URL ("name @ git+...")
    name_match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)
    if not name_match:
        raise ValueError(f"cannot parse requirement {text!r}")
    name = name_match.group(0)
    rest = text[name_match.end():].strip()
    if rest.startswith("["):  # name[extra] -> the extras of a dependency are not checked
        rest = rest[rest.index("]") + 1:].strip()
    specifier = rest.strip("() ").replace(" ", "")
    return Requirement(name, specifier, extra)


def _parse_toml(text: str) -> dict:
    """pyproject.toml as a dict: tomllib (3.11+), tomli, or a tiny parser for the keys used
    here (``[project]`` name, requires-python, dependencies and
    ``[project.optional-dependencies]``, string arrays possibly over several lines)."""
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            return parse_toml_minimal(text)
    return tomllib.loads(text)


def parse_toml_minimal(text: str) -> dict:
    """Just enough TOML for the project table: ``[table]`` headers, ``key = "string"`` and
    ``key = ["string", ...]`` (arrays may span lines). Anything else is skipped."""
    result: dict = {}
    table = result
    lines = iter(text.splitlines())
    for raw in lines:
        line = _strip_comment(raw).strip()
        if not line:
            continue
        header = re.fullmatch(r"\[([^\[\]]+)\]", line)
        if header:
            table = result
            for part in header.group(1).split("."):
                table = table.setdefault(part.strip().strip('"'), {})
            continue
        key, eq, value = line.partition("=")
        if not eq:
            continue
        key, value = key.strip().strip('"'), value.strip()
        if value.startswith("["):
            while value.count("[") > value.count("]"):  # array continued on later lines
                value += " " + _strip_comment(next(lines, "]"))
            table[key] = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'', value)
            table[key] = [a or b for a, b in table[key]]
        elif value[:1] in "\"'":
            table[key] = value[1:value.index(value[0], 1)]
    return result


def _strip_comment(line: str) -> str:
    """Drop a ``#`` comment that is not inside a string."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:i]
    return line


def requirements_from_pyproject(path: Path = PYPROJECT) -> tuple[list[Requirement], str]:
    """(requirements, requires-python) from ``pyproject.toml``."""
    project = _parse_toml(path.read_text(encoding="utf-8")).get("project", {})
    reqs = [parse_requirement(r) for r in project.get("dependencies", [])]
    for extra, items in project.get("optional-dependencies", {}).items():
        reqs += [Requirement(r.name, r.specifier, extra) for r in map(parse_requirement, items)]
    return reqs, project.get("requires-python", "")


def requirements_from_metadata() -> tuple[list[Requirement], str] | None:
    """(requirements, requires-python) of the installed distribution, or None."""
    try:
        dist = metadata.distribution(DIST_NAME)
    except metadata.PackageNotFoundError:
        return None
    reqs = [parse_requirement(r) for r in (dist.requires or [])]
    return reqs, dist.metadata.get("Requires-Python") or ""


def load_requirements() -> tuple[list[Requirement], str, str]:
    """(requirements, requires-python, where they were read from)."""
    found = requirements_from_metadata()
    if found is not None:
        return (*found, f"installed metadata of {DIST_NAME} {metadata.version(DIST_NAME)}")
    if PYPROJECT.exists():
        return (*requirements_from_pyproject(), str(PYPROJECT))
    raise RuntimeError(
        f"{DIST_NAME} is not installed and {PYPROJECT} does not exist: "
        "cannot tell what the course needs"
    )


# ---------------------------------------------------------------------------- comparing


def _release(version: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); pre/post/dev parts are ignored by the fallback."""
    numbers = []
    for piece in version.split("+")[0].split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        numbers.append(int(match.group(0)))
        if match.end() != len(piece):
            break
    return tuple(numbers)


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _fallback_satisfies(version: str, specifier: str) -> bool:
    have = _release(version)
    for clause in filter(None, specifier.split(",")):
        op = next(o for o in _OPERATORS if clause.startswith(o)) if clause[0] in "~=!<>" else "=="
        target = clause[len(op):] if clause.startswith(op) else clause
        if target.endswith(".*"):  # "==2.*": prefix match
            prefix = _release(target[:-2])
            same = have[: len(prefix)] == prefix
            if (op == "==") != same:
                return False
            continue
        a, b = _pad(have, _release(target))
        ok = {
            ">=": a >= b,
            ">": a > b,
            "<=": a <= b,
            "<": a < b,
            "==": a == b,
            "!=": a != b,
            # ~=2.2 means >=2.2 and ==2.*
            "~=": a >= b and have[: len(_release(target)) - 1] == _release(target)[:-1],
        }[op]
        if not ok:
            return False
    return True


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets ``specifier`` (``''`` = any version)."""
    if not specifier:
        return True
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ModuleNotFoundError:
        return _fallback_satisfies(version, specifier)
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return _fallback_satisfies(version, specifier)


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------- report


def check(requirements: list[Requirement], requires_python: str) -> list[Line]:
    """One Line for Python and one per requirement, in the order given."""
    python = platform.python_version()
    needs = f" (needs {requires_python})" if requires_python else ""
    lines = [Line(satisfies(python, requires_python), f"Python {python}{needs}")]
    for req in requirements:
        needs = f" (needs {req.specifier})" if req.specifier else " (any version)"
        have = installed_version(req.name)
        if have is None:
            lines.append(Line(False, f"{req.name} not installed{needs}"))
        else:
            lines.append(Line(satisfies(have, req.specifier), f"{req.name} {have}{needs}"))
    return lines


def describe_device() -> Line:
    """Which device the notebooks' ``"cuda" if available else "cpu"`` picks."""
    try:
        import torch
    except Exception as error:  # a broken install can raise more than ImportError
        return Line(False, f"device: torch cannot be imported ({type(error).__name__}: {error})")
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        name = torch.cuda.get_device_name(0)
        return Line(True, f"device: CUDA ({name}, {count} GPU{'s' if count > 1 else ''})")
    extra = ""
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        extra = "; Apple MPS also available"
    return Line(True, f"device: CPU ({torch.get_num_threads()} threads; no CUDA GPU{extra})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.check_env",
        description="Check that this environment has what the course needs.",
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME",
        help="also check an optional group from pyproject.toml: 'lab' (JupyterLab), "
        "'tools' (the instructor's tools) or 'dev' (the tools and the test tools); may be repeated",
    )
    args = parser.parse_args(argv)

    requirements, requires_python, source = load_requirements()
    known = {r.extra for r in requirements if r.extra}
    unknown = set(args.extra) - known
    if unknown:
        parser.error(f"unknown extra {sorted(unknown)}; choose from {sorted(known)}")
    wanted = [r for r in requirements if r.extra is None or r.extra in args.extra]
    # An extra may repeat a name (ipykernel is in both lab and dev): check it once.
    unique: dict[tuple[str, str], Requirement] = {}
    for req in wanted:
        unique.setdefault((req.name.lower(), req.specifier), req)

    lines = check(list(unique.values()), requires_python)
    torch_ok = next((line.ok for line in lines if line.text.startswith("torch ")), False)
    device = describe_device() if torch_ok else None

    for line in lines:
        print(f"[{'OK' if line.ok else 'FAIL'}] {line.text}")
    if device is not None:
        print(f"[{'INFO' if device.ok else 'FAIL'}] {device.text}")
    print(f"[INFO] Python executable: {sys.executable}")
    print(f"[INFO] requirements read from {source}")

    failures = [line for line in lines if not line.ok]
    if device is not None and not device.ok:
        failures.append(device)
    if failures:
        print(
            f"{len(failures)} problem(s). From the course folder, `python3 course.py setup` "
            "installs everything into .venv; in Colab, run the notebook's set-up cell."
        )
        return 1
    print("Everything the course needs is installed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
