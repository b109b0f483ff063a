"""Stage: isolation. What a graded kernel runs in and what is left of it afterwards: its
environment (no path of the submissions, its own temporary folders, the course imported from the
grader's private copy), the ``bwrap`` sandbox around it (no network, its own process list, the
submissions and the course's files hidden, everything read-only but its own folder), and the
killing of every process a notebook started, detached ones too (the grader adopts orphans as a
child subreaper on Linux)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from ..kernels import PACKAGE_ROOT, kernel_env

CHECK_TIME_LIMIT_VARIABLE = "COURSE_CHECK_TIME_LIMIT"  # read by course_utils.checks: one check's time limit


def grading_env(turn: Path, hidden: Iterable[Path], package_root: Path = PACKAGE_ROOT,
                check_time_limit: float | None = None) -> dict[str, str]:
    """A graded kernel's environment: :func:`kernel_env` without the variables that name a
    folder of the submissions (or the instructor's current folder), with its own IPython,
    matplotlib and temporary folders inside ``turn``, importing the course from ``package_root``
    (the grader's private copy) rather than from the instructor's checkout."""
    env = kernel_env("agg")  # figures are never drawn: grading needs no pictures
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != PACKAGE_ROOT]
    hidden = [str(p) for p in hidden]
    for name in list(env):
        value = env[name]
        if name in ("PWD", "OLDPWD") or any(h and h in value for h in hidden):
            del env[name]
    env["PYTHONPATH"] = os.pathsep.join([str(package_root), *(p for p in inherited if not any(h in p for h in hidden))])
    # no byte-code cache: a module first imported while an exercise is checked (torch imports some
    # lazily) would otherwise be compiled and cached into __pycache__ folders outside the turn's
    # folder, and the audit hook would flag the honest student's line for those writes
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if check_time_limit is not None:
        env[CHECK_TIME_LIMIT_VARIABLE] = f"{check_time_limit:g}"
    # torch's compiler, imported lazily, makes its cache folder (/tmp/torchinductor_<user>) on first
    # use: flagged once on an honest student's line (a full suite's run, under load) before it lived here
    for name, sub in (("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl"), ("TMPDIR", "tmp"),
                      ("TORCHINDUCTOR_CACHE_DIR", "torchinductor")):
        (turn / sub).mkdir(exist_ok=True)
        env[name] = str(turn / sub)
    return env


def sandbox_prefix(turn: Path, workdir: Path, hidden: Iterable[Path], package_root: Path = PACKAGE_ROOT) -> list[str]:
    """``bwrap`` arguments: no network, own process list, everything read-only except
    ``turn`` (which holds the working folder), ``/tmp`` empty, the submissions (and whatever
    else is in ``hidden``) an empty read-only folder, ``package_root`` read-only."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-all",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    keep = [Path(package_root).resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    # a course checkout or virtual environment under /tmp (a CI clone) must stay visible
    rebound = [k for k in keep if Path("/tmp") in k.parents]
    for k in rebound:
        args += ["--ro-bind", str(k), str(k)]
    for path in hidden:
        path = Path(path).resolve()
        under_tmp = path == Path("/tmp") or Path("/tmp") in path.parents
        if not path.exists() or (under_tmp and not any(k == path or k in path.parents for k in rebound)):
            continue  # already hidden by the empty /tmp
        if path.is_dir() and not any(k == path or path in k.parents for k in keep):
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]  # a write fails there, as elsewhere
        elif path.is_file():
            args += ["--ro-bind", "/dev/null", str(path)]
    return [*args, "--bind", str(turn), str(turn), "--chdir", str(workdir)]


def sandbox_problem() -> str | None:
    """Why ``--sandbox`` cannot work here, or ``None``."""
    if shutil.which("bwrap") is None:
        return "--sandbox needs bwrap (Debian/Ubuntu: apt-get install bubblewrap), which is not on PATH"
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"--sandbox: bwrap cannot start here: {probe.stderr.strip()[:200]}"
    return None


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux), so that a process a
    notebook detached (double fork, new session) is still found among our descendants."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def child_processes() -> dict[int, list[int]]:
    """``{parent pid: [child pids]}`` from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _tree(root: int, children: dict[int, list[int]]) -> set[int]:
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def launch_chain(root: int) -> set[int]:
    """``root`` and, when it is ``bwrap``, the sandbox's own processes down to the first
    process that is not (the kernel): what a turn started itself, not the notebook."""
    chain, pid = {root}, root
    children = child_processes()
    while _command_name(pid) == "bwrap" and len(children.get(pid, [])) == 1:
        pid = children[pid][0]
        chain.add(pid)
    return chain


def kill_descendants(root: int, keep: Iterable[int] = (), rounds: int = 50) -> int:
    """Kill ``root`` and every process below it, and every orphan this process adopted
    (a child of ours outside ``keep``, the kernels still running); repeat until none is
    left, since a process may fork while its siblings die. Returns how many were killed."""
    me, keep = os.getpid(), set(keep)
    killed: set[int] = set()
    for _ in range(rounds):
        children = child_processes()
        spared = set().union(*(_tree(k, children) for k in keep)) if keep else set()
        victims = _tree(root, children) | {
            pid for child in children.get(me, []) if child not in keep for pid in _tree(child, children)
        }
        victims -= spared | {me}
        victims = {pid for pid in victims if Path(f"/proc/{pid}").exists()}
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed |= victims
        time.sleep(0.02)
        for pid in victims:  # reap the orphans we adopted (our kernels are reaped by their manager)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
    return len(killed)

