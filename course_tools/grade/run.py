"""Stage: running one notebook. :func:`run_plan` runs a plan's cells in a fresh kernel (after the
kernel side's set-up cell), in a temporary folder, against its own copy of the course package,
within one time limit for the whole notebook, sandboxed when asked; then kills whatever the
notebook left running and keeps only the verdicts signed with this run's key and the right
nonce (:class:`Run`: what the run gave, before any grading)."""

from __future__ import annotations

import ast
import asyncio
import hmac
import math
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from ..guard import PackageCopy
from ..kernels import CurrentEnvKernelManager
from . import hide_references
from .common import (
    AUDIT_EVENT,
    CHECK_SOURCE,
    DEFAULT_TIMEOUT,
    END_SOURCE,
    STARTUP_TIMEOUT,
    TIMED_OUT,
    VERDICT_MIME,
    first_line,
)
from .kernel_side import kernel_setup_source, sign
from .plan import CourseNotebook, Plan, Step
from .sandbox import grading_env, kill_descendants, launch_chain, sandbox_prefix


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
RUNNING: set[int] = set()


class _GradingKernelManager(CurrentEnvKernelManager):
    """Puts the kernel's pid in :data:`RUNNING` as soon as its process exists, before anything
    else on the event loop runs. jupyter_client's ``start_kernel`` awaits a short sleep after
    the launch; a turn that ended in that moment (``--jobs 2``) took the new kernel for an
    orphan and killed it, and its notebook came out "crashed" (the likely cause of a student
    seen "crashed" once in CI)."""

    launched_pid: int | None = None

    async def _async_launch_kernel(self, kernel_cmd, **kw):  # jupyter_client's override point
        await super()._async_launch_kernel(kernel_cmd, **kw)
        self.launched_pid = getattr(self.provisioner, "pid", None)
        if self.launched_pid:
            RUNNING.add(self.launched_pid)


class GradingClient(NotebookClient):
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
            RUNNING.discard(self.kernel_pid)
            if self.kernel_pid:
                launched = launch_chain(self.kernel_pid)  # the kernel, and the sandbox around it
                self.killed = max(0, kill_descendants(self.kernel_pid, keep=RUNNING) - len(launched))
            await self._async_cleanup_kernel()

    async def async_start_new_kernel(self, **kwargs: Any):
        await super().async_start_new_kernel(**kwargs)
        provisioner = getattr(self.km, "provisioner", None)
        self.kernel_pid = getattr(provisioner, "pid", None)  # in RUNNING since its launch

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
            "hidden": hide_references.hidden_names([*(e.name for e in course_nb.exercises), *course_nb.later]),
            "guard_source": hide_references.GUARD_SOURCE, "skipped_modules": hide_references.SKIPPED_MODULES,
        }
        cells = [nbformat.v4.new_code_cell(kernel_setup_source(config))]
        cells += [nbformat.v4.new_code_cell(s.source) for s in plan.steps]
        nb = nbformat.v4.new_notebook(cells=cells)
        env = grading_env(turn, hidden, package.root, check_time_limit)
        prefix = sandbox_prefix(turn, workdir, hidden, package.root) if sandbox else []
        client = GradingClient(
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
            run.stopped, run.detail = "grading failed", f"{type(exc).__name__}: {first_line(exc)}"
        run.killed = client.killed

    setup_errors = [o for o in nb.cells[0].get("outputs", []) if o.get("output_type") == "error"]
    if setup_errors and run.stopped is None:
        error = setup_errors[0]
        run.stopped = "grading failed"
        run.detail = f"the grader's set-up cell raised {error.get('ename')}: {first_line(error.get('evalue', ''))}"
    run.cells = nb.cells[1:]
    if client.current is not None and run.stopped is not None:
        run.stopped_step = client.current - 1 if client.current > 0 else None
    for i, step in enumerate(plan.steps):
        if step.kind in ("check", "end"):
            run.messages[i], run.forged[i] = _messages(run.cells[i], key, step.nonce)
        else:  # a verdict message in any other cell can only be a forgery
            run.forged[i] = len(_verdict_outputs(run.cells[i]))


