"""Delegate every exercise of the course to every callable a graded kernel still reaches;
print, as JSON, what the grader would have counted as passed (nothing, if the hidden
references of course_tools/grade/hide_references.py are out of reach). A check of the grader
(issue 23), not a speed benchmark; tests/test_hide_references.py runs a fixed sample of it
(``--sample``); the full run is too slow for the suite.

    .venv/bin/python benchmarks/hidden_brute_force.py solutions              # every notebook, every candidate
    .venv/bin/python benchmarks/hidden_brute_force.py solutions 01 09        # some notebooks
    .venv/bin/python benchmarks/hidden_brute_force.py solutions --sample 40  # at most 40 candidates an exercise
    .venv/bin/python benchmarks/hidden_brute_force.py solutions --control 01 # hide nothing

``--control``: hide nothing (the harness must then find the references themselves).

For each graded notebook it builds the kernel's public copy of ``course_utils`` as the
grader's set-up does (the notebook's references and every later notebook's hidden: guards
in the public copy, and the real objects' own code gated), without the kernel: an audit
hook answers the guards and the gates with the grader's own rules (``gate_allows``),
the answers' code counting as a student's exercise cell. The candidates are every
callable of the course a student's code can reach: the public modules' globals, their
tables and the classes' methods; the checkers' modules (a checker's hook hands its
``__globals__`` to the student's code); and every subclass of ``nn.Module`` from the course
(``nn.Module.__subclasses__()``). Exercise by exercise, with the notebook's earlier
exercises answered by the references (a student who solved them), it checks with the
real checker: a function exercise answered by ``lambda *a, **k: candidate(*a, **k)``; a
class exercise by each class candidate itself, by a subclass of it, and by a module that
builds the candidate and adopts its children (``add_module``) with ``forward`` delegating
to the candidate's. An answer counts as passed when the checker passes it and the
grader's second line (``grade.uses_reference``) does not see the reference in it.

Measured on the shared 2-core machine (nice 10), 2026-11-28, nothing counted as passed:
the full run of 01-05, 7,212 answers in 45 s; ``--sample 40`` of 06-09, 1,662 answers in
675 s (06 413 s and 09 200 s: their checks decode and train); ``--sample 40`` of 01, 04
and 08 (the suite's), 26 s. The control (``--control 01 --sample 40``) finds the
references, 06's ``make_src_mask`` as 01's ``padding_mask`` among them. The full run of
06-09 did not finish within 6 minutes for 06 alone.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import time
import types
import weakref
from pathlib import Path

STUDENT = "<brute-force student>"  # the file name of the answers' code: a student's exercise cell
ANSWERS = '''
def make(name, is_class, candidate, torch):
    if not is_class:
        def answer(*args, **kwargs):
            return candidate(*args, **kwargs)

        answer.__name__ = answer.__qualname__ = name
        return [answer]
    if not isinstance(candidate, type):
        return []
    found = [candidate]
    if issubclass(candidate, torch.nn.Module) or type(candidate).__name__ == "_Hidden":
        if issubclass(candidate, torch.nn.Module):
            Sub = type(name, (candidate,), {})
            found.append(Sub)

        class Adopted(torch.nn.Module):
            def __init__(self, *args, **kwargs):
                super().__init__()
                inner = candidate(*args, **kwargs)
                for child, module in inner.named_children():
                    self.add_module(child, module)
                for key, value in vars(inner).items():
                    if not key.startswith("_") and key not in ("training",):
                        setattr(self, key, value)

            def forward(self, *args, **kwargs):
                return candidate.forward(self, *args, **kwargs)

        Adopted.__name__ = Adopted.__qualname__ = name
        found.append(Adopted)
    return found
'''


def candidates(modules: dict) -> list[tuple[str, object]]:
    """Every callable of the course reachable from ``modules``: their globals, the values of
    their module-level tables, the classes' methods; and the course's ``nn.Module``
    subclasses."""
    import torch

    seen, found = set(), []

    def add(label, obj):
        module = getattr(obj, "__module__", None)
        if id(obj) in seen or not callable(obj) or not (isinstance(module, str) and module.startswith("course_utils")):
            return
        seen.add(id(obj))
        found.append((label, obj))

    def add_class_members(label, cls):
        for k, v in list(vars(cls).items()):
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            elif isinstance(v, property):
                v = v.fget
            add(f"{label}.{k}", v)

    for name, module in sorted(modules.items()):
        for key, value in list(vars(module).items()):
            add(f"{name}.{key}", value)
            if isinstance(value, dict):
                for k, v in list(value.items()):
                    add(f"{name}.{key}[{k!r}]", v)
            if isinstance(value, type) and str(getattr(value, "__module__", "")).startswith("course_utils"):
                add_class_members(f"{name}.{key}", value)
    todo = list(type.__subclasses__(torch.nn.Module))
    while todo:
        cls = todo.pop()
        todo += type.__subclasses__(cls)
        if str(cls.__module__).startswith("course_utils") and id(cls) not in seen:
            add(f"nn.Module.__subclasses__: {cls.__module__}.{cls.__qualname__}", cls)
            add_class_members(f"nn.Module.__subclasses__: {cls.__module__}.{cls.__qualname__}", cls)
    return found


def sampled(found: list, hidden: set[str], size: int | None) -> list:
    """All of ``found``, or at most ``size``: every candidate that names a hidden object
    (the ones that could compute an answer), then an even spread of the others (fixed)."""
    if size is None or len(found) <= size:
        return found
    first = [c for c in found if any(h in c[0] for h in hidden)]
    rest = [c for c in found if c not in first]
    room = max(0, size - len(first))
    step = max(1, len(rest) // room) if room else len(rest) + 1
    return first + rest[::step][:room]


def main(solutions: str, only: list[str], control: bool = False, sample: int | None = None) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    # the checkers' own time limit, shorter: an answer that runs some slow function of the
    # course (generating a data set) fails by the limit instead of taking minutes; the
    # control's references, run by the real checkers, get the default
    os.environ.setdefault("COURSE_CHECK_TIME_LIMIT", "60" if control else "3")
    import matplotlib

    matplotlib.use("agg")
    import torch

    import course_utils.checks  # noqa: F401 - the checkers' copy, as the grader's set-up imports it
    from course_tools import grade
    from course_tools.grade import hide_references as hide

    namespace: dict = {}
    exec(compile(ANSWERS, STUDENT, "exec"), namespace)  # noqa: S102 - the answers' code, as a student's cell
    make = namespace["make"]
    course = grade.load_course(Path(solutions), grade.checker_exercises())
    state: dict = {"deliver": None, "gate": None}

    def hook(event, args):
        if event == "course-grade-hidden" and state["deliver"] is not None:
            fetch = sys._getframe(1)  # hook <- the guard's request <- the guard <- its caller
            state["deliver"](args[0], args[1], fetch.f_back.f_back if fetch.f_back else None)
        elif event == "course-grade-gate" and state["gate"] is not None:
            state["gate"](sys._getframe(1), args[0], args[1])

    sys.addaudithook(hook)
    stdlib = os.path.dirname(os.__file__) + os.sep
    report: dict = {"passed": [], "tried": {}, "seconds": {}}
    for filename, course_nb in course.items():
        if only and not any(filename.startswith(o) for o in only):
            continue
        start = time.monotonic()
        # a fresh checkers' copy for each notebook after the first: the set-up gates the hidden
        # objects for good (a copy left ungated would be a third copy, which no kernel has)
        if report["tried"]:
            for name in [n for n in sys.modules if n == "course_utils" or n.startswith("course_utils.")]:
                del sys.modules[name]
            importlib.import_module("course_utils.checks")
        exercises = [e.name for e in course_nb.exercises]
        hidden = {} if control else hide.hidden_names([*exercises, *course_nb.later])
        private, public, guards, _, gates = hide.public_course(
            hidden, "course-grade-hidden", hide.GUARD_SOURCE, hide.SKIPPED_MODULES, "course-grade-gate",
            course_nb.later)
        checks = private["course_utils.checks"]
        references = {e: getattr(private["course_utils"], e, None) for e in exercises}
        others = {}
        for label, (guard, real) in guards.items():
            others[id(guard)], others[id(real)] = (guard, label), (real, label)
        for entry in gates.values():
            others.setdefault(id(entry[6]), (entry[6], entry[1]))
        helpers = {label for label in guards if label.rpartition(".")[2] not in exercises}
        package = str(Path(private["course_utils"].__file__).parent) + "/"
        solved: set[str] = set()  # earlier exercises, answered by the student's own code (here: the reference)
        made: dict = {}

        def deliver(label, box, caller):
            if (label in helpers and caller is not None and caller.f_code.co_filename.startswith(package)) \
                    or label.rpartition(".")[2] in solved:
                box.append(guards[label][1])

        def gate(asker, box, called):
            entry = gates.get(id(asker.f_code))
            if entry is not None and entry[0] is asker.f_code and hide.gate_allows(
                    asker.f_back, entry, called, {STUDENT}, set(), package, gates, stdlib, made):
                if called and entry[4] is not None and isinstance(called[0], entry[4]):
                    with contextlib.suppress(TypeError):
                        made[id(called[0])] = weakref.ref(called[0])
                box.append(entry[2])

        state["deliver"], state["gate"] = deliver, gate
        tried = 0
        found = candidates({**public, **{f"checkers' {n}": m for n, m in private.items()}})
        names = {*exercises, *course_nb.later, *(h.rpartition(".")[2] for e in hide.HELPERS.values() for h in e)}
        for i, exercise in enumerate(course_nb.exercises):
            solved.update(e.name for e in course_nb.exercises[:i])
            is_class = isinstance(references[exercise.name], type)
            for label, candidate in sampled(found, names, sample):
                for answer in make(exercise.name, is_class, candidate, torch):
                    tried += 1
                    began = time.monotonic()
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        try:
                            result = getattr(checks, exercise.checker)(answer)
                        except BaseException as error:  # noqa: BLE001 - a checker never raises; say so if it did
                            result = types.SimpleNamespace(passed=False, status=f"raised {error!r}"[:80])
                    if time.monotonic() - began > 5:
                        print(f"slow: {exercise.name} <- {label}: {time.monotonic() - began:.0f} s", file=sys.stderr,
                              flush=True)
                    if result.passed is True and (control or grade.uses_reference(
                            answer, exercise.name, references[exercise.name], {STUDENT}, others) is None):
                        report["passed"].append(f"{filename} {exercise.name} <- {label} ({answer!r:.60})")
        state["deliver"] = state["gate"] = None
        report["tried"][filename] = tried
        report["seconds"][filename] = round(time.monotonic() - start, 1)
        print(f"{filename}: {tried} answers in {report['seconds'][filename]} s", file=sys.stderr, flush=True)
    return report


if __name__ == "__main__":
    args = sys.argv[2:]
    size = None
    if "--sample" in args:
        i = args.index("--sample")
        size = int(args[i + 1])
        del args[i:i + 2]
    control = "--control" in args
    found = main(sys.argv[1], [a for a in args if a != "--control"], control, size)
    print(json.dumps(found))
