#!/usr/bin/env python3
"""Set up and run the course "Build a Transformer from scratch in PyTorch".

    python3 course.py lab     # set up .venv, copy the notebooks into my_work/, open JupyterLab there
    python3 course.py test    # set up .venv, then run the whole test suite (pytest)
    python3 course.py setup   # set up .venv only

Standard library only; any Python >= 3.10 on Linux, macOS or Windows. The virtual
environment lives in ``.venv`` next to this file. A stamp file in it records a hash of
``pyproject.toml``, so a second run skips pip entirely until that file changes.

Environment variables:
    TORCH_SPEC       pip requirement used to install PyTorch (default ``torch==2.13.0``).
    TORCH_INDEX_URL  index used for that PyTorch install only, e.g.
                     https://download.pytorch.org/whl/cpu for the small CPU-only build
                     on Linux (PyPI's Linux wheel bundles CUDA and is several GB).
    COURSE_VERBOSE   set to 1 to see pip's full output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".course-stamp.json"
PYPROJECT = ROOT / "pyproject.toml"
WORK = ROOT / "my_work"  # students' copies of the notebooks (git-ignored)

MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 2)  # keep in step with "torch>=2.2" in pyproject.toml
DEFAULT_TORCH_SPEC = "torch==2.13.0"
MIN_PIP_FOR_EDITABLE = (21, 3)  # PEP 660 editable installs from pyproject.toml

# Which pyproject extras each command needs.
EXTRAS = {"lab": ("lab",), "test": ("dev",), "setup": ("dev", "lab")}


def say(message: str) -> None:
    print(f"[course] {message}", flush=True)


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"[course] ERROR: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def venv_python() -> Path:
    if os.name == "nt":
        return VENV / "Scripts" / "python.exe"
    return VENV / "bin" / "python"


def version_tuple(text: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); stops at the first non-numeric part ('2.3.0rc1' -> (2, 3))."""
    parts = []
    for piece in text.split("+")[0].split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def probe_venv() -> dict | None:
    """Python, pip and torch versions inside .venv, or None when it is missing or broken."""
    python = venv_python()
    if not python.exists():
        return None
    code = (
        "import sys, json, importlib.metadata as m\n"
        "import pip\n"
        "try:\n"
        "    torch = m.version('torch')\n"
        "except m.PackageNotFoundError:\n"
        "    torch = None\n"
        "print(json.dumps({'python': list(sys.version_info[:3]), 'pip': pip.__version__,"
        " 'torch': torch}))\n"
    )
    try:
        done = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def create_venv() -> None:
    say(f"creating virtual environment {VENV.name}/ with Python {sys.version.split()[0]}")
    done = subprocess.run([sys.executable, "-m", "venv", str(VENV)])
    if done.returncode != 0 or probe_venv() is None:
        fail(
            "could not create a working virtual environment with pip in it. On Debian/Ubuntu "
            "install the venv module first (sudo apt install python3-venv), then run again."
        )


def ensure_venv() -> dict:
    info = probe_venv()
    if info is not None:
        return info
    if VENV.exists():
        # Only delete what is recognisably a virtual environment (or an empty folder).
        if not (VENV / "pyvenv.cfg").exists() and any(VENV.iterdir()):
            fail(f"{VENV} exists but is not a virtual environment; move it away and run again.")
        say(f"{VENV.name}/ is broken (no working python or pip in it): recreating it")
        shutil.rmtree(VENV)
    create_venv()
    info = probe_venv()
    assert info is not None  # create_venv checked it
    return info


def pip_install(args: list[str], what: str) -> None:
    cmd = [str(venv_python()), "-m", "pip", "install", "--no-input"]
    if not os.environ.get("COURSE_VERBOSE"):
        cmd.append("-q")
    if os.environ.get("CI") or not sys.stdout.isatty():
        cmd += ["--progress-bar", "off"]
    cmd += args
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    say(f"installing {what}")
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env)
    if done.returncode != 0:
        fail(f"pip failed while installing {what} (command: {' '.join(cmd)})", done.returncode)
    say(f"installed {what} in {time.monotonic() - start:.0f}s")


def stamp_hash() -> str:
    digest = hashlib.sha256()
    digest.update(PYPROJECT.read_bytes())
    # A different PyTorch request must not be skipped by an old stamp.
    digest.update(os.environ.get("TORCH_SPEC", DEFAULT_TORCH_SPEC).encode())
    digest.update(os.environ.get("TORCH_INDEX_URL", "").encode())
    return digest.hexdigest()


def read_stamp() -> dict:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return {}


def ensure_installed(extras: tuple[str, ...]) -> None:
    if sys.version_info < MIN_PYTHON:
        needed = ".".join(map(str, MIN_PYTHON))
        fail(f"Python {needed}+ is needed; this is {sys.version.split()[0]}.")
    if not PYPROJECT.exists():
        fail(f"{PYPROJECT} not found: run this script from a copy of the course repository.")
    info = ensure_venv()

    stamp = read_stamp()
    wanted = set(extras)
    if stamp.get("hash") == stamp_hash() and wanted <= set(stamp.get("extras", [])):
        say(f"{VENV.name}/ is up to date (pyproject.toml unchanged): skipping pip")
        return

    if tuple(version_tuple(info["pip"])) < MIN_PIP_FOR_EDITABLE:
        pip_install(["--upgrade", "pip"], f"a newer pip (found {info['pip']})")

    torch = info.get("torch")
    if torch and version_tuple(torch) >= MIN_TORCH:
        say(f"torch {torch} already installed")
    else:
        spec = os.environ.get("TORCH_SPEC", DEFAULT_TORCH_SPEC)
        args = [spec]
        index = os.environ.get("TORCH_INDEX_URL")
        if index:
            args += ["--index-url", index]
        elif sys.platform.startswith("linux"):
            say(
                "tip: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu gets the small "
                "CPU-only PyTorch on Linux"
            )
        pip_install(args, spec + (f" from {index}" if index else ""))

    # Keep the extras installed earlier so `lab` after `test` does not drop anything.
    all_extras = sorted(wanted | set(stamp.get("extras", [])))
    extras_text = ",".join(all_extras)
    pip_install(["-e", f".[{extras_text}]"], f"the course package with [{extras_text}]")
    STAMP.write_text(json.dumps({"hash": stamp_hash(), "extras": all_extras}) + "\n")


def run_in_venv(cmd: list[str], env: dict | None = None) -> int:
    try:
        return subprocess.run([str(venv_python()), *cmd], cwd=ROOT, env=env).returncode
    except KeyboardInterrupt:
        return 130


def command_setup(args: list[str]) -> int:
    if args:
        fail(f"'setup' takes no arguments (got {' '.join(args)})", 2)
    ensure_installed(EXTRAS["setup"])
    say(f"ready: {venv_python()}")
    return 0


def command_lab(args: list[str]) -> int:
    ensure_installed(EXTRAS["lab"])
    # Students work on copies in my_work/ (git-ignored), so `git pull` never conflicts with
    # their answers: copy the notebooks that are not there yet, never overwrite one that is,
    # and say which copies a course update made outdated (--write-new: put the newer
    # version beside them). See course_utils/start.py.
    start_args = [str(WORK), "--rerun-hint", "python3 course.py lab --write-new"]
    if "--write-new" in args:
        args = [a for a in args if a != "--write-new"]
        start_args.append("--write-new")
    code = run_in_venv(["-m", "course_utils.start", *start_args])
    if code != 0:
        fail(f"could not copy the notebooks into {WORK.name}/ (see above)", code)
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in args:
        args = [*args, "--allow-root"]  # e.g. in a container; Jupyter refuses root otherwise
    say(f"starting JupyterLab in {WORK.name}/ (Ctrl+C to stop)")
    return run_in_venv(["-m", "jupyterlab", str(WORK), *args])


def command_test(args: list[str]) -> int:
    ensure_installed(EXTRAS["test"])
    env = dict(os.environ)
    # Never open a window during tests. Not "Agg": nbval's kernels inherit this variable,
    # and under Agg `plt.show()` displays nothing, so every figure stored in solutions/
    # would be reported missing. The inline backend is what ipykernel uses by default
    # (and what the solutions were executed with); outside a kernel it draws with Agg.
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")  # silences jupyter_core's path-migration warning
    say("running python -m pytest " + " ".join(args))
    start = time.monotonic()
    code = run_in_venv(["-m", "pytest", *args], env=env)
    say(f"pytest finished in {time.monotonic() - start:.0f}s with exit code {code}")
    return code


COMMANDS = {"lab": command_lab, "test": command_test, "setup": command_setup}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="course.py",
        description=(
            "Set up the course in .venv and run it. "
            "lab: copy the notebooks into my_work/ (never overwriting yours; "
            "--write-new puts newer versions beside them) and open JupyterLab there; "
            "test: run the test suite (extra arguments go to pytest); "
            "setup: install only."
        ),
        epilog=(
            "Environment: TORCH_SPEC (default %s), TORCH_INDEX_URL (e.g. "
            "https://download.pytorch.org/whl/cpu), COURSE_VERBOSE=1 for pip's output."
            % DEFAULT_TORCH_SPEC
        ),
    )
    parser.add_argument("command", choices=sorted(COMMANDS), help="what to do")
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, help="passed on to jupyter lab or pytest"
    )
    ns = parser.parse_args(argv)
    return COMMANDS[ns.command](ns.args)


if __name__ == "__main__":
    raise SystemExit(main())
