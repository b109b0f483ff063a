"""The machinery every checker shares; its promises are in docs/course-contract.md
("For every checker").

A checker runs the student's code on fresh, awkward, random inputs, compares with the
reference and, when they differ, with the reference run *with a known mistake* to name it::

    @checker("scaled_dot_product_attention")
    def check_scaled_dot_product_attention(fn):
        got = call_student(fn, q, k, v)          # StudentError on exception
        expect_close("output", got, ref, mistakes={"no scaling": no_scale_out, ...})
        return "6 cases with and without masks"  # success detail

The body fails with :func:`fail`. The decorator turns that, a student's exception, a stub's
``NotImplementedError`` or the checker's own bug into a :class:`CheckResult` (it never
raises), seeds the draw (``seed=``, else ``$COURSE_CHECK_SEED``, else a fresh seed, printed
in every verdict but ``[OK]``) and ends the check after :data:`TIME_LIMIT_S` seconds.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import inspect
import os
import signal
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .._validate import names_used
from ._display import mimebundle, show_verdict, verdict_html

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

# The comparisons the checkers rely on, captured at import: a notebook that later rebinds
# one (`torch.allclose = lambda *a, **k: True`) cannot turn a wrong verdict into [OK].
# Checkers use these names, never the torch attributes.
allclose, equal, isclose, isnan, isfinite = torch.allclose, torch.equal, torch.isclose, torch.isnan, torch.isfinite

# Seconds a whole check may run (the slowest takes a few on a laptop); $COURSE_CHECK_TIME_LIMIT overrides it.
TIME_LIMIT_S = float(os.environ.get("COURSE_CHECK_TIME_LIMIT", "60"))


@dataclass
class CheckResult:
    """A checker's verdict; ``bool(result)`` is ``passed``. ``status``: ``"passed"``,
    ``"failed"``, ``"not implemented"`` or ``"error"``; ``mistake``: the catalogued name
    (``_mistakes.py``) or None; ``seed``: ``check_...(..., seed=seed)`` draws the inputs again."""

    exercise: str
    passed: bool
    feedback: str  # the verdict's text, as printed
    status: str = "failed"
    mistake: str | None = None
    seed: int | None = None
    _shown: bool = field(default=False, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.passed

    def show(self) -> None:
        """HTML and this text in Jupyter, the text alone elsewhere."""
        show_verdict(self.feedback, self.status)
        self._shown = True

    def _ipython_display_(self) -> None:
        if not self._shown:  # the checker already showed its verdict: not twice
            self.show()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return mimebundle(self.feedback, self.status)  # for tools without IPython's display hook

    def _repr_html_(self) -> str:
        return verdict_html(self.feedback, self.status)


class Failure(Exception):
    """Raised inside a checker body: the student's code ran but gave a wrong result."""

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(message)
        self.message, self.mistake = message, mistake


class StudentError(Exception):
    """The student's code raised; ``exc`` is the original exception."""

    def __init__(self, exc: BaseException, context: str):
        super().__init__(str(exc))
        self.exc, self.context = exc, context


def fail(message: str, mistake: str | None = None) -> None:
    raise Failure(message, mistake)


def _is_student_frame(filename: str) -> bool:
    path = os.path.abspath(filename)  # not this package, torch, the standard library or an installed package
    if path.startswith((_PACKAGE_DIR, _TORCH_DIR)) or "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(os.path.dirname(os.__file__))


def student_line(exc: BaseException) -> str | None:
    """``'line 7: return q @ k.T'`` for the deepest traceback frame in the student's code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_student_frame(f.filename)]
    if not frames:
        return None
    frame = frames[-1]
    code = (frame.line or "").strip()
    where = f"line {frame.lineno}" + (f" (in {frame.name})" if frame.name != "<module>" else "")
    return f"{where}: {code}" if code else where


def _at(exc: BaseException) -> str:
    """The student's line as a feedback line of its own, or ``""``."""
    line = student_line(exc)
    return f"\n    at {line}" if line else ""


def call_student(fn: Callable[..., Any], *args: Any, context: str = "", tensors: bool = True, **kwargs: Any) -> Any:
    """Call student code; any exception becomes a :class:`StudentError` for the decorator.
    A numpy array returned (alone or in a tuple or list) fails at once ("not a tensor"),
    before the checker's own tensor code stumbles on it with a misleading error; not where
    ``tensors`` is False (an exercise of plain Python, notebook 11's: its own checks say what it returns)."""
    try:
        result = fn(*args, **kwargs)
    except (Exception, SystemExit, KeyboardInterrupt, GeneratorExit) as exc:  # noqa: BLE001 - none escapes
        # SystemExit too (sys.exit(), exit(), quit() in student code): it would end the check without a
        # verdict; so would a KeyboardInterrupt or GeneratorExit the code raises itself. A real interrupt
        # (the student stops the cell) and the check's own time limit still escape.
        if isinstance(exc, KeyboardInterrupt) and _INTERRUPTED.is_set():
            raise
        raise StudentError(exc, context) from exc
    if tensors and any(_is_ndarray(p) for p in (result if isinstance(result, (tuple, list)) else (result,))):
        where = f" ({context})" if context else ""
        fail(f"your code returned a numpy.ndarray{where}, expected a torch.Tensor: stay in torch (torch functions "
             "and tensor methods, not numpy), or convert with torch.from_numpy(...).", mistake="not a tensor")
    return result


def _is_ndarray(x: Any) -> bool:
    # by name, so numpy is never imported here for a check that does not need it
    return type(x).__module__ == "numpy" and type(x).__name__ == "ndarray"


def describe_shape(x: Any) -> str:
    if isinstance(x, Tensor):
        return "(" + ", ".join(str(s) for s in x.shape) + ")"
    return "a numpy.ndarray" if _is_ndarray(x) else type(x).__name__


def _close(a: Any, b: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """True when ``a`` is a tensor of ``b``'s shape with (nearly) its values."""
    if not isinstance(a, Tensor) or a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(equal(a, b))
    try:
        return bool(allclose(a.detach().double(), b.detach().double(), atol=atol, rtol=rtol, equal_nan=False))
    except (RuntimeError, TypeError):
        return False


matches = _close  # the checkers' name for it

# (catalogue name, plain-words diagnosis, candidate tensor or zero-argument callable)
Mistake = tuple[str, str, Any]


def expect_close(what: str, got: Any, expected: Tensor, mistakes: Mapping[str, Any] | Iterable[Mistake] | None = None,
                 atol: float = 1e-5, rtol: float = 1e-4, case: str = "") -> None:
    """Fail with a precise diagnosis unless ``got`` equals ``expected``. ``mistakes``: what
    the code would return with each catalogued mistake, as ``(name, diagnosis, candidate)``
    or ``{diagnosis: candidate}`` (the name is then the diagnosis); a candidate is a tensor
    or a zero-argument callable, computed only when ``got`` is wrong (one that raises is
    skipped). The first match is reported, else the shape, dtype or values that differ."""
    where = f" ({case})" if case else ""
    has = "have" if what.endswith("s") and not what.endswith("ss") else "has"  # the logits have, the loss has
    if not isinstance(got, Tensor):
        fail(f"{what}{where} should be a torch.Tensor, but your code returned {describe_shape(got)}.")
    if _close(got, expected, atol, rtol):
        return
    triples = [(d, d, c) for d, c in mistakes.items()] if isinstance(mistakes, Mapping) else mistakes or ()
    for name, diagnosis, candidate in triples:
        try:
            value = candidate() if callable(candidate) else candidate
        except Exception:  # noqa: BLE001 - a mistake that cannot even be computed is not this one
            value = None
        if isinstance(value, Tensor) and _close(got, value, atol, rtol):
            fail(f"{what}{where}: {diagnosis}", mistake=name)
    if got.shape != expected.shape:
        fail(f"{what}{where} {has} shape {describe_shape(got)}, expected {describe_shape(expected)}.",
             mistake="wrong shape")
    if got.dtype != expected.dtype and (got.dtype == torch.bool) != (expected.dtype == torch.bool):
        fail(f"{what}{where} {has} dtype {got.dtype}, expected {expected.dtype}.", mistake="wrong dtype")
    if got.dtype == torch.bool or expected.dtype == torch.bool:
        wrong = int((got != expected).sum())
        fail(f"{what}{where}: {wrong} of {expected.numel()} entries are wrong.", mistake="values differ")
    diff = (got.detach().double() - expected.detach().double()).abs()
    if isnan(got).any():
        fail(f"{what}{where} contain{'' if has == 'have' else 's'} NaN.", mistake="NaN")  # the logits contain
    if got.dim() == 0:  # one number: no index to show
        fail(f"{what}{where} is {float(got.detach()):.5f}, expected {float(expected.detach()):.5f}.",
             mistake="values differ")
    idx = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])

    def shown(t: Tensor) -> str:  # ids as ids (13), not 13.0000; detached: no requires_grad warning in the verdict
        t = t.detach()
        return str(int(t[idx])) if not (t.is_floating_point() or t.is_complex()) else f"{float(t[idx]):.4f}"

    fail(f"{what}{where} {has} the right shape but the wrong values: the largest difference is {float(diff.max()):.3g} "
         f"at index {idx} (yours {shown(got)}, expected {shown(expected)}).",
         mistake="values differ")


# ---------------------------------------------------------------- input helpers
def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]`` from torch's generator (seeded fresh by ``@checker``)."""
    return int(torch.randint(low, high + 1, ()))


def check_unchanged(names: Iterable[str], tensors: Iterable[Any], originals: Iterable[Any], where: str) -> None:
    for name, t, t0 in zip(names, tensors, originals):
        if isinstance(t, Tensor) and not equal(t, t0):
            fail(f"your code modified its input `{name}` in place ({where}). Work on new tensors (e.g. `x = x + y`, "
                 "not `x += y` or `x.masked_fill_(...)`); the caller still needs its input.",
                 mistake="input modified in place")


def module_state(module: nn.Module) -> dict[str, Tensor]:
    """A copy of ``module``'s parameters and buffers, for :func:`check_state_unchanged`."""
    return {name: t.detach().clone() for name, t in module.state_dict().items()}


def check_state_unchanged(module: nn.Module, before: dict[str, Tensor], case: str, fix: str = "") -> None:
    """A forward call must leave the parameters and buffers as they were: an in-place change
    (``weight.mul_(...)`` under ``no_grad``) compounds with every call, so its effect on the
    values would be misread as another mistake. Call it after the first forward."""
    for name, t in module.state_dict().items():
        old = before.get(name)
        # exact, but for a buffer re-cast to another dtype (the input's), whose values round
        if old is not None and not equal(t, old) and (t.dtype == old.dtype or not _close(t.detach(), old)):
            fail(f"your forward changed `{name}` in place ({case}): every call changes it again, so the same input "
                 "gives other numbers at each call. A forward computes new tensors and leaves the module's own state "
                 f"alone. {fix}".rstrip(), mistake="parameters modified in place")


def dropout_scale(got: Any, kept: Tensor, atol: float = 1e-5) -> float | None:
    """``s`` when every entry of ``got`` is 0 or ``s * kept`` for one ``s``, with at least
    one of each (what dropout with ``p = 1 - 1/s`` makes of ``kept``), else None."""
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
    """True when ``got`` is ``kept`` after dropout with probability ``p``."""
    s = dropout_scale(got, kept, atol)
    return s is not None and abs(s * (1 - p) - 1) < 1e-3


def fail_fixed_p(scale: float, p: float, where: str, case: str) -> None:
    """Dropout acts on ``where`` but scales kept entries by ``scale``, not ``1 / (1 - p)``."""
    fail(f"in {case}: dropout acts on {where}, but with p = {1 - 1 / scale:.2g} (kept entries are scaled by "
         f"{scale:.3g} = 1/(1 - p)) instead of the dropout argument {p}: build nn.Dropout(dropout) from the "
         "argument, not a fixed number.", mistake="hard-coded dropout p")


def fail_eval_dropout(what: str, case: str) -> None:
    fail(f"in {case}: {what} differs from the one without dropout: dropout still acts in eval mode. Use the "
         "module nn.Dropout (or F.dropout(..., training=self.training)), which model.eval() switches off.",
         mistake="dropout ignores eval mode")


def random_mask(*shape: int, p_true: float = 0.5) -> Tensor:
    """Bool mask whose every row (last axis) allows and blocks at least one key (others True with
    probability ``p_true``), the rows not all identical (so a mis-broadcast mask shows)."""
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
    require_contract_parameters(fn, name)


def own_helper_failure(fn: Callable[..., Any], name: str, reference: Callable[..., Any],
                       check: Callable[..., Any]) -> str | None:
    """Why the student's own ``name`` (the one ``fn``'s globals hold, where ``fn`` calls it and it is
    not the ``reference``) fails its ``check``: the mistake's name or "it raises X"; None where
    ``fn`` uses no helper of its own, the helper passes, is a stub, or its check cannot run. The
    check's body runs quietly (no verdict shown, no second timer), in a forked random state."""
    helper = getattr(fn, "__globals__", {}).get(name)
    if name not in names_used(fn) or not callable(helper) or helper is reference:
        return None
    try:
        with torch.random.fork_rng(devices=[]):
            check.__wrapped__(helper)
        return None
    except Failure as f:
        return f.mistake or "its check fails"
    except StudentError as err:
        return None if isinstance(err.exc, NotImplementedError) else f"it raises {type(err.exc).__name__}"
    except Exception:  # noqa: BLE001 - the helper's own check could not run: the caller's verdict stands
        return None


def raised(exc: BaseException, inline: bool = False) -> str:
    """``T: first line of the message`` and the student's line: on a line of its own
    (``\n    at line 7: ...``), or ``inline`` in parentheses."""
    first = (str(exc).strip().splitlines() or [""])[0]
    text = type(exc).__name__ + (f": {first}" if first else ("" if inline else "."))
    if not inline:
        return text + _at(exc)
    line = student_line(exc)
    return text + (f" (at {line})" if line else "")


def fail_view_error(exc: BaseException, why: str, fix: str) -> None:
    """Name the classic ``.view`` on a non-contiguous tensor (after ``.transpose`` or a slice),
    saying ``why`` the tensor is not contiguous here and the ``fix``; other errors pass."""
    if isinstance(exc, RuntimeError) and "view size is not compatible" in str(exc):
        fail(f"your code raised RuntimeError: .view cannot reshape a non-contiguous tensor (its entries out of "
             f"memory order): {why}. Use {fix}." + _at(exc), mistake="view on a non-contiguous tensor")


# The contract's parameter names that callers pass by keyword (docs/course-contract.md,
# "Parameter names"): {exercise: {"" for a function, else "__init__"/"forward": (names, signature shown)}}
_LAYER = ("d_model", "num_heads", "d_ff", "dropout", "norm_first")
_LAYER_SIG = "(d_model, num_heads, d_ff, dropout=0.0, norm_first=False)"
_STACK_SIG = "(num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False)"
_DECODER_FORWARD = (("tgt_mask", "memory_mask"), "(x, memory, tgt_mask=None, memory_mask=None)")
CONTRACT_PARAMETERS: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "scaled_dot_product_attention": {"": (("mask",), "(query, key, value, mask=None)")},
    "padding_mask": {"": (("pad_id",), "(tokens, pad_id)")},
    "MultiHeadAttention": {"__init__": (("d_model", "num_heads", "dropout"), "(d_model, num_heads, dropout=0.0)"),
                           "forward": (("mask",), "(query, key, value, mask=None)")},
    "PositionalEncoding": {"__init__": (("d_model", "max_len", "dropout"), "(d_model, max_len=5000, dropout=0.0)")},
    "TokenEmbedding": {"__init__": (("vocab_size", "d_model"), "(vocab_size, d_model)")},
    "LayerNorm": {"__init__": (("d_model", "eps"), "(d_model, eps=1e-5)")},
    "FeedForward": {"__init__": (("d_model", "d_ff", "dropout"), "(d_model, d_ff, dropout=0.0)")},
    "EncoderLayer": {"__init__": (_LAYER, _LAYER_SIG), "forward": (("mask",), "(x, mask=None)")},
    "Encoder": {"__init__": (("num_layers", *_LAYER), _STACK_SIG), "forward": (("mask",), "(x, mask=None)")},
    "DecoderLayer": {"__init__": (_LAYER, _LAYER_SIG), "forward": _DECODER_FORWARD},
    "Decoder": {"__init__": (("num_layers", *_LAYER), _STACK_SIG), "forward": _DECODER_FORWARD},
    # notebook 10 passes RMSNorm's width by position only (Norm(d_model, eps), cls(32)) and eps by keyword (eps=0.0)
    "RMSNorm": {"__init__": (("eps",), "(d_model, eps=1e-6)")},
    "rotary_tables": {"": (("base",), "(d_k, max_len, base=10000.0, device=None)")},
    "apply_rotary": {"": (("offset",), "(x, cos, sin, offset=0)")},
    "GroupedQueryAttention": {"__init__": (("d_model", "num_heads", "n_kv_heads"), "(d_model, num_heads, n_kv_heads=None)"),  # noqa: E501
                              "forward": (("mask",), "(x, cos=None, sin=None, mask=None, offset=0)")},
}


def require_contract_parameters(obj: Any, exercise: str) -> None:
    """Fail ("parameter renamed") when the function or class ``obj`` lacks one of the
    names of :data:`CONTRACT_PARAMETERS` as a keyword. ``**kwargs`` accepts every name; an
    unreadable signature, a method not written yet or an exercise not listed: no verdict."""
    for part, (names, shown) in CONTRACT_PARAMETERS.get(exercise, {}).items():
        target = getattr(obj, part, None) if part else obj
        if part and target is getattr(nn.Module, part, None):
            continue  # not written yet (nn.Module's own forward): the check reports that itself
        try:
            params = inspect.signature(target).parameters
        except (TypeError, ValueError):
            continue
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        named = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        missing = [n for n in names if n not in named]
        if missing:
            title, yours = f"{exercise}.{part}" if part else exercise, ", ".join(n for n in params if n != "self")
            fail(f"your {title} has no parameter named `{missing[0]}` (yours: ({yours})); the exercise's signature "
                 f"is {title}{'(self, ' + shown[1:] if part else shown}. Callers pass `{missing[0]}=...` by keyword "
                 "(later cells, the next exercises), which raises TypeError under another name: keep the exercise's "
                 "names (extra optional parameters are fine).", mistake="parameter renamed")
        positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD and n in names]
        if positional != [n for n in names if n in positional]:  # the names right, their order not
            title, yours = f"{exercise}.{part}" if part else exercise, ", ".join(n for n in params if n != "self")
            fail(f"your {title} takes its parameters in another order (yours: ({yours})); the exercise's signature "
                 f"is {title}{'(self, ' + shown[1:] if part else shown}. Callers also pass them by position, so "
                 f"with your order `{positional[0]}` receives what is meant for `{[n for n in names if n in positional][0]}`: "  # noqa: E501
                 "keep the exercise's order (the body can stay as it is).", mistake="parameters in wrong order")


def check_dtype_follows(
    build: Callable[[], nn.Module], call: Callable[[nn.Module, torch.dtype], Any], what: str, case: str,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16),
    follow: str = "the input's dtype (.to(x.dtype))",
) -> None:
    """The dtype rule (the contract's "Dtype rule"): for each of ``dtypes``, ``build()``'s
    fresh module (eval mode; as built for float32, else ``.to(dtype)``) run by ``call(module,
    dtype)`` on inputs of that dtype returns floating tensors of that dtype only, else
    "dtype not preserved", naming the dtype got. ``follow`` says whose dtype new tensors
    take (a module fed integer ids: its weight's, not the input's)."""
    for dtype in dtypes:
        module = build().eval()
        module = module if dtype == torch.float32 else module.to(dtype)
        with torch.no_grad():
            try:
                out = call(module, dtype)
            except StudentError as err:
                if dtype == torch.float32 or "dtype" not in str(err.exc) and "scalar type" not in str(err.exc):
                    raise
                fail(f"your {what}, converted with .to({dtype}) ({case}), raised {raised(err.exc)}\n    Part of it did "
                     "not follow .to(): a layer or tensor kept outside the module's registered parameters and buffers "
                     "(a plain attribute tensor, a Python list or dict of layers), or a tensor created in forward in a "
                     "fixed dtype. Register sub-modules as attributes (or nn.ModuleList), tables with register_buffer, "
                     f"and create new tensors (and casts: not .float()) in {follow}.", mistake="dtype not preserved")
        for got in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(got, Tensor) and got.is_floating_point() and got.dtype != dtype:
                cause = {
                    torch.float64: "a float64 tensor reached the result (a table or constant built in float64, "
                    "or .double()); build tables in float32 (or convert them, .to(x.dtype))",
                    torch.float32: "something casts to float32 (.float()) or adds a float32 tensor to "
                    f"the {dtype} input; convert it to {follow} or leave the cast out",
                }.get(got.dtype, "remove the cast")
                fail(f"your {what}, {'as built' if dtype == torch.float32 else f'converted with .to({dtype})'} "
                     f"({case}, any floating input in {dtype} too), returns {got.dtype} instead of {dtype}: {cause}. "
                     "The output's dtype follows the module's and its input's, so that the next layer does not fail "
                     "with 'mat1 and mat2 must have the same dtype'.", mistake="dtype not preserved")


# Tensor methods that copy values out into Python: a tensor rebuilt from them lands on the CPU.
_TO_PYTHON = {"tolist", "item", "numpy"}


# Tensor factories: without device= they build on the CPU, whatever the inputs' device.
_FACTORIES = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange,
              torch.eye, torch.linspace, torch.rand, torch.randn, torch.randint, torch.randperm}
_DEVICE_FIX = ("create every new tensor on the input's device (device=x.device, or torch.ones_like / "
               "zeros_like / full_like), and stay in torch operations")


def _tensors(obj: Any) -> Iterator[Tensor]:
    """The tensors in ``obj``, inside tuples, lists and dict values too."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (tuple, list, dict)):
        for item in obj.values() if isinstance(obj, dict) else obj:
            yield from _tensors(item)


class _HostWatch(torch.overrides.TorchFunctionMode):
    """A second device stood in for on the CPU: a tensor of a factory called without ``device=``
    is marked as the CPU's, and so is every result computed from one, unless moved with
    ``.to(device)``. (0-d tensors mix with any device; ``copy_`` and assignment copy across; a
    CPU index picks from a tensor on any device.)"""

    def __init__(self) -> None:
        super().__init__()
        self.marked: dict[int, Tensor] = {}  # id -> tensor, kept alive so the ids stay unique
        self.to_python: list[str] = []  # .tolist(), .item(), .numpy() or .cpu() called
        self.factories: list[str] = []  # the factories called without device=, by name (torch.rand, ...)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in _TO_PYTHON:
            self.to_python.append(name)
        if func in _FACTORIES:  # torch.as_tensor(t) stays where t is
            data = args[0] if args and isinstance(args[0], Tensor) else None
            mark = kwargs.get("device") is None and (data is None or id(data) in self.marked)
            if mark and data is None and f"torch.{name}" not in self.factories:
                self.factories.append(f"torch.{name}")
        elif name == "cpu" or (name == "to" and any(  # .to("cpu") spelled out; .to(x.device) is a torch.device
                isinstance(a, str) and a.startswith("cpu") for a in (*args[1:], kwargs.get("device")))):
            mark = True
            self.to_python.append("cpu")
        elif name in ("to", "cuda"):
            moved = name == "cuda" or kwargs.get("device") is not None or any(
                isinstance(a, (str, torch.device, Tensor)) for a in args[1:])
            mark = not moved and id(args[0]) in self.marked
            if moved:  # .to(the device it is on) returns the tensor itself: no longer the CPU's here
                self.marked.pop(id(out), None)
        elif name == "__getitem__":  # a CPU index picks from a tensor on any device
            mark = id(args[0]) in self.marked
        else:
            mark = name not in ("copy_", "__setitem__") and any(id(t) in self.marked for t in _tensors((args, kwargs)))
        for t in _tensors(out) if mark else ():
            if t.dim() > 0:
                self.marked[id(t)] = t
        return out


def check_input_device(on_meta: Callable[[], Any] | None, on_cpu: Callable[[], Any], what: str, case: str,
                       fix: str = _DEVICE_FIX, host: Callable[[], tuple[Tensor, ...]] | None = None) -> None:
    """The result stays on the inputs' device. ``on_meta()`` runs the student's code with its
    tensor inputs on PyTorch's "meta" device (shapes and dtypes, no data; on every machine),
    which stands in for a GPU: a returned tensor elsewhere, or a clash with a tensor built on
    the CPU (``torch.ones(...)`` without ``device=``), is "wrong device". When the meta run
    fails for another reason (meta has no values: ``.item()``, a loop over them), or without
    ``on_meta``, ``on_cpu()`` (the same call on the CPU) runs under :class:`_HostWatch`: a
    result built from a factory called without ``device=`` is "wrong device"; a loop writing
    values into a tensor made on the input's device passes. Any other failure is no verdict.
    ``host()`` (tensors that stay on the CPU, e.g. a module's plain tensor attributes, asked for
    after the meta run): the watch runs after a passing meta run too (an index on the CPU passes
    on meta), with these marked."""
    if on_meta is not None:
        try:
            out = on_meta()
        except Exception as exc:  # noqa: BLE001 - the student's code on meta: a device clash, else the watch
            first = (str(exc).strip().splitlines() or [""])[0]
            if "device" in first:
                fail(f"{what} mixes devices ({case}; the inputs were on PyTorch's 'meta' device, which stands in "
                     f"for a GPU): {type(exc).__name__}: {first}. A tensor created without device= (torch.ones, "
                     f"torch.zeros, torch.tensor, torch.arange) lands on the CPU; {fix}.", mistake="wrong device")
        else:
            for got in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(got, Tensor) and got.device.type != "meta":
                    fail(f"{what} returned a tensor on {got.device} for inputs on PyTorch's 'meta' device ({case}; "
                         f"it stands in for a GPU): the result must stay on the input's device; {fix}.",
                         mistake="wrong device")
            if host is None:
                return
    watch = _HostWatch()
    watch.marked.update((id(t), t) for t in (host() if host is not None else ()))
    try:
        with watch:
            out = on_cpu()
    except Exception:  # noqa: BLE001 - the plain run passed; nothing more to learn
        return
    for got in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(got, Tensor) and id(got) in watch.marked:
            made = (", ".join(watch.factories) + " here" if watch.factories
                    else "torch.zeros, torch.full, torch.tensor, ...")
            how = f"builds the result from a tensor created without device= ({made})"
            if watch.to_python:
                how = ("moves a tensor to the CPU (.cpu() or .to('cpu')) and builds the result from it"
                       if "cpu" in watch.to_python
                       else f"copies the tensor's values into Python (.{watch.to_python[0]}()) and builds the result "
                       "from them")
            fail(f"{what} {how} ({case}): such a tensor lands on the CPU whatever the input's device, so on a GPU "
                 f"(Colab) the result is on the wrong device or the code fails; {fix}.", mistake="wrong device")


def _plain_tensors(module: nn.Module) -> dict[str, Tensor]:
    """``{"self.part.name": tensor}``: the tensors (not 0-d) kept as plain attributes, not buffers."""
    return {f"self.{name}.{key}".replace("self..", "self."): value for name, part in module.named_modules()
            for key, value in vars(part).items() if isinstance(value, Tensor) and value.dim() > 0}


def check_module_device(model: nn.Module, args: tuple[Any, ...], what: str, case: str, fix: str = _DEVICE_FIX) -> None:
    """:func:`check_input_device` for a module: the meta run calls a deep copy moved with
    ``.to("meta")`` (a plain tensor attribute, not a buffer, stays on the CPU and clashes), then
    the CPU watch runs the module itself, its plain tensor attributes marked as the CPU's (an
    embedding indexed with a CPU tensor passes on meta), except those the meta run replaced with
    tensors on meta (a cache rebuilt when the input's device changes follows the device). Call it
    last, once the values are right."""
    plain = _plain_tensors(model)
    if plain:  # a likely cause: say which attribute and how to register it
        fix = (f"{fix}. If forward uses `{next(iter(plain))}`: it is a plain tensor attribute, not a registered buffer, "  # noqa: E501
               "so .to(device) does not move it (and state_dict misses it); register it in __init__ with "
               "self.register_buffer(name, tensor, persistent=False)")
    try:
        meta = copy.deepcopy(model).to("meta")
    except Exception:  # noqa: BLE001 - an uncopyable module: the CPU watch alone
        meta = None

    def run(module: nn.Module, device: str | None) -> Any:
        with torch.no_grad():
            return module(*(a.to(device or a.device, copy=True) if isinstance(a, Tensor) else a for a in args))

    def host() -> tuple[Tensor, ...]:
        rebuilt = {n for n, t in (_plain_tensors(meta) if meta is not None else {}).items() if t.device.type == "meta"}
        return tuple(value for name, value in plain.items() if name not in rebuilt)

    check_input_device(None if meta is None else lambda: run(meta, "meta"), lambda: run(model, None), what, case, fix,
                       host=host)


def require_module_class(cls: Any, name: str) -> None:
    """The checker takes the student's class (it builds instances itself)."""
    if isinstance(cls, nn.Module):
        fail(f"pass the class itself, not an instance: check_...({name}), not check_...({name}(...)). The check "
             "builds its own instances with its own sizes.", mistake="not a class")
    if not isinstance(cls, type):
        fail(f"expected your class {name}, got {type(cls).__name__}.", mistake="not a class")
    if not issubclass(cls, nn.Module):
        fail(f"{name} should subclass nn.Module (class {name}(nn.Module): ...).", mistake="not a class")
    require_contract_parameters(cls, name)


# ---------------------------------------------------------------- the decorator
def _raising_stub(exc: BaseException, tested: Any = None) -> tuple[str, str, Any] | None:
    """``(qualified name, bare name, class or function)`` of the student's function that
    raised, e.g. ``("LayerNorm.__init__", "LayerNorm", LayerNorm)`` or ``("causal_mask",
    "causal_mask", causal_mask)``; ``None`` when it is ``tested`` itself (the checked class
    or function, whatever its name)."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        if _is_student_frame(tb.tb_frame.f_code.co_filename):
            found = tb.tb_frame
        tb = tb.tb_next
    if found is None:
        return None
    func, owner = found.f_code.co_name, found.f_locals.get("self")
    if isinstance(owner, nn.Module):
        kind = type(owner)
        return None if kind is tested else (f"{kind.__name__}.{func}", kind.__name__, kind)
    return None if found.f_code is getattr(tested, "__code__", None) else (func, func, found.f_globals.get(func))


def _reference_name(stub: Any, name: str) -> str | None:
    """The course's reference for the student's ``stub`` (named ``name``): the export of that
    name, else the one export whose parameters have the same names (``LN(d_model, eps)``:
    ``LayerNorm``), and where several have them, the one with the same defaults too
    (``eps=1e-5``: ``LayerNorm``, not ``RMSNorm``); ``None`` when none or several fit."""
    import course_utils  # here: course_utils imports the checkers

    if name in getattr(course_utils, "__all__", ()):
        return name

    def params(obj: Any) -> tuple[tuple[str, Any], ...] | None:
        try:
            found = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
        except (TypeError, ValueError):
            return None
        return tuple((n, p.default) for n, p in found.items() if n not in ("self", "args", "kwargs"))

    mine = params(stub)
    if not mine:
        return None
    exports = [getattr(course_utils, n, None) for n in getattr(course_utils, "__all__", ())]
    same_kind = [(n, params(e)) for n, e in zip(getattr(course_utils, "__all__", ()), exports)
                 if isinstance(stub, type) == isinstance(e, type) and callable(e)]
    fits = [n for n, theirs in same_kind if theirs is not None and [k for k, _ in theirs] == [k for k, _ in mine]]
    if len(fits) > 1:
        def same(theirs: tuple[tuple[str, Any], ...]) -> bool:
            try:  # a default may be anything the student wrote (a tensor's == is not a bool)
                return all(a is b or bool(a == b) for (_, a), (_, b) in zip(theirs, mine))
            except Exception:  # noqa: BLE001
                return False

        fits = [n for n, theirs in same_kind if n in fits and same(theirs)]
    return fits[0] if len(fits) == 1 else None


# Set when SIGINT arrives during a check: a KeyboardInterrupt then is the student stopping the
# cell, which must stop it; any other KeyboardInterrupt was raised by the student's code.
_INTERRUPTED = threading.Event()


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[None]:
    """Note a real SIGINT (in :data:`_INTERRUPTED`) while the body runs, then act as before."""
    _INTERRUPTED.clear()
    if threading.current_thread() is not threading.main_thread():
        yield  # no signal reaches this thread: every KeyboardInterrupt here is the student's
        return
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum: int, frame: Any) -> None:
        _INTERRUPTED.set()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, on_interrupt)
    except (ValueError, OSError, TypeError):  # signals unavailable here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _TimeUp(BaseException):
    """Raised into the running code when a check's time is up. A BaseException, so neither
    the student's ``except Exception`` nor :func:`call_student` turns it into something else."""


def _verdict(exercise: str, exc: BaseException, tested: Any = None) -> tuple[str, str | None, str]:
    """``(status, mistake, feedback)`` of a check that ended with ``exc``; ``tested``: the
    checked class or function (a stub of its own is this exercise's, whatever its name)."""
    if isinstance(exc, Failure):
        return "failed", exc.mistake, f"[X] {exercise}: {exc.message}"
    if isinstance(exc, _TimeUp):
        line = student_line(exc)
        return "error", "time limit", (
            f"[X] {exercise}: your code did not finish within {TIME_LIMIT_S:g} s, so the check "
            "stopped it. Look for a loop that never ends or a call that waits (a sleep, an input())."
            + (f"\n    it was running line {line.removeprefix('line ')}" if line else "")
        )
    if isinstance(exc, (SystemExit, KeyboardInterrupt, GeneratorExit)):  # raised outside call_student
        exc = StudentError(exc, "")  # (a class's own calls): the student's code all the same
    if not isinstance(exc, StudentError):
        if isinstance(exc, NotImplementedError):
            return "not implemented", "not implemented", f"[ ] {exercise}: not implemented yet."
        return "error", None, (  # a bug in the checker itself
            f"[X] {exercise}: the check could not run your code: {type(exc).__name__}: {exc}" + _at(exc))
    context, exc = f" while {exc.context}" if exc.context else "", exc.exc
    if isinstance(exc, NotImplementedError):
        stub = _raising_stub(exc, tested)
        if stub is not None and stub[1] not in (exercise, "<module>"):
            # an unfinished earlier exercise used inside this one: blame the right code
            ref = _reference_name(stub[2], stub[1])
            if ref is None:
                use = f"import its reference from course_utils and use it in place of `{stub[1]}`"
            elif ref == stub[1]:
                use = f"run `from course_utils import {ref}`"
            else:
                use = f"run `from course_utils import {ref}` and use {ref} in place of `{stub[1]}`"
            return "not implemented", "not implemented", (
                f"[ ] {exercise} can't be checked yet: it uses your `{stub[1]}`, which is still a stub (`{stub[0]}` "
                f"raises NotImplementedError). Finish that exercise first, or continue with the reference: {use}, "
                f"then run the cell that defines {exercise}, then this check again."
            )
        return "not implemented", "not implemented", (
            f"[ ] {exercise}: not implemented yet. Replace the lines `# YOUR CODE HERE` and "
            "`raise NotImplementedError(...)` with your code, run that cell, then run this check again."
        )
    if isinstance(exc, SystemExit):
        return "error", None, (
            f"[X] {exercise}: your code called sys.exit() (or exit(), quit()){context}, which would stop the "
            "whole program: a function ends with `return ...`; raise an exception such as ValueError for bad "
            "input." + _at(exc)
        )
    name = type(exc).__name__
    return "error", None, f"[X] {exercise}: your code raised {name}{context}{raised(exc)[len(name):]}"


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
    """``fn()``, or :class:`_TimeUp` after ``limit`` seconds (``limit <= 0``: none). On the
    main thread a real-time alarm raises it inside the running Python code (an outer alarm
    is put back with what remained of its time); elsewhere, or without SIGALRM (Windows),
    ``fn`` runs in a daemon thread that is left behind if it hangs."""
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


def call_student_within(seconds: float, fn: Callable[..., Any], *args: Any, context: str = "", on_timeout: str = "",
                        mistake: str = "time limit", tensors: bool = True, **kwargs: Any) -> Any:
    """:func:`call_student` under a time limit of its own (inside the check's): a call still
    running after ``seconds`` is stopped and the check fails with ``on_timeout`` as the
    verdict, naming ``mistake`` (a merge loop that never ends is told apart from a slow one)."""
    try:
        return _within_time_limit(lambda: call_student(fn, *args, context=context, tensors=tensors, **kwargs),
                                  seconds)
    except _TimeUp as exc:
        line = student_line(exc)
        fail(on_timeout + (f"\n    it was running line {line.removeprefix('line ')}" if line else ""), mistake=mistake)


def checker(exercise: str) -> Callable[[Callable[..., str | None]], Callable[..., CheckResult]]:
    """Turn a checker body into a function that shows its verdict and never raises."""

    def decorate(body: Callable[..., str | None]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def run(*args: Any, seed: int | None = None, **kwargs: Any) -> CheckResult:
            def attempt() -> str | None:
                with torch.random.fork_rng(devices=[]):
                    # the CPU generator only (the one forked): torch.manual_seed would also queue a seeding
                    # of the accelerators', formatting the whole call stack each time (slow in deep stacks)
                    torch.random.default_generator.manual_seed(seed)
                    return body(*args, **kwargs)

            try:
                seed = _choose_seed(seed)
                with _interrupts_noted():
                    detail = _within_time_limit(attempt, TIME_LIMIT_S)
                status, mistake = "passed", None
                feedback = f"[OK] {exercise}: all checks passed" + (f" ({detail})." if detail else ".")
            except (_TimeUp, SystemExit, KeyboardInterrupt, GeneratorExit, Exception) as exc:  # noqa: BLE001
                # a checker never raises at a student: only a real interrupt (stopping the cell) goes on
                if isinstance(exc, KeyboardInterrupt) and _INTERRUPTED.is_set():
                    raise
                status, mistake, feedback = _verdict(exercise, exc, args[0] if args else None)
            if status not in ("passed", "not implemented") and isinstance(seed, int):
                # a stub's verdict does not depend on the inputs: no seed to replay
                feedback += f"\n    (seed {seed}: {body.__name__}(..., seed={seed}) repeats these inputs)"
            if status != "passed" and exercise in HINTS:
                feedback += f'\n    Stuck? Ask for a hint: hint("{exercise}").'
            result = CheckResult(exercise, status == "passed", feedback, status, mistake,
                                 seed if isinstance(seed, int) else None)
            result.show()
            # No hook here: the grader (course_utils.grade) calls the checkers itself and takes
            # the CheckResult they return, so nothing a notebook does can report a verdict.
            return result

        run.exercise = exercise  # type: ignore[attr-defined]  # how the grader maps check_* calls to exercises
        return run

    return decorate


# ---------------------------------------------------------------- hints
HINTS: dict[str, list[str]] = {}
_HINT_LEVEL: dict[str, int] = {}  # the last hint shown, per exercise


def register_hints(exercise: str, hints: list[str]) -> None:
    """Hints go from gentle to specific; none gives away the full solution."""
    HINTS[exercise] = list(hints)


def hint(exercise: str, level: int | None = None) -> None:
    """Print hints for an exercise: ``hint("causal_mask")`` prints the first, then the next
    each time you call it again; ``hint("causal_mask", 2)`` prints the second. A class
    can be named either way: ``hint("MultiHeadAttention")`` or ``hint("multi_head_attention")``, and a
    method by its class's hints: ``hint("TransformerClassifier.forward")``."""
    name = getattr(exercise, "__qualname__", exercise.__name__) if callable(exercise) else str(exercise)
    if name not in HINTS and "." in name:  # "TransformerClassifier.forward": the class is the exercise
        name = name.split(".")[0] if name.split(".")[0] in HINTS else name.split(".")[-1]
    if name not in HINTS:  # the other spelling: "multi_head_attention", "multiheadattention"
        folded = name.replace("_", "").replace(" ", "").lower()
        found = [known for known in HINTS if known.replace("_", "").lower() == folded]
        name = found[0] if len(found) == 1 else name
    if name not in HINTS:
        print(f"No hints for {name!r}. Exercises with hints: {', '.join(sorted(HINTS)) or 'none yet'}.")
        return
    hints = HINTS[name]
    if level is None:
        level = _HINT_LEVEL.get(name, 0) + 1
        _HINT_LEVEL[name] = min(level, len(hints))
    level = max(1, min(level, len(hints)))
    print(f"Hint {level}/{len(hints)} for {name}: {hints[level - 1]}")
    if level == len(hints):
        print(f"Still stuck? Continue with the reference: `from course_utils import {name}` and come back later "
              "(fine for learning; a graded copy shows that exercise as 'used the reference').")


# ---------------------------------------------------------------- probes shared by the module checkers
_WALKS = ("parameters", "named_parameters", "_named_members", "named_modules")


def _plain_walks(modules: Iterable[nn.Module]) -> bool:
    """No module overrides how torch walks parameters: :func:`_owns_parameters` then says what
    ``any(sub.parameters())`` says."""
    types = {type(m) for m in modules}
    return all(getattr(t, n, None) is getattr(nn.Module, n) for t in types for n in _WALKS)


def _owns_parameters(module: nn.Module, memo: dict[int, bool]) -> bool:
    """Whether ``module`` or a sub-module holds a parameter: one walk for a whole tree (``memo``),
    where ``any(module.parameters())`` walks each sub-tree again for every module above it."""
    if id(module) not in memo:
        memo[id(module)] = False  # a module met again inside itself adds nothing
        memo[id(module)] = (any(p is not None for p in module._parameters.values())
                            or any(_owns_parameters(c, memo) for c in module._modules.values() if c is not None))
    return memo[id(module)]


def _shared_groups(module: nn.Module) -> list[list[str]]:
    """Names under which one object serves more than once: sub-modules that own parameters
    (``self.norm2 = self.norm1``; topmost names only), then, outside those, parameters whose
    memory overlaps (``p.data = other.data``, ``p.set_(other)``, one Parameter under two names)."""
    by_id: dict[int, list[str]] = {}
    subs = list(module.named_modules(remove_duplicate=False))
    plain, memo = _plain_walks(sub for _, sub in subs), {}
    for name, sub in subs:
        if name and (_owns_parameters(sub, memo) if plain else any(True for _ in sub.parameters())):
            by_id.setdefault(id(sub), []).append(name)
    groups, seen = [], []
    for group in by_id.values():
        if len(group) > 1 and not any(n.startswith(p + ".") for n in group for p in seen):
            groups.append(group)
            seen += group
    by_memory: list[list[str]] = []
    spans: list[tuple[int, int]] = []
    starts: list[tuple[int, int]] = []  # (lo, hi) of the spans, sorted: they never overlap one another
    for name, p in module.named_parameters(remove_duplicate=False):
        if any(name.startswith(e + ".") for e in seen):
            continue
        lo = p.data_ptr()
        hi = lo + max(p.numel(), 1) * p.element_size()
        below = bisect.bisect_left(starts, (hi,)) - 1  # the last span starting before hi
        if below < 0 or starts[below][1] <= lo:  # overlaps no span: a group of its own
            by_memory.append([name])
            spans.append((lo, hi))
            bisect.insort(starts, (lo, hi))
            continue
        for group, (glo, ghi) in zip(by_memory, spans):  # the first group it overlaps, in order
            if lo < ghi and glo < hi:
                group.append(name)
                break
    return groups + [g for g in by_memory if len(g) > 1]


def shared_roles(module: nn.Module, reference: nn.Module | None = None) -> list[list[str]]:
    """Groups of names in ``module`` (sub-modules or parameters) that are one object or
    memory although ``reference`` keeps them apart: ``[["norm1", "norm2"]]`` for ``self.norm2
    = self.norm1``, ``[["norm1.weight", "norm2.weight"]]`` for ``p.data = other.data``
    (copying parameters by name cannot see this). A group counts when two of its names are
    distinct roles of ``reference``, or when none is tied there and ``module`` trains fewer
    distinct entries (so an alias such as ``self.net = nn.Sequential(self.linear1, ...)``
    passes). Modules without parameters (one nn.Dropout used twice) never count. Without
    ``reference``, every group. ``[]``: nothing shared."""
    found = _shared_groups(module)
    if reference is None:
        return found
    roles = dict(reference.named_modules()).keys() | dict(reference.named_parameters()).keys()
    tied = {n for g in _shared_groups(reference) for n in g}
    # parameters() yields a shared Parameter once: what the optimiser really trains
    fewer = sum(p.numel() for p in module.parameters()) < sum(p.numel() for p in reference.parameters())
    return [g for g in found if len([n for n in g if n in roles and n not in tied]) >= 2
            or (fewer and not any(n in tied for n in g))]


def _listed(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def require_distinct_roles(module: nn.Module, reference: nn.Module | None, what: str, why: str = "") -> None:
    """Fail ("modules shared") when :func:`shared_roles` finds a sharing in ``module``;
    ``why`` (a sentence) says why this model keeps the roles apart."""
    groups = shared_roles(module, reference)
    if not groups:
        return
    group, why = groups[0], f" {why}" if why else ""
    subs = dict(module.named_modules(remove_duplicate=False))
    params = dict(module.named_parameters(remove_duplicate=False))
    if group[0] in subs:
        kind = type(subs[group[0]]).__name__
        text = (f"{_listed(group)} are one and the same {kind} object (e.g. self.{group[1]} = self.{group[0]}): "
                f"they share one set of weights, so the {what} has fewer parameters than it should and these roles "
                f"cannot learn different things.{why} Build a separate {kind} for each of them in __init__.")
    elif len({id(params[n]) for n in group if n in params}) == 1:  # one Parameter under several names
        text = (f"the parameters {_listed(group)} are one and the same Parameter (e.g. `self.{group[1]} = "
                f"self.{group[0]}`): the roles are tied, one matrix learns for all of them.{why} Leave each "
                "sub-module its own parameters.")
    else:
        text = (f"the parameters {_listed(group)} share the same memory (e.g. `{group[1]}.data = {group[0]}.data`): "
                f"they are one tensor under several names.{why} Give every parameter its own tensor: build each "
                "sub-module separately and do not assign one's data to another.")
    fail(f"in your {what}, {text}", mistake="modules shared")


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
    """``(run(), the names in `names` of the torch functions it called)``, matched by the
    function's name so that every spelling counts: ``{"layer_norm"}`` sees ``F.layer_norm``,
    ``torch.layer_norm`` and ``nn.LayerNorm``. Exceptions of ``run`` propagate."""
    spy = _CallSpy(set(names))
    with spy:
        result = run()
    return result, spy.seen


def require_own_code(run: Callable[[], Any], names: Iterable[str], what: str, instead: str) -> Any:
    """``run()``, failing ("forbidden call") when it calls one of the torch functions
    ``names`` that the exercise asks the student to write: ``instead`` says what to write."""
    result, seen = forbidden_calls(run, names)
    if seen:
        fail(f"your {what} calls torch's {seen[0]} (F.{seen[0]}, torch.{seen[0]} or the nn module that wraps it): "
             f"the exercise is to write it yourself, {instead}.", mistake="forbidden call")
    return result


# ---------------------------------------------------------------- the gradient probe
_CUTS = ("a `with torch.no_grad():` block, `.detach()`, `.data`, a round trip through `.item()`, `.tolist()` or numpy, "
         "or a parameter left with requires_grad=False")


def gradient_probe(student: Callable[..., Any], reference: Callable[..., Any], inputs: Mapping[str, Any],
                   params: Iterable[tuple[str, Tensor, Tensor]] = (), what: str = "code", case: str = "") -> None:
    """Fail unless the student's code passes the reference's gradients back (the contract's
    "Gradients"). ``student`` and ``reference`` run on their own copies of ``inputs`` (float
    tensors require grad); one random upstream gradient goes back through the first tensor
    each returns; the gradients of the float inputs (named by their key) and of ``params``
    (``(name, student parameter, reference parameter)``, values made equal) must match.
    Call it on a case whose forward matched, modules in eval mode, no fully blocked mask row.
    Mistakes: "gradient blocked", "gradient differs", "backward fails"."""
    where = f" ({case})" if case else ""

    def leaves(values: Iterable[Any]) -> list[Any]:
        return [v.detach().clone().requires_grad_() if isinstance(v, Tensor) and v.is_floating_point() else v
                for v in values]

    def first(result: Any) -> Any:
        return result[0] if isinstance(result, (tuple, list)) and result else result

    given_s, given_r = leaves(inputs.values()), leaves(inputs.values())
    with torch.enable_grad():
        try:
            out_s = first(call_student(student, *given_s, context=f"running your {what} with inputs that require grad"))
        except StudentError as err:
            if "numpy" not in str(err.exc) and "requires grad" not in str(err.exc):
                raise
            if "in-place operation" in str(err.exc):  # x.mul_(...) on an input that requires grad
                fail(f"with inputs that require grad, as in training{where}, your {what} raised "
                     f"{raised(err.exc, inline=True)}: an in-place operation (`x.mul_(...)`, `x += ...`, `x[...] = "
                     "...`) on an input that requires grad, which autograd refuses. Leave the inputs unchanged: use the "  # noqa: E501
                     "out-of-place form (`x = x * 2`, `x = x + y`) on a new tensor.", mistake="input modified in place")
            fail(f"with inputs that require grad, as in training{where}, your {what} raised {raised(err.exc, inline=True)}: "  # noqa: E501
                 f"it leaves the autograd graph (numpy, `.item()`), so no gradient could flow back. Stay with torch "
                 "operations on the tensors themselves.", mistake="gradient blocked")
        out_r = first(reference(*given_r))
        if not isinstance(out_s, Tensor) or out_s.shape != out_r.shape or not out_r.requires_grad:
            return  # the forward checks speak of a wrong output
        upstream = torch.randn(out_r.shape, dtype=out_r.dtype)
        named = [(n, s, r) for n, s, r in zip(inputs, given_s, given_r) if isinstance(r, Tensor) and r.requires_grad]
        named += list(params)
        grads_r = torch.autograd.grad(out_r, [r for _, _, r in named], upstream, allow_unused=True)
        # rounding leaves ~1e-7 where the exact gradient is 0 (a key bias: softmax ignores a shift)
        scale = max((float(g.abs().max()) for g in grads_r if g is not None), default=0.0)
        reached = [n for (n, _, _), g in zip(named, grads_r) if g is not None and float(g.abs().max()) > 1e-4 * scale]
        if not reached:
            return
        if not out_s.requires_grad:
            fail(f"the output of your {what}{where} does not require grad, although gradients should reach "
                 f"{_listed(reached[:4])}{' and more' if len(reached) > 4 else ''} through it: the result is "
                 f"computed outside the autograd graph ({_CUTS}), so nothing before it can learn, and "
                 "loss.backward() fails with 'element 0 of tensors does not require grad'. Compute it with torch "
                 "operations on the tensors themselves.", mistake="gradient blocked")
        live = [s for _, s, _ in named if s.requires_grad]  # a frozen parameter gets no gradient at all
        try:
            found = dict(zip(map(id, live), torch.autograd.grad(out_s, live, upstream.to(out_s.dtype), allow_unused=True)))  # noqa: E501
        except RuntimeError as exc:
            fail(f"the output of your {what}{where} is right, but backpropagating through it raises "
                 f"{raised(exc, inline=True)}. An in-place operation (`+=`, `masked_fill_`, `relu_`, `x[...] = ...`) "
                 "changed a tensor that autograd saved for the backward pass: use the out-of-place form "
                 "(`x = x + y`, `masked_fill`).", mistake="backward fails")
    # an nn.Embedding(..., padding_idx=i) of the student's gives its row i no gradient: their choice
    padding_rows = {id(m.weight): m.padding_idx for m in (student.modules() if isinstance(student, nn.Module) else ())
                    if isinstance(m, nn.Embedding) and m.padding_idx is not None}
    grads_s = [found.get(id(s)) for _, s, _ in named]
    grads_s = [g.to_dense() if g is not None and g.is_sparse else g for g in grads_s]  # nn.Embedding(sparse=True)
    blocked, differ = [], []
    for (name, s, _), g_s, g_r in zip(named, grads_s, grads_r):
        if name not in reached:
            continue  # the reference passes (next to) nothing back here either
        if id(s) in padding_rows and g_s is not None:
            g_r, g_s = g_r.clone(), g_s.clone()
            g_r[padding_rows[id(s)]] = g_s[padding_rows[id(s)]] = 0
        if g_s is None or not bool(g_s.any()):
            blocked.append(name)
        elif not allclose(g_s.double(), g_r.double(), rtol=1e-3, atol=1e-3 * float(g_r.abs().max())):
            differ.append((name, float((g_s.double() - g_r.double()).abs().max()), float(g_r.abs().max())))
    if blocked:
        more = f" and {len(blocked) - 4} more" if len(blocked) > 4 else ""
        fail(f"no gradient reaches {_listed(blocked[:4])}{more}{where}: the output is right, but your {what} cuts "
             f"the autograd graph between {'it' if len(blocked) == 1 else 'them'} and the output ({_CUTS}), so "
             "training would never update what lies behind the cut. Compute it with torch operations on the "
             "tensors themselves.", mistake="gradient blocked")
    if differ:
        name, diff, size = differ[0]
        others = f" (and of {_listed([n for n, _, _ in differ[1:4]])})" if len(differ) > 1 else ""
        fail(f"the gradient of `{name}`{others}{where} differs from the reference's (largest difference {diff:.3g}, "
             f"gradient entries up to {size:.3g}): the output is right, but part of the computation is cut from the "
             f"graph, so `{name}` gets only part of its gradient. Look for {_CUTS} applied to one branch or "
             "factor (a weight, a residual, a norm's statistics).", mistake="gradient differs")


# A checker's draw (sizes, a model, inputs, what it later caches on them) follows from the random state it
# starts from: checks from one state (one seed, as when a test runs many students on one set of seeds) share
# one draw, and the random state after it is set as if drawn. Users must not change it (hand out copies).
_DRAWS: dict[tuple, tuple[Any, Tensor]] = {}
_DRAWS_KEPT = 160  # the most recently used; a draw is a few small models and tensors


_ATOMS = (type(None), bool, int, float, str, type, torch.dtype, torch.device)


def module_copy(module: nn.Module) -> nn.Module:
    """``copy.deepcopy(module)`` (a student's own copy of a drawn model, to mutate at will) at a
    fraction of its cost: modules, their attribute dicts and their empty hook dicts are rebuilt
    directly; everything else (parameters, tensors, any other object) goes to copy.deepcopy,
    with one memo for the whole tree, so shared objects stay shared."""
    return _copied(module, {})


def _copied(x: Any, memo: dict[int, Any]) -> Any:
    if type(x) in _ATOMS:
        return x
    if id(x) in memo:
        return memo[id(x)]
    t = type(x)
    if t in (dict, OrderedDict) and not x:  # hook dicts: empty on a drawn model
        y = memo[id(x)] = t()
        return y
    if t is dict:
        y = memo[id(x)] = {}
        y.update((k, _copied(v, memo)) for k, v in x.items())
        return y
    if t is set and all(type(v) in _ATOMS for v in x):
        y = memo[id(x)] = set(x)
        return y
    plain = (isinstance(x, nn.Module) and getattr(t, "__deepcopy__", None) is None
             and t.__reduce_ex__ is nn.Module.__reduce_ex__ and t.__reduce__ is nn.Module.__reduce__
             and t.__getstate__ is nn.Module.__getstate__
             and t.__setstate__ is nn.Module.__setstate__ and not hasattr(x, "__slots__"))
    if not plain:
        return copy.deepcopy(x, memo)
    y = memo[id(x)] = t.__new__(t)
    y.__setstate__(_copied(x.__dict__, memo))
    return y


def drawn_once(draw: Callable[..., Any], **kwargs: Any) -> Any:
    """``draw(**kwargs)``, made once per random state (and per ``draw`` and arguments)."""
    key = (draw.__module__, draw.__qualname__, torch.random.get_rng_state().numpy().tobytes(),
           tuple(sorted(kwargs.items())))
    if key not in _DRAWS:
        result = draw(**kwargs)
        _DRAWS[key] = result, torch.random.get_rng_state()
        while len(_DRAWS) > _DRAWS_KEPT:
            del _DRAWS[next(iter(_DRAWS))]
    result, state = _DRAWS[key] = _DRAWS.pop(key)  # the most recently used last: evicted last
    torch.random.set_rng_state(state)
    return result
