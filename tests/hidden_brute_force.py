"""Delegate every exercise of the course to every callable a graded kernel's public
``course_utils`` still has; print, as JSON, what earned a pass (nothing, if the table of
course_tools/_hide_references.py is complete). Run by tests/test_hide_references.py in a
process of its own: it moves ``course_utils`` in and out of ``sys.modules``.

    python tests/hidden_brute_force.py SOLUTIONS_DIR [--control] [NOTEBOOK...]

``--control``: hide nothing (the harness must then find the references themselves).

For each graded notebook it builds the public copy as the grader's set-up does (without
the kernel: an audit hook hands a guard's helper to the course's code that calls it, and
nothing else, as the grader's hook does for a student's code),
then, exercise by exercise, with the notebook's earlier exercises answered by the real
references (a student who solved them) and the exercise's own name a guard (as while
the grader checks it), checks with the real checker: a function exercise answered by ``lambda *a, **k: candidate(*a, **k)``; a class
exercise by each class candidate itself, and by a module that builds the candidate and
adopts its children (``add_module``) with ``forward`` delegating to the candidate's.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import types
from pathlib import Path


def candidates(public: dict) -> list[tuple[str, object]]:
    """Every callable of the course reachable from the public modules: their globals, the
    values of their module-level tables, the classes' methods."""
    seen, found = set(), []

    def add(label, obj):
        module = getattr(obj, "__module__", None)
        if id(obj) in seen or not callable(obj) or not (isinstance(module, str) and module.startswith("course_utils")):
            return
        seen.add(id(obj))
        found.append((label, obj))

    for name, module in sorted(public.items()):
        for key, value in list(vars(module).items()):
            add(f"{name}.{key}", value)
            if isinstance(value, dict):
                for k, v in list(value.items()):
                    add(f"{name}.{key}[{k!r}]", v)
            if isinstance(value, type) and str(getattr(value, "__module__", "")).startswith("course_utils"):
                for k, v in list(vars(value).items()):
                    if isinstance(v, (staticmethod, classmethod)):
                        v = v.__func__
                    elif isinstance(v, property):
                        v = v.fget
                    add(f"{name}.{key}.{k}", v)
    return found


def submissions(name: str, is_class: bool, candidate) -> list:
    import torch

    if not is_class:
        def answer(*args, **kwargs):
            return candidate(*args, **kwargs)

        answer.__name__ = answer.__qualname__ = name
        return [answer]
    if not isinstance(candidate, type):
        return []
    found = [candidate]
    if issubclass(candidate, torch.nn.Module) or type(candidate).__name__ == "_Hidden":
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


def main(solutions: str, only: list[str], control: bool = False) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import matplotlib

    matplotlib.use("agg")
    import course_utils.checks  # noqa: F401 - the checkers' copy, as the grader's set-up imports it

    from course_tools import _hide_references as hide
    from course_tools import grade

    course = grade.load_course(Path(solutions), grade.checker_exercises())
    state = {"deliver": None}

    def hook(event, args):
        if event == "course-grade-hidden" and state["deliver"] is not None:
            fetch = sys._getframe(1)  # hook <- the guard's request <- the guard <- its caller
            state["deliver"](args[0], args[1], fetch.f_back.f_back if fetch.f_back else None)

    sys.addaudithook(hook)
    report = {"passed": [], "tried": {}, "seconds": {}}
    for filename, course_nb in course.items():
        if only and not any(filename.startswith(o) for o in only):
            continue
        start = time.monotonic()
        exercises = [e.name for e in course_nb.exercises]
        before = dict(sys.modules)
        private, public, guards, _ = hide._public_course(
            {} if control else hide.hidden_names(exercises), "course-grade-hidden", hide.GUARD_SOURCE, hide.SKIPPED_MODULES)
        checks = private["course_utils.checks"]
        # the grader's hook, as graded code meets it: a helper only for the course's own code
        # that calls it, the exercises' references for nobody (no course cell runs here)
        helpers = {label for label in guards if label.rpartition(".")[2] not in exercises}
        package = str(Path(private["course_utils"].__file__).parent) + "/"
        solved = set()  # earlier exercises, answered by the student's own code (here: the reference)

        def deliver(label, box, caller):
            if (label in helpers and caller is not None and caller.f_code.co_filename.startswith(package)) \
                    or label.rpartition(".")[2] in solved:
                box.append(guards[label][1])

        state["deliver"] = deliver
        tried = 0
        for i, exercise in enumerate(course_nb.exercises):
            solved.update(e.name for e in course_nb.exercises[:i])
            is_class = isinstance(getattr(private["course_utils"], exercise.name), type)
            for label, candidate in candidates(public):
                for answer in submissions(exercise.name, is_class, candidate):
                    tried += 1
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        try:
                            result = getattr(checks, exercise.checker)(answer)
                        except BaseException as error:  # noqa: BLE001 - a checker never raises; say so if it did
                            result = types.SimpleNamespace(passed=False, status=f"raised {error!r}"[:80])
                    if result.passed is True:
                        report["passed"].append(f"{filename} {exercise.name} <- {label} ({answer!r:.60})")
        for name in [n for n in sys.modules if n == "course_utils" or n.startswith("course_utils.")]:
            del sys.modules[name]
        sys.modules.update({n: m for n, m in before.items() if n == "course_utils" or n.startswith("course_utils.")})
        report["tried"][filename] = tried
        report["seconds"][filename] = round(time.monotonic() - start, 1)
        print(f"{filename}: {tried} answers in {report['seconds'][filename]} s", file=sys.stderr, flush=True)
    return report


if __name__ == "__main__":
    args = sys.argv[2:]
    print(json.dumps(main(sys.argv[1], [a for a in args if a != "--control"], "--control" in args)))
