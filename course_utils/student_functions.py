"""The student's own functions or the references (backs notebooks 07 and 11).

Notebook 07 asks for four functions (:data:`EXERCISES`); its training run and its
demonstration cells use the student's own where they pass their checkers, else the
references of :mod:`course_utils.training`, and say which and why:

* :func:`choose_functions` - keyword arguments for :func:`~course_utils.translator_training.fit`:
  ``fit(model, train, valid, **RECIPE["fit"], **choose_functions(...))``.
* :func:`yours_or_reference` - the function one demonstration cell runs.
* :func:`cpu_seconds` - the CPU seconds of one call, for notebook 11's speed guards and timings.

Notebook 11's later cells do the same with :class:`StandIns`, which remembers the verdict of
each check cell the student ran instead of checking again (its checks train BPE tokenizers:
too slow to repeat in every cell).

The checkers are found at each call in ``course_utils.checks`` (a graded kernel replaces
that package with the grader's stand-in), so the training library itself never imports
the checkers.
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

from ._validate import check_optional_function, names_used
from .training import REFERENCES

# Notebook 07's exercises, in the order the notebook asks for them.
EXERCISES = ("shift_targets", "masked_cross_entropy", "noam_lr", "train_step")


def choose_functions(
    shift_targets: Callable[..., Any] | None = None,
    masked_cross_entropy: Callable[..., Any] | None = None,
    noam_lr: Callable[..., Any] | None = None,
    train_step: Callable[..., Any] | None = None,
    *,
    verbose: bool = True,
) -> dict[str, Callable[..., Any] | None]:
    """Which of notebook 07's four functions :func:`fit` should train with.

    Each function given is checked again, quietly, with its ``check_*`` checker: one that
    passes is used, one that is missing, unfinished or fails falls back to the reference
    (``None`` in the result). A student's ``train_step`` that calls ``masked_cross_entropy``
    falls back too when that one did not pass (it would call it). With ``verbose``, one
    line per function says which one trains and why. Returns keyword arguments for
    :func:`fit`: ``fit(model, train, valid, **RECIPE["fit"], **choose_functions(...))``.
    """
    given = dict(shift_targets=shift_targets, masked_cross_entropy=masked_cross_entropy, noam_lr=noam_lr,
                 train_step=train_step)
    chosen: dict[str, Callable[..., Any] | None] = {}
    works: dict[str, bool] = {}  # the function given is the reference or passed its check
    lines = []
    for name in EXERCISES:
        fn = check_optional_function(name, given[name])
        why = _why_not_yours(name, fn)
        if name == "train_step" and fn is not None and fn is not REFERENCES[name] \
                and "masked_cross_entropy" in names_used(fn) and not works["masked_cross_entropy"]:
            # its own verdict too, when it failed (an unwritten loss it calls reads as "not written")
            why = "yours calls your masked_cross_entropy, which has not passed its check" \
                if why is None or why in _UNWRITTEN else \
                f"{why}; and it calls your masked_cross_entropy, which has not passed its check either"
        works[name] = why is None or fn is REFERENCES[name]
        chosen[name] = None if why else fn
        lines.append(f"  {name:<21} " + (f"the reference: {why}" if why else "yours"))
    if chosen["train_step"] is not None and chosen["masked_cross_entropy"] is not None \
            and "masked_cross_entropy" not in names_used(chosen["train_step"]):
        lines[1] += " (but your train_step does not call it)"
    # yours or the reference: the recipe's linear schedule calls neither, so say so in both cases
    lines[2] += ' (used with schedule="noam" only; the recipe decays linearly)'
    if verbose:
        print("Training with:\n" + "\n".join(lines))
    return chosen


# the reasons of a function that is not written: "write yours" (a written one that fails: "fix yours")
_UNWRITTEN = ("none given", "yours is not written yet")


def _why_not_yours(name: str, fn: Callable[..., Any] | None) -> str | None:
    """``None`` when the student's ``fn`` for exercise ``name`` passes its checker (run
    quietly); else why the reference replaces it, in a few words that are never cut."""
    # looked up at each call: a graded kernel's course_utils.checks is the grader's stand-in
    from . import checks

    if fn is None:
        return _UNWRITTEN[0]
    if fn is REFERENCES[name]:
        return "you imported it from course_utils"
    result = _quiet_check(getattr(checks, f"check_{name}"), fn)
    if result.passed:
        return None
    if result.status == "not implemented":
        return _UNWRITTEN[1]
    return f"yours has not passed its check: {_what_failed(result, name)}; its check cell says more"


def _what_failed(result: Any, name: str, limit: int = 100) -> str:
    """The mistake's short name when the checker named one; else the verdict's first line,
    whole when short, else cut at a word outside any parentheses (they stay balanced)."""
    if result.mistake:
        return result.mistake
    first = result.feedback.strip().split("\n")[0].split(f"{name}: ", 1)[-1]
    if len(first) <= limit:
        return first
    depth, cut = 0, 0
    for i, ch in enumerate(first[: limit + 1]):
        depth += (ch == "(") - (ch == ")")
        if ch == " " and depth == 0:
            cut = i
    kept = first[:cut].rstrip(" ,;:")
    return f"{kept} ..." if kept else "its verdict is long"


def yours_or_reference(name: str, fn: Callable[..., Any] | None) -> Callable[..., Any]:
    """The function a notebook 07 demonstration cell runs for exercise ``name``: the
    student's ``fn`` when it passes its checker (checked again, quietly), else the
    reference, with one printed line saying why (an unfinished exercise then does not stop
    "Run All" at the first cell that uses it)."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {EXERCISES}, got {name!r}")
    if check_optional_function(name, fn) is REFERENCES[name]:
        return fn  # imported from course_utils: nothing to say
    why = _why_not_yours(name, fn)
    if why is None:
        return fn
    todo = "write" if why in _UNWRITTEN else "fix"
    print(f"{name}: this cell uses the reference ({why}); {todo} yours and run its check to use it here")
    return REFERENCES[name]


def _quiet_check(check: Callable[[Any], Any], fn: Callable[..., Any]) -> Any:
    """Run a checker without showing its verdict (the exercise's own check cell did)."""
    from . import checks

    result_type = getattr(checks, "CheckResult", None)  # the grader's stand-in has none: nothing shown
    with contextlib.ExitStack() as quiet:
        quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
        if result_type is not None:
            quiet.enter_context(mock.patch.object(result_type, "show", lambda self: None))
        return check(fn)


def cpu_seconds(fn: Callable[..., Any], *args: Any, at_least: float = 0.2, repeats: int = 3,
                once: float = 1.0) -> float:
    """CPU seconds (time.process_time: other programs on a loaded machine do not count) of one call
    ``fn(*args)``: calls repeated until they ran ``at_least`` seconds, the best of ``repeats`` such runs.
    A call of ``once`` seconds or more is timed once: its noise is small, and a slow function is not
    run again."""
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    for arg, value in (("at_least", at_least), ("once", once)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise TypeError(f"{arg} must be a number of seconds >= 0, got {value!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise TypeError(f"repeats must be an int >= 1, got {repeats!r}")
    best = float("inf")
    for _ in range(repeats):
        calls, start = 0, time.process_time()
        while calls == 0 or time.process_time() - start < at_least:  # one short call is too noisy to compare
            fn(*args)
            calls += 1
        best = min(best, (time.process_time() - start) / calls)
        if best >= once:
            break
    return best


class StandIns:
    """Notebook 11's stand-ins: the student's function, or the reference of the same name in
    ``reference`` (a module, e.g. :mod:`course_utils.tokenizer`) where the student's is not
    written yet or, as it was when its check ran, failed that check.

    ``stand_ins = StandIns(reference)``; ``check_x = stand_ins.remember(check_x)`` keeps each
    check's verdict; ``stand_ins.call(fn, *args)`` runs ``fn`` or its reference;
    ``stand_ins.too_slow(...)`` and ``stand_ins.whose(...)`` say whose function a cell used.
    :attr:`using_reference` holds the names the reference stood in for so far, :attr:`slow` those
    of them :meth:`too_slow` marked.
    """

    # what a cell does instead of a slow function, and why it may be slow (too_slow's defaults, by name)
    SLOW = {
        "train_bpe": ("this cell trains with the reference train_bpe instead",
                      "if your count_pairs adds Counters, with sum(...) or reduce(...), that copies every count for "
                      "each piece; counts[pair] += freq in one pass is fast"),
        "bpe_encode": ("these cells use the reference encoder for GPT-2's merges (yours still encodes with your own "
                       "merges)", "if yours tries every merge on every piece, the rank lookup of exercise 4 makes it "
                       "fast"),
    }

    def __init__(self, reference: Any) -> None:
        if reference is None or isinstance(reference, (str, bytes, int, float)):
            raise TypeError(f"reference must be a module (or object) holding the reference functions, "
                            f"got {type(reference).__name__}")
        self.reference = reference
        self.using_reference: set[str] = set()  # the exercises whose reference stood in so far
        self.slow: set[str] = set()  # those of them too_slow marked: written and checked, but too slow for a long run
        self._checked: dict[str, tuple[Any, Any]] = {}  # name -> (the function checked, the check's result)
        self._told: set[tuple[str, int | None]] = set()  # (name, cell): the notice is printed once per cell

    def remember(self, *checks: Callable[..., Any]) -> Any:
        """Each check wrapped to keep its verdict for :meth:`call` (the check's result is
        returned unchanged); one check gives one wrapped check, several give a tuple."""
        if not checks:
            raise TypeError("checks must be one or more check functions, got none")
        for check in checks:
            if not callable(check):
                raise TypeError(f"checks must be functions, got {type(check).__name__}")
        wrapped = tuple(self._remembering(check) for check in checks)
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def _remembering(self, check: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(check)
        def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
            result = check(fn, *args, **kwargs)
            self._checked[getattr(fn, "__name__", "")] = (fn, result)
            return result
        return run

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; the reference of the same name instead (saying so once per cell) when
        ``fn`` is a stub (raises ``NotImplementedError``) or is the very function that failed
        its check (one written again since is used again). Not the reference: a function that
        passed, or that no check has seen."""
        if not callable(fn) or not isinstance(getattr(fn, "__name__", None), str):
            raise TypeError(f"fn must be a named function, got {type(fn).__name__}")
        name = fn.__name__
        if not hasattr(self.reference, name):
            raise ValueError(f"fn must be one of the reference's functions, got {name!r}")
        if str(getattr(fn, "__module__", "")).startswith("course_utils"):  # the imported reference itself
            self.using_reference.add(name)
        checked, result = self._checked.get(name, (None, None))
        # this very function, checked and failed: a stub's check says "not implemented", a stand-in grader's nothing
        failed = checked is fn and getattr(result, "status", "passed") not in ("passed", "not implemented")
        if not failed:
            try:
                return fn(*args)
            except NotImplementedError:
                pass
        self.using_reference.add(name)
        cell = _cell_number()
        if cell is None or (name, cell) not in self._told:  # plain Python: no cells, say it every time
            self._told.add((name, cell))
            why = "failed its check" if failed else "is not written yet"
            print(f"(your {name} {why}: this cell uses the reference instead)")
        return getattr(self.reference, name)(*args)

    def too_slow(self, name: str, measured: str, expected: float, instead: str | None = None,
                 why: str | None = None, limit: float = 30) -> bool:
        """True when the student's ``name`` would take about ``expected`` seconds (more than
        ``limit``) in a cell's long run: it prints so, with what was ``measured``, what the cells
        do ``instead`` and ``why`` (by default :attr:`SLOW`'s for ``name``), and marks the
        reference as standing in. False (nothing printed) when it is fast enough or the reference
        stands in already."""
        default_instead, default_why = self.SLOW.get(name, (None, None)) if isinstance(name, str) else (None, None)
        instead = default_instead if instead is None else instead
        why = default_why if why is None else why
        for arg, value in (("name", name), ("measured", measured), ("instead", instead), ("why", why)):
            if not isinstance(value, str):
                raise TypeError(f"{arg} must be a str, got {type(value).__name__}")
        for arg, value in (("expected", expected), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{arg} must be a number of seconds, got {type(value).__name__}")
        if name in self.using_reference or expected <= limit:
            return False
        print(f"your {name} {measured}, so the full run would take about {expected:.0f} s: {instead} ({why}).")
        self.using_reference.add(name)
        self.slow.add(name)
        return True

    def whose(self, name: str, noun: str = "") -> str:
        """"the reference's" where the reference stood in for the student's ``name``, else
        "yours"; with a ``noun``, "the reference's noun" or "your noun"."""
        for arg, value in (("name", name), ("noun", noun)):
            if not isinstance(value, str):
                raise TypeError(f"{arg} must be a str, got {type(value).__name__}")
        if name in self.using_reference:
            return f"the reference's {noun}".rstrip()
        return f"your {noun}" if noun else "yours"


def _cell_number() -> int | None:
    """The running Jupyter cell's execution count; None outside IPython (plain Python)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else shell.execution_count


__all__ = ["EXERCISES", "StandIns", "choose_functions", "cpu_seconds", "yours_or_reference"]
