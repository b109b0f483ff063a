"""Checkers for notebook 10 (a modern, Llama-style decoder): ``RMSNorm``, ``rotary_tables``,
``apply_rotary``, ``SwiGLU`` and ``GroupedQueryAttention``.

Each runs the student's code on random inputs of awkward sizes (``B != L != d_k``, rows with a
large mean, an offset for the cache's case) and compares with :mod:`course_utils.llama`. A wrong
result is compared with the reference computed with each catalogued mistake (RMSNorm with the mean
subtracted, ``eps`` outside the root, the wrong axis; rotary tables or rotation in Meta's pairs
layout, positions from 1, the offset ignored, values rotated; SwiGLU's gate on the wrong branch,
GELU; GQA's ``repeat`` instead of ``repeat_interleave``), pinned over 20 seeds by
tests/test_checks_llama.py.

Each exercise's mistakes are one table (:mod:`.catalogue`): ``RMS``, ``TABLES``, ``ROTARY``,
``SWIGLU``, ``GQA``, in the order the check tries them; ``MISTAKES`` lists their names.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..llama import GroupedQueryAttention, apply_rotary, rotary_tables, rotate_half
from ._core import (
    Failure,
    StudentError,
    allclose,
    call_student,
    check_unchanged,
    checker,
    describe_shape,
    equal,
    expect_close,
    fail,
    gradient_probe,
    isnan,
    own_helper_failure,
    randint,
    register_hints,
    require_function,
    require_module_class,
    require_own_code,
)
from ._pairing import randomise_parameters
from .catalogue import GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Raises, Reference

__all__ = ["check_rms_norm", "check_rotary_tables", "check_apply_rotary", "check_swiglu",
           "check_grouped_query_attention"]

_PAIRS = ("this is Meta's *pairs* layout, which rotates features (2i, 2i+1) together. The course (and Hugging "
          "Face's `rotate_half`, so that LlamaForCausalLM weights copy as they are) uses the *halves* layout: "
          "feature i turns with feature i + d_k/2. Both are the same model once the rows of w_q and w_k are "
          "permuted, but not the same numbers: write the halves layout")


# other codes' names for the contract's (Hugging Face's Llama, LLMs-from-scratch, nn.RMSNorm-like `scale`)
_OTHER_NAMES = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2", "fc1": "w1", "fc2": "w3", "fc3": "w2",
                "q_proj": "w_q", "k_proj": "w_k", "v_proj": "w_v", "o_proj": "w_o", "W_query": "w_q",
                "W_key": "w_k", "W_value": "w_v", "out_proj": "w_o", "scale": "weight", "gamma": "weight"}


def _renames(names: list[str]) -> str:
    """' Rename: gate_proj -> w1, ...' for the names another code uses, else ''."""
    pairs = [f"{n} -> {_OTHER_NAMES[n]}" for n in names if n in _OTHER_NAMES]
    return (" Rename them to the course's names (the checker, the model and the weight mapping read those): "
            + ", ".join(pairs) + ".") if pairs else ""


def _forward(model: Callable[..., Any], args: tuple[Any, ...], case: str) -> Any:
    return call_student(model, *args, context=f"calling it on {case}")


def _module_class(what: str) -> list[Entry]:
    """A class that builds an nn.Module (stage "built": the object the constructor gave)."""
    return [Entry("not a class", None, Probe("require_module_class")),
            Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
                  f"{what} should subclass nn.Module.")]


# ---------------------------------------------------------------- RMSNorm
def _rms(x: Tensor, w: Tensor, eps: float, dim: int | tuple[int, ...] = -1) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=dim, keepdim=True) + eps) * w


def _rms_run(make: Callable[[Any], Tensor], default_eps: bool | None = None) -> Reference:
    """One candidate: ``make(c)`` for case ``c`` (``x``, ``w``, ``eps``, ``default_eps``); ``default_eps``: only
    on the cases with (True) or without (False) the default eps, None: always."""
    return Reference(lambda c: [] if default_eps is not None and c.default_eps != default_eps
                     else [({}, lambda: make(c))], "values")


def _centred(c: Any) -> Tensor:
    centred = c.x - c.x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + c.eps) * c.w


def _ms(c: Any) -> Tensor:
    return c.x.pow(2).mean(-1, keepdim=True)  # (..., 1)


_AXES = ((-2, "the positions (dim=-2)"), (0, "the batch (dim=0)"), (None, "every axis"))

RMS = Catalogue("RMSNorm", "10", [
    *_module_class("RMSNorm"),
    # its one parameter, weight (D,), starting at ones (stage "weight": _param's)
    Entry("missing submodule", None, Output(lambda c: c.p is None, "weight"),
          "{what} needs a parameter `{name}` of shape {shape} (yours: {names}).{renames}"),
    Entry("wrong parameter shape", None, Output(lambda c: tuple(c.p.shape) != c.shape and dict(
        got=describe_shape(c.p)), "weight"), "`{name}` of {what} has shape {got}, expected {shape}."),
    Entry("unexpected parameters", None, Output(lambda extra: extra and dict(extra=", ".join(extra)), "extra"),
          "RMSNorm has one parameter, `weight` (D,); yours also has {extra}. No bias: RMSNorm only rescales."),
    Entry("wrong initial values", None, Output(lambda w: not equal(w.detach(), torch.ones(w.shape)), "init"),
          "`weight` should start at ones (the identity scale), as LayerNorm's does."),
    Entry("forbidden call", None, Probe("require_own_code")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the wrong output is the norm with one of these mistakes (in this order)
    Entry("mean subtracted",
          "RMSNorm with the mean subtracted (LayerNorm without its bias, or dividing by the std)",
          _rms_run(_centred),
          "you subtracted the mean first: that is LayerNorm (without its bias). RMSNorm divides x itself by its root "
          "mean square, sqrt(mean(x ** 2) + eps): no mean, which is what makes it cheaper."),
    Entry("mean subtracted", None,
          _rms_run(lambda c: c.x / torch.sqrt(c.x.var(-1, unbiased=False, keepdim=True) + c.eps) * c.w),
          "you divided by the standard deviation (x.var / x.std subtract the mean); RMSNorm divides by the root mean "
          "square of x itself: torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)."),
    Entry("mean subtracted", None, _rms_run(lambda c: c.x / torch.sqrt(c.x.var(-1, keepdim=True) + c.eps) * c.w),
          "you divided by the standard deviation (x.var and x.std subtract the mean, and by default divide by D - 1); "
          "RMSNorm divides by the root mean square of x itself: torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)."),
    Entry("sum instead of mean", "a sum instead of a mean",
          _rms_run(lambda c: c.x / torch.sqrt(c.x.pow(2).sum(-1, keepdim=True) + c.eps) * c.w),
          "you divided by sqrt(sum(x ** 2) + eps): the *sum* of squares grows with D, so your output is sqrt(D) times "
          "too small. RMSNorm takes the mean: x.pow(2).mean(-1, keepdim=True)."),
    Entry("mean absolute value",
          "RMSNorm divides by mean(|x|) instead of the root mean square",
          _rms_run(lambda c: c.x / (c.x.abs().mean(-1, keepdim=True) + c.eps) * c.w),
          "you divided by mean(|x|), the mean absolute value; RMSNorm divides by the root mean square, "
          "torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)."),
    Entry("scale (1 + weight)",
          "RMSNorm scaled by (1 + weight), Gemma's convention, instead of weight",
          _rms_run(lambda c: _rms(c.x, 1 + c.w, c.eps)),
          "you multiplied by (1 + weight), Gemma's convention (its weight starts at zeros); Llama's RMSNorm, and this "
          "exercise, multiply by weight itself, which starts at ones."),
    Entry("eps outside the square root", None, _rms_run(lambda c: c.x / (_ms(c).sqrt() + c.eps) * c.w),
          "you added eps after the square root, x / (sqrt(mean(x ** 2)) + eps); it goes inside: x / sqrt(mean(x ** 2) "
          "+ eps)."),
    Entry("no square root",
          "RMSNorm divides by the mean square, not its square root",
          _rms_run(lambda c: c.x / (_ms(c) + c.eps) * c.w),
          "you divided by mean(x ** 2) + eps, the mean *square*; divide by its square root."),
    Entry("no learnable scale and shift", None, _rms_run(lambda c: c.x / torch.sqrt(_ms(c) + c.eps)),
          "the learned scale `weight` is not applied: multiply by self.weight at the end."),
    *(Entry("normalised over the wrong axis",
            None if i else "RMSNorm's mean square taken over another axis than the features",
            _rms_run(lambda c, dim=dim: _rms(c.x, c.w, c.eps, tuple(range(c.x.dim())) if dim is None else dim)),
            f"you took the mean over {where}; RMSNorm normalises each vector on its own: the mean over the features, "
            "the last axis (dim=-1, keepdim=True).")
      for i, (dim, where) in enumerate(_AXES)),
    Entry("eps ignored", None, _rms_run(lambda c: _rms(c.x, c.w, 1e-6), default_eps=False),
          "the eps passed to the constructor is not used (a fixed eps?): store it, self.eps = eps, and use it."),
    # rows of tiny values (mean square about 1e-6) make the default's value show
    *(Entry("wrong default eps", None,
            _rms_run(lambda c, other=other: _rms(c.x, c.w, other), default_eps=True),
            f"your default eps behaves as {other:g}; the exercise (Llama's RMSNorm) uses eps=1e-6: def "
            "__init__(self, d_model, eps=1e-6), stored as self.eps and used in forward (not a number written there).")
      for i, other in enumerate((1e-5, 1e-8, 0.0, 1e-12))),
    *GRADIENT_PROBE,
])


def _param(model: nn.Module, name: str, shape: tuple[int, ...], what: str) -> Tensor:
    p = dict(model.named_parameters()).get(name)
    names = [n for n, _ in model.named_parameters()]
    RMS.detect("weight", SimpleNamespace(p=p, shape=shape), what=what, name=name, shape=shape,
               names=", ".join(names) or "none", renames=_renames(names))
    return p


def _rms_case(model: nn.Module, w: Tensor, eps: float, x: Tensor, case: str, default_eps: bool) -> None:
    x0 = x.clone()
    got = _forward(model, (x,), case)
    check_unchanged(["x"], [x], [x0], case)
    expected = _rms(x0, w.detach(), eps)
    mistakes = RMS.candidates(SimpleNamespace(x=x0, w=w.detach(), eps=eps, default_eps=default_eps), "values")
    expect_close("the output", got, expected, mistakes, atol=1e-5, rtol=1e-4, case=case)


def _rms_inputs(*shape: int, scale: float = 1.0) -> Tensor:
    """Rows with a clear mean (so that a subtracted mean shows) and varied scales."""
    x = torch.randn(*shape) + 2.0 * torch.randn(*shape[:-1], 1)  # (..., D): a different mean per row
    return scale * x * torch.empty(*shape[:-1], 1).uniform_(0.5, 2.0)


@checker("RMSNorm")
def check_rms_norm(cls: Any) -> str:
    require_module_class(cls, "RMSNorm")
    B, L, D = randint(2, 3), randint(4, 6), randint(7, 12)
    model = call_student(cls, D, context=f"constructing RMSNorm(d_model={D})")
    RMS.detect("built", model)
    w = _param(model, "weight", (D,), "RMSNorm")
    RMS.detect("extra", [n for n, _ in model.named_parameters() if n != "weight"])
    RMS.detect("init", w)
    model.eval()
    randomise_parameters(model)
    x = _rms_inputs(B, L, D)
    case = f"x of shape ({B}, {L}, {D}), default eps"
    require_own_code(lambda: _forward(model, (x,), case), {"rms_norm"}, "RMSNorm",
                     "from its formula, x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight")
    _rms_case(model, w, 1e-6, x, case, default_eps=True)
    _rms_case(model, w, 1e-6, _rms_inputs(L, D), f"x of shape ({L}, {D}), default eps", default_eps=True)
    _rms_case(model, w, 1e-6, _rms_inputs(B, L, D, scale=1e-3), f"x of shape ({B}, {L}, {D}) with tiny values "
              "(about 1e-3), default eps", default_eps=True)
    eps = round(float(torch.empty(()).uniform_(0.2, 0.5)), 2)
    model = call_student(cls, D, eps, context=f"constructing RMSNorm(d_model={D}, eps={eps})")
    w = _param(model, "weight", (D,), "RMSNorm")
    model.eval()
    randomise_parameters(model)
    _rms_case(model, w, eps, _rms_inputs(B, L, D, scale=0.3), f"x of shape ({B}, {L}, {D}) with small values, "
              f"eps={eps}", default_eps=False)
    ref_w = nn.Parameter(w.detach().clone())
    gradient_probe(model, lambda x: _rms(x, ref_w, eps), dict(x=_rms_inputs(B, L, D)), [("weight", w, ref_w)],
                   what="RMSNorm", case=f"x of shape ({B}, {L}, {D})")
    return "default and large eps, rows with a large mean, random weight; same as torch.nn.RMSNorm"


# ---------------------------------------------------------------- rotary tables
def _angles(d_k: int, positions: Tensor, base: float, two: float = 2.0, sign: float = -1.0) -> Tensor:
    inv = base ** (sign * two * torch.arange(d_k // 2, dtype=torch.float64) / d_k)  # (d_k/2,)
    return positions.double()[:, None] * inv  # (L, d_k/2)


def _halves(a: Tensor) -> Tensor:
    return torch.cat([a, a], dim=-1)  # (L, d_k): [theta | theta]


def _table_run(make: Callable[[Any], Tensor], other_base: bool = False) -> Reference:
    """One candidate: the table ``make(c)`` in float32 for case ``c`` (``d_k``, ``base``, ``pos``, ``right``: the
    right angles, ``trig``/``other``: the table's function and the other one); ``other_base``: only when the base
    is not the default (a base ignored cannot show there)."""
    return Reference(lambda c: [] if other_base and c.base == 10000.0 else [({}, lambda: make(c).float())], "values")


def _floored(c: Any, exponent: Tensor) -> Tensor:
    return c.trig(_halves(c.pos.double()[:, None] * c.base ** exponent))


def _two_i(c: Any) -> Tensor:
    return torch.arange(0, c.d_k, 2, dtype=torch.float64)  # (d_k/2,)


def _flipped(c: Any) -> bool:
    """Frequencies ``base ** (+2i / d_k)`` give angles of thousands of radians, which float32 holds only to about
    1e-3: compared on rows 0 and 1 only, within 2e-3 (a right table differs there by far more)."""
    table, d_k = c.table, c.d_k
    if not isinstance(table, Tensor) or table.dim() != 2 or table.size(0) < 2 or table.size(1) != d_k:
        return False
    right = c.trig(_halves(_angles(d_k, torch.arange(2), c.base)))  # (2, d_k), float64
    if allclose(table[:2].double(), right, atol=1e-5):
        return False
    flipped = c.trig(_halves(_angles(d_k, torch.arange(2), c.base, sign=1.0)))  # (2, d_k)
    return bool(allclose(table[:2].double(), flipped, atol=2e-3))


TABLES = Catalogue("rotary_tables", "10", [
    Entry("not a function", None, Probe("require_function")),
    Entry("wrong return", None,
          Output(lambda got: (not isinstance(got, (tuple, list)) or len(got) != 2) and dict(got=describe_shape(got)),
                 "return"),
          "{case} should return two tables (cos, sin); got {got}."),
    # each table, cos then sin
    Entry("half-width tables", "rotary tables of d_k/2 columns instead of the course's (max_len, d_k)",
          Output(lambda c: isinstance(c.table, Tensor) and tuple(c.table.shape) == (c.max_len, c.d_k // 2)
                 and dict(shape=describe_shape(c.table)), "half"),
          "your {which} table ({case}) has shape {shape}: one column per frequency. The course's tables are "
          "(max_len, d_k) = ({max_len}, {d_k}), the d_k/2 angles written twice ([theta | theta], torch.cat([angles, "
          "angles], dim=-1)), so that apply_rotary multiplies them with x feature by feature."),
    Entry("frequency exponent sign flipped",
          "rotary frequencies base ** (+2i / d_k), growing instead of shrinking", Output(_flipped, "sign"),
          "the {which} table ({case}): your frequencies grow with i (base ** (+2i / d_k)); they shrink: theta_i = "
          "base ** (-2i / d_k) = 1 / base ** (2i / d_k)."),
    # the wrong table is the right one with one of these mistakes (in this order)
    Entry("pairs layout", "RoPE in Meta's pairs layout (2i, 2i+1) instead of the course's halves layout (rotate_half)",
          _table_run(lambda c: c.trig(c.right.repeat_interleave(2, dim=-1))),
          _PAIRS + ": each row is [theta_0, ..., theta_(d/2-1), theta_0, ..., theta_(d/2-1)] (torch.cat([angles, "
          "angles], dim=-1)), not each angle twice in a row (repeat_interleave)."),
    Entry("positions from 1", "rotary positions counted from 1 instead of 0",
          _table_run(lambda c: c.trig(_halves(_angles(c.d_k, c.pos + 1, c.base)))),
          "your rows start at position 1; the first token is position 0 (row 0 is cos = 1, sin = 0: no rotation). "
          "torch.arange(max_len) starts at 0."),
    Entry("frequencies without the factor 2", "rotary frequencies base ** (-i / d_k) instead of base ** (-2i / d_k)",
          _table_run(lambda c: c.trig(_halves(_angles(c.d_k, c.pos, c.base, two=1.0)))),
          "your frequencies are base ** (-i / d_k); they are base ** (-2i / d_k) for i = 0 .. d_k/2 - 1 "
          "(torch.arange(0, d_k, 2) / d_k)."),
    Entry("base ignored", "the rotary base argument is not used (10000 written in)",
          _table_run(lambda c: c.trig(_halves(_angles(c.d_k, c.pos, 10000.0))), True),
          "the base passed in is not used (10000 written in?): theta_i = base ** (-2i / d_k) with the base argument."),
    Entry("sin and cos swapped", None, _table_run(lambda c: c.other(_halves(c.right))),
          "your cos table holds the sines and your sin table the cosines: return (cos, sin) in that order."),
    *(Entry("integer division in the exponent",
            None if i else "rotary exponents computed with // on integers: every frequency after the first equal",
            _table_run(lambda c, exponent=exponent: _floored(c, exponent(_two_i(c) / c.d_k))),
            f"your exponents are whole numbers: {shown} on integer tensors rounds down ({rounded}), so every "
            "frequency after the first is the same. Divide in floating point: torch.arange(0, d_k, 2, "
            "dtype=torch.float32) / d_k.")
      for i, (shown, rounded, exponent) in enumerate((
          ("-torch.arange(0, d_k, 2) // d_k", "to -1 for every i > 0", lambda r: torch.floor(-r)),
          ("torch.arange(0, d_k, 2) // d_k", "to 0", lambda r: -torch.floor(r))))),
    Entry("wrong dtype", None, Output(lambda c: c.table.dtype != torch.float32 and dict(dtype=c.table.dtype), "dtype"),
          "the {which} table ({case}) has the right values but dtype {dtype}; the tables are float32 (torch's default "
          "dtype): apply_rotary multiplies float32 queries and keys by them, and a {dtype} table makes the result "
          "{dtype} too. Compute in float64 if you like, then return cos.float(), sin.float()."),
    # device= honoured (on PyTorch's 'meta' device, stage "device")
    Entry("no device parameter", None, Raises("device", (TypeError,), "device"),
          "{call} raised TypeError: {error}. The signature is rotary_tables(d_k, max_len, base=10000.0, device=None): "
          "the model builds its tables on its own device."),
    Entry("device ignored", None, Output(lambda wrong: bool(wrong) and dict(device=wrong[0]), "device"),
          "{call} returned tables on {device}: the `device` argument is ignored. Create the positions and frequencies "
          "on it (torch.arange(..., device=device)), so that the tables land where the queries are (the GPU on "
          "Colab)."),
])


@checker("rotary_tables")
def check_rotary_tables(fn: Any) -> str:
    require_function(fn, "rotary_tables")
    d_k, max_len = 2 * randint(3, 6), randint(9, 17)
    for base in (10000.0, float(randint(20, 300))):
        case = f"rotary_tables(d_k={d_k}, max_len={max_len}, base={base})"
        got = call_student(fn, d_k, max_len, base=base, context=f"calling {case}")
        TABLES.detect("return", got, case=case)
        right = _halves(_angles(d_k, torch.arange(max_len), base))  # (max_len, d_k)
        for which, table, trig, other in (("cos", got[0], torch.cos, torch.sin), ("sin", got[1], torch.sin, torch.cos)):
            c = SimpleNamespace(table=table, d_k=d_k, max_len=max_len, base=base, trig=trig, other=other,
                                pos=torch.arange(max_len), right=right[:, : d_k // 2])
            TABLES.detect("half", c, which=which, case=case, max_len=max_len, d_k=d_k)
            TABLES.detect("sign", c, which=which, case=case)
            expect_close(f"the {which} table", table, trig(right).float(), TABLES.candidates(c, "values"), atol=1e-5,
                         rtol=1e-4, case=case)
            TABLES.detect("dtype", c, which=which, case=case)  # float64 tables make apply_rotary's q and k float64
    _rotary_device(fn, d_k, max_len)
    return ("random even d_k and max_len, the default base and another; halves layout, positions from 0; float32, "
            "on the device asked for")


def _rotary_device(fn: Any, d_k: int, max_len: int) -> None:
    """``device=`` is honoured: PyTorch's "meta" device exists on every machine, so an ignored device shows
    without a GPU; code that cannot run there (a rare way of building the tables) is not the student's mistake."""
    call = f"rotary_tables({d_k}, {max_len}, device='meta')"
    try:
        got = fn(d_k, max_len, device="meta")
    except TypeError as exc:
        TABLES.detect_raised(exc, "device", call=call, error=exc)
        return
    except Exception:  # noqa: BLE001 - see the docstring
        return
    tables = got if isinstance(got, (tuple, list)) else ()
    TABLES.detect("device", [t.device for t in tables if isinstance(t, Tensor) and t.device.type != "meta"], call=call)


# ---------------------------------------------------------------- apply_rotary
def _rot(x: Tensor, cos: Tensor, sin: Tensor, start: int, turn: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    L = x.size(-2)
    half = turn or (lambda t: torch.cat([-t[..., t.size(-1) // 2:], t[..., : t.size(-1) // 2]], dim=-1))
    return x * cos[start : start + L] + half(x) * sin[start : start + L]


def _pairs_turn(t: Tensor) -> Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): the 90-degree turn of Meta's pairs."""
    even, odd = t[..., 0::2], t[..., 1::2]
    return torch.stack([-odd, even], dim=-1).flatten(-2)


def _meta(x: Tensor, start: int, base: float = 10000.0) -> Tensor:
    """Meta's pairs layout with Meta's frequencies: pair (2i, 2i+1) turned by m * theta_i."""
    L, d = x.shape[-2:]
    a = _angles(d, torch.arange(start, start + L), base).to(x.dtype).repeat_interleave(2, dim=-1)  # (L, d_k)
    return x * a.cos() + _pairs_turn(x) * a.sin()


def _rot_run(turn: Callable[[Tensor], Tensor] | None = None, shift: int = 0, sin_sign: float = 1.0,
             swap: bool = False) -> Reference:
    """One candidate: the rotation of case ``c`` (``x``, ``cos``, ``sin``, ``offset``) with one thing changed."""
    def build(c: Any) -> list:
        cos, sin = (c.sin, c.cos) if swap else (c.cos, sin_sign * c.sin)
        return [({}, lambda: _rot(c.x, cos, sin, c.offset + shift, turn))]
    return Reference(build, "values")


def _swap_halves(t: Tensor) -> Tensor:
    return torch.cat([t[..., t.size(-1) // 2:], t[..., : t.size(-1) // 2]], -1)


_SLICE_TO_L = ("with offset = {offset} you took the rows cos[offset:L], which end at row L - 1 instead of "
               "offset + L - 1: the slice is cos[offset:offset + L] (and sin the same way), L rows from offset")


def _not_sliced(c: Any) -> bool:
    return isinstance(c.exc, RuntimeError) and f"({c.rows})" in str(c.exc) and c.rows != c.L


def _ends_at_L(c: Any) -> bool:
    short = max(0, c.L - c.offset)  # what cos[offset:L] holds
    return bool(c.offset) and isinstance(c.exc, RuntimeError) and f"({c.L})" in str(c.exc) \
        and f"({short})" in str(c.exc)


ROTARY = Catalogue("apply_rotary", "10", [
    Entry("not a function", None, Probe("require_function")),
    # the call raised (stage "raised"): x (L rows) times the whole (max_len, d_k) table, torch names max_len
    Entry("rotary tables not sliced",
          "the whole (max_len, d_k) cos/sin tables used instead of the rows of the L positions",
          Output(_not_sliced, "raised"),
          "your code raised RuntimeError on {case}: {error}. The cos and sin passed in are the whole tables, ({rows}, "
          "{cols}) here, while x has L = {L} positions: slice the tables to the L positions, from offset: "
          "cos[offset:offset + L] and sin the same way (L = x.size(-2))."),
    Entry("rotary slice ends at L",
          "apply_rotary slices cos[offset:L] instead of cos[offset:offset + L]",
          Output(_ends_at_L, "raised"),
          "your code raised RuntimeError on {case}: {error}. " + _SLICE_TO_L + "."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the wrong result is the rotation with one of these mistakes (in this order)
    Entry("rotary offset ignored", "apply_rotary ignores offset: a cached token is rotated at position 0",
          Reference(lambda c: [({}, lambda: _rot(c.x, c.cos, c.sin, 0))] if c.offset > 0 else [], "values"),
          "with offset = {offset} your rotation starts at position 0: the offset is not used. With a key/value cache "
          "the new token sits at position offset (not 0), and its query and key must turn by that position's angle: "
          "rows offset .. offset + L - 1 of the tables."),
    Entry("pairs layout",
          "RoPE in Meta's pairs layout (2i, 2i+1) instead of the course's halves layout (rotate_half)",
          Reference(lambda c: [({}, lambda: _meta(c.x, c.offset))], "values"),
          _PAIRS + ": rotate_half(x) = torch.cat([-x2, x1], dim=-1) with x1, x2 the two halves of the last axis."),
    Entry("pairs layout", None, _rot_run(_pairs_turn),
          _PAIRS + ": you turned the pairs (2i, 2i+1) with the halves layout's tables; rotate_half(x) = "
          "torch.cat([-x2, x1], dim=-1) with x1, x2 the two halves of the last axis."),
    Entry("positions from 1", "rotary positions counted from 1 instead of 0", _rot_run(shift=1),
          "you rotated the tokens one position too far (positions from 1): the token at position p uses row p of "
          "the tables, rows offset .. offset + L - 1."),
    Entry("rotation the wrong way", "RoPE turns by -angle (x * cos - rotate_half(x) * sin)", _rot_run(sin_sign=-1.0),
          "you turned by -angle: rotate_half is [-x2 | x1] (the minus on the second half, moved to the front), and "
          "the sine term is added: x * cos + rotate_half(x) * sin."),
    Entry("rotate_half without the minus", "rotate_half swaps the halves without negating one", _rot_run(_swap_halves),
          "your rotate_half swaps the halves without negating: it must be torch.cat([-x2, x1], dim=-1) (a quarter "
          "turn, not a reflection)."),
    Entry("sin and cos swapped", None, _rot_run(swap=True),
          "you multiplied x by the sines and rotate_half(x) by the cosines: x * cos + rotate_half(x) * sin."),
    Entry("rotary slice ends at L", None,
          Reference(lambda c: [({}, lambda: c.x * c.cos[c.offset : c.x.size(-2)] + rotate_half(c.x)
                                * c.sin[c.offset : c.x.size(-2)])] if c.offset > 0 else [], "values"),
          _SLICE_TO_L + "."),
    # the property the rotation exists for, on the student's code (stage "relative")
    Entry("values differ", None,
          Output(lambda s: s is not None and abs(s[0] - s[1]) > 1e-4 * (1 + abs(s[0]))
                 and dict(first=f"{s[0]:.4f}", second=f"{s[1]:.4f}"), "relative"),
          "<R(m) q, R(n) k> should depend on m - n only; yours gives {first} for (4, 1) and {second} for ({m}, {n})."),
    *GRADIENT_PROBE,
    Entry("dtype not preserved", None, Output(lambda c: isinstance(c.got, Tensor) and c.got.dtype != c.dtype
                                              and dict(got=c.got.dtype), "dtype"),
          "apply_rotary({case}) returns {got}: the result keeps x's dtype, bfloat16 (else a bfloat16 model carries "
          "float32 queries and keys from here on). x * cos promotes to float32 when the tables are float32: take the "
          "rows in x's dtype, cos[offset:offset + L].to(x.dtype), and sin the same way."),
])


def _rotary_case(fn: Any, x: Tensor, cos: Tensor, sin: Tensor, offset: int | None, case: str) -> None:
    x0, c0, s0 = x.clone(), cos.clone(), sin.clone()
    kwargs = {} if offset is None else {"offset": offset}
    try:
        got = call_student(fn, x, cos, sin, context=f"calling apply_rotary on {case}", **kwargs)
    except StudentError as err:
        ROTARY.detect("raised", SimpleNamespace(exc=err.exc, rows=cos.size(0), L=x.size(-2), offset=offset or 0),
                      case=case, error=err.exc, rows=cos.size(0), cols=cos.size(1), L=x.size(-2), offset=offset)
        raise
    check_unchanged(["x", "cos", "sin"], [x, cos, sin], [x0, c0, s0], case)
    start = offset or 0
    mistakes = ROTARY.candidates(SimpleNamespace(x=x0, cos=c0, sin=s0, offset=start), "values", offset=start)
    expect_close("the result", got, _rot(x0, c0, s0, start), mistakes, atol=1e-5, rtol=1e-4, case=case)


@checker("apply_rotary")
def check_apply_rotary(fn: Any) -> str:
    require_function(fn, "apply_rotary")
    B, H, L, d_k = randint(2, 3), randint(2, 4), randint(5, 9), 2 * randint(3, 6)
    offset = randint(3, 12)
    cos, sin = rotary_tables(d_k, L + offset + randint(1, 5))
    _rotary_case(fn, torch.randn(B, H, L, d_k), cos, sin, None, f"x of shape ({B}, {H}, {L}, {d_k}), offset left "
                 "at its default")
    _rotary_case(fn, torch.randn(B, L, d_k), cos, sin, 0, f"x of shape ({B}, {L}, {d_k}), offset=0")
    _rotary_case(fn, torch.randn(B, H, L, d_k), cos, sin, offset, f"x of shape ({B}, {H}, {L}, {d_k}), "
                 f"offset={offset}")
    _rotary_case(fn, torch.randn(B, H, 1, d_k), cos, sin, offset, f"one new token x of shape ({B}, {H}, 1, {d_k}) "
                 f"at offset={offset} (the key/value cache's case)")
    q, k = torch.randn(d_k), torch.randn(d_k)  # the property the rotation exists for, on the student's code
    try:
        scores = [float(call_student(fn, q[None], cos, sin, offset=m) @ call_student(fn, k[None], cos, sin, offset=n).T)
                  for m, n in ((4, 1), (offset + 4, offset + 1))]
    except StudentError:
        scores = None
    ROTARY.detect("relative", scores, m=offset + 4, n=offset + 1)
    gradient_probe(lambda x: fn(x, cos, sin), lambda x: _rot(x, cos, sin, 0), dict(x=torch.randn(B, H, L, d_k)),
                   what="apply_rotary", case=f"x of shape ({B}, {H}, {L}, {d_k})")
    _rotary_dtype(fn, torch.randn(B, H, L, d_k).to(torch.bfloat16), cos, sin)
    return "3-D and 4-D inputs, offsets 0 and > 0, one cached token; <R(m) q, R(n) k> depends on m - n only"


def _rotary_dtype(fn: Any, x: Tensor, cos: Tensor, sin: Tensor) -> None:
    """bfloat16 queries with float32 tables: the result keeps x's dtype, as the reference's ``.to(x.dtype)`` does.
    Code that cannot run on bfloat16 at all (complex numbers of bfloat16 do not exist) is not failed for it."""
    case = f"x of shape {describe_shape(x)} in torch.bfloat16, float32 tables"
    try:
        got = call_student(fn, x, cos, sin, context=f"calling apply_rotary on {case}")
    except StudentError:
        return
    ROTARY.detect("dtype", SimpleNamespace(got=got, dtype=x.dtype), case=case)


# ---------------------------------------------------------------- SwiGLU
def _glu_run(make: Callable[[Tensor, Tensor], Tensor], after_w2: Callable[[Tensor], Tensor] | None = None) -> Reference:
    """One candidate: ``w2(make(a, b))`` for case ``c``, with ``a = w1(x)`` (the gate's pre-activation) and
    ``b = w3(x)`` (the value's), ``after_w2`` applied to the result."""
    def build(c: Any) -> list:
        def run() -> Tensor:
            a, b = c.x @ c.w1.T, c.x @ c.w3.T  # (..., d_ff) each
            out = make(a, b) @ c.w2.T  # (..., D)
            return after_w2(out) if after_w2 else out
        return [({}, run)]
    return Reference(build, "values")


def _linear_facts(model: nn.Module, name: str, i: int, o: int) -> SimpleNamespace:
    m = getattr(model, name, None)
    children = [n for n, _ in model.named_children()]
    return SimpleNamespace(m=m, i=i, o=o, children=children)


# a layer the exercise names: nn.Linear(i, o, bias=False) (SwiGLU's and GroupedQueryAttention's), stage "linear"
_LINEAR = [
    Entry("missing submodule", None, Output(lambda c: c.m is None, "linear"),
          "{what} needs `{name}` = nn.Linear({i}, {o}, bias=False) (yours: {children}).{renames}"),
    Entry("wrong submodule", None, Output(lambda c: not isinstance(c.m, nn.Linear), "linear"),
          "{what} needs `{name}` = nn.Linear({i}, {o}, bias=False) (yours: {children}).{renames}"),
    Entry("wrong submodule", None,
          Output(lambda c: tuple(c.m.weight.shape) != (c.o, c.i) and dict(got_i=c.m.in_features,
                                                                          got_o=c.m.out_features), "linear"),
          "`{name}` of {what} maps {got_i} -> {got_o} features; it should map {i} -> {o}."),
    Entry("bias in a layer",
          "a linear layer with a bias where Llama's have none",
          Output(lambda c: c.m.bias is not None, "linear"),
          "`{name}` has a bias; Llama's layers have none: nn.Linear(..., bias=False)."),
]
_LINEARS = Catalogue("a Llama linear layer", "10", _LINEAR)  # not an exercise: SwiGLU's and GQA's tables hold them


def _linear(model: nn.Module, name: str, i: int, o: int, what: str) -> Tensor:
    c = _linear_facts(model, name, i, o)
    _LINEARS.detect("linear", c, what=what, name=name, i=i, o=o, children=", ".join(c.children) or "none",
                    renames=_renames(c.children))
    return c.m.weight


def _w2_w3_swapped(c: Any) -> bool:
    """w2 built as the up projection and w3 as the down one (LLMs-from-scratch's fc2 / fc3 order)."""
    w2, w3 = getattr(c.model, "w2", None), getattr(c.model, "w3", None)
    return (isinstance(w2, nn.Linear) and isinstance(w3, nn.Linear) and tuple(w2.weight.shape) == (c.d_ff, c.D)
            and tuple(w3.weight.shape) == (c.D, c.d_ff))


SWIGLU = Catalogue("SwiGLU", "10", [
    *_module_class("SwiGLU"),
    Entry("w2 and w3 swapped",
          "SwiGLU's w2 built as the up projection (d_model -> d_ff) and w3 as the down one",
          Output(_w2_w3_swapped, "swapped"),
          "your w2 maps d_model -> d_ff ({D} -> {d_ff}) and your w3 maps d_ff -> d_model: the two are swapped. In "
          "Llama's names (and the course's, which the weights load by) w3 is the value branch, d_model -> d_ff, "
          "multiplied by silu(w1(x)), and w2 projects back, d_ff -> d_model: w2(silu(w1(x)) * w3(x)). Swap the names "
          "of the two layers (in __init__ and forward)."),
    *_LINEAR,
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the wrong output is the layer with one of these mistakes (in this order)
    Entry("gate on the wrong branch",
          "SwiGLU's SiLU on w3(x) instead of the gate w1(x)",
          _glu_run(lambda a, b: F.silu(b) * a),
          "SiLU is applied to w3(x) and w1(x) is the plain branch; the gate is w1: w2(silu(w1(x)) * w3(x))."),
    Entry("GELU instead of SiLU", "GEGLU: GELU on SwiGLU's gate instead of SiLU", _glu_run(lambda a, b: F.gelu(a) * b),
          "this is GEGLU (GELU on the gate); SwiGLU's gate uses SiLU (swish), F.silu(h) = h * sigmoid(h)."),
    Entry("GELU instead of SiLU", None, _glu_run(lambda a, b: F.gelu(a, approximate="tanh") * b),
          "this is GEGLU with the tanh GELU; SwiGLU's gate uses SiLU, F.silu(h) = h * sigmoid(h)."),
    Entry("sigmoid gate", "GLU's sigmoid gate instead of SwiGLU's SiLU", _glu_run(lambda a, b: torch.sigmoid(a) * b),
          "the gate is sigmoid(w1(x)) (the original GLU); SwiGLU uses silu(w1(x)) = w1(x) * sigmoid(w1(x))."),
    Entry("ReLU instead of SiLU", "ReGLU: ReLU on SwiGLU's gate instead of SiLU", _glu_run(lambda a, b: F.relu(a) * b),
          "this is ReGLU (ReLU on the gate); SwiGLU uses SiLU."),
    Entry("gate missing", "SwiGLU without its second branch w3(x)", _glu_run(lambda a, b: F.silu(a)),
          "w3(x) is not used: SwiGLU multiplies the activated gate by a second projection, w2(silu(w1(x)) * w3(x))."),
    Entry("SiLU on both branches", "SiLU on both SwiGLU branches", _glu_run(lambda a, b: F.silu(a) * F.silu(b)),
          "SiLU is applied to both branches; only the gate w1(x) goes through it: w2(silu(w1(x)) * w3(x))."),
    Entry("SiLU after the product",
          "SiLU applied to w1(x) * w3(x) instead of to the gate alone",
          _glu_run(lambda a, b: F.silu(a * b)),
          "SiLU is applied after the product; it gates w1(x) alone: w2(silu(w1(x)) * w3(x))."),
    Entry("sum instead of product",
          "SwiGLU adds the gate and the value branch instead of multiplying them",
          _glu_run(lambda a, b: F.silu(a) + b),
          "you added the two branches; the gate multiplies: w2(silu(w1(x)) * w3(x)), element by element."),
    Entry("SiLU after w2",
          "SwiGLU's SiLU applied to w2's output instead of to the gate w1(x)",
          _glu_run(lambda a, b: a * b, F.silu),
          "SiLU is applied to the output of w2; it gates w1(x) alone, inside: w2(silu(w1(x)) * w3(x)), and w2's "
          "output is the layer's output as it is."),
    Entry("SiLU after w2", None, _glu_run(lambda a, b: F.silu(a) * b, F.silu),
          "SiLU is applied to the output of w2 as well; it gates w1(x) alone, inside: w2(silu(w1(x)) * w3(x)), and "
          "w2's output is the layer's output as it is."),
    *GRADIENT_PROBE,
])


@checker("SwiGLU")
def check_swiglu(cls: Any) -> str:
    require_module_class(cls, "SwiGLU")
    B, L, D = randint(2, 3), randint(4, 6), randint(7, 11)
    d_ff = D + randint(5, 9)  # not D: w2 and w3 mixed up shows in the shapes
    model = call_student(cls, D, d_ff, context=f"constructing SwiGLU(d_model={D}, d_ff={d_ff})")
    SWIGLU.detect("built", model)
    SWIGLU.detect("swapped", SimpleNamespace(model=model, D=D, d_ff=d_ff), D=D, d_ff=d_ff)
    w1, w2, w3 = (_linear(model, n, i, o, "SwiGLU") for n, i, o in (("w1", D, d_ff), ("w2", d_ff, D), ("w3", D, d_ff)))
    model.eval()
    randomise_parameters(model)
    for shape in ((B, L, D), (L, D)):
        x = 2 * torch.randn(*shape)
        case = f"x of shape {describe_shape(x)}"
        x0 = x.clone()
        got = _forward(model, (x,), case)
        check_unchanged(["x"], [x], [x0], case)
        ws = [w.detach() for w in (w1, w2, w3)]
        mistakes = SWIGLU.candidates(SimpleNamespace(x=x0, w1=ws[0], w2=ws[1], w3=ws[2]), "values")
        expect_close("the output", got, (F.silu(x0 @ ws[0].T) * (x0 @ ws[2].T)) @ ws[1].T, mistakes, atol=1e-5,
                     rtol=1e-4, case=case)
    refs = [nn.Parameter(w.detach().clone()) for w in (w1, w2, w3)]
    gradient_probe(model, lambda x: (F.silu(x @ refs[0].T) * (x @ refs[2].T)) @ refs[1].T,
                   dict(x=torch.randn(B, L, D)), list(zip(("w1.weight", "w2.weight", "w3.weight"), (w1, w2, w3), refs)),
                   what="SwiGLU", case=f"x of shape ({B}, {L}, {D})")
    return "3-D and 2-D inputs, random weights, d_ff != d_model"


# ---------------------------------------------------------------- grouped-query attention
def _gqa(ref: GroupedQueryAttention, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, *,
         interleave: str = "kv", rotate: str = "qk", causal: str = "tril", scale: str = "sqrt(d_k)",
         heads_first: bool = True, use_mask: str = "and", fill: str = "-inf", inverted: bool = False,
         softmax_dim: int = -1, split_transpose: bool = True, merge_transpose: bool = True,
         use_w_o: bool = True, offsets: tuple[int, int] = (0, 0)) -> Tensor:
    """The reference attention with one thing changed (the catalogued mistakes): ``interleave`` names the tensors
    spread with repeat_interleave (the others with .repeat), ``heads_first=False`` rotates (B, L, H, d_k) before
    the transpose, ``causal`` is "tril", "none" or "triu" (causal_mask(L).T), ``use_mask`` is "and", "or",
    "replaces" (the causal mask), "not" (causal & ~mask), "ignored" or "added" (the bool mask added to the
    scores), ``fill`` is "-inf", "-inf, nan_to_num", "finite" (-1e9) or "zero", ``inverted`` fills the allowed
    scores instead of the blocked ones, ``split_transpose`` / ``merge_transpose`` False: the heads split or
    merged by a plain view, (B, L, D) <-> (B, H, L, d_k); ``offsets``: the positions q and k are rotated from."""
    H, H_kv, d_k = ref.num_heads, ref.n_kv_heads, ref.d_k
    B, L, D = x.shape

    def split(t: Tensor, heads: int) -> Tensor:  # (B, L, heads, d_k); without the transpose (B, heads, L, d_k)
        return t.view(B, L, heads, d_k) if split_transpose else t.reshape(B, heads, L, d_k)

    q, k, v = split(ref.w_q(x), H), split(ref.w_k(x), H_kv), split(ref.w_v(x), H_kv)
    if split_transpose:
        v = v.transpose(1, 2)  # (B, H_kv, L, d_k)
        if heads_first:
            q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, L, d_k), (B, H_kv, L, d_k)
    q = _rot(q, cos, sin, offsets[0]) if "q" in rotate else q
    k = _rot(k, cos, sin, offsets[1]) if "k" in rotate else k
    v = _rot(v, cos, sin, 0) if "v" in rotate else v
    if split_transpose and not heads_first:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    g = H // H_kv
    k, v = ((t.repeat_interleave(g, dim=1) if name in interleave else t.repeat(1, g, 1, 1))
            for name, t in (("k", k), ("v", v)))  # (B, H, L, d_k)
    ones = torch.ones(L, L, dtype=torch.bool)
    allowed = {"tril": ones.tril(), "triu": ones.triu(), "none": ones}[causal]  # (L, L)
    if mask is not None:
        allowed = {"and": allowed & mask, "or": allowed | mask, "replaces": mask, "not": allowed & ~mask}.get(
            use_mask, allowed)
    scores = q @ k.transpose(-2, -1) / {"sqrt(d_k)": d_k**0.5, "none": 1.0, "d_k": float(d_k)}[scale]  # (B, H, L, L)
    value = {"zero": 0.0, "finite": -1e9}.get(fill, float("-inf"))
    scores = scores.masked_fill(allowed if inverted else ~allowed, value)
    if mask is not None and use_mask == "added":
        scores = scores + mask
    weights = scores.softmax(softmax_dim)  # (B, H, L, L)
    weights = weights.nan_to_num() if fill == "-inf, nan_to_num" else weights  # a fully blocked row zeroed
    out = weights @ v  # (B, H, L, d_k)
    merged = (out.transpose(1, 2) if merge_transpose else out).reshape(B, L, D)  # (B, L, D)
    return ref.w_o(merged) if use_w_o else merged


_INVERTED = ("your mask blocks the allowed positions and lets the blocked ones through: True means may attend, so "
             "fill the scores where the mask is False: scores.masked_fill(~allowed, float('-inf'))")


def _gqa_run(masked: bool | None = None, **settings: Any) -> Reference:
    """One candidate: the reference attention of case ``c`` (``ref``, ``x``, ``cos``, ``sin``, ``mask``) with these
    settings (:func:`_gqa`); ``masked``: only with (True) or without (False) a mask, None: always."""
    def build(c: Any) -> list:
        if masked is not None and (c.mask is not None) != masked:
            return []
        return [({}, lambda: _gqa(c.ref, c.x, c.cos, c.sin, c.mask, **settings))]
    return Reference(build, "values")


def _offsets(c: Any) -> list:
    """q and k rotated at different offsets (trial s8_10: `apply_rotary(q, cos, sin, offset=1)` with the keys at 0):
    the scores then see every distance shifted by the difference."""
    return [(dict(ahead="ahead of" if q > k else "behind", n=abs(q - k), s="" if abs(q - k) == 1 else "s"),
             lambda q=q, k=k: _gqa(c.ref, c.x, c.cos, c.sin, c.mask, offsets=(q, k)))
            for q, k in ((1, 0), (0, 1))]


GQA = Catalogue("GroupedQueryAttention", "10", [
    *_module_class("GroupedQueryAttention"),
    # the projections and the attributes the exercise names
    Entry("key/value projections not grouped",
          "GQA's w_k/w_v map to d_model (one head per query head), not n_kv_heads * d_k",
          Output(lambda c: isinstance(getattr(c.model, "w_k", None), nn.Linear) and c.model.w_k.out_features == c.D
                 and c.kv != c.D, "linears"),
          "w_k maps {D} -> {D}: one key head per query head (multi-head attention). In grouped-query attention "
          "w_k and w_v map d_model -> n_kv_heads * d_k = {kv}: fewer key/value heads, each shared by a group."),
    *_LINEAR,
    Entry("attribute missing or renamed", "a module lacks an attribute the contract names (or stores it under "
          "another name)", Output(lambda c: c.wrong, "attributes"),
          "GroupedQueryAttention({shown}) should store self.{name} = {value} (an int); yours has {what}{also}. The "
          "exercise names num_heads, n_kv_heads and d_k: the key/value cache and the Llama model read them."),
    # the forward on x with and without a padding mask (B, 1, 1, L)
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the wrong output is the reference run with one of these mistakes (in this order); with NaN, the one whose
    # NaN fall at the same places
    Entry("padding mask replaces causal", None, _gqa_run(True, use_mask="replaces"),
          "with a padding mask your attention drops the causal mask (the mask argument replaces it), so every "
          "position sees the future: combine the two, causal_mask(L) & mask."),
    Entry("| instead of &", None, _gqa_run(True, use_mask="or"),
          "you combined the causal and the padding masks with |: a key is then allowed when either mask allows it, "
          "so the padding mask lets every future position through. Combine them with &: causal_mask(L) & mask."),
    Entry("inverted mask", None, _gqa_run(True, use_mask="not"),
          "your code reads the padding mask the wrong way round (causal_mask(L) & ~mask, or masked_fill(mask, ...)): "
          "True means a real token that may be attended, False a padding key. Keep causal_mask(L) & mask as it is; "
          "a query whose keys are all blocked then gets NaN, as here."),
    Entry("repeat instead of repeat_interleave", "GQA's key/value heads cycled over the query heads (repeat), not in "
          "groups", _gqa_run(interleave=""),
          "the key/value heads go to the wrong query heads: in your code query head h reads key/value head h % "
          "n_kv_heads (heads 0, 1, 0, 1, ...: what `k.repeat(1, g, 1, 1)` does, or grouping the queries with "
          ".view(B, g, n_kv_heads, ...)); it must read key/value head h // g (g = num_heads // n_kv_heads), so that "
          "head j serves the consecutive query heads j * g .. (j + 1) * g - 1: k.repeat_interleave(g, dim=1), or "
          "q.view(B, n_kv_heads, g, ...) when you group the queries."),
    Entry("repeat instead of repeat_interleave", None, _gqa_run(interleave="k"),
          "the keys and the values are spread differently: one with repeat_interleave, the other with .repeat, so "
          "query head h reads the keys of head h // g but the values of head h % n_kv_heads. Spread both with "
          "repeat_interleave(g, dim=1)."),
    Entry("repeat instead of repeat_interleave", None, _gqa_run(interleave="v"),
          "the keys and the values are spread differently: one with repeat_interleave, the other with .repeat, so "
          "query head h reads the values of head h // g but the keys of head h % n_kv_heads. Spread both with "
          "repeat_interleave(g, dim=1)."),
    Entry("rotary on (B, L, H, d_k)",
          "RoPE applied before the heads axis moved: heads turned by their index, not positions",
          _gqa_run(heads_first=False),
          "you rotated q and k while they were (B, L, H, d_k), before .transpose(1, 2): apply_rotary reads the "
          "positions from the second-to-last axis, so it turned each head by its head number instead of each token "
          "by its position. Rotate after the transpose, on (B, H, L, d_k) (split_heads gives that layout)."),
    Entry("rotary on values", "RoPE applied to the values as well as queries and keys", _gqa_run(rotate="qkv"),
          "you rotated the values too; RoPE turns queries and keys only (their dot product is what should depend on "
          "the relative position), never the values."),
    Entry("rotary on queries or keys only", "RoPE applied to the queries or the keys, not both", _gqa_run(rotate="k"),
          "only the keys are rotated: rotate the queries as well (q and k both with apply_rotary)."),
    Entry("rotary on queries or keys only", None, _gqa_run(rotate="q"),
          "only the queries are rotated: rotate the keys as well (q and k both with apply_rotary)."),
    Entry("q and k rotated at different offsets",
          "the queries and the keys turned by the angles of different positions (offset passed to one of them)",
          Reference(_offsets, "values"),
          "the queries and the keys are rotated at different offsets (the queries {n} position{s} {ahead} the keys): "
          "RoPE makes the score of query m and key n depend on m - n only when each is turned by the angle of its "
          "own position, so every distance is off by {n} here. forward sees the whole sequence: rotate both at "
          "offset 0, apply_rotary(q, cos, sin) and apply_rotary(k, cos, sin) (with a cache, both at the same "
          "offset)."),
    Entry("rotary not applied", "queries and keys not rotated", _gqa_run(rotate=""),
          "queries and keys are not rotated: without RoPE this model has no idea of position. Apply apply_rotary(q, "
          "cos, sin) and apply_rotary(k, cos, sin) after splitting the heads."),
    Entry("no causal mask", None, _gqa_run(causal="none"),
          "every position attends to the future too: build causal_mask(L) (and `&` the mask argument)."),
    Entry("upper triangle", None, _gqa_run(causal="triu"),
          "your causal mask is the upper triangle (torch.triu, or causal_mask(L).T): each position sees the future "
          "instead of the past. causal_mask(L) is already True where key j <= query i: use it as it is."),
    Entry("no scaling", None, _gqa_run(scale="none"), "the scores are not divided by sqrt(d_k)."),
    Entry("scaled by d_k", None, _gqa_run(scale="d_k"),
          "the scores are divided by d_k; divide by its square root, math.sqrt(self.d_k)."),
    Entry("softmax over the wrong axis", None, _gqa_run(softmax_dim=-2),
          "the softmax runs over the queries (dim=-2) instead of the keys: softmax(dim=-1), so each query's weights "
          "over the keys sum to 1."),
    Entry("inverted mask", None, _gqa_run(inverted=True),
          _INVERTED + ". (The last query may attend every key, so your code blocked its whole row: softmax over a row "
          "of -inf is 0 / 0 = NaN.)"),
    Entry("inverted mask", None, _gqa_run(inverted=True, fill="-inf, nan_to_num"), _INVERTED + "."),
    Entry("inverted mask", None, _gqa_run(inverted=True, fill="finite"),
          _INVERTED + " (a very negative number such as -1e9 does the same as -inf)."),
    Entry("mask filled with 0", None, _gqa_run(fill="zero"),
          "the blocked scores are set to 0, which still gives them weight (exp(0) = 1): fill them with float('-inf') "
          "so that their weight is 0."),
    Entry("missing output projection", None, _gqa_run(use_w_o=False),
          "the output skips the final projection: after merging the heads, pass the result through self.w_o."),
    Entry("split without transpose", None, _gqa_run(split_transpose=False),
          "the heads were split with a plain .view(B, num_heads, L, d_k) from (B, L, D), no transpose, so each head "
          "got a block of positions instead of a slice of features. Use split_heads(t, num_heads) (notebook 02's, "
          "imported here): a view as (B, L, H, d_k), then transpose(1, 2)."),
    Entry("split without transpose", None, _gqa_run(split_transpose=False, merge_transpose=False),
          "the heads were split with a plain .view(B, num_heads, L, d_k) and merged back with a plain .reshape(B, L, "
          "D), no transposes: each head got a block of positions instead of a slice of features. Use "
          "split_heads(t, num_heads) and merge_heads(out) (notebook 02's, imported here)."),
    Entry("reshape without transpose", None, _gqa_run(merge_transpose=False),
          "the heads were merged with a plain .reshape(B, L, D) from (B, H, L, d_k), no transpose, which mixes "
          "positions and heads. Use merge_heads(out) (notebook 02's, imported here): transpose(1, 2) to (B, L, H, "
          "d_k), then flatten the last two axes."),
    Entry("mask ignored", None, _gqa_run(True, use_mask="ignored"),
          "the padding mask argument has no effect: combine it with the causal mask, causal_mask(L) & mask, before "
          "filling the scores."),
    Entry("additive float mask", None, _gqa_run(True, use_mask="added"),
          "you added the mask to the scores (Hugging Face's masks are additive 0 / -inf floats); the course's mask "
          "is bool, True = may attend: scores.masked_fill(~(causal_mask(L) & mask), float('-inf'))."),
    # n_kv_heads left at its default, then one that does not divide num_heads
    Entry("n_kv_heads default not handled", "GQA built with n_kv_heads=None (the default: num_heads) fails or "
          "misbehaves",
          Raises("", stage="default"),
          "GroupedQueryAttention({shown}) raised {type}: {error}. The default n_kv_heads=None means one key/value head "
          "per query head (plain multi-head attention): start __init__ with `if n_kv_heads is None: n_kv_heads = "
          "num_heads`."),
    Entry("wrong error type", None, Raises("", stage="divisible"),
          "GroupedQueryAttention(d_model=12, num_heads=6, n_kv_heads=4) raised {type}: {error}; n_kv_heads must divide "
          "num_heads, and the course's error for it is a ValueError that says so."),
    Entry("n_kv_heads not checked", "an n_kv_heads that does not divide num_heads is accepted",
          Output(lambda built: built, "divisible"),
          "GroupedQueryAttention(d_model=12, num_heads=6, n_kv_heads=4) was built: 4 key/value heads cannot share 6 "
          "query heads in equal groups. Raise a ValueError when num_heads % n_kv_heads != 0."),
    # any failure above, when forward calls the notebook's own apply_rotary and that one fails its check
    Entry("calls a failing apply_rotary", "GroupedQueryAttention calls the student's apply_rotary, which fails its "
          "own check",
          Output(lambda why: why is not None and dict(why=why), "blame"),
          "your forward calls your apply_rotary, which has not passed its check ({why}): the queries and keys it "
          "rotates are wrong, so this check cannot tell whether the attention itself is right. Fix apply_rotary first "
          "(its check cell says more), or continue with the reference: run `from course_utils import apply_rotary`, "
          "then the cell that defines GroupedQueryAttention, then this check again."),
])


def _nan_named(got: Any, mistakes: list[tuple[str, str, Any]], case: str) -> None:
    """Output with NaN (a row of -inf scores): name the catalogued mistake that gives NaN at the same places and
    the same numbers elsewhere (expect_close compares without NaN)."""
    if not isinstance(got, Tensor) or not got.is_floating_point() or not bool(isnan(got).any()):
        return
    for name, diagnosis, candidate in mistakes:
        try:
            value = candidate() if callable(candidate) else candidate
        except Exception:  # noqa: BLE001 - a mistake that cannot even be computed is not this one
            continue
        if (isinstance(value, Tensor) and value.shape == got.shape and bool(isnan(value).any())
                and allclose(got.detach().double(), value.double(), atol=1e-4, rtol=1e-4, equal_nan=True)):
            fail(f"the output ({case}) contains NaN: {diagnosis}", mistake=name)


def _gqa_linears(model: nn.Module, D: int, kv: int) -> None:
    GQA.detect("linears", SimpleNamespace(model=model, D=D, kv=kv), D=D, kv=kv)
    for name, o in (("w_q", D), ("w_k", kv), ("w_v", kv), ("w_o", D)):
        _linear(model, name, D, o, "GroupedQueryAttention")


def _wrong_attribute(model: nn.Module, name: str, value: int) -> dict[str, Any] | None:
    got = getattr(model, name, None)
    if type(got) is int and got == value:  # a tensor or None compared with == would not be a bool
        return None
    near = [n for n, v in vars(model).items() if not n.startswith("_") and n != name and type(v) is int and v == value]
    return dict(name=name, value=value, also=f" (yours has `{near[0]}` = {value}: rename it)" if near else "",
                what="no such attribute" if got is None else describe_shape(got) if isinstance(got, Tensor)
                else repr(got))


def _gqa_attributes(model: nn.Module, shown: str, expected: dict[str, int]) -> None:
    """The attributes the exercise names (the model's cache and Llama read them by these names)."""
    for name, value in expected.items():
        wrong = _wrong_attribute(model, name, value)
        GQA.detect("attributes", SimpleNamespace(wrong=wrong), shown=shown, **(wrong or {}))


def _gqa_compare(model: nn.Module, shape: tuple[int, int, int], H: int, H_kv: int, cos: Tensor, sin: Tensor,
                 masks: tuple[Tensor | None, ...], shown: str) -> None:
    """Forward on ``x`` of ``shape`` (with each mask) against the reference holding the model's weights."""
    B, L, D = shape
    model.eval()
    randomise_parameters(model)
    ref = GroupedQueryAttention(D, H, H_kv).eval()
    ref.load_state_dict(model.state_dict(), strict=False)
    for mask in masks:
        x = torch.randn(B, L, D)
        case = f"x of shape ({B}, {L}, {D}), {shown}" + (", a padding mask (B, 1, 1, L)" if mask is not None else "")
        x0 = x.clone()
        args = (x, cos, sin) if mask is None else (x, cos, sin, mask)
        got = _forward(model, args, case)
        check_unchanged(["x"], [x], [x0], case)
        with torch.no_grad():
            expected = _gqa(ref, x0, cos, sin, mask)
            c = SimpleNamespace(ref=ref, x=x0, cos=cos, sin=sin, mask=mask)
            mistakes = GQA.candidates(c, "values") if H_kv < H else []
            _nan_named(got, mistakes, case)
            expect_close("the output", got, expected, mistakes, atol=1e-4, rtol=1e-4, case=case)


def _blame_apply_rotary(cls: Any) -> None:
    """A GroupedQueryAttention that failed and whose forward calls the notebook's own apply_rotary: when that one
    fails its own check, the attention inherits its mistake, whatever the attention itself does (as
    check_train_step blames a failing masked_cross_entropy)."""
    GQA.detect("blame", own_helper_failure(getattr(cls, "forward", None), "apply_rotary", apply_rotary,
                                           check_apply_rotary))


@checker("GroupedQueryAttention")
def check_grouped_query_attention(cls: Any) -> str:
    require_module_class(cls, "GroupedQueryAttention")
    try:
        return _check_grouped_query_attention(cls)
    except (Failure, StudentError):
        _blame_apply_rotary(cls)
        raise


def _check_grouped_query_attention(cls: Any) -> str:
    H_kv, g, d_k = randint(2, 3), randint(2, 3), 2 * randint(2, 4)  # H_kv, g >= 2: repeat and interleave differ
    H, B, L = H_kv * g, randint(2, 3), randint(5, 8)
    D = H * d_k
    shown = f"d_model={D}, num_heads={H}, n_kv_heads={H_kv}"
    model = call_student(cls, D, H, H_kv, context=f"constructing GroupedQueryAttention({shown})")
    GQA.detect("built", model)
    _gqa_linears(model, D, H_kv * d_k)
    _gqa_attributes(model, shown, dict(num_heads=H, n_kv_heads=H_kv, d_k=d_k))
    cos, sin = rotary_tables(d_k, L + H + 3)  # longer than both L and H: (B, L, H, d_k) code runs too
    padded = torch.ones(B, 1, 1, L, dtype=torch.bool)  # (B, 1, 1, L): keys of the last positions blocked
    padded[0, ..., L - 2 :] = False
    _gqa_compare(model, (B, L, D), H, H_kv, cos, sin, (None, padded), shown)
    shown = f"d_model={D}, num_heads={H}, n_kv_heads left at its default (None)"
    try:
        model = cls(D, H)
    except Exception as exc:  # noqa: BLE001 - named, never raised at the student
        GQA.detect_raised(exc, "default", shown=shown, type=type(exc).__name__, error=exc)
    _gqa_linears(model, D, D)
    _gqa_attributes(model, shown, dict(num_heads=H, n_kv_heads=H, d_k=d_k))
    _gqa_compare(model, (B, L, D), H, H, cos, sin, (None,), shown)
    bad = (6, 4)
    try:
        cls(bad[0] * 2, bad[0], bad[1])
    except ValueError:
        pass
    except Exception as exc:  # noqa: BLE001 - named, never raised at the student
        GQA.detect_raised(exc, "divisible", type=type(exc).__name__, error=exc)
    else:
        GQA.detect("divisible", True)
    return "4 to 9 query heads in groups of 2 or 3, with and without a padding mask, rotated queries and keys"


CATALOGUES = (RMS, TABLES, ROTARY, SWIGLU, GQA)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints("RMSNorm", [
    "Like LayerNorm, but without the mean: divide each vector by its root mean square over the features, then "
    "multiply by a learned scale (self.weight = nn.Parameter(torch.ones(d_model))). No bias.",
    "rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps), shape (..., 1); eps goes inside the root.",
    "Check on a hand example: x = [3, 4] has mean square 12.5, so the output is x / sqrt(12.5) = [0.8485, 1.1314] "
    "(with weight ones and eps 0); torch.nn.RMSNorm gives the same.",
])
register_hints("rotary_tables", [
    "theta_i = base ** (-2i / d_k) for i = 0 .. d_k/2 - 1: torch.arange(0, d_k, 2) / d_k gives the exponents.",
    "The angles are the outer product of the positions 0 .. max_len - 1 and the frequencies: shape (max_len, d_k/2). "
    "Create both with device=device, in float32 (or convert at the end).",
    "Write each angle row twice side by side, torch.cat([angles, angles], dim=-1), (max_len, d_k), and return "
    "(angles.cos(), angles.sin()). Row 0 must be cos = 1, sin = 0.",
])
register_hints("apply_rotary", [
    "The halves layout turns feature i together with feature i + d_k/2: split the last axis in two halves x1, x2.",
    "rotate_half(x) = torch.cat([-x2, x1], dim=-1); the rotation is x * cos + rotate_half(x) * sin, with the "
    "table rows of the tokens' positions.",
    "The tokens of x sit at positions offset .. offset + L - 1 (L = x.size(-2)): slice cos[offset:offset + L] and "
    "sin the same way, .to(x.dtype) so that the result keeps x's dtype; (L, d_k) broadcasts over the leading axes.",
])
register_hints("SwiGLU", [
    "Three nn.Linear layers without bias: w1 and w3 map d_model -> d_ff, w2 maps d_ff -> d_model.",
    "w1 is the gate, through SiLU (F.silu); w3 is the value it multiplies, element by element.",
    "The order: project with w1 and w3, activate the w1 branch only, multiply the two element-wise, project "
    "back with w2. With F.gelu or torch.sigmoid in place of F.silu it is another GLU variant, not SwiGLU.",
])
register_hints("GroupedQueryAttention", [
    "w_k and w_v map d_model -> n_kv_heads * d_k (fewer heads than the queries); split them with "
    "split_heads(..., n_kv_heads). n_kv_heads=None means num_heads (set it before any arithmetic), stored as "
    "self.n_kv_heads; raise ValueError when n_kv_heads does not divide num_heads.",
    "Rotate q and k (not v) with apply_rotary(t, cos, sin) (offset stays 0: forward sees the whole sequence), "
    "then give each query head its group's keys "
    "and values: k.repeat_interleave(num_heads // n_kv_heads, dim=1) (not .repeat, which cycles the groups).",
    "Then it is notebook 02's attention: causal_mask(L) & mask, softmax(q k^T / sqrt(d_k)) v, merge_heads, w_o.",
])
