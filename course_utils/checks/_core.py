"""The machinery every checker shares (used by notebooks 01-07).

A checker (``check_<name>(student_fn_or_class)``) runs the student's code on fresh,
awkward, random inputs, compares with the reference, and, when they differ, compares
with the reference run *with a known mistake* to name that mistake. It never raises:
everything, including the checker's own bugs, becomes a :class:`CheckResult`.

Writing a checker::

    @checker("scaled_dot_product_attention")
    def check_scaled_dot_product_attention(fn):
        ...
        got = call_student(fn, q, k, v)          # StudentError on exception
        expect_close("output", got, ref, mistakes={"no scaling": no_scale_out, ...})
        return "6 cases with and without masks"  # success detail

Failure is signalled by raising :class:`Failure` (``fail(...)``) inside the body; the
decorator turns it, a student exception, or a stub's ``NotImplementedError`` into a
``CheckResult``.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


@dataclass
class CheckResult:
    """What a checker concluded. ``bool(result)`` is ``result.passed``.

    ``feedback`` is the full message printed in the notebook; ``mistake`` names the
    catalogued mistake that was recognised (``None`` if none or passed); ``status`` is
    one of ``"passed"``, ``"failed"``, ``"not implemented"``, ``"error"``.
    """

    exercise: str
    passed: bool
    feedback: str
    status: str = "failed"
    mistake: str | None = None
    _shown: bool = field(default=False, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.passed

    def show(self) -> None:
        """Show the verdict: HTML and this text in Jupyter, the text alone elsewhere."""
        from ._display import show_verdict

        show_verdict(self.feedback, self.status)
        self._shown = True

    def _ipython_display_(self) -> None:
        # the checker already showed its verdict; showing the result again would repeat it
        if not self._shown:
            self.show()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        """Both forms, for tools that render an object without IPython's display hook."""
        from ._display import mimebundle

        return mimebundle(self.feedback, self.status)

    def _repr_html_(self) -> str:
        from ._display import verdict_html

        return verdict_html(self.feedback, self.status)


class Failure(Exception):
    """Raised inside a checker body: the student's code ran but gave a wrong result."""

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(message)
        self.message = message
        self.mistake = mistake


class StudentError(Exception):
    """The student's code raised; ``exc`` is the original exception."""

    def __init__(self, exc: BaseException, context: str):
        super().__init__(str(exc))
        self.exc = exc
        self.context = context


def fail(message: str, mistake: str | None = None) -> None:
    raise Failure(message, mistake)


def _is_student_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR) or path.startswith(_TORCH_DIR):
        return False
    if path.startswith(os.path.dirname(os.__file__)) and "site-packages" not in path:
        return False  # the standard library
    return "site-packages" not in path and "dist-packages" not in path


def student_line(exc: BaseException) -> str | None:
    """``'line 7: return q @ k.T'`` for the deepest traceback frame in the student's code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_student_frame(f.filename)]
    if not frames:
        return None
    frame = frames[-1]
    code = (frame.line or "").strip()
    where = f"line {frame.lineno}" + (f" (in {frame.name})" if frame.name not in ("<module>",) else "")
    return f"{where}: {code}" if code else where


def call_student(fn: Callable[..., Any], *args: Any, context: str = "", **kwargs: Any) -> Any:
    """Call student code; any exception becomes a :class:`StudentError` for the decorator."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every student exception is reported, none escapes
        raise StudentError(exc, context) from exc


def describe_shape(x: Any) -> str:
    if isinstance(x, Tensor):
        return "(" + ", ".join(str(s) for s in x.shape) + ")"
    return type(x).__name__


def _close(a: Any, b: Tensor, atol: float, rtol: float) -> bool:
    if not isinstance(a, Tensor) or a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    try:
        return bool(torch.allclose(a.detach().double(), b.detach().double(), atol=atol, rtol=rtol, equal_nan=False))
    except (RuntimeError, TypeError):
        return False


def matches(a: Any, b: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """True when ``a`` is a tensor of ``b``'s shape with (nearly) its values."""
    return _close(a, b, atol, rtol)


# (catalogue name, plain-words diagnosis, candidate tensor or zero-argument callable)
Mistake = tuple[str, str, Any]


def expect_close(
    what: str,
    got: Any,
    expected: Tensor,
    mistakes: Mapping[str, Any] | Iterable[Mistake] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    case: str = "",
) -> None:
    """Fail with a precise diagnosis unless ``got`` equals ``expected``.

    ``mistakes`` lists what the code would return with each catalogued mistake: either
    ``(name, diagnosis, candidate)`` triples (``CheckResult.mistake`` gets the short
    ``name``, the feedback the plain-words ``diagnosis``) or a mapping ``{diagnosis:
    candidate}``. A candidate is a tensor or a zero-argument callable, computed only when
    ``got`` is wrong; one that cannot be computed is skipped. The first match is reported.
    """
    where = f" ({case})" if case else ""
    if not isinstance(got, Tensor):
        fail(f"{what}{where} should be a torch.Tensor, but your code returned {type(got).__name__}.")
    if mistakes is None:
        mistakes = ()
    triples = [(d, d, c) for d, c in mistakes.items()] if isinstance(mistakes, Mapping) else mistakes
    if not _close(got, expected, atol, rtol):
        for name, diagnosis, candidate in triples:
            try:
                value = candidate() if callable(candidate) else candidate
            except Exception:  # noqa: BLE001 - a mistake that cannot even be computed is not this one
                value = None
            if isinstance(value, Tensor) and _close(got, value, atol, rtol):
                fail(f"{what}{where}: {diagnosis}", mistake=name)
    if got.shape != expected.shape:
        fail(
            f"{what}{where} has shape {describe_shape(got)}, expected {describe_shape(expected)}.",
            mistake="wrong shape",
        )
    if got.dtype != expected.dtype and (got.dtype == torch.bool) != (expected.dtype == torch.bool):
        fail(f"{what}{where} has dtype {got.dtype}, expected {expected.dtype}.", mistake="wrong dtype")
    if not _close(got, expected, atol, rtol):
        if got.dtype == torch.bool or expected.dtype == torch.bool:
            wrong = int((got != expected).sum())
            fail(f"{what}{where}: {wrong} of {expected.numel()} entries are wrong.", mistake="values differ")
        diff = (got.detach().double() - expected.detach().double()).abs()
        if torch.isnan(got).any():
            fail(f"{what}{where} contains NaN.", mistake="NaN")
        idx = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])
        fail(
            f"{what}{where} has the right shape but the wrong values: the largest difference is "
            f"{float(diff.max()):.3g} at index {idx} (yours {float(got[idx]):.4f}, expected "
            f"{float(expected[idx]):.4f}).",
            mistake="values differ",
        )


# ---------------------------------------------------------------- input helpers
def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]`` from torch's generator (seeded fresh by ``@checker``)."""
    return int(torch.randint(low, high + 1, ()))


def check_unchanged(names: Iterable[str], tensors: Iterable[Any], originals: Iterable[Any], where: str) -> None:
    for name, t, t0 in zip(names, tensors, originals):
        if isinstance(t, Tensor) and not torch.equal(t, t0):
            fail(
                f"your code modified its input `{name}` in place ({where}). Work on new tensors "
                f"(e.g. `x = x + y`, not `x += y` or `x.masked_fill_(...)`); the caller still needs its input.",
                mistake="input modified in place",
            )


def random_mask(*shape: int) -> Tensor:
    """Bool mask whose every row (last axis) allows at least one key and blocks at least
    one, with rows that are not all identical (so a mis-broadcast mask shows)."""
    L_k = shape[-1]
    while True:
        rows = torch.rand(*shape).reshape(-1, L_k) < 0.5  # (rows, L_k)
        n = rows.size(0)
        allow = torch.randint(L_k, (n,))
        block = (allow + torch.randint(1, L_k, (n,))) % L_k  # never equal to allow
        rows[torch.arange(n), allow] = True
        rows[torch.arange(n), block] = False
        if n == 1 or not bool((rows == rows[0]).all()):
            return rows.reshape(shape)


def require_function(fn: Any, name: str) -> None:
    """The checker takes the student's function itself (not a class, not its result)."""
    if isinstance(fn, type) or not callable(fn):
        fail(f"pass your function itself: check_{name}({name}).", mistake="not a function")


def require_module_class(cls: Any, name: str) -> None:
    """The checker takes the student's class (it builds instances itself)."""
    if isinstance(cls, nn.Module):
        fail(
            f"pass the class itself, not an instance: check_...({name}), not "
            f"check_...({name}(...)). The check builds its own instances with its own sizes.",
            mistake="not a class",
        )
    if not isinstance(cls, type):
        fail(f"expected your class {name}, got {type(cls).__name__}.", mistake="not a class")
    if not issubclass(cls, nn.Module):
        fail(f"{name} should subclass nn.Module (class {name}(nn.Module): ...).", mistake="not a class")



def _raising_stub(exc: BaseException) -> tuple[str, str] | None:
    """``(qualified name, bare name)`` of the student's function that raised, e.g.
    ``("LayerNorm.__init__", "LayerNorm")`` or ``("causal_mask", "causal_mask")``."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        if _is_student_frame(tb.tb_frame.f_code.co_filename):
            found = tb.tb_frame
        tb = tb.tb_next
    if found is None:
        return None
    func = found.f_code.co_name
    owner = found.f_locals.get("self")
    if isinstance(owner, nn.Module):
        cls = type(owner).__name__
        return f"{cls}.{func}", cls
    return func, func


def _format_exception(exercise: str, err: StudentError) -> tuple[str, str]:
    exc = err.exc
    if isinstance(exc, NotImplementedError):
        stub = _raising_stub(exc)
        if stub is not None and stub[1] not in (exercise, "<module>"):
            # an unfinished earlier exercise used inside this one: blame the right code
            return (
                "not implemented",
                f"[ ] {exercise}: not implemented yet: it uses your `{stub[1]}`, and `{stub[0]}` "
                f"still raises NotImplementedError. Finish that exercise first, or continue with "
                f"the reference: run `from course_utils import {stub[1]}`, then the cell that "
                f"defines {exercise}, then this check again.",
            )
        return (
            "not implemented",
            f"[ ] {exercise}: not implemented yet. Replace `raise NotImplementedError()` "
            f"with your code, run that cell, then run this check again.",
        )
    line = student_line(exc)
    context = f" while {err.context}" if err.context else ""
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else ""
    text = f"[X] {exercise}: your code raised {type(exc).__name__}{context}"
    text += f": {first}" if first else "."
    if line:
        text += f"\n    at {line}"
    return "error", text


# Called with every CheckResult a checker returns, after its verdict is printed. The grader
# (course_utils.grade) appends one in its copy of a notebook to record the results; a
# listener that raises is ignored.
_RESULT_LISTENERS: list[Callable[[CheckResult], None]] = []


def checker(exercise: str) -> Callable[[Callable[..., str | None]], Callable[..., CheckResult]]:
    """Turn a checker body into a function that prints its verdict and never raises."""

    def decorate(body: Callable[..., str | None]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> CheckResult:
            mistake = None
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))  # fresh inputs every run
                    detail = body(*args, **kwargs)
                status, passed = "passed", True
                feedback = f"[OK] {exercise}: all checks passed" + (f" ({detail})." if detail else ".")
            except Failure as f:
                status, passed, mistake = "failed", False, f.mistake
                feedback = f"[X] {exercise}: {f.message}"
            except StudentError as err:
                status, feedback = _format_exception(exercise, err)
                passed = False
                mistake = "not implemented" if status == "not implemented" else None
            except NotImplementedError:
                status, passed, mistake = "not implemented", False, "not implemented"
                feedback = f"[ ] {exercise}: not implemented yet."
            except Exception as exc:  # noqa: BLE001 - a checker never raises at a student
                status, passed = "error", False
                line = student_line(exc)
                feedback = (
                    f"[X] {exercise}: the check could not run your code: {type(exc).__name__}: {exc}"
                    + (f"\n    at {line}" if line else "")
                )
            result = CheckResult(exercise, passed, feedback, status, mistake)
            if status != "passed" and exercise in HINTS:
                result.feedback += f'\n    Stuck? Ask for a hint: hint("{exercise}").'
            result.show()
            for listener in list(_RESULT_LISTENERS):
                try:
                    listener(result)
                except Exception:  # noqa: BLE001 - a listener's bug never reaches the student
                    pass
            return result

        # course_utils.grade maps the check_* calls it finds in a notebook to exercises with it
        run.exercise = exercise  # type: ignore[attr-defined]
        return run

    return decorate


# ---------------------------------------------------------------- hints
HINTS: dict[str, list[str]] = {}


def register_hints(exercise: str, hints: list[str]) -> None:
    """Hints go from gentle to specific; none gives away the full solution."""
    HINTS[exercise] = list(hints)


def hint(exercise: str, level: int | None = None) -> None:
    """Print hints for an exercise: ``hint("causal_mask")`` prints the first, then the next
    each time you call it again; ``hint("causal_mask", 2)`` prints the second."""
    name = exercise.__name__ if callable(exercise) else str(exercise)
    if name not in HINTS:
        known = ", ".join(sorted(HINTS)) or "none yet"
        print(f"No hints for {name!r}. Exercises with hints: {known}.")
        return
    hints = HINTS[name]
    if level is None:
        level = _HINT_LEVEL.get(name, 0) + 1
        _HINT_LEVEL[name] = min(level, len(hints))
    level = max(1, min(level, len(hints)))
    print(f"Hint {level}/{len(hints)} for {name}: {hints[level - 1]}")
    if level == len(hints):
        print(
            f"Still stuck? Continue with the reference: `from course_utils import {name}` "
            "and come back later."
        )


_HINT_LEVEL: dict[str, int] = {}
