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

Every check is replayable and bounded in time. The decorator seeds torch's generator (in a
fork, so the caller's stream is untouched) with the ``seed=`` keyword every checker accepts,
else ``$COURSE_CHECK_SEED``, else a fresh random seed; the seed is stored in
``CheckResult.seed`` and printed in every verdict that is not ``[OK]``, and the same seed
draws the same inputs again. A check that runs longer than :data:`TIME_LIMIT_S` ends with
"did not finish within N s" (an alarm signal on the main thread; elsewhere the check stops
waiting for a worker thread).
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

# The comparisons the checkers rely on, captured at import: a notebook that later rebinds
# one (`torch.allclose = lambda *a, **k: True`) cannot turn a wrong verdict into [OK].
# Checkers use these names, never the torch attributes.
allclose, equal, isclose, isnan, isfinite = torch.allclose, torch.equal, torch.isclose, torch.isnan, torch.isfinite

# Seconds a whole check may run before it ends with "did not finish" (generous: the
# slowest check takes a few seconds on a laptop); $COURSE_CHECK_TIME_LIMIT overrides it.
TIME_LIMIT_S = float(os.environ.get("COURSE_CHECK_TIME_LIMIT", "60"))


@dataclass
class CheckResult:
    """What a checker concluded. ``bool(result)`` is ``result.passed``.

    ``feedback`` is the full message printed in the notebook; ``mistake`` names the
    catalogued mistake that was recognised (``None`` if none or passed); ``status`` is
    one of ``"passed"``, ``"failed"``, ``"not implemented"``, ``"error"``; ``seed`` is the
    seed the inputs were drawn from (printed in every verdict but ``[OK]``).
    """

    exercise: str
    passed: bool
    feedback: str
    status: str = "failed"
    mistake: str | None = None
    seed: int | None = None  # the seed of the inputs: check_...(..., seed=seed) draws them again
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
    """Call student code; any exception becomes a :class:`StudentError` for the decorator.

    A numpy array returned (alone or inside a tuple or list) fails at once with "returned a
    numpy.ndarray, expected a torch.Tensor": nothing in the course returns one, and the
    checker's own tensor code would otherwise stumble on it with a misleading error."""
    try:
        result = fn(*args, **kwargs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every student exception is reported, none escapes
        # SystemExit too (sys.exit(), exit(), quit() in student code): it would end the check without a
        # verdict. KeyboardInterrupt (the student stops the cell) and the check's own time limit still escape.
        raise StudentError(exc, context) from exc
    parts = result if isinstance(result, (tuple, list)) else (result,)
    if any(_is_ndarray(p) for p in parts):
        where = f" ({context})" if context else ""
        fail(
            f"your code returned a numpy.ndarray{where}, expected a torch.Tensor: stay in torch "
            "(torch functions and tensor methods, not numpy), or convert with torch.from_numpy(...).",
            mistake="not a tensor",
        )
    return result


def _is_ndarray(x: Any) -> bool:
    # by name, so numpy is never imported here for a check that does not need it
    return type(x).__module__ == "numpy" and type(x).__name__ == "ndarray"


def describe_shape(x: Any) -> str:
    if isinstance(x, Tensor):
        return "(" + ", ".join(str(s) for s in x.shape) + ")"
    return "a numpy.ndarray" if _is_ndarray(x) else type(x).__name__


def _close(a: Any, b: Tensor, atol: float, rtol: float) -> bool:
    if not isinstance(a, Tensor) or a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(equal(a, b))
    try:
        return bool(allclose(a.detach().double(), b.detach().double(), atol=atol, rtol=rtol, equal_nan=False))
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
        kind = "a numpy.ndarray" if _is_ndarray(got) else type(got).__name__
        fail(f"{what}{where} should be a torch.Tensor, but your code returned {kind}.")
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
        if isnan(got).any():
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
        if isinstance(t, Tensor) and not equal(t, t0):
            fail(
                f"your code modified its input `{name}` in place ({where}). Work on new tensors "
                f"(e.g. `x = x + y`, not `x += y` or `x.masked_fill_(...)`); the caller still needs its input.",
                mistake="input modified in place",
            )


def dropout_scale(got: Any, kept: Tensor, atol: float = 1e-5) -> float | None:
    """``s`` when every entry of ``got`` is 0 or ``s * kept`` for one ``s``, with at least
    one dropped and one kept entry: what dropout with ``p = 1 - 1/s`` makes of ``kept``
    (on the many entries the checkers use, p > 0 never keeps or drops them all). Else None."""
    if not isinstance(got, Tensor) or got.shape != kept.shape or not got.is_floating_point():
        return None
    got, kept = got.detach().double(), kept.detach().double()
    big = kept.abs() > 100 * atol  # entries whose ratio is well defined
    ratio = got[big] / kept[big]
    kept_ones = ratio.abs() > 1e-3
    if not bool(kept_ones.any()) or bool(kept_ones.all()):
        return None
    s = float(ratio[kept_ones].median())
    dropped = isclose(got, torch.zeros_like(got), atol=atol, rtol=0)
    scaled = isclose(got, kept * s, atol=atol, rtol=1e-4)
    return s if bool((dropped | scaled).all()) else None


def dropout_pattern(got: Any, kept: Tensor, p: float, atol: float = 1e-5) -> bool:
    """True when ``got`` is ``kept`` after dropout with probability ``p`` (each entry 0, or
    kept and scaled by ``1 / (1 - p)``); see :func:`dropout_scale`."""
    s = dropout_scale(got, kept, atol)
    return s is not None and abs(s * (1 - p) - 1) < 1e-3


def fail_fixed_p(scale: float, p: float, where: str, case: str) -> None:
    """Dropout acts where it should but scales kept entries by ``scale``: the ``p`` it uses
    (``1 - 1/scale``) is not the ``dropout`` argument ``p``."""
    fail(
        f"in {case}: dropout acts on {where}, but with p = {1 - 1 / scale:.2g} (kept entries are scaled by "
        f"{scale:.3g} = 1/(1 - p)) instead of the dropout argument {p}: build nn.Dropout(dropout) from the "
        "argument, not a fixed number.",
        mistake="hard-coded dropout p",
    )


def fail_eval_dropout(what: str, case: str) -> None:
    """Dropout still acts after ``model.eval()``."""
    fail(
        f"in {case}: {what} differs from the one without dropout: dropout still acts in eval mode. Use the "
        "module nn.Dropout (or F.dropout(..., training=self.training)), which model.eval() switches off.",
        mistake="dropout ignores eval mode",
    )


def random_mask(*shape: int, p_true: float = 0.5) -> Tensor:
    """Bool mask whose every row (last axis) allows at least one key and blocks at least
    one (each other entry True with probability ``p_true``), with rows that are not all
    identical (so a mis-broadcast mask shows)."""
    L_k = shape[-1]
    while True:
        rows = torch.rand(*shape).reshape(-1, L_k) < p_true  # (rows, L_k)
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
        what = "a class" if isinstance(fn, type) else f"the result of calling it (you passed a {type(fn).__name__})"
        fail(f"pass the function itself, `check_{name}({name})`, not {what}.", mistake="not a function")


def raised(exc: BaseException, inline: bool = False) -> str:
    """``T: first line of the message`` and the student's line: on a line of its own
    (``\n    at line 7: ...``), or ``inline`` in parentheses."""
    first = (str(exc).strip().splitlines() or [""])[0]
    line = student_line(exc)
    text = f"{type(exc).__name__}" + (f": {first}" if first else ("" if inline else "."))
    if line:
        text += f" (at {line})" if inline else f"\n    at {line}"
    return text


def is_view_error(exc: BaseException) -> bool:
    """The classic ``.view`` on a non-contiguous tensor (after ``.transpose`` or a slice)."""
    return isinstance(exc, RuntimeError) and "view size is not compatible" in str(exc)


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
    if isinstance(exc, SystemExit):
        text = (f"[X] {exercise}: your code called sys.exit() (or exit(), quit()){context}, which would stop "
                "the whole program: a function ends with `return ...`; raise an exception such as ValueError "
                "for bad input.")
        return "error", text + (f"\n    at {line}" if line else "")
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else ""
    text = f"[X] {exercise}: your code raised {type(exc).__name__}{context}"
    text += f": {first}" if first else "."
    if line:
        text += f"\n    at {line}"
    return "error", text


class _TimeUp(BaseException):
    """Raised into the running code when a check's time is up. A BaseException, so neither
    the student's ``except Exception`` nor :func:`call_student` turns it into something else."""


def _choose_seed(seed: Any) -> int:
    """The ``seed=`` argument, else ``$COURSE_CHECK_SEED``, else a fresh random seed; a bad
    one fails the check with a message naming it (a checker never raises)."""
    source = "seed"
    if seed is None and os.environ.get("COURSE_CHECK_SEED", "").strip():
        seed, source = os.environ["COURSE_CHECK_SEED"].strip(), "$COURSE_CHECK_SEED"
        seed = int(seed) if seed.isdigit() else seed
    if seed is None:
        return int.from_bytes(os.urandom(4), "little")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        fail(f"{source} must be an int in [0, 2**63) (the seed a failed check printed), got {seed!r}.")
    return seed


def _within_time_limit(fn: Callable[[], Any], limit: float) -> Any:
    """``fn()``, or :class:`_TimeUp` once ``limit`` seconds have passed (``limit <= 0``: none).

    On the main thread (a notebook cell, pytest) a real-time alarm raises it inside the
    running Python code; an alarm already set by an outer user (a nested check, a test
    runner) is put back with what remained of its time. Off the main thread or without
    SIGALRM (Windows), ``fn`` runs in a daemon thread that is left behind if it hangs."""
    if limit <= 0:
        return fn()
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():

        def on_alarm(signum: int, frame: Any) -> None:
            raise _TimeUp()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        outer, _ = signal.setitimer(signal.ITIMER_REAL, limit)
        start = time.monotonic()
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer:
                signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise _TimeUp()
    if "error" in box:
        raise box["error"]
    return box["value"]


def checker(exercise: str) -> Callable[[Callable[..., str | None]], Callable[..., CheckResult]]:
    """Turn a checker body into a function that prints its verdict and never raises."""

    def decorate(body: Callable[..., str | None]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def run(*args: Any, seed: int | None = None, **kwargs: Any) -> CheckResult:
            mistake = None
            try:
                seed = _choose_seed(seed)

                def attempt() -> str | None:
                    with torch.random.fork_rng(devices=[]):
                        torch.manual_seed(seed)
                        return body(*args, **kwargs)

                detail = _within_time_limit(attempt, TIME_LIMIT_S)
                status, passed = "passed", True
                feedback = f"[OK] {exercise}: all checks passed" + (f" ({detail})." if detail else ".")
            except _TimeUp as up:
                status, passed, mistake = "error", False, "time limit"
                line = student_line(up)
                feedback = (
                    f"[X] {exercise}: your code did not finish within {TIME_LIMIT_S:g} s, so the check "
                    "stopped it. Look for a loop that never ends or a call that waits (a sleep, an input())."
                    + (f"\n    it was running line {line.removeprefix('line ')}" if line else "")
                )
            except Failure as f:
                status, passed, mistake = "failed", False, f.mistake
                feedback = f"[X] {exercise}: {f.message}"
            except StudentError as err:
                status, feedback = _format_exception(exercise, err)
                passed = False
                mistake = "not implemented" if status == "not implemented" else None
            except SystemExit as exc:  # student code called outside call_student (a class's own calls)
                status, feedback = _format_exception(exercise, StudentError(exc, ""))
                passed = False
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
            if status != "passed" and isinstance(seed, int):
                feedback += f"\n    (seed {seed}: {body.__name__}(..., seed={seed}) repeats these inputs)"
            result = CheckResult(exercise, passed, feedback, status, mistake, seed if isinstance(seed, int) else None)
            if status != "passed" and exercise in HINTS:
                result.feedback += f'\n    Stuck? Ask for a hint: hint("{exercise}").'
            result.show()
            # No hook here: the grader (course_utils.grade) calls the checkers itself and takes
            # the CheckResult they return, so nothing a notebook does can report a verdict.
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


def _hint_key(name: str) -> str:
    """The registered exercise name for either spelling of it: ``"multi_head_attention"``,
    ``"MultiHeadAttention"`` and ``"multiheadattention"`` all name ``MultiHeadAttention``."""
    if name in HINTS:
        return name
    folded = name.replace("_", "").replace(" ", "").lower()
    matches = [known for known in HINTS if known.replace("_", "").lower() == folded]
    return matches[0] if len(matches) == 1 else name


def hint(exercise: str, level: int | None = None) -> None:
    """Print hints for an exercise: ``hint("causal_mask")`` prints the first, then the next
    each time you call it again; ``hint("causal_mask", 2)`` prints the second. A class
    can be named either way: ``hint("MultiHeadAttention")`` or ``hint("multi_head_attention")``."""
    name = exercise.__name__ if callable(exercise) else str(exercise)
    name = _hint_key(name)
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
            "and come back later (fine for learning; a graded copy shows that exercise as "
            "'used the reference')."
        )


_HINT_LEVEL: dict[str, int] = {}


# ---------------------------------------------------------------- probes shared by the module checkers
def _param_module_groups(module: nn.Module) -> list[list[str]]:
    """Names under which one sub-module object that owns parameters appears more than once
    (``self.norm2 = self.norm1``), topmost names only, in registration order."""
    names: dict[int, list[str]] = {}
    for name, sub in module.named_modules(remove_duplicate=False):
        if name and any(True for _ in sub.parameters()):
            names.setdefault(id(sub), []).append(name)
    groups, seen = [], []
    for group in names.values():
        if len(group) > 1 and not any(n.startswith(p + ".") for n in group for p in seen):
            groups.append(group)
            seen += group
    return groups


def _span(p: Tensor) -> tuple[int, int]:
    start = p.data_ptr()
    return start, start + max(p.numel(), 1) * p.element_size()


def _param_storage_groups(module: nn.Module, explained: list[str]) -> list[list[str]]:
    """Names of parameters whose memory overlaps (``p.data = other.data``, ``p.set_(other)``,
    or one Parameter object under two names), except those inside ``explained`` modules."""
    params = [
        (n, p) for n, p in module.named_parameters(remove_duplicate=False)
        if not any(n.startswith(e + ".") for e in explained)
    ]  # fmt: skip
    groups: list[list[str]] = []
    spans: list[tuple[int, int]] = []
    for name, p in params:
        lo, hi = _span(p)
        for group, (glo, ghi) in zip(groups, spans):
            if lo < ghi and glo < hi:
                group.append(name)
                break
        else:
            groups.append([name])
            spans.append((lo, hi))
    return [g for g in groups if len(g) > 1]


def _unique_numel(module: nn.Module) -> int:
    """Parameter entries with distinct memory (what the optimiser really trains)."""
    return sum(p.numel() for p in module.parameters())  # parameters() drops repeated objects


def shared_roles(module: nn.Module, reference: nn.Module | None = None) -> list[list[str]]:
    """Groups of names in ``module`` (sub-modules or parameters) that are one and the same
    object or memory although ``reference`` keeps them apart: ``[["norm1", "norm2"]]`` for
    ``self.norm2 = self.norm1``, ``[["w_q", "w_k", "w_v"]]`` for one projection under three
    names, ``[["norm1.weight", "norm2.weight"]]`` for ``p.data = other.data``.

    Copying parameters into the reference by name cannot see this: one module under two
    names looks like two equal copies. A group is reported when two of its names are
    distinct roles of ``reference`` (names it has, not shared there); a group whose names
    the reference lacks is reported only when ``module`` trains fewer distinct parameter
    entries than ``reference`` (so an alias such as ``self.net = nn.Sequential(self.linear1,
    ...)`` and weights the reference ties too are fine). Modules without parameters (one
    nn.Dropout used twice) are never reported. Without ``reference`` every group is
    returned. ``[]``: nothing shared."""
    found = _param_module_groups(module)
    found += _param_storage_groups(module, [n for g in found for n in g])
    if reference is None:
        return found
    ref_subs = dict(reference.named_modules())
    ref_params = dict(reference.named_parameters())
    allowed = _param_module_groups(reference)
    allowed += _param_storage_groups(reference, [n for g in allowed for n in g])
    tied = {n for g in allowed for n in g}
    fewer = _unique_numel(module) < _unique_numel(reference)
    out = []
    for group in found:
        roles = [n for n in group if (n in ref_subs or n in ref_params) and n not in tied]
        if len(roles) >= 2 or (len(roles) < 2 and fewer and not any(n in tied for n in group)):
            out.append(group)
    return out


def _listed(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def require_distinct_roles(module: nn.Module, reference: nn.Module | None, what: str, why: str = "") -> None:
    """Fail ("modules shared") when :func:`shared_roles` finds a sharing in ``module``;
    ``why`` (a sentence) says why this model keeps the roles apart."""
    groups = shared_roles(module, reference)
    if not groups:
        return
    group = groups[0]
    subs = dict(module.named_modules(remove_duplicate=False))
    why = f" {why}" if why else ""
    if group[0] in subs:
        kind = type(subs[group[0]]).__name__
        fail(
            f"in your {what}, {_listed(group)} are one and the same {kind} object (e.g. "
            f"self.{group[1]} = self.{group[0]}): they share one set of weights, so the {what} has "
            f"fewer parameters than it should and these roles cannot learn different things.{why} Build a "
            f"separate {kind} for each of them in __init__.",
            mistake="modules shared",
        )
    params = dict(module.named_parameters(remove_duplicate=False))
    if len({id(params[n]) for n in group if n in params}) == 1:  # one Parameter under several names
        fail(
            f"in your {what}, the parameters {_listed(group)} are one and the same Parameter (e.g. "
            f"`self.{group[1]} = self.{group[0]}`): the roles are tied, one matrix learns for all of "
            f"them.{why} Leave each sub-module its own parameters.",
            mistake="modules shared",
        )
    fail(
        f"in your {what}, the parameters {_listed(group)} share the same memory (e.g. "
        f"`{group[1]}.data = {group[0]}.data`): they are one tensor under several names.{why} Give every "
        "parameter its own tensor: build each sub-module separately and do not assign one's data to another.",
        mistake="modules shared",
    )


def require_no_grad(grad_enabled: Iterable[bool], what: str, function: str, case: str) -> None:
    """Fail ("gradients tracked") when a model call of a generation loop ran with gradient
    tracking on: ``grad_enabled`` holds ``torch.is_grad_enabled()`` at each call (a hook's)."""
    if any(grad_enabled):
        fail(f"the model ran with gradient tracking on ({case}): {what} needs no gradients, and "
             "they cost memory at every step. Wrap the loop in `with torch.no_grad():` (or decorate "
             f"{function} with @torch.no_grad()).", mistake="gradients tracked")


class _CallSpy(torch.overrides.TorchFunctionMode):
    """Notes the torch functions called whose ``__name__`` is in ``names``."""

    def __init__(self, names: set[str]):
        super().__init__()
        self.names, self.seen = names, []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in self.names and name not in self.seen:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def forbidden_calls(run: Callable[[], Any], names: Iterable[str]) -> tuple[Any, list[str]]:
    """``(run(), the names in `names` of the torch functions it called)``, e.g.
    ``forbidden_calls(lambda: model(x), {"layer_norm"})`` sees ``F.layer_norm``,
    ``torch.layer_norm`` and ``nn.LayerNorm`` (which calls them); ``{"gelu"}`` sees
    ``F.gelu`` and ``nn.GELU``. Matched by the function's name, so every spelling of it
    counts; exceptions of ``run`` propagate."""
    spy = _CallSpy(set(names))
    with spy:
        result = run()
    return result, spy.seen


def require_own_code(run: Callable[[], Any], names: Iterable[str], what: str, instead: str) -> Any:
    """``run()``, failing ("forbidden call") when it calls one of the torch functions
    ``names`` that the exercise asks the student to write: ``instead`` says what to write."""
    result, seen = forbidden_calls(run, names)
    if seen:
        fail(
            f"your {what} calls torch's {seen[0]} (F.{seen[0]}, torch.{seen[0]} or the nn module that "
            f"wraps it): the exercise is to write it yourself, {instead}.",
            mistake="forbidden call",
        )
    return result
