"""The commands of course.py (run ``python3 course.py ...``, not this file).

course.py checks the Python version in syntax that any Python reads, then calls
:func:`main` here; this file needs Python 3.10+. Standard library only.
"""

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".course-stamp.json"
PYPROJECT = ROOT / "pyproject.toml"
WORK = ROOT / "my_work"  # students' copies of the notebooks (git-ignored)

MIN_TORCH = (2, 2)  # keep in step with "torch>=2.2" in pyproject.toml
DEFAULT_TORCH_SPEC = "torch==2.13.0"
MIN_PIP_FOR_EDITABLE = (21, 3)  # PEP 660 editable installs from pyproject.toml

CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

# The pyproject extras .venv gets, whichever command runs first: installing them all at once
# (lab's JupyterLab, test's runners) means `lab` after `test` (or any other order) installs
# nothing more until pyproject.toml changes, as the README promises.
EXTRAS = ("browser", "dev", "lab", "site")


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


def caching_env() -> dict[str, str]:
    """This process's environment, letting .venv's Python cache the byte code it compiles.

    Under CI pip installs without compiling (see pip_install); where PYTHONDONTWRITEBYTECODE
    is also set, every one of the test suite's ~60 processes and kernels would compile
    torch's sources again on import (measured: 5.7 s of CPU per `import torch`, 2.5 s with
    the cache)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def probe_venv() -> dict | None:
    """What .venv holds, or None when it is missing or has no working Python with pip.

    ``torch`` is the installed version, or None when torch is not installed *or does
    not import* (a half-removed package has its files gone but may keep its metadata);
    ``course`` is the folder the course package imports from (None when it does not).
    """
    python = venv_python()
    if not python.exists():
        return None
    code = (
        "import sys, json, importlib.metadata as m\n"
        "import pip\n"
        "try:\n"
        "    import torch\n"
        "    torch = m.version('torch')\n"
        "except Exception:\n"
        "    torch = None\n"
        "try:\n"
        "    import course_utils, os\n"
        "    course = os.path.dirname(os.path.dirname(os.path.abspath(course_utils.__file__)))\n"
        "except Exception:\n"
        "    course = None\n"
        "print(json.dumps({'python': list(sys.version_info[:3]), 'pip': pip.__version__,"
        " 'torch': torch, 'course': course}))\n"
    )
    try:
        # not from ROOT: there `import course_utils` would find the folder, installed or not
        done = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=str(VENV),
            env=caching_env(),
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
    if os.environ.get("CI"):
        # byte-compiling the ~15,000 installed .py files costs CI about a minute on 2 cores;
        # Python compiles (and caches) the few modules the tests import on first use
        # (`command_test` lets it write that cache even where PYTHONDONTWRITEBYTECODE is set)
        cmd.append("--no-compile")
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


def pip_configured_index() -> str | None:
    """The index (or ``no-index``) the user's pip configuration sets, if any: a mirror
    chosen on purpose, which the CPU default must not replace."""
    for name in ("PIP_INDEX_URL", "PIP_NO_INDEX"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    try:
        done = subprocess.run(
            [str(venv_python()), "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in done.stdout.splitlines():  # e.g. global.index-url='https://mirror/simple'
        key = line.split("=", 1)[0].strip()
        if key.endswith((".index-url", ".no-index")) and not key.endswith(".extra-index-url"):
            return line.strip()
    return None


def reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout`` seconds
    (name lookup included, which has no timeout of its own: it runs in a thread)."""
    host = url.split("://", 1)[-1].split("/", 1)[0]
    result = []

    def connect() -> None:
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            result.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result)


def choose_torch_index(
    environ: dict,
    platform: str,
    has_nvidia_smi: bool,
    configured_index=lambda: None,
    index_reachable=reachable,
) -> tuple[str | None, str | None]:
    """``(index URL or None, what to tell the user)`` for installing PyTorch.

    ``TORCH_INDEX_URL`` wins. Otherwise, on Linux without ``nvidia-smi`` (no NVIDIA
    driver, so the CUDA build's gigabytes would be wasted), PyTorch's CPU index, unless
    pip's own configuration names an index (a mirror, or an offline wheel folder) or the
    CPU index cannot be reached: then pip's own settings, which is also the choice
    everywhere else (macOS and Windows wheels are CPU-sized already; with a GPU,
    PyPI's default build is the CUDA one). The callables are only asked when needed.
    """
    index = environ.get("TORCH_INDEX_URL")
    if index:
        return index, None
    if not platform.startswith("linux") or has_nvidia_smi:
        if platform.startswith("linux"):
            return None, (
                "NVIDIA GPU found (nvidia-smi): PyPI's default PyTorch, the CUDA build (several GB; "
                "set TORCH_INDEX_URL to choose another build)"
            )
        return None, None
    configured = configured_index()
    if configured:
        return None, (
            f"no NVIDIA GPU found, but your pip configuration sets {configured}: using it for "
            "PyTorch (set TORCH_INDEX_URL to choose)"
        )
    if not index_reachable(CPU_TORCH_INDEX):
        return None, (
            f"no NVIDIA GPU found, but {CPU_TORCH_INDEX} cannot be reached: installing PyTorch "
            "with pip's own settings (set TORCH_INDEX_URL to choose)"
        )
    return CPU_TORCH_INDEX, (
        "no NVIDIA GPU found (nvidia-smi absent): installing the small CPU-only PyTorch "
        f"from {CPU_TORCH_INDEX} (set TORCH_INDEX_URL to choose another build)"
    )


def nvidia_smi_present() -> bool:
    """NVIDIA's driver installs ``nvidia-smi``: without it no CUDA build can run."""
    return shutil.which("nvidia-smi") is not None


def install_torch() -> None:
    spec = os.environ.get("TORCH_SPEC", DEFAULT_TORCH_SPEC)
    index, note = choose_torch_index(
        dict(os.environ), sys.platform, nvidia_smi_present(), pip_configured_index, reachable
    )
    if note:
        say(note)
    pip_install([spec, "--index-url", index] if index else [spec], spec + (f" from {index}" if index else ""))


def stamp_is_current(stamp: dict) -> bool:
    """Whether ``.venv``'s stamp says every extra of :data:`EXTRAS` was installed for this
    pyproject.toml and this PyTorch request (then no command needs pip)."""
    return stamp.get("hash") == stamp_hash() and set(EXTRAS) <= set(stamp.get("extras", []))


def ensure_installed() -> None:
    if not PYPROJECT.exists():
        fail(f"{PYPROJECT} not found: run this script from a copy of the course repository.")
    info = ensure_venv()

    stamp = read_stamp()
    # extras an older stamp lists stay listed (pip would not remove them anyway)
    all_extras = sorted(set(EXTRAS) | set(stamp.get("extras", [])))
    if stamp_is_current(stamp):
        problem = venv_problem(info)
        if problem is None:
            say(f"{VENV.name}/ is up to date (pyproject.toml unchanged): skipping pip")
            return
        say(f"{VENV.name}/ needs repair: {problem}")

    if tuple(version_tuple(info["pip"])) < MIN_PIP_FOR_EDITABLE:
        pip_install(["--upgrade", "pip"], f"a newer pip (found {info['pip']})")

    torch = info.get("torch")
    if torch and version_tuple(torch) >= MIN_TORCH:
        say(f"torch {torch} already installed")
    else:
        install_torch()

    extras_text = ",".join(all_extras)
    pip_install(["-e", f".[{extras_text}]"], f"the course package with [{extras_text}]")
    problem = venv_problem(probe_venv())
    if problem is not None:
        fail(f"after installing, {problem}. Delete {VENV.name}/ and run this command again.")
    STAMP.write_text(json.dumps({"hash": stamp_hash(), "extras": all_extras}) + "\n")


def venv_problem(info: dict | None) -> str | None:
    """Why .venv cannot run the course (torch or the course package missing), or None."""
    if info is None:
        return "its Python no longer runs"
    if not info.get("torch"):
        return "torch is not installed or does not import"
    course = info.get("course")
    if not course:
        return "the course package (course_utils) does not import"
    if Path(course).resolve() != ROOT.resolve():
        return f"the course package is installed from {course}, not from {ROOT}"
    return None


def run_in_venv(cmd: list[str], env: dict | None = None, server: bool = False) -> int:
    """Run ``.venv``'s Python with ``cmd``; on Ctrl+C wait for it to end, then return 130.

    Ctrl+C reaches the child too (same process group). pytest then stops by itself and
    prints its summary. Jupyter instead asks "Shut down this Jupyter server (y/[n])?" and
    would keep running, its question landing on the shell prompt: for a ``server`` the
    interrupt is followed by a terminate (Jupyter's clean shutdown on SIGTERM).
    """
    try:
        child = subprocess.Popen([str(venv_python()), *cmd], cwd=ROOT, env=env)
    except OSError as error:
        fail(f"could not start {venv_python()}: {error}")
    interrupted = False
    while True:
        try:
            code = child.wait(timeout=None if not interrupted else 30)
            return 130 if interrupted else code
        except KeyboardInterrupt:  # (again, if the user presses Ctrl+C twice)
            if interrupted or server:
                child.terminate()
            interrupted = True
        except subprocess.TimeoutExpired:
            child.kill()


def command_setup(args: list[str]) -> int:
    if args:
        fail(f"'setup' takes no arguments (got {' '.join(args)})", 2)
    ensure_installed()
    say(f"ready: {venv_python()}")
    return 0


# Defaults for the JupyterLab (and Notebook 7) that `lab`/`notebook` start: no "Would you like
# to get notified about official Jupyter news?" greeting (the course runs offline), no update
# check. Written as an override of the defaults in .venv's own JupyterLab folder, which both
# apps read ({sys.prefix}/share/jupyter/lab/settings/overrides.d/): the student's own settings
# (~/.jupyter) are untouched and still win, e.g. when they turn the news on.
LAB_DEFAULTS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def lab_settings_dir(venv: Path) -> Path:
    """Where the JupyterLab installed in ``venv`` reads its default-setting overrides."""
    return venv / "share" / "jupyter" / "lab" / "settings"


def write_lab_defaults(settings_dir: Path) -> None:
    """Put :data:`LAB_DEFAULTS` in ``settings_dir/overrides.d/`` (this course's own file)."""
    path = settings_dir / "overrides.d" / "transformer-course.json"
    text = json.dumps(LAB_DEFAULTS, indent=1, sort_keys=True) + "\n"
    try:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    except OSError as error:  # only a greeting is at stake: say so and go on
        say(f"could not write {path} ({error}); JupyterLab may ask about its news")


def command_lab(args: list[str], app: str = "jupyterlab") -> int:
    ensure_installed()
    write_lab_defaults(lab_settings_dir(VENV))
    # Students work on copies in my_work/ (git-ignored), so `git pull` never conflicts with
    # their answers: copy the notebooks that are not there yet, never overwrite one that is,
    # and say which copies a course update made outdated (--write-new: put the newer
    # version beside them). See course_tools/start.py.
    start_args = [str(WORK), "--rerun-hint", "python3 course.py lab --write-new"]
    if "--write-new" in args:
        args = [a for a in args if a != "--write-new"]
        start_args.append("--write-new")
    code = run_in_venv(["-m", "course_tools.start", *start_args])
    if code != 0:
        fail(f"could not copy the notebooks into {WORK.name}/ (see above)", code)
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in args:
        args = [*args, "--allow-root"]  # e.g. in a container; Jupyter refuses root otherwise
    name = {"jupyterlab": "JupyterLab", "notebook": "Jupyter Notebook"}[app]
    say(f"starting {name} in {WORK.name}/ (Ctrl+C to stop)")
    code = run_in_venv(["-m", app, str(WORK), *args], server=True)
    if code == 130:
        say(f"{name} stopped (Ctrl+C); your notebooks are saved in {WORK.name}/.")
    return code


def command_notebook(args: list[str]) -> int:
    return command_lab(args, app="notebook")


def command_test(args: list[str]) -> int:
    ensure_installed()
    env = caching_env()
    # Never open a window during tests. Not "Agg": nbval's kernels inherit this variable,
    # and under Agg `plt.show()` displays nothing, so every figure stored in solutions/
    # would be reported missing. The inline backend is what ipykernel uses by default
    # (and what the solutions were executed with); outside a kernel it draws with Agg.
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")  # silences jupyter_core's path-migration warning
    if not any(a == "-n" or a.startswith(("-n=", "--numprocesses", "-p")) for a in args):
        # one worker per core, whole files to a worker (a notebook's cells run in one kernel,
        # in order), longest files first (conftest.py orders them); the unit tests pin torch
        # to one thread, so two workers use both cores
        args = ["-n", str(min(os.cpu_count() or 1, 4)), "--dist", "loadfile", "--no-loadscope-reorder", *args]
    # a skipped test's one-line reason (e.g. "no Chromium with chromedriver") in the summary,
    # with pytest's default failures and errors; a -r of the user's own comes later and wins
    args = ["-rfEs", *args]
    say("running python -m pytest " + " ".join(args))
    start = time.monotonic()
    code = run_in_venv(["-m", "pytest", *args], env=env)
    if code == 130:
        say(f"tests stopped (Ctrl+C) after {time.monotonic() - start:.0f}s")
    else:
        say(f"pytest finished in {time.monotonic() - start:.0f}s with exit code {code}")
    return code


def command_site(args: list[str]) -> int:
    ensure_installed()
    # the saved notebooks as a static website in build/site/ (git-ignored); nothing is re-run
    return run_in_venv(["-m", "course_tools.site", *args])


COMMANDS = {"lab": command_lab, "notebook": command_notebook, "test": command_test, "setup": command_setup,
            "site": command_site}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="course.py",
        description=(
            "Set up the course in .venv and run it. "
            "lab: copy the notebooks into my_work/ (never overwriting yours; "
            "--write-new puts newer versions beside them) and open JupyterLab there; "
            "notebook: the same in Jupyter Notebook 7; "
            "test: run the test suite (extra arguments go to pytest); "
            "site: build the course as a static website in build/site/ (open its index.html); "
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
        "args", nargs=argparse.REMAINDER, help="passed on to jupyter lab, pytest or course_tools.site"
    )
    ns = parser.parse_args(argv)
    try:
        return COMMANDS[ns.command](ns.args)
    except KeyboardInterrupt:
        # one line instead of a traceback; no stamp was written, so a rerun carries on
        print(file=sys.stderr)
        print(
            f"[course] interrupted (Ctrl+C): '{ns.command}' stopped; run it again to carry on.",
            file=sys.stderr, flush=True,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
