"""The student's own functions or the references (backs notebook 07).

Notebook 07 asks for four functions (:data:`EXERCISES`); its training run and its
demonstration cells use the student's own where they pass their checkers, else the
references of :mod:`course_utils.training`, and say which and why:

* :func:`choose_functions` - keyword arguments for :func:`~course_utils.translator_training.fit`:
  ``fit(model, train, valid, **RECIPE["fit"], **choose_functions(...))``.
* :func:`yours_or_reference` - the function one demonstration cell runs.

The checkers are found at each call in ``course_utils.checks`` (a graded kernel replaces
that package with the grader's stand-in), so the training library itself never imports
the checkers.
"""

from __future__ import annotations

import contextlib
import io
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


__all__ = ["EXERCISES", "choose_functions", "yours_or_reference"]
