"""Grade a class: run the students' exercise cells and check them (instructors).

    python -m course_tools.grade PATH... [--timeout SECONDS] [--csv FILE] [--json FILE]
                                         [--jobs N] [--solutions DIR] [--assignment NAME]
                                         [--sandbox | --no-sandbox] [--check-time-limit SECONDS]

``PATH`` is a student's notebook or a folder searched recursively for ``*.ipynb`` (files
and folders whose name starts with ``.``, such as ``.ipynb_checkpoints``, and
``__MACOSX`` are skipped). The students' files are read once, at the start, and never
changed (a file that changes during grading is put back and reported).

Only answers are graded
    The unit of an answer is the *exercise cell*: the cell that defines the exercise's
    function or class (found by its cell id, else as the last cell that defines that
    name). The grader builds the notebook to run from the course's own student notebook
    of the same assignment (made from ``--solutions DIR``, default ``solutions``), puts
    the student's exercise cells in place of the stubs, and runs it top to bottom in a
    fresh kernel, in a temporary folder. Every other cell of the submission is ignored
    (the report lists the changed or added cells it ignored). After each exercise cell
    the grader calls the course's checker itself on the name the exercise defines; check
    calls in the notebook count for nothing.

How a verdict travels
    A first cell, run before any student code, imports the checkers (so they capture
    what they compare with), snapshots ``torch``, ``course_utils`` and the builtins, and
    installs a Python audit hook. The hook is the only holder of a key that the grader
    made for this run and passed in a file deleted at once; it runs each check when the
    grader's check cell raises an audit event naming a fresh nonce, undoes any change
    to the snapshot first, and publishes the verdict signed (HMAC-SHA256) with that key
    and nonce. The grader keeps only a verdict whose signature and nonce are right,
    from the check cell that asked for it. The same hook refuses, and reports, what
    graded code has no reason to do: start processes, send signals, load C libraries,
    walk frames or the garbage collector, trace, open the network, or read or write files
    outside its own folder. The checkers' ``course_utils`` then leaves ``sys.modules``: the
    notebook gets a public copy in which its own references, every later notebook's, and
    their helpers are guards that only the course's own code gets through, and the real
    objects' own code is gated the same way (:mod:`._hide_references`).

Per exercise
    ``passed``; ``failed`` (the checker's diagnosis); ``not attempted`` (the stub still
    raises NotImplementedError); ``error`` (the student's code raised inside the check);
    ``not run`` (no verdict: the notebook stopped first, or the exercise cell raised
    before defining the name); ``used the reference`` (the answer is the course's own
    reference: the same object, an alias, a wrapper, a subclass, the cell imports that
    name from ``course_utils``, or the code asked for the reference or a helper of it,
    hidden while grading; other references, such as earlier notebooks', are allowed); ``review`` (the exercise cell does something graded code has no reason to
    do, named with its line; a human should look. A ``review`` is never counted as
    passed, whatever the checker said).

Per notebook
    ``ok``; ``crashed`` (a cell raised, named, later cells still run; or the kernel died);
    ``timed out`` (its cells took more than ``--timeout`` seconds in all, kernel start-up
    not counted); ``invalid notebook`` (not a notebook); ``wrong assignment`` (the
    notebook is another course notebook, recognised from its header link and its
    exercise cells, or no course notebook at all): nothing is run.

Output: one table per assignment on stdout (students x the assignment's official
exercises, symbols explained below it), then one line per problem, flag and ignored
cell. ``--csv FILE``: one row per student x exercise; ``--json FILE``: everything.
``--jobs N`` runs N notebooks at a time. The exit status is 0 when the run completed,
whatever the students' results, 2 for a usage error, and 130 when interrupted.

Isolation: every process a notebook starts is killed when its turn ends, detached ones
too (on Linux the grader adopts orphans as a child subreaper and kills every
descendant); the kernel's command line and environment hold no path of the
submissions. Each kernel imports its own read-only copy of the course package, hashed
after its turn; the class's files, the solutions and the instructor's course are
compared with their state at the start after each turn, put back, and the change laid
on the notebook whose turn it was (:mod:`course_tools.guard`). Where ``bwrap``
(Debian's ``bubblewrap``) works, each kernel runs in its sandbox unless
``--no-sandbox``: no network, its own process list, the submissions and the course's
files hidden, everything read-only but its own folder. Without it, students' code runs
with your permissions, and only the audit hook and those hashes (which cover only the
files named) stand between it and your files.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import csv
import functools
import hashlib
import hmac
import inspect
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from ipykernel.compiler import murmur2_x86
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.reader import NotJSONError

from . import _hide_references, build
from .guard import FileGuard, PackageCopy, remove_stale_copies
from .kernels import PACKAGE_ROOT, CurrentEnvKernelManager, kernel_env

DEFAULT_TIMEOUT = 300.0  # seconds for all the cells of one notebook
CHECK_TIME_LIMIT_VARIABLE = "COURSE_CHECK_TIME_LIMIT"  # read by course_utils.checks: one check's time limit
STARTUP_TIMEOUT = 60  # seconds for a kernel to start (not counted in the notebook's time)

# Notebook statuses.
OK, CRASHED, TIMED_OUT, INVALID, WRONG = "ok", "crashed", "timed out", "invalid notebook", "wrong assignment"
NOTEBOOK_STATUSES = [OK, CRASHED, TIMED_OUT, INVALID, WRONG]
# Exercise statuses, and their symbols in the table.
PASSED, FAILED, NOT_ATTEMPTED, ERROR, NOT_RUN = "passed", "failed", "not attempted", "error", "not run"
REFERENCE, REVIEW = "used the reference", "review"
SYMBOLS = {PASSED: "OK", FAILED: "X", NOT_ATTEMPTED: "-", ERROR: "E", NOT_RUN: "?", REFERENCE: "R", REVIEW: "!"}
LEGEND = (
    "OK passed, X failed, - not attempted (the stub still raises NotImplementedError), "
    "E error (the code raised inside the check), ? not run (no verdict), "
    "R used the reference (the course's own code, not counted), "
    "! review (the exercise cell does something graded code should not; not counted)"
)
FROM_VERDICT = {"passed": PASSED, "failed": FAILED, "not implemented": NOT_ATTEMPTED, "error": ERROR}

CHECK_CALL = re.compile(r"\b(check_\w+)\s*\(")
CSV_COLUMNS = [
    "student", "assignment", "path", "notebook_status", "exercise", "status", "mistake", "message", "feedback",
    "flags", "ignored_cells",
]
VERDICT_MIME = "application/vnd.course-grade.verdict+json"
AUDIT_EVENT = "course-grade"
# The grader's own cells. The kernel accepts a request only from a cell with exactly this
# source (it compares the file name ipykernel gives the cell's code).
CHECK_SOURCE = '__import__("sys").audit("course-grade", "check", "{nonce}", "{name}")'
END_SOURCE = '__import__("sys").audit("course-grade", "end", "{nonce}", "")'


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


# --------------------------------------------------------------------------- kernels


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


# --------------------------------------------------------------------------- processes

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


def _children() -> dict[int, list[int]]:
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
    children = _children()
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
        children = _children()
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


# --------------------------------------------------------------------------- inside the kernel


def _kernel_side(config):  # pragma: no cover - runs inside the graded kernel
    """Set up grading in the kernel, before any student code: runs with private globals
    (a copy of the builtins), so nothing a student cell binds changes how it works. What
    it keeps lives only in the closure of the audit hook it installs."""
    import builtins
    import hashlib
    import os
    import sys
    import types
    import weakref

    import torch
    import torch.nn
    import torch.nn.functional
    import torch.testing
    from IPython import get_ipython
    from IPython.display import publish_display_data
    from ipykernel.compiler import get_file_name

    import course_utils
    import course_utils.checks
    from course_utils.checks._core import CheckResult

    package_root = os.path.realpath(config["package_root"])
    if not os.path.realpath(course_utils.__file__).startswith(package_root + os.sep):
        raise RuntimeError(f"grading: course_utils came from {course_utils.__file__}, not the grader's copy")

    with open(config["key_path"], "rb") as f:
        key = f.read().ljust(64, b"\0")
    os.unlink(config["key_path"])
    sha256 = hashlib.sha256  # a C function: nothing in Python can change what it computes
    ipad, opad = bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)

    def sign(text):
        return sha256(opad + sha256(ipad + text.encode()).digest()).hexdigest()

    shell = get_ipython()
    missing = object()
    workdir = os.path.realpath(config["workdir"])
    turn = os.path.realpath(config["turn"])
    mime, event_name = config["mime"], config["event"]
    checkers = {name: getattr(course_utils.checks, fn) for name, fn in config["exercises"].items()}
    references = {name: getattr(course_utils, name, None) for name in config["exercises"]}
    # ipykernel compiles each cell under a file name made from a hash of its source: the
    # frames of the students' exercise cells, and the grader's own cells, are known by it.
    student_files = {get_file_name(src): name for name, src in config["exercise_sources"]}
    stdlib = os.path.dirname(os.__file__) + os.sep
    import linecache

    linecache_file = linecache.__file__
    readable = [workdir, turn, sys.prefix, sys.base_prefix, sys.exec_prefix, package_root,
                *(p for p in sys.path if "site-packages" in p or "dist-packages" in p),
                "/usr", "/lib", "/lib64", "/etc", "/dev", "/sys", "/proc/self", f"/proc/{os.getpid()}"]
    readable = [os.path.realpath(p) for p in readable if p]
    writable = [workdir, turn, "/dev/null"]
    # the references of this notebook out of reach (course_tools/_hide_references.py): the
    # checkers' copy of course_utils is kept here only; the kernel gets a public copy
    hidden_event, gate_event = event_name + "-hidden", event_name + "-gate"
    private, public, guards, fetch_code, gates = _public_course(
        config["hidden"], hidden_event, config["guard_source"], config["skipped_modules"], gate_event,
        [e for e in config["hidden"] if e not in config["exercises"]])
    made = {}  # id -> weak reference: instances of hidden classes made where that was allowed
    course_files = {get_file_name(src) for src in config["course_sources"]} - set(student_files)
    package = os.path.realpath(os.path.dirname(course_utils.__file__)) + os.sep
    # what the course's other code may call: the helpers, and later notebooks' references
    helper_labels = {label for label in guards if label.rpartition(".")[2] not in config["exercises"]}
    # how a hidden name is shown: an exercise as course_utils exports it, a helper by its module
    shown = {label: label.rpartition(".")[2] if label.rpartition(".")[2] in config["hidden"] else label
             for label in guards}
    others = {}  # id -> (object, label): the hidden names' guards and the real helpers
    for label, (guard, real) in guards.items():
        others[id(guard)] = (guard, f"{shown[label]} (hidden while grading)")
        others[id(real)] = (real, shown[label])
    for entry in gates.values():  # the public copy's own objects, gated: the reference as well
        others.setdefault(id(entry[6]), (entry[6], shown.get(entry[1].rpartition(".")[0] if entry[4] else entry[1],
                                                             entry[1])))
    hidden_hits = []  # refused requests of a student's code: dicts with exercise, line, code, what
    checked = {}  # exercise label -> the student's own definition, once checked

    def watched():
        """(label, namespace owner, snapshot) of what a student could patch to fool a check."""
        owners = [("torch", torch), ("torch.nn", torch.nn), ("torch.nn.functional", torch.nn.functional),
                  ("torch.testing", torch.testing), ("torch.Tensor", torch.Tensor),
                  ("torch._C.TensorBase", torch._C.TensorBase), ("torch.nn.Module", torch.nn.Module),
                  ("torch.nn.Parameter", torch.nn.Parameter), ("torch.UntypedStorage", torch.UntypedStorage),
                  ("torch.TypedStorage", torch.TypedStorage), ("torch.serialization", torch.serialization),
                  ("builtins", builtins), ("CheckResult", CheckResult)]
        owners += [(n, m) for n, m in sorted(private.items())]
        owners += [(n, m) for n, m in sorted(public.items())]
        return [(label, owner, dict(vars(owner))) for label, owner in owners]

    pending = []  # findings not yet sent: dicts with exercise, line, what
    state = {"busy": 0, "checking": ""}

    def restore():
        """Put back what was saved; name the changes a student made (torch replaces a few of
        its own functions lazily: those are put back too, but are nobody's doing)."""
        changed = []
        for label, owner, saved in snapshot:
            now = vars(owner)
            # what a student added to a class (`torch.Tensor.__eq__ = ...` shadows the C method) or
            # to the course's modules; a module that appears in a package was imported, nobody's doing
            added = [n for n in now if n not in saved and (isinstance(owner, type) or label.startswith("course_utils"))
                     and not isinstance(now[n], types.ModuleType) and n != "__warningregistry__"]
            for name in added:
                code = getattr(now[name], "__code__", None)  # a library's addition (transformers adds
                if not (code is not None and "-packages" in code.co_filename):  # nn.Module.smart_apply)
                    changed.append(f"{label}.{name}")
                try:
                    if isinstance(owner, types.ModuleType):
                        del now[name]
                    else:
                        delattr(owner, name)
                except Exception:
                    pass
            for name, value in saved.items():
                new = now.get(name, missing)
                if name in ("_", "__", "___", "input", "raw_input", "getpass") or new is value:
                    continue
                module = getattr(new, "__module__", None)
                if owner is builtins or not (isinstance(module, str) and module.split(".")[0] == "torch"):
                    changed.append(f"{label}.{name}")
                try:
                    if isinstance(owner, types.ModuleType):
                        now[name] = value
                    else:
                        setattr(owner, name, value)
                except Exception:
                    pass
        return changed

    def stack():
        state["busy"] += 1
        try:
            frame = sys._getframe()
        finally:
            state["busy"] -= 1
        while frame is not None:
            yield frame
            frame = frame.f_back

    def student_frame(direct):
        """The innermost frame of a student's exercise cell on the stack (``direct``: only
        when it is the first frame outside the standard library, i.e. the student's code
        itself asked, not a library it called)."""
        for frame in stack():
            name = frame.f_code.co_filename
            if name in student_files:
                return frame
            if direct and not (name.startswith(stdlib) and "-packages" not in name) and name != "<course-grade>":
                return None
        return None

    def shown_by_linecache():
        """Whether the standard library's linecache, not a student's code, opens a file."""
        for frame in stack():
            name = frame.f_code.co_filename
            if name in student_files:
                return False
            if name == linecache_file:
                return True
        return False

    def flag(frame, what):
        name = frame.f_code.co_filename
        line = ""
        try:
            import linecache

            line = linecache.getline(name, frame.f_lineno).strip()
        except Exception:
            pass
        pending.append({"exercise": student_files.get(name), "line": frame.f_lineno, "code": line, "what": what})

    def inside(path, roots):
        return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

    def paths(args):
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)):
                try:
                    yield os.path.realpath(os.fsdecode(arg))
                except Exception:
                    continue

    # refused when a student's cell is anywhere on the stack (a library may be its tool) ...
    spawn = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
             "pty.spawn", "os.startfile", "os.kill", "os.killpg", "socket.connect", "socket.bind", "socket.sendto"}
    # ... or when the student's own code asks (libraries use these for their own ends)
    introspection = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
                     "sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                     "sys._current_frames", "sys.monitoring.register_callback"}
    changing = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                "os.utime", "os.symlink", "os.link", "shutil.rmtree", "shutil.move", "shutil.copyfile",
                "shutil.copytree", "os.chdir"}
    listing = {"os.listdir", "os.scandir", "glob.glob"}
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}

    def refused_by_system(exc):
        text = str(exc)
        return getattr(exc, "errno", None) in (1, 13, 30) or any(
            t in text for t in ("Read-only file system", "Permission denied", "Operation not permitted"))

    def file_function(fn, label, path_of, write_of):
        """``fn`` (a torch function that opens files in C, out of the audit hook's sight) with the
        hook's rule for files; an attempt the system refused (the sandbox) is reported too."""
        def guarded(*args, **kwargs):
            frame = student_frame(direct=False)
            if frame is None:
                return fn(*args, **kwargs)
            write = bool(write_of(args, kwargs))
            for path in paths([path_of(args, kwargs)]):
                if not inside(path, writable if write else readable):
                    refuse = f"{'writes' if write else 'reads'} {path} ({label}), outside its folder"
                    flag(frame, refuse + " (refused)")
                    raise PermissionError(f"grading: not allowed in graded code: {refuse}")
            try:
                return fn(*args, **kwargs)
            except (OSError, RuntimeError) as exc:
                if refused_by_system(exc):
                    flag(frame, f"{label} stopped by the system: {str(exc).strip().splitlines()[0][:160]}")
                raise
        return guarded

    def arg(i, name, default=None):
        return lambda args, kwargs: args[i] if len(args) > i else kwargs.get(name, default)

    for owner, attr, label, path_of, write_of in (
        (torch, "from_file", "torch.from_file", arg(0, "filename"), arg(1, "shared")),
        (torch.UntypedStorage, "from_file", "UntypedStorage.from_file", arg(0, "filename"), arg(1, "shared")),
        (torch.TypedStorage, "from_file", "TypedStorage.from_file", arg(0, "filename"), arg(1, "shared")),
        (torch, "save", "torch.save", arg(1, "f"), lambda a, k: True),
        (torch.serialization, "save", "torch.save", arg(1, "f"), lambda a, k: True),
        (torch, "load", "torch.load", arg(0, "f"), lambda a, k: False),
        (torch.serialization, "load", "torch.load", arg(0, "f"), lambda a, k: False),
        (torch.ops.aten, "from_file", "torch.ops.aten.from_file", arg(0, "filename"), arg(1, "shared")),
    ):
        wrapped = file_function(getattr(owner, attr), label, path_of, write_of)
        setattr(owner, attr, staticmethod(wrapped) if isinstance(owner, type) else wrapped)

    snapshot = watched()

    hidden_seen = set()

    def deliver(args):
        """A guard asks for a hidden reference: handed over to the course's own cells (one on
        the stack, no student cell, no check running), and a helper to the course's other
        code that calls it (``MultiHeadAttention`` computes its weights with notebook 01's
        helper); anyone else is refused."""
        if len(args) != 2 or type(args[0]) is not str or type(args[1]) is not list or args[0] not in guards:
            return
        label = args[0]
        state["busy"] += 1
        try:
            asker = sys._getframe(2)  # deliver <- hook <- the guard's request <- the guard <- its caller
            caller = asker.f_back.f_back if asker.f_back is not None else None
        finally:
            state["busy"] -= 1
        if asker.f_code is fetch_code and label in helper_labels and caller is not None \
                and caller.f_code.co_filename.startswith(package):
            args[1].append(guards[label][1])
            return
        if asker.f_code is fetch_code and not state["checking"]:
            course = False
            for frame in stack():
                name = frame.f_code.co_filename
                if name in student_files:
                    course = False
                    break
                course = course or name in course_files
            if course:
                args[1].append(guards[label][1])
                return
        if asker.f_code is fetch_code and label in checked:  # an exercise already checked: the student's own
            args[1].append(checked[label])
            return
        refused(label, shown[label])

    def gate(args):
        """A hidden object's own code asks to run (:func:`_gate_allows` says who may)."""
        if len(args) != 2 or type(args[0]) is not list or type(args[1]) is not tuple:
            return
        state["busy"] += 1
        try:
            asker = sys._getframe(2)  # gate <- hook <- the gated function
            entry = gates.get(id(asker.f_code))
            if entry is None or entry[0] is not asker.f_code:
                return
            allowed = _gate_allows(asker.f_back, entry, args[1], student_files, course_files, package, gates,
                                   stdlib, made)
            # an instance the course's code made or used (a checker's copy of a reference model):
            # its methods may then run for the student's code it is handed to
            if allowed and args[1] and entry[4] is not None and isinstance(args[1][0], entry[4]):
                try:
                    made[id(args[1][0])] = weakref.ref(args[1][0])
                except TypeError:
                    pass
        finally:
            state["busy"] -= 1
        if allowed:
            args[0].append(entry[2])
            return
        label = entry[1]
        exercise = next((e for e in config["hidden"] if label == e or label.startswith(e + ".")
                         or f".{e}." in f".{label}."), None)
        refused(label, label if exercise is None else label[label.index(exercise):])

    def refused(label, name):
        """Report a hidden object a student's code asked for: used the reference (R)."""
        what = f"calls course_utils.{name} (hidden while grading, refused)"
        frame = student_frame(direct=False)
        key = (frame.f_code.co_filename, frame.f_lineno, label) if frame is not None else (state["checking"], label)
        if key in hidden_seen:
            return
        hidden_seen.add(key)
        if frame is not None:
            flag(frame, what)
            hidden_hits.append(pending.pop())  # used the reference (R), not a finding to review
        elif state["checking"]:
            hidden_hits.append({"exercise": state["checking"], "line": None, "code": "", "what": what})
        else:
            pending.append({"exercise": None, "line": None, "code": "", "what": what})

    def hook(event, args):
        if state["busy"]:
            return
        if event == "sys.addaudithook":
            raise RuntimeError("grading: no other audit hook")
        if event == event_name:
            return request(args)
        if event == hidden_event:
            return deliver(args)
        if event == gate_event:
            return gate(args)
        state["busy"] += 1
        try:
            refuse = None
            if event in spawn or event in introspection:
                frame = student_frame(direct=event in introspection)
                if frame is not None and not (event in ("os.kill", "os.killpg") and args[0] == os.getpid()):
                    refuse = f"{event}{_short(args)}"
            elif event == "open" or event in changing or event in listing:
                frame = student_frame(direct=False)
                if frame is not None:
                    write = event in changing
                    if event == "open":
                        mode, flags = (args[1], args[2]) if len(args) > 2 else (args[1] if len(args) > 1 else "r", 0)
                        write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT))
                    for path in paths(args[:2] if event != "open" else args[:1]):
                        if not inside(path, writable if write else readable):
                            what = "writes" if write else "reads"
                            refuse = f"{what} {path} ({event}), outside its folder"
                            break
            elif event in ("sys._getframe", "object.__getattr__"):
                attr = args[1] if event == "object.__getattr__" and len(args) > 1 else ""
                if event == "sys._getframe" or attr in frame_attrs or attr == "__code__":
                    frame = student_frame(direct=True)
                    if frame is not None:
                        flag(frame, f"inspects the call stack or code ({event}{' ' + attr if attr else ''})")
                        if attr != "__code__":
                            raise PermissionError(f"grading: {event} {attr} is not allowed in graded code")
            elif event == "_thread.start_new_thread":
                frame = student_frame(direct=True)
                if frame is not None:
                    flag(frame, "starts a thread")
            elif event in ("compile", "code.__new__") and len(args) > 1 and isinstance(args[1], str) and (
                    args[1] in course_files or args[1].startswith(package)):
                frame = student_frame(direct=False)  # code passed off as the course's
                if frame is not None:
                    refuse = f"{event} of code named as the course's {args[1]}"
            if refuse is None and event in ("open", "exec") and args:
                # the course's code read or run again would be the hidden references anew
                code = getattr(args[0], "co_filename", None) if event == "exec" else next(paths(args[:1]), None)
                if isinstance(code, str) and code.startswith(package) and (event == "exec" or code.endswith((".py", ".pyc"))):
                    frame = student_frame(direct=False)
                    # linecache reads source lines to show a warning or a traceback (a
                    # student's `warnings.warn` during a check names the checker's line)
                    if frame is not None and not (event == "open" and shown_by_linecache()):
                        refuse = f"reads or runs the course's code {code} ({event}): hidden while grading"
            if refuse is not None:
                flag(frame, refuse + " (refused)")
                raise PermissionError(f"grading: not allowed in graded code: {refuse}")
        finally:
            state["busy"] -= 1

    def verdict_of(name):
        obj = shell.user_ns.get(name, missing)
        if obj is missing:
            return {"status": "undefined", "passed": False, "mistake": None,
                    "feedback": f"{name} is not defined (its cell did not define it)"}
        state["checking"] = name
        try:
            result = checkers[name](obj)
        finally:
            state["checking"] = ""
        if type(result) is not CheckResult:
            return {"status": "error", "passed": False, "mistake": None, "feedback": "the checker gave no result"}
        out = {"status": result.status, "passed": result.passed is True, "mistake": result.mistake,
               "feedback": result.feedback}
        return {k: (v if type(v) in (str, bool) or v is None else repr(v)) for k, v in out.items()}

    def request(args):
        if len(args) != 3 or not all(type(a) is str for a in args):
            return
        action, nonce, name = args
        source = config["check_source"] if action == "check" else config["end_source"]
        expected = get_file_name(source.format(nonce=nonce, name=name))
        state["busy"] += 1
        try:
            caller = sys._getframe(2).f_code.co_filename  # request <- hook <- the cell
        finally:
            state["busy"] -= 1
        if caller != expected or (action == "check" and name not in checkers):
            return  # not the grader's cell: ignored (its nonce would not be the grader's anyway)
        message = {"action": action, "exercise": name}
        if action == "check":
            changed = restore()
            own = shell.user_ns.get(name, missing)
            message["verdict"] = verdict_of(name)  # course_utils.<name> is still a guard: no way round
            state["busy"] += 1
            try:
                message["reference"] = _uses_reference(own, name, references.get(name), student_files, others)
            finally:
                state["busy"] -= 1
            changed += [c + " (while being checked)" for c in restore()]
            hits = [h for h in hidden_hits if h["exercise"] == name]
            hidden_hits[:] = [h for h in hidden_hits if h["exercise"] != name]
            said = [message["reference"]] if message["reference"] else []
            said += [(f"line {h['line']}: " if h["line"] else "") + h["what"] + (f": `{h['code']}`" if h["code"] else "")
                     for h in hits]
            message["reference"] = "; ".join(said) or None
            if own is not missing:  # checked: course_utils.<name> is the student's own for the student's code
                checked.update({label: own for label, (guard, _) in guards.items()
                                if label.rpartition(".")[2] == name and own is not guard})
            for what in changed:
                pending.append({"exercise": name, "line": None, "code": "",
                                "what": f"changed {what}; undone before checking"})
        if action == "end":  # a reference a student's code asked for after its exercise's check
            pending.extend(hidden_hits)
            hidden_hits.clear()
        message["flags"] = list(pending)
        pending.clear()
        text = repr(message)
        publish_display_data({mime: {"payload": text, "mac": sign(nonce + text)}})

    sys.addaudithook(hook)


def _short(args) -> str:  # pragma: no cover - runs inside the graded kernel too
    text = ", ".join(repr(a)[:60] for a in args[:2])
    return f" ({text})" if text else ""


def _uses_reference(obj, name, ref, student_files, others=None):  # pragma: no cover - runs inside the graded kernel too
    """How ``obj``, a student's answer to exercise ``name``, uses ``ref``, the course's
    reference (``None``: it does not): it is ``ref`` (an alias), subclasses it, or a function
    or class of the student's (code from ``student_files``) holds or names it (a wrapper,
    a closure, a default, ``functools.partial``, a method, a helper it calls). ``others``:
    ``{id: (object, label)}``, more objects that count as the reference (in a graded kernel,
    the hidden names' guards and the reference's helpers)."""
    import functools
    import types

    if ref is None:
        return None
    others = dict(others or {})
    others[id(ref)] = (ref, name)
    missing = object()
    seen, todo, steps = set(), [(obj, "it is")], 0
    while todo and steps < 500:
        x, how = todo.pop()
        steps += 1
        if id(x) in seen:
            continue
        seen.add(id(x))
        if id(x) in others and others[id(x)][0] is x:
            return f"{how} course_utils.{others[id(x)][1]}"
        kind = type(x)  # an object the reference made (a course cell's model, say): its class is the reference
        if id(kind) in others and others[id(kind)][0] is kind:
            return f"{how} a course_utils.{others[id(kind)][1]} object"
        if isinstance(x, type):
            for base in x.__mro__[1:]:
                if id(base) in others and others[id(base)][0] is base:
                    return f"it subclasses course_utils.{others[id(base)][1]}"
            if getattr(x, "__module__", "").split(".")[0] in ("torch", "builtins", "course_utils"):
                continue
            todo += [(v, "it uses") for v in vars(x).values()]
            todo += [(b, "it uses") for b in x.__bases__]
        elif isinstance(x, (staticmethod, classmethod)):
            todo.append((x.__func__, how))
        elif isinstance(x, property):
            todo += [(f, "it uses") for f in (x.fget, x.fset) if f is not None]
        elif isinstance(x, functools.partial):
            todo += [(v, "it wraps") for v in (x.func, *x.args, *x.keywords.values())]
        elif isinstance(x, types.MethodType):
            todo.append((x.__func__, how))
        elif isinstance(x, types.FunctionType):
            if x.__code__.co_filename not in student_files and x is not obj:
                continue  # a library's function: what it uses is not the student's doing
            if "__wrapped__" in x.__dict__:
                todo.append((x.__dict__["__wrapped__"], "it wraps"))
            for cell in x.__closure__ or ():
                try:
                    todo.append((cell.cell_contents, "it wraps"))
                except ValueError:  # an empty cell
                    pass
            todo += [(v, "it uses") for v in (*(x.__defaults__ or ()), *(x.__kwdefaults__ or {}).values())]
            names, codes = set(), [x.__code__]
            while codes:
                code = codes.pop()
                names.update(code.co_names)
                codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for n in names:
                v = x.__globals__.get(n, missing)
                if isinstance(v, types.ModuleType):
                    # `course_utils.name` (or a submodule's): both names are in the code
                    if v.__name__.split(".")[0] == "course_utils":
                        for attr in sorted(names):
                            got = getattr(v, attr, None)
                            if id(got) in others and others[id(got)][0] is got:
                                return f"it uses course_utils.{others[id(got)][1]}"
                elif v is not missing:
                    todo.append((v, "it calls"))
    return None


def kernel_setup_source(config: dict) -> str:
    """The first cell of a graded notebook: runs :func:`_kernel_side` with private globals."""
    code = "\n\n".join(textwrap.dedent(inspect.getsource(f))
                       for f in (_short, _uses_reference, _hide_references._gate_objects, _hide_references._gate_allows,
                                 _hide_references._public_course, _kernel_side))
    code += f"\n\n_kernel_side({config!r})\n"
    return (
        "# Added by course_tools.grade: set up grading before any student code runs.\n"
        f"exec(compile({code!r}, '<course-grade>', 'exec'), "
        "{'__builtins__': dict(vars(__import__('builtins'))), '__name__': 'course_grade'})\n"
    )


def sign(key: bytes, nonce: str, text: str) -> str:
    """The signature :func:`_kernel_side` puts on a message (HMAC-SHA256)."""
    return hmac.new(key.ljust(64, b"\0"), (nonce + text).encode(), hashlib.sha256).hexdigest()


def ipykernel_file_name(source: str) -> str:
    """The base name ipykernel gives the code of a cell with this source."""
    return f"{murmur2_x86(source, 0xC70F6907)}.py"


# --------------------------------------------------------------------------- the course


@dataclass
class Exercise:
    name: str  # the function or class the exercise defines
    checker: str  # the check_* function that checks it
    cell_id: str  # id of its cell in the course's notebooks


@dataclass
class CourseNotebook:
    """One assignment: the course's student notebook and its exercises, in order."""

    filename: str
    notebook: Any
    exercises: list[Exercise]
    check_cells: set[str]  # ids of the course's cells that only call checkers
    aliases: dict[str, str]  # names its cells import: {name: dotted module or object}
    # the exercises of the notebooks after this one: their references compute this one's
    # answers too (notebook 02's MultiHeadAttention with identity projections is notebook
    # 01's attention), so they are hidden while it is graded
    later: list[str] = field(default_factory=list)


def checker_exercises() -> dict[str, str]:
    """``{checker function name: exercise}`` for every checker in ``course_utils.checks``."""
    from course_utils import checks  # imports torch: only when grading

    names = {}
    for name in dir(checks):
        exercise = getattr(getattr(checks, name), "exercise", None)
        if name.startswith("check_") and isinstance(exercise, str):
            names[name] = exercise
    return names


def _code_lines(source: str) -> Iterable[str]:
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or re.match(r"(def|class)\s", stripped):
            continue
        yield line


def check_calls(cells, checkers: dict[str, str]) -> list[tuple[int, str]]:
    """``(cell index, exercise)`` for every call of a course checker in the code cells."""
    calls = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        for line in _code_lines(cell.get("source", "")):
            for name in CHECK_CALL.findall(line):
                if name in checkers:
                    calls.append((i, checkers[name]))
    return calls


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def solution_exercises(path: Path, checkers: dict[str, str]) -> list[str]:
    """The exercises a solution notebook checks, in order."""
    nb = nbformat.read(path, as_version=4)
    return _unique(exercise for _, exercise in check_calls(nb.cells, checkers))


@functools.lru_cache(maxsize=4096)  # load_course asks about each cell once per exercise
def _parse(source: str) -> ast.Module | None:
    """The cell's code as Python (IPython's magics turned into calls), or None (shared:
    callers only read the tree)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        transformed = TransformerManager().transform_cell(source)
        # IPython drops leading blank lines: put them back, so that line numbers are the cell's
        blank = len(source.splitlines()) - len(source.lstrip("\n \t").splitlines())
        if not source.lstrip("\n \t"):
            blank = 0
        source = "\n" * max(0, blank - (len(transformed.splitlines()) - len(transformed.lstrip("\n \t").splitlines()))) + transformed
    except Exception:  # noqa: BLE001 - then parse it as it is
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def defined_names(source: str) -> set[str]:
    """Names a cell defines at top level with ``def`` or ``class``."""
    tree = _parse(source)
    if tree is None:
        return set(re.findall(r"^(?:async\s+def|def|class)\s+(\w+)", source, re.MULTILINE))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """``{bound name: dotted path}`` for the imports in ``tree`` (``import torch.nn as nn``
    -> ``nn: torch.nn``; ``from course_utils import causal_mask as cm`` -> ``cm:
    course_utils.causal_mask``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _only_checks(source: str, checkers: dict[str, str]) -> bool:
    tree = _parse(source)
    return bool(tree and tree.body) and all(
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
        and s.value.func.id in checkers for s in tree.body
    )


def load_course(solutions: Path, checkers: dict[str, str]) -> dict[str, CourseNotebook]:
    """Every assignment of the course: ``{file name: CourseNotebook}`` from the solutions."""
    course = {}
    by_exercise = {exercise: fn for fn, exercise in checkers.items()}
    for path in build.notebook_files(solutions) if Path(solutions).is_dir() else []:
        solution, _ = build.read_notebook(path)
        student = build.student_notebook(solution, path.name)
        exercises = []
        for name in _unique(e for _, e in check_calls(solution.cells, checkers)):
            cells = [c for c in solution.cells if c.cell_type == "code" and name in defined_names(c.source)]
            marked = [c for c in cells if "BEGIN SOLUTION" in c.source] or cells
            if marked:
                exercises.append(Exercise(name, by_exercise[name], marked[0].id))
        aliases: dict[str, str] = {}
        for cell in student.cells:
            tree = _parse(cell.source) if cell.cell_type == "code" else None
            if tree is not None:
                aliases.update(import_aliases(tree))
        check_cells = {c.id for c in student.cells if c.cell_type == "code" and _only_checks(c.source, checkers)}
        course[path.name] = CourseNotebook(path.name, student, exercises, check_cells, aliases)
    names = list(course)
    for i, name in enumerate(names):
        course[name].later = _unique(e.name for n in names[i + 1:] for e in course[n].exercises)
    return course


# --------------------------------------------------------------------------- reading a cell

# Modules an exercise cell may import (anything under them); course_utils too, except
# the tools and private modules.
ALLOWED_IMPORTS = {"torch", "math", "numpy", "typing", "dataclasses", "functools", "itertools", "collections",
                   "copy", "einops", "__future__", "course_utils", "operator", "abc", "enum", "numbers",
                   "warnings", "sys", "time"}  # sys: its risky parts (frames, modules, hooks) are flagged where used;
# time: a check that sleeps is stopped by the checkers' time limit
TOOL_MODULES = {"course_utils.grade", "course_utils.build", "course_utils.start", "course_utils.check_env"}
PROTECTED_ROOTS = {"torch", "course_utils", "builtins", "numpy", "math", "sys", "os", "IPython", "ipykernel"}
DANGEROUS_ATTRS = {
    "__globals__", "__closure__", "__code__", "__builtins__", "__dict__", "__subclasses__", "__bases__", "__mro__",
    "__getattribute__", "__import__", "__loader__", "__spec__", "__func__", "__self__", "__wrapped__",
    "__defaults__", "__kwdefaults__", "__traceback__", "f_back", "f_globals", "f_locals", "f_code", "f_builtins",
    "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "_getframe", "settrace", "setprofile",
    "addaudithook", "modules", "_current_frames", "_RESULT_LISTENERS", "_core",
}
DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "get_ipython",
                 "input", "exit", "quit"}
BASE_ALIASES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "course_utils": "course_utils",
                "builtins": "builtins", "__builtins__": "builtins"}


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``torch.testing.assert_close`` for an attribute chain whose root is an imported name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Subscript):
        return _dotted(node.value, aliases)
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def _targets(node: ast.AST) -> Iterable[ast.AST]:
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def _import_problem(module: str, names: list[str]) -> str | None:
    root = module.split(".")[0]
    if root not in ALLOWED_IMPORTS:
        return f"imports {module}"
    if root == "course_utils":
        if module in TOOL_MODULES or any(p.startswith("_") for p in module.split(".")[1:]):
            return f"imports {module} (the course's tools or the checkers' internals)"
        private = [n for n in names if n.startswith("_")]
        if private:
            return f"imports {module}.{private[0]} (the checkers' internals)"
        tools = [n for n in names if f"{module}.{n}" in TOOL_MODULES]  # from course_utils import grade
        if tools:
            return f"imports {module}.{tools[0]} (the course's tools)"
    return None


@dataclass
class CellScan:
    flags: list[dict] = field(default_factory=list)  # {line, code, what}
    reference: str | None = None  # how the cell uses the reference (with its line), or None


def scan_exercise_cell(source: str, exercise: str, aliases: dict[str, str] | None = None) -> CellScan:
    """Read an exercise cell without running it: what it does that graded code has no
    reason to do (each with its line), and whether it takes the exercise's answer from
    ``course_utils``. ``aliases``: names the course's own cells import."""
    scan = CellScan()
    lines = source.splitlines()

    def code(n):
        return lines[n - 1].strip() if 0 < n <= len(lines) else ""

    def add(node_or_line, what):
        n = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", 0)
        scan.flags.append({"line": n, "code": code(n), "what": what})

    for n, line in enumerate(lines, start=1):
        if re.match(r"\s*(%|!)", line):
            add(n, "runs an IPython magic or shell command")
    tree = _parse(source)
    if tree is None:
        return scan
    names = {**BASE_ALIASES, **(aliases or {}), **import_aliases(tree)}

    def protected(node):
        dotted = _dotted(node, names)
        return dotted if dotted and dotted.split(".")[0] in PROTECTED_ROOTS else None

    def is_reference(dotted):
        return dotted and dotted.split(".")[0] == "course_utils" and dotted.split(".")[-1] == exercise

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                problem = _import_problem(a.name, [])
                if problem:
                    add(node, problem)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            problem = _import_problem(module, [a.name for a in node.names]) if not node.level else \
                f"imports {module} (a relative import)"
            if problem:
                add(node, problem)
            if module.split(".")[0] == "course_utils" and any(a.name == exercise for a in node.names):
                scan.reference = scan.reference or f"line {node.lineno}: `{code(node.lineno)}`"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in (t for top in targets for t in _targets(top)):
                if isinstance(target, (ast.Attribute, ast.Subscript)):
                    dotted = protected(target)
                    if dotted:
                        add(node, f"assigns to {dotted}")
                elif isinstance(target, ast.Name) and target.id in ("__import__", "__builtins__", "get_ipython"):
                    add(node, f"redefines {target.id}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn, args = node.func.id, node.args
            if fn in DYNAMIC_CALLS:
                add(node, f"calls {fn}()")
            elif fn in ("setattr", "delattr") and args:
                target = protected(args[0])
                if target:
                    add(node, f"{fn} on {target}")
                elif len(args) > 1 and not isinstance(args[1], ast.Constant):
                    add(node, f"{fn} with a computed name")
            elif fn in ("getattr", "hasattr") and len(args) > 1 and isinstance(args[1], ast.Constant):
                attr = args[1].value
                if attr in DANGEROUS_ATTRS:
                    add(node, f"reads .{attr}")
                if is_reference(f"{_dotted(args[0], names)}.{attr}"):
                    scan.reference = scan.reference or f"line {node.lineno}: `{code(node.lineno)}`"
            elif fn == "open":
                path = args[0] if args else None
                if not (isinstance(path, ast.Constant) and isinstance(path.value, str)
                        and not os.path.isabs(path.value) and ".." not in Path(path.value).parts):
                    add(node, "opens a file outside its folder (or at a computed path)")
        elif isinstance(node, ast.Attribute):
            if node.attr in DANGEROUS_ATTRS:
                add(node, f"uses .{node.attr}")
            dotted = _dotted(node, names)
            if dotted and dotted.split(".")[0] == "course_utils" and any(
                    p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:]):
                add(node, f"touches {dotted} (the course's internals)")
            if is_reference(dotted) and not isinstance(getattr(node, "ctx", None), ast.Store):
                scan.reference = scan.reference or f"line {node.lineno}: `{code(node.lineno)}`"
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "_RESULT_LISTENERS"):
            add(node, f"uses {node.id}")
    seen, unique = set(), []
    for f in scan.flags:  # one finding per line and kind
        if (f["line"], f["what"]) not in seen:
            seen.add((f["line"], f["what"]))
            unique.append(f)
    scan.flags = sorted(unique, key=lambda f: f["line"])
    return scan


# --------------------------------------------------------------------------- the notebook to run

HEADER_LINK = re.compile(r"/(?:notebooks|solutions)/(\d{2}_[^/)\s\"']+\.ipynb)")


def header_assignment(nb) -> str | None:
    """The course notebook the header cell's link names (the course's own mark), or None."""
    for cell in nb.cells[:3]:
        if build.HEADER_TAG in cell.get("metadata", {}).get("tags", []) or "colab" in cell.get("source", ""):
            match = HEADER_LINK.search(cell.get("source", ""))
            if match:
                return match.group(1)
    return None


def _exercise_cell(nb, exercise: Exercise) -> int | None:
    """Index of the student's cell for ``exercise``: the cell with its id that defines the
    name, else the last cell that defines it, else the cell with its id."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.get("cell_type") == "code"]
    by_id = [i for i, c in code if c.get("id") == exercise.cell_id]
    defining = [i for i, c in code if exercise.name in defined_names(c.get("source", ""))]
    for i in by_id:
        if i in defining:
            return i
    if defining:
        return defining[-1]
    return by_id[0] if by_id else None


def recognise(nb, course: dict[str, CourseNotebook]) -> dict[str, int]:
    """``{assignment: how many of its exercise cells the notebook has}`` (by id or name)."""
    found = {}
    for name, course_nb in course.items():
        ids = {c.get("id") for c in nb.cells}
        defined = set().union(*(defined_names(c.get("source", "")) for c in nb.cells if c.get("cell_type") == "code"))
        found[name] = sum(e.cell_id in ids or e.name in defined for e in course_nb.exercises)
    return found


def which_assignment(nb, named: str, course: dict[str, CourseNotebook]) -> tuple[str | None, str | None]:
    """``(assignment, why it is the wrong one)``: the notebook ``named`` (its file name or
    ``--assignment``) when it is that course notebook; else the problem. A notebook whose
    name says nothing is recognised from its header link and exercise cells."""
    header = header_assignment(nb)
    counts = recognise(nb, course)
    best = max(counts, key=counts.get, default=None)
    if named:
        if named not in course:
            return None, f"no course notebook {named} in the solutions"
        if header and header != named:
            return None, f"its header says it is {header}, not {named}"
        if counts[named] == 0 and best is not None and counts[best] > 0:
            return None, f"its exercise cells are those of {best}, not {named}"
        return named, None
    if header in course:
        return header, None
    if best is not None and counts[best] > 0:
        return best, None
    return None, "not a notebook of this course (no header link or exercise cell of any course notebook)"


@dataclass
class Step:
    """One cell the grader runs: ``kind`` is "setup", "course" (the course's own cell,
    index ``index`` in its notebook), "exercise" (the student's cell ``index``), "check"
    or "end" (the grader's)."""

    kind: str
    source: str
    index: int | None = None
    exercise: str | None = None
    nonce: str = ""


@dataclass
class Plan:
    steps: list[Step]
    exercise_cells: dict[str, int | None]  # exercise -> the student's cell (None: the stub ran)
    ignored: list[int]  # the student's code cells that were changed or added and not run
    scans: dict[str, CellScan]


def plan_run(nb, course_nb: CourseNotebook) -> Plan:
    """The cells to run for a student's notebook: the course's student notebook with the
    student's exercise cells in place, each followed by the grader's check cell."""
    chosen = {e.name: _exercise_cell(nb, e) for e in course_nb.exercises}
    by_cell_id = {e.cell_id: e for e in course_nb.exercises}
    steps, scans = [], {}
    for index, cell in enumerate(course_nb.notebook.cells):
        if cell.cell_type != "code" or cell.id in course_nb.check_cells:
            continue
        exercise = by_cell_id.get(cell.id)
        if exercise is None:
            steps.append(Step("course", cell.source, index))
            continue
        own = chosen[exercise.name]
        source = nb.cells[own].get("source", "") if own is not None else cell.source
        scans[exercise.name] = scan_exercise_cell(source, exercise.name, course_nb.aliases)
        steps.append(Step("exercise", source, own, exercise.name))
        nonce = secrets.token_hex(16)
        steps.append(Step("check", CHECK_SOURCE.format(nonce=nonce, name=exercise.name), None, exercise.name, nonce))
    nonce = secrets.token_hex(16)
    steps.append(Step("end", END_SOURCE.format(nonce=nonce), nonce=nonce))
    course_sources = {c.id: c.source for c in course_nb.notebook.cells if c.cell_type == "code"}
    unchanged = set(course_sources.values())
    used = set(chosen.values())
    # a cell without the course's id (nbformat 4.4 and v3 have none, or a copy got new ones) is
    # known by its source: only a changed or added cell is worth a line in the report
    ignored = [
        i for i, c in enumerate(nb.cells)
        if c.get("cell_type") == "code" and i not in used and c.get("source", "").strip()
        and (course_sources.get(c.get("id")) != c.get("source") if c.get("id") in course_sources
             else c.get("source") not in unchanged)
    ]
    return Plan(steps, chosen, ignored, scans)


# --------------------------------------------------------------------------- running one notebook


@dataclass
class Run:
    """What running one notebook gave.

    ``steps``: the cells run (with ``cells``, their executed notebook cells). ``messages``:
    per check step index, the grader's signed messages found in its outputs; ``forged``:
    how many messages looked like the grader's but were not signed by it. ``stopped``:
    ``None`` when every cell ran, else why not (``"timed out"``, ``"kernel died"``,
    ``"invalid notebook"``, ``"grading failed"``), with ``stopped_step`` and ``detail``.
    """

    steps: list[Step] = field(default_factory=list)
    cells: list = field(default_factory=list)
    messages: dict[int, list[dict]] = field(default_factory=dict)
    forged: dict[int, int] = field(default_factory=dict)
    stopped: str | None = None
    stopped_step: int | None = None
    detail: str = ""
    seconds: float = 0.0
    killed: int = 0  # processes left behind, killed when the turn ended
    package_changes: list[str] = field(default_factory=list)  # the course package's copy, changed in this turn


class _OutOfTime(Exception):
    """The notebook's time ran out between two cells."""


# Kernels running now (their pids): a turn that ends kills its own processes and the
# orphans it finds, but never another notebook's kernel.
_RUNNING: set[int] = set()


class _GradingKernelManager(CurrentEnvKernelManager):
    """Puts the kernel's pid in :data:`_RUNNING` as soon as its process exists, before anything
    else on the event loop runs. jupyter_client's ``start_kernel`` awaits a short sleep after
    the launch; a turn that ended in that moment (``--jobs 2``) took the new kernel for an
    orphan and killed it, and its notebook came out "crashed" (the likely cause of a student
    seen "crashed" once in CI)."""

    launched_pid: int | None = None

    async def _async_launch_kernel(self, kernel_cmd, **kw):  # jupyter_client's override point
        await super()._async_launch_kernel(kernel_cmd, **kw)
        self.launched_pid = getattr(self.provisioner, "pid", None)
        if self.launched_pid:
            _RUNNING.add(self.launched_pid)


class _GradingClient(NotebookClient):
    """Runs the cells within one time limit for the whole notebook (counted from the moment
    the kernel is ready: start-up has its own limit)."""

    def __init__(self, nb, limit: float, command_prefix: list[str], **kwargs: Any):
        super().__init__(nb, **kwargs)
        self.limit = limit
        self.deadline = math.inf
        self.current: int | None = None  # index of the cell running or last run
        self.command_prefix = command_prefix
        self.kernel_pid: int | None = None
        self.killed = 0  # processes other than the kernel killed when the turn ended

    def create_kernel_manager(self):
        self.km = _GradingKernelManager(kernel_name="python3", command_prefix=self.command_prefix)
        return self.km

    @asynccontextmanager
    async def async_setup_kernel(self, **kwargs: Any):
        """nbclient's, less its SIGINT/SIGTERM handlers: those shut down the current kernel and
        let the run go on, so Ctrl-C could not stop a class run. Here Ctrl-C cancels the run,
        and this ``finally`` kills the kernel."""
        if self.km is None:
            self.km = self.create_kernel_manager()
        try:
            if not self.km.has_kernel:
                await self.async_start_new_kernel(**kwargs)
            if self.kc is None:
                await self.async_start_new_kernel_client()
            yield
        finally:
            # every process the notebook started dies with its kernel, before the kernel's
            # children can be orphaned (orphans of earlier deaths come to us as subreaper)
            self.kernel_pid = self.kernel_pid or getattr(self.km, "launched_pid", None)  # a failed start too
            _RUNNING.discard(self.kernel_pid)
            if self.kernel_pid:
                launched = launch_chain(self.kernel_pid)  # the kernel, and the sandbox around it
                self.killed = max(0, kill_descendants(self.kernel_pid, keep=_RUNNING) - len(launched))
            await self._async_cleanup_kernel()

    async def async_start_new_kernel(self, **kwargs: Any):
        await super().async_start_new_kernel(**kwargs)
        provisioner = getattr(self.km, "provisioner", None)
        self.kernel_pid = getattr(provisioner, "pid", None)  # in _RUNNING since its launch

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self.current = cell_index
        if cell_index == 0:  # the grader's set-up (importing torch): start-up, not the notebook's time
            self.timeout = self.iopub_timeout = STARTUP_TIMEOUT
            try:
                return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            finally:
                self.deadline = time.monotonic() + self.limit
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _OutOfTime()
        # this cell gets what is left, for its reply and again for its outputs: under load the
        # kernel's output channel can lag its reply by seconds, and nbclient's default (wait 4 s,
        # then drop what has not come) loses a verdict, and the exercise comes out "review"
        # ("no verdict came back"; the likely cause of an honest "review" seen once in CI)
        self.timeout = self.iopub_timeout = max(1, math.ceil(remaining))
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)


def _first_line(text: Any) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def read_student_notebook(data: bytes):
    """The notebook in ``data`` (nbformat v4, converted if older); raises if it is not one."""
    nb = nbformat.reads(data.decode("utf-8"), as_version=4, capture_validation_error={})
    if not isinstance(nb.get("cells"), list):
        raise ValueError("no list of cells")
    return nb


def _verdict_outputs(cell) -> list:
    """What a cell's outputs carry under the grader's verdict type."""
    found = []
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
        if isinstance(data, dict) and VERDICT_MIME in data:
            found.append(data[VERDICT_MIME])
    return found


def _messages(cell, key: bytes, nonce: str) -> tuple[list[dict], int]:
    """The grader's messages in a cell's outputs whose signature is right, and how many
    others claimed to be."""
    good, forged = [], 0
    for item in _verdict_outputs(cell):
        try:
            text, mac = item["payload"], item["mac"]
            if not hmac.compare_digest(sign(key, nonce, text), str(mac)):
                raise ValueError("bad signature")
            good.append(ast.literal_eval(text))
        except Exception:  # noqa: BLE001 - anything not signed by the grader is a forgery
            forged += 1
    return good, forged


async def run_plan(plan: Plan, course_nb: CourseNotebook, timeout: float = DEFAULT_TIMEOUT,
                   sandbox: bool = False, hidden: Iterable[Path] = (), check_time_limit: float | None = None) -> Run:
    """Run ``plan`` in a fresh kernel, in a temporary folder (its working directory),
    within ``timeout`` seconds for all its cells; then kill whatever it left running."""
    start = time.monotonic()
    run = Run(steps=plan.steps)
    hidden = list(hidden)
    package = PackageCopy()  # this kernel's own copy of the course: what it does to it, it does alone
    try:
        await _run_in(package, plan, course_nb, run, timeout, sandbox, hidden, check_time_limit)
        run.package_changes = [str(c) for c in package.changes()]
    finally:
        package.remove()
    run.seconds = time.monotonic() - start
    return run


async def _run_in(package: PackageCopy, plan: Plan, course_nb: CourseNotebook, run: Run, timeout: float,
                  sandbox: bool, hidden: list[Path], check_time_limit: float | None) -> None:
    with tempfile.TemporaryDirectory(prefix="course-grade-", ignore_cleanup_errors=True) as tmp:
        turn = Path(tmp).resolve()
        workdir = turn / "notebook"
        workdir.mkdir()
        key = secrets.token_bytes(32)
        key_path = turn / "key"
        key_path.write_bytes(key)
        os.chmod(key_path, 0o600)
        config = {
            "key_path": str(key_path), "workdir": str(workdir), "turn": str(turn), "mime": VERDICT_MIME,
            "package_root": str(package.root),
            "event": AUDIT_EVENT, "check_source": CHECK_SOURCE, "end_source": END_SOURCE,
            "exercises": {e.name: e.checker for e in course_nb.exercises},
            "exercise_sources": [(s.exercise, s.source) for s in plan.steps if s.kind == "exercise"],
            "course_sources": [s.source for s in plan.steps if s.kind == "course"],
            "hidden": _hide_references.hidden_names([*(e.name for e in course_nb.exercises), *course_nb.later]),
            "guard_source": _hide_references.GUARD_SOURCE, "skipped_modules": _hide_references.SKIPPED_MODULES,
        }
        cells = [nbformat.v4.new_code_cell(kernel_setup_source(config))]
        cells += [nbformat.v4.new_code_cell(s.source) for s in plan.steps]
        nb = nbformat.v4.new_notebook(cells=cells)
        env = grading_env(turn, hidden, package.root, check_time_limit)
        prefix = sandbox_prefix(turn, workdir, hidden, package.root) if sandbox else []
        client = _GradingClient(
            nb,
            limit=timeout,
            command_prefix=prefix,
            timeout=max(1, math.ceil(timeout)),
            startup_timeout=STARTUP_TIMEOUT,
            kernel_name="python3",
            allow_errors=True,
            raise_on_iopub_timeout=True,  # outputs still missing when the time is up: timed out
            shutdown_kernel="immediate",  # kill it: it may be stuck in a loop
            record_timing=False,
            # no history file; in a sandbox the kernel's parent is the sandbox's own init, which
            # ipykernel would take for a dead parent (bwrap --die-with-parent does that job)
            extra_arguments=["--HistoryManager.enabled=False", *(["--IPKernelApp.parent_handle=0"] if sandbox else [])],
            resources={"metadata": {"path": str(workdir)}},
        )
        # the connection file (the key to the kernel's channels) stays in this turn's folder,
        # out of the shared runtime folder where another notebook could find it
        client.km = client.create_kernel_manager()
        client.km.connection_file = str(turn / "kernel.json")
        if sandbox:  # the sandbox has no network: the kernel talks over Unix sockets in its folder
            client.km.transport = "ipc"
            client.km.ip = str(turn / "kernel")
        try:
            execution = client.async_execute(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # a backstop in case something other than a cell hangs
            await asyncio.wait_for(execution, timeout + STARTUP_TIMEOUT + 60)
        except (CellTimeoutError, _OutOfTime, asyncio.TimeoutError):
            run.stopped, run.detail = TIMED_OUT, f"after {timeout:g} s"
        except DeadKernelError:
            run.stopped, run.detail = "kernel died", "the kernel died"
        except Exception as exc:  # noqa: BLE001 - e.g. a kernel that cannot start: reported, not raised
            run.stopped, run.detail = "grading failed", f"{type(exc).__name__}: {_first_line(exc)}"
        run.killed = client.killed

    setup_errors = [o for o in nb.cells[0].get("outputs", []) if o.get("output_type") == "error"]
    if setup_errors and run.stopped is None:
        error = setup_errors[0]
        run.stopped = "grading failed"
        run.detail = f"the grader's set-up cell raised {error.get('ename')}: {_first_line(error.get('evalue', ''))}"
    run.cells = nb.cells[1:]
    if client.current is not None and run.stopped is not None:
        run.stopped_step = client.current - 1 if client.current > 0 else None
    for i, step in enumerate(plan.steps):
        if step.kind in ("check", "end"):
            run.messages[i], run.forged[i] = _messages(run.cells[i], key, step.nonce)
        else:  # a verdict message in any other cell can only be a forgery
            run.forged[i] = len(_verdict_outputs(run.cells[i]))


# --------------------------------------------------------------------------- grading


@dataclass
class Submission:
    """A notebook to grade: whose (``student``), which course notebook it should be
    (``assignment``, a file name such as ``01_attention.ipynb``; ``""`` when its name does
    not say), and its bytes as read at the start (``data``)."""

    path: Path
    student: str
    assignment: str
    data: bytes | None = None


@dataclass
class ExerciseGrade:
    exercise: str
    status: str  # one of SYMBOLS
    message: str = ""  # one line: the verdict without its "[X] name: " prefix, or why not
    feedback: str = ""  # the checker's full feedback
    mistake: str | None = None
    cell: int | None = None  # the student's exercise cell (None: none found, the stub ran)
    verdict: str | None = None  # what the checker said, when the status is another
    reference: str | None = None  # how the answer uses the course's reference
    flags: list[str] = field(default_factory=list)  # what to review, each with its line


@dataclass
class NotebookGrade:
    path: str
    student: str
    assignment: str
    status: str  # one of NOTEBOOK_STATUSES
    problem: str | None  # what went wrong, in one line (None when ok)
    errors: list[dict]  # every exception other than NotImplementedError: cell, source, exception, message
    exercises: list[ExerciseGrade]
    ignored_cells: list[int] = field(default_factory=list)  # the student's cells not run
    flags: list[str] = field(default_factory=list)  # findings not tied to one exercise
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(e.status == PASSED for e in self.exercises)


def _code_line(source: str) -> str:
    """The first line that is not blank or a comment (else the first line)."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("#")), lines[0] if lines else "")


def _describe(run: Run, index: int | None) -> str:
    """``cell 3 (`def causal_mask(...`)`` for a student's cell, ``the course's cell 5
    (...)`` for the course's own, ``the grader's check of causal_mask`` for its own."""
    if index is None or not 0 <= index < len(run.steps):
        return "the grader's set-up"
    step = run.steps[index]
    source = _code_line(step.source)
    if len(source) > 60:
        source = source[:57] + "..."
    if step.kind == "exercise":
        return f"cell {step.index} (`{source}`)" if step.index is not None else f"the stub of {step.exercise}"
    if step.kind == "course":
        return f"the course's cell {step.index} (`{source}`)"
    return f"the grader's check of {step.exercise}" if step.kind == "check" else "the grader's last cell"


def cell_errors(run: Run) -> list[dict]:
    """Every exception a cell raised other than NotImplementedError (an unfinished stub)."""
    found = []
    for i, cell in enumerate(run.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") != "NotImplementedError":
                found.append({
                    "cell": run.steps[i].index if run.steps[i].kind == "exercise" else None,
                    "where": _describe(run, i),
                    "source": _code_line(run.steps[i].source),
                    "exception": output.get("ename", ""),
                    "message": _first_line(output.get("evalue", "")),
                })
    return found


def _verdict_message(feedback: str, exercise: str) -> str:
    first = _first_line(feedback)
    return re.sub(r"^\[(OK|X| )\]\s*" + re.escape(exercise) + r":\s*", "", first)


def _flag_text(f: dict) -> str:
    where = f"line {f['line']}: " if f.get("line") else ""
    code = f" `{f['code']}`" if f.get("code") else ""
    return f"{where}{f['what']}{':' if code else ''}{code}"


def _not_run_reason(run: Run, step: int) -> str:
    if run.stopped in (TIMED_OUT, "kernel died") and run.stopped_step is not None and step >= run.stopped_step:
        how = "timed out" if run.stopped == TIMED_OUT else "stopped: the kernel died"
        if step - 1 <= run.stopped_step:  # in the exercise cell or its check
            return f"the notebook {how} in {_describe(run, run.stopped_step)}"
        return f"the notebook {how} in {_describe(run, run.stopped_step)}, before this exercise"
    if run.stopped is not None:
        return f"the notebook stopped before its check ({run.detail})"
    return "the grader's check gave no verdict"


def grade_run(sub: Submission, plan: Plan, run: Run, course_nb: CourseNotebook) -> NotebookGrade:
    """Turn what running a notebook gave into its grade (pure: no kernel)."""
    errors = cell_errors(run)
    if run.stopped == TIMED_OUT:
        status = TIMED_OUT
        problem = f"still running {_describe(run, run.stopped_step)} {run.detail}"
    elif run.stopped == "kernel died":
        status, problem = CRASHED, f"the kernel died in {_describe(run, run.stopped_step)}"
    elif run.stopped is not None:
        status, problem = CRASHED, f"grading failed: {run.detail}"
    elif errors:
        first = errors[0]
        status = CRASHED
        problem = f"{first['where']} raised {first['exception']}: {first['message']}"
        if len(errors) > 1:
            problem += f" (and {len(errors) - 1} more cell error(s))"
    else:
        status, problem = OK, None

    notebook_flags: list[str] = []
    runtime: dict[str, list[str]] = {}
    sources = {s.exercise: s.source for s in run.steps if s.kind == "exercise"}
    for i, messages in run.messages.items():
        for m in messages:
            for f in m.get("flags", []):
                if f.get("exercise") in plan.exercise_cells:
                    if f.get("line"):  # the kernel numbers the lines of the cell as IPython ran it
                        f = {**f, "line": f["line"] + leading_blank_lines(sources.get(f["exercise"], ""))}
                    runtime.setdefault(f["exercise"], []).append(_flag_text(f))
                else:
                    notebook_flags.append(_flag_text(f))
    if run.killed:
        notebook_flags.append(f"left {run.killed} process(es) running; killed when its turn ended")
    elsewhere = []  # forgeries in the course's own cells: sent by code an exercise cell left behind
    for i, step in enumerate(run.steps):
        forged = run.forged.get(i, 0) if step.kind not in ("check", "end") else 0
        if forged:
            where = runtime.setdefault(step.exercise, []) if step.kind == "exercise" else elsewhere
            where.append(f"{forged} verdict message(s) not signed by the grader (forged) in {_describe(run, i)}")
        if step.kind == "exercise" and i < len(run.cells):
            runtime.setdefault(step.exercise, []).extend(system_refusals(run.cells[i], step.source))

    grades = []
    for exercise in course_nb.exercises:
        name = exercise.name
        check = next(i for i, s in enumerate(run.steps) if s.kind == "check" and s.exercise == name)
        scan = plan.scans[name]
        flags = [_flag_text(f) for f in scan.flags] + runtime.get(name, [])
        messages = run.messages.get(check, [])
        if run.forged.get(check):
            flags.append(f"{run.forged[check]} verdict message(s) not signed by the grader (forged)")
        if len(messages) > 1:
            flags.append(f"the grader's check was asked {len(messages)} times")
        grade = ExerciseGrade(name, NOT_RUN, cell=plan.exercise_cells[name])
        if messages:
            verdict = messages[-1]["verdict"]
            feedback = str(verdict.get("feedback", ""))
            grade.feedback, grade.mistake = feedback, verdict.get("mistake")
            if verdict.get("status") == "undefined":
                grade.message = f"{feedback}" + (f"; {errors[0]['where']} raised {errors[0]['exception']}"
                                                 if any(e["cell"] == grade.cell for e in errors) else "")
            else:
                grade.status = FROM_VERDICT.get(verdict.get("status"), ERROR)
                if grade.status == PASSED and verdict.get("passed") is not True:
                    grade.status = ERROR
                grade.message = _verdict_message(feedback, name)
            grade.reference = messages[-1].get("reference")
        else:
            grade.message = _not_run_reason(run, check)
            if run.stopped is None and run.cells[check].get("execution_count") is not None:
                flags.append("the grader's check ran but no verdict came back (its messages were blocked)")
        if scan.reference:
            grade.reference = f"{grade.reference}; " if grade.reference else ""
            grade.reference += f"the cell names it: {scan.reference}"
        grade.flags = flags = deduplicated(flags)
        if grade.status != NOT_RUN or flags or grade.reference:
            if grade.reference:
                grade.verdict, grade.status = grade.status, REFERENCE
                grade.message = f"answered with the course's reference ({grade.reference})"
            if flags:
                grade.verdict = grade.verdict or grade.status
                grade.status = REVIEW
                grade.message = f"to review: {flags[0]}" + (f" (and {len(flags) - 1} more)" if len(flags) > 1 else "")
        grades.append(grade)
    result = NotebookGrade(
        path=str(sub.path), student=sub.student, assignment=sub.assignment, status=status, problem=problem,
        errors=errors, exercises=grades, ignored_cells=plan.ignored, flags=deduplicated(notebook_flags),
        seconds=round(run.seconds, 1),
    )
    for flag in elsewhere:
        review_all(result, flag)
    if run.package_changes:
        shown = ", ".join(run.package_changes[:3]) + (f" and {len(run.package_changes) - 3} more"
                                                     if len(run.package_changes) > 3 else "")
        review_all(result, f"CHANGED THE COURSE PACKAGE while its notebook ran ({shown} in its private copy): its "
                           "verdicts cannot be trusted; the next notebook gets a fresh copy")
    return result


def review_all(grade: NotebookGrade, flag: str) -> None:
    """Add ``flag`` to the notebook, and put every exercise it has a verdict for up for review
    (what it did may have changed any verdict of its run)."""
    grade.flags = deduplicated([*grade.flags, flag])
    for e in grade.exercises:
        if e.status not in (NOT_RUN, REVIEW):
            e.verdict = e.verdict or e.status
            e.status = REVIEW
            e.message = f"to review: {flag}"


def deduplicated(flags: list[str]) -> list[str]:
    """Each flag once, in order, with how many times it came when more than once."""
    counts: dict[str, int] = {}
    for f in flags:
        counts[f] = counts.get(f, 0) + 1
    return [f if n == 1 else f"{f} ({n} times)" for f, n in counts.items()]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
SYSTEM_REFUSALS = ("Read-only file system", "Permission denied", "Operation not permitted")


def leading_blank_lines(source: str) -> int:
    """How many blank lines open a cell: IPython drops them before it runs the cell, so its line
    numbers are the cell's less these."""
    lines = source.splitlines()
    blank = next((i for i, line in enumerate(lines) if line.strip()), 0)
    return blank


def system_refusals(cell, source: str) -> list[str]:
    """A flag (with its line) for each error in an exercise cell's outputs that says the system
    refused a file operation: an attempt the sandbox (or the permissions) stopped."""
    flags = []
    lines = source.splitlines()
    for output in cell.get("outputs", []):
        if output.get("output_type") != "error":
            continue
        text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
        if not any(t in text for t in SYSTEM_REFUSALS) or "grading: not allowed" in text:
            continue  # (the audit hook's own refusals are flagged where they happen)
        match = re.search(r"Cell In\[\d+\], line (\d+)", _ANSI.sub("", "\n".join(output.get("traceback", []))))
        n = int(match.group(1)) + leading_blank_lines(source) if match else 0
        code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
        flags.append(_flag_text({"line": n, "code": code,
                                 "what": f"was stopped by the system: {_first_line(text)[:160]}"}))
    return flags


def wrote_outside(changes: list[str]) -> str:
    """The flag of a notebook in whose turn files outside its folder changed."""
    shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
    return f"WROTE OUTSIDE ITS FOLDER (found by the grader's hashes after its turn, and put back): {shown}"


def not_graded(sub: Submission, course_nb: CourseNotebook | None, status: str, problem: str) -> NotebookGrade:
    """The grade of a notebook that was not run (invalid, or the wrong assignment)."""
    exercises = [ExerciseGrade(e.name, NOT_RUN, message=problem) for e in (course_nb.exercises if course_nb else [])]
    return NotebookGrade(path=str(sub.path), student=sub.student, assignment=sub.assignment, status=status,
                         problem=problem, errors=[], exercises=exercises)


# --------------------------------------------------------------------------- discovery


def student_name(path: Path) -> str:
    """The parent folder's name for a file named like a course notebook, else the stem."""
    if build.NOTEBOOK_NAME.match(path.name):
        return path.resolve().parent.name or path.stem
    return path.stem


def _skipped(part: str) -> bool:
    return part.startswith(".") or part == "__MACOSX"


def find_notebooks(paths: Iterable[Path], assignment: str | None = None) -> list[Submission]:
    """The notebooks to grade, in the order given (folders: sorted, recursively)."""
    if assignment and not assignment.endswith(".ipynb"):
        assignment += ".ipynb"
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found.extend(sorted(
                p for p in path.rglob("*.ipynb")
                if p.is_file() and not any(_skipped(part) for part in p.relative_to(path).parts)
            ))
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"no such file or folder: {path}")
    seen, subs = set(), []
    for path in found:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        name = assignment or (path.name if build.NOTEBOOK_NAME.match(path.name) else "")
        subs.append(Submission(path, student_name(path), name))
    return subs


# --------------------------------------------------------------------------- reports


def _labels(grades: list[NotebookGrade]) -> list[str]:
    """Row labels: the student's name, or the path when two rows share a name."""
    counts: dict[str, int] = {}
    for g in grades:
        counts[g.student] = counts.get(g.student, 0) + 1
    return [g.student if counts[g.student] == 1 else g.path for g in grades]


def format_report(grades: list[NotebookGrade], assignments: dict[str, dict], mode: str = "") -> str:
    """The tables (one per assignment), the legend, then one line per problem; ``mode`` (how
    the kernels were isolated) first when given."""
    out: list[str] = [f"Isolation: {mode}", ""] if mode else []
    for name, info in assignments.items():
        rows = [g for g in grades if g.assignment == name]
        exercises = info["exercises"]
        title = name or "notebooks not named NN_*.ipynb and not recognised"
        source = f"solution {info['solution']}" if info["solution"] else "no solution found"
        out.append(f"{title}: {len(rows)} notebook(s); {source}")
        header = ["student", "notebook", *exercises, "passed"]
        table = [header]
        for label, g in zip(_labels(rows), rows):
            by_name = {e.exercise: e for e in g.exercises}
            marks = [SYMBOLS[by_name[e].status] if e in by_name else "" for e in exercises]
            table.append([label, g.status, *marks, f"{g.passed}/{len(exercises)}"])
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        for r, row in enumerate(table):
            out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if r == 0:
                out.append("  ".join("-" * w for w in widths))
        out.append("")
    out.append(f"Legend: {LEGEND}.")
    out.append("Only exercise cells are graded: the grader runs the course's notebook with each student's "
               "exercise cells in place and calls the checkers itself.")
    problems = []
    for label, g in zip(_labels(grades), grades):
        if g.problem:
            problems.append(f"  {label}: {g.status}: {g.problem}")
        if g.ignored_cells:
            cells = ", ".join(map(str, g.ignored_cells))
            problems.append(f"  {label}: ignored {len(g.ignored_cells)} cell(s) that are not exercise cells: {cells}")
        for f in g.flags:
            problems.append(f"  {label}: review: {f}")
        for e in g.exercises:
            if e.status in (FAILED, ERROR) or (e.status == NOT_RUN and g.status not in (INVALID, WRONG)):
                problems.append(f"  {label}: {e.exercise} {e.status}: {e.message}")
            elif e.status == REFERENCE:
                problems.append(f"  {label}: {e.exercise} {e.status}: {e.reference}")
            elif e.status == REVIEW:
                problems.extend(f"  {label}: {e.exercise} review: {f}" for f in e.flags)
                if e.reference:
                    problems.append(f"  {label}: {e.exercise} also used the reference: {e.reference}")
    if problems:
        out.append("")
        out.append("Problems:")
        out.extend(problems)
    return "\n".join(out)


def write_csv(grades: list[NotebookGrade], path: Path) -> None:
    """One row per student x exercise (a notebook without exercises: one row, exercise empty)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for g in grades:
            base = {"student": g.student, "assignment": g.assignment, "path": g.path, "notebook_status": g.status,
                    "ignored_cells": " ".join(map(str, g.ignored_cells))}
            if not g.exercises:
                writer.writerow({**base, "message": g.problem or "", "flags": " | ".join(g.flags)})
            for e in g.exercises:
                writer.writerow({
                    **base, "exercise": e.exercise, "status": e.status, "mistake": e.mistake or "",
                    "message": e.message, "feedback": e.feedback, "flags": " | ".join(e.flags + g.flags),
                })


def report_dict(grades: list[NotebookGrade], assignments: dict[str, dict], timeout: float) -> dict:
    return {
        "timeout": timeout,
        "statuses": {"notebook": NOTEBOOK_STATUSES, "exercise": list(SYMBOLS)},
        "assignments": [{"assignment": name, **info} for name, info in assignments.items()],
        "notebooks": [{**asdict(g), "passed": g.passed, "total": len(g.exercises)} for g in grades],
    }


# --------------------------------------------------------------------------- a class


def grade_class(
    subs: list[Submission], solutions: Path, timeout: float = DEFAULT_TIMEOUT, jobs: int = 1, sandbox: bool = False,
    hidden: Iterable[Path] = (), progress: Callable[[str], None] | None = None,
    check_time_limit: float | None = None,
) -> tuple[list[NotebookGrade], dict[str, dict]]:
    """Grade every submission; returns the grades (in the order of ``subs``) and, per
    assignment, its solution and exercises (the table's columns).

    Each kernel imports its own copy of the course package, checked after its turn; and after
    each turn every file of the class (``hidden``, else the submissions), the solutions and the
    instructor's course is compared with what it was at the start and put back. A change is
    laid at the door of the notebook whose turn it was; when other notebooks ran at the same
    time (``jobs`` > 1), each of them is graded again alone to find which one it was."""
    checkers = checker_exercises()
    course = load_course(solutions, checkers)
    remove_stale_copies()  # a grader killed (SIGKILL) before it could remove its kernels' copies
    for sub in subs:
        if sub.data is None:
            sub.data = sub.path.read_bytes()
    hidden = list(hidden) or [s.path for s in subs]
    course_files = [Path(solutions).resolve(), *(PACKAGE_ROOT / part for part in ("course_utils", "course_tools", "data"))]
    guard = FileGuard([*hidden, *course_files], known={s.path: s.data for s in subs if s.data is not None})
    hidden = [*hidden, *course_files]  # in the sandbox the instructor's course is out of sight too
    grades: list[NotebookGrade | None] = [None] * len(subs)
    jobs_to_run = []
    for i, sub in enumerate(subs):
        try:
            nb = read_student_notebook(sub.data)
        except NotJSONError:
            grades[i] = not_graded(sub, course.get(sub.assignment), INVALID,
                                   "not a notebook: the file is not JSON (cut short, or not a notebook?)")
            continue
        except Exception as exc:  # noqa: BLE001 - whatever the file is, it is not a notebook we can run
            grades[i] = not_graded(sub, course.get(sub.assignment), INVALID,
                                   f"not a notebook: {type(exc).__name__}: {_first_line(exc)[:120]}")
            continue
        assignment, wrong = which_assignment(nb, sub.assignment, course)
        if assignment is None:
            grades[i] = not_graded(sub, course.get(sub.assignment), WRONG, wrong)
            continue
        sub.assignment = assignment
        jobs_to_run.append((i, sub, plan_run(nb, course[assignment])))

    async def run_all() -> None:
        limit = asyncio.Semaphore(jobs)
        done = 0
        loop = asyncio.get_running_loop()

        def quiet_dead_kernels(loop, context):
            # nbclient turns the cancellation of a cell (Ctrl-C) into a DeadKernelError nobody awaits
            if not isinstance(context.get("exception"), DeadKernelError):
                loop.default_exception_handler(context)

        loop.set_exception_handler(quiet_dead_kernels)

        active: set[int] = set()  # the notebooks running now
        window: set[int] = set()  # those that ran at some time since the files were last checked
        unclear: list[tuple[set[int], list[str]]] = []  # changes that more than one of them could have made
        blamed: set[int] = set()

        async def one(i: int, sub: Submission, plan: Plan, again: bool = False) -> None:
            nonlocal done
            async with limit:
                active.add(i)
                window.add(i)
                try:
                    run = await run_plan(plan, course[sub.assignment], timeout, sandbox, hidden, check_time_limit)
                finally:
                    active.discard(i)
                    changes = [str(c) for c in guard.check()]
                    suspects = set(window)
                    window.clear()
                    window.update(active)
            grades[i] = grade = grade_run(sub, plan, run, course[sub.assignment])
            if changes or run.package_changes:
                if suspects == {i}:
                    blamed.add(i)
                    if changes:
                        review_all(grade, wrote_outside(changes))
                    if progress is not None:
                        progress(f"!! {sub.path}: {', '.join(grade.flags[-1:])}")
                else:
                    unclear.append((suspects, changes + run.package_changes))
            if progress is not None:
                counter = "again, alone" if again else f"{done + 1}/{len(jobs_to_run)}"
                progress(f"[{counter}] {sub.path}: {grade.status} ({run.seconds:.1f} s)")
            done += not again

        await asyncio.gather(*(one(*job) for job in jobs_to_run))
        # a change that one of several notebooks running together made: each is run again alone
        # (a clean run: its grade replaces the first one), and the change is the one's that repeats it
        suspects = sorted(set().union(*(s for s, _ in unclear)))
        found = len(unclear)
        del unclear[:]
        by_index = {job[0]: job for job in jobs_to_run}
        for i in suspects:
            await one(*by_index[i], again=True)
        if found and not blamed & set(suspects):
            for i in suspects:  # nobody did it again: each of them stays under suspicion
                review_all(grades[i], "a file outside its folder changed while this notebook and others ran, and "
                                      "none of them changed it again when run alone")

    become_subreaper()
    asyncio.run(run_all())
    assignments: dict[str, dict] = {}
    for sub in subs:
        info = assignments.setdefault(sub.assignment, {"solution": None, "exercises": []})
        if sub.assignment in course:
            info["solution"] = str(Path(solutions) / sub.assignment)
            info["exercises"] = [e.name for e in course[sub.assignment].exercises]
    return [g for g in grades if g is not None], assignments


def restore_changed_files(subs: list[Submission]) -> list[Submission]:
    """Put back every student's file that changed while grading ran (a notebook found it);
    returns those submissions."""
    changed = []
    for sub in subs:
        if sub.data is None:
            continue
        try:
            same = sub.path.read_bytes() == sub.data
        except OSError:
            same = False
        if not same:
            sub.path.write_bytes(sub.data)
            changed.append(sub)
    return changed


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.grade",
        description="Run students' exercise cells in the course's notebooks, in fresh kernels, and tabulate "
                    "the checkers' verdicts.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, or folders of them")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit for all the cells of one notebook (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write one row per student x exercise")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every detail")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="notebooks run at a time (default 1)")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), metavar="DIR",
                        help="solution notebooks, from which the course's notebooks and exercises are made "
                             "(default: solutions)")
    parser.add_argument("--assignment", metavar="NAME",
                        help="grade every file as this course notebook (e.g. 01_attention), "
                             "for files named after students")
    parser.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=None,
                        help="run each kernel under bwrap: no network, the submissions and the course's files "
                             "hidden, read-only but its own folder (default: on where bwrap works; --no-sandbox "
                             "turns it off)")
    parser.add_argument("--check-time-limit", type=float, metavar="SECONDS",
                        help="time limit of one check inside a graded kernel (default: the checkers' own, 60)")
    args = parser.parse_args(argv)
    try:
        if not args.timeout > 0:
            raise UsageError("--timeout must be positive")
        if args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        for option, path in (("--csv", args.csv), ("--json", args.json)):
            if path is not None and not path.resolve().parent.is_dir():
                raise UsageError(f"{option}: no folder {path.parent}")
        if not (args.solutions.is_dir() and build.notebook_files(args.solutions)):
            raise UsageError(f"--solutions: no course notebooks NN_*.ipynb in {args.solutions}")
        subs = find_notebooks(args.paths, args.assignment)
        if not subs:
            raise UsageError("no notebooks found in " + ", ".join(map(str, args.paths)))
        if args.check_time_limit is not None and not args.check_time_limit > 0:
            raise UsageError("--check-time-limit must be positive")
        problem = sandbox_problem() if args.sandbox is not False else None
        if args.sandbox and problem:
            raise UsageError(problem)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # a grader started in the background by a shell or a script inherits SIGINT ignored: it
    # would then run on through `kill -INT` (and Ctrl-C in a terminal that brings it back)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    sandbox = args.sandbox if args.sandbox is not None else problem is None
    mode = ("sandbox: each kernel ran under bwrap (--no-sandbox to turn it off)" if sandbox else
            "no sandbox: " + ("turned off with --no-sandbox" if args.sandbox is False else problem or "")
            + "; the kernels ran with your permissions (see the README)")
    progress(f"Isolation: {mode}")
    hidden = [p.resolve() for p in args.paths]
    try:
        grades, assignments = grade_class(subs, args.solutions, args.timeout, args.jobs, sandbox,
                                          hidden, progress, args.check_time_limit)
    except KeyboardInterrupt:
        restore_changed_files(subs)
        print("interrupted: no report written", file=sys.stderr)
        return 130
    by_path = {g.path: g for g in grades}
    for sub in restore_changed_files(subs):  # the grader's hashes put back every change: a last resort
        by_path[str(sub.path)].flags.append(
            "its file was changed while grading ran, not by its own notebook; put back, and graded as it was read")
    print(format_report(grades, assignments, mode))
    if args.csv is not None:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**report_dict(grades, assignments, args.timeout), "sandbox": sandbox}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
