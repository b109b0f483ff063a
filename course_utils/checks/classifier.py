"""Checkers for notebook 08 (an encoder-only classifier): ``gelu``, ``masked_mean_pool``
and ``TransformerClassifier``.

``gelu`` is compared with ``F.gelu`` (exact, erf form) at ``atol=1e-6`` on random values, on a
row from -100 to 100 (the tails, where a careless formula overflows), in float64 (the dtype must
follow) and on a 0-dim ``x`` (the shape must follow). ``masked_mean_pool`` gets ``x (B, L, D)``
(sizes all different) and a ``(B, L)`` mask with padding anywhere, then trailing, then a float64
``x`` (the result's dtype is ``x``'s). ``TransformerClassifier`` (the student writes ``forward``)
is built for both poolings (post-norm GELU, pre-norm ReLU) with a non-zero ``pad_id`` and real
tokens of id 0, every parameter randomised and copied by name into
:class:`course_utils.classifier.TransformerClassifier`; a forward pre-hook records the mask the
encoder gets. A wrong result is compared with the reference computed with each catalogued
mistake. Right logits are followed by a batch of one review (a ``.squeeze()`` drops its batch
axis). Then, built again with ``dropout=0.5``: the modes kept, eval mode deterministic, and in
training mode the encoder's input one dropout of ``x + pe`` and the classifier's input the pooled
output (hooks; the checks shared with ``check_transformer``).

Each exercise's mistakes are one table (:mod:`.catalogue`): ``GELU``, ``POOL``, ``CLASSIFIER``,
in the order the check tries them (``CLASSIFIER`` tries most of ``POOL``'s on the encoder's
output); ``MISTAKES`` lists their names, pinned by tests/test_checks_classifier.py.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import causal_mask, padding_mask
from ..classifier import TransformerClassifier
from ._core import (
    Mistake,
    StudentError,
    allclose,
    call_student,
    check_input_device,
    check_unchanged,
    checker,
    dropout_scale,
    equal,
    expect_close,
    gradient_probe,
    isnan,
    matches,
    randint,
    register_hints,
    require_function,
    require_module_class,
    require_own_code,
    student_line,
)
from ._pairing import load_reference, randomise_parameters
from .catalogue import GRADIENT_PROBE, Candidate, Catalogue, Entry, Output, Probe, Reference
from .model import check_modes_kept, check_stack_input_dropout

__all__ = ["check_gelu", "check_masked_mean_pool", "check_transformer_classifier"]

_ATOL = 1e-4  # whole encoders; gelu and the pooling use tighter tolerances


def _distinct_sizes(low_high: list[tuple[int, int]]) -> list[int]:
    """Random ints, one per ``(low, high)``, all different (so a mixed-up axis shows)."""
    while True:
        sizes = [randint(lo, hi) for lo, hi in low_high]
        if len(set(sizes)) == len(sizes):
            return sizes


# ---------------------------------------------------------------- gelu
_ERF = "0.5 * x * (1 + erf(x / sqrt(2)))"
def _tanh_gelu(x: Tensor, scale: float, cubic: float) -> Tensor:
    """The tanh approximation ``0.5 x (1 + tanh(scale (x + cubic x^3)))``: right with ``sqrt(2 / pi)``, 0.044715."""
    return 0.5 * x * (1 + torch.tanh(scale * (x + cubic * x**3)))


def _gelu_is(f: Callable[[Tensor], Tensor]) -> Reference:
    """The candidate ``f(x)`` on the case ``x``."""
    return Reference(lambda x: [({}, lambda: f(x))])


def _math_on_tensor(r: Any) -> bool:
    """math.erf (or math.exp...) on a tensor of several numbers: the message and the student's line say so."""
    math_call = re.search(r"\bmath\.\w+\(|(?<![\w.])erf\(", r.line)  # math.erf(...), or erf(...) imported
    return "only one element tensors can be converted" in str(r.exc) and bool(math_call)


def _nan_in_the_tails(r: Any) -> bool:
    return isinstance(r.got, Tensor) and r.got.shape == r.expected.shape and bool(isnan(r.got).any()) \
        and not bool(isnan(r.x0).any())


GELU = Catalogue("gelu", "08", [
    Entry("not a function", None, Probe("require_function")),
    Entry("math function on a tensor", "math.erf (a function of one Python number) called on a tensor: torch.erf",
          Output(_math_on_tensor, "raised"),
          "your code raised {type} calling gelu on {case}: {exc}, at {line}. `math` functions take one Python "
          "number; x is a tensor of many: use the element-wise torch function (`torch.erf` for math.erf; "
          "math.sqrt(2), a constant, is fine)."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the result (stage "result": got, x0 and the expected values)
    Entry("constant of shape (1,)", "a constant torch.tensor([c]) of shape (1,) turns a 0-dim input into shape (1,)",
          Output(lambda r: r.x0.dim() == 0 and isinstance(r.got, Tensor) and tuple(r.got.shape) == (1,), "result"),
          "your result ({case}) has shape (1,), where F.gelu keeps the input's shape (): a constant written as a "
          "tensor of one element, `torch.tensor([2.0])`, has shape (1,), and x broadcast against it takes that axis. "
          "Write the constant as a Python number, `math.sqrt(2)` (or a 0-dim `torch.tensor(2.0, dtype=x.dtype)`)."),
    Entry("NaN in the tails", "GELU gives NaN for large |x|", Output(_nan_in_the_tails, "result"),
          "your result ({case}) contains NaN for large |x| (a division or exp that overflows in the tails?). "
          "`0.5 * x * (1 + torch.erf(x / math.sqrt(2)))` is safe for every x."),
    # the wrong values are one of these functions of x (in this order)
    Entry("tanh approximation", "the tanh approximation instead of the exact GELU",
          _gelu_is(lambda x: F.gelu(x, approximate="tanh")),
          "this is the tanh approximation of GELU (GPT-2's, `F.gelu(x, approximate='tanh')`; Google's original BERT "
          "code used it too); it differs from the exact GELU by up to about 5e-4. Write the exact form, as BERT's "
          f"paper defines it and this exercise asks: `x * Phi(x) = {_ERF}`."),
    Entry("sigmoid approximation", "the sigmoid approximation instead of the exact GELU",
          _gelu_is(lambda x: x * torch.sigmoid(1.702 * x)),
          f"this is the sigmoid approximation x * sigmoid(1.702 x); write the exact form {_ERF}."),
    Entry("SiLU instead of GELU", "SiLU instead of GELU", _gelu_is(F.silu),
          "this is SiLU (swish), x * sigmoid(x), a cousin of GELU. GELU weighs x by the normal distribution's Phi(x) "
          "= 0.5 * (1 + erf(x / sqrt(2))), not by the sigmoid."),
    Entry("ReLU instead of GELU", "ReLU where GELU is asked for", _gelu_is(F.relu),
          f"this is ReLU, max(0, x). GELU is smooth: x * Phi(x) = {_ERF}."),
    Entry("missing 1/2", "GELU without the factor 1/2", _gelu_is(lambda x: x * (1 + torch.erf(x / math.sqrt(2)))),
          "your result is twice GELU: the factor 1/2 is missing. Phi(x) = 0.5 * (1 + erf(x / sqrt(2))) lies between "
          "0 and 1."),
    Entry("erf of x, not x / sqrt(2)", "erf(x) instead of erf(x / sqrt(2))",
          _gelu_is(lambda x: 0.5 * x * (1 + torch.erf(x))),
          "you took erf(x); the normal distribution's Phi needs erf(x / sqrt(2))."),
    Entry("multiplied by sqrt(2)", "erf(x * sqrt(2)) instead of erf(x / sqrt(2))",
          _gelu_is(lambda x: 0.5 * x * (1 + torch.erf(x * math.sqrt(2)))),
          "you took erf(x * sqrt(2)); divide instead: erf(x / sqrt(2))."),
    Entry("erf of x / 2, not x / sqrt(2)", "erf(x / 2) instead of erf(x / sqrt(2))",
          _gelu_is(lambda x: 0.5 * x * (1 + torch.erf(x / 2))),
          "you took `erf(x / 2)`; the normal distribution's Phi divides by the square root of 2: "
          "`erf(x / math.sqrt(2))`."),
    Entry("1 + erf missing", "0.5 * x * erf(x / sqrt(2)): the 1 inside Phi's bracket is missing",
          _gelu_is(lambda x: 0.5 * x * torch.erf(x / math.sqrt(2))),
          "you wrote `0.5 * x * erf(x / sqrt(2))`: the 1 inside the bracket is missing. Phi(x) = 0.5 * (1 + erf(x / "
          "sqrt(2))) goes from 0 to 1; erf alone goes from -1 to 1."),
    Entry("1 - erf", "0.5 * x * (1 - erf(x / sqrt(2))): the gate reversed",
          _gelu_is(lambda x: 0.5 * x * (1 - torch.erf(x / math.sqrt(2)))),
          "you wrote `1 - erf(...)`: that is 2 * (1 - Phi(x)), the gate reversed (it opens for negative x). Add the "
          f"erf: `{_ERF}`."),
    Entry("Phi(x) without the factor x", "Phi(x) returned without the factor x",
          _gelu_is(lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))),
          "you returned Phi(x) = 0.5 * (1 + erf(x / sqrt(2))), the probability alone; GELU multiplies it by x: x * "
          "Phi(x)."),
    Entry("tanh approximation, wrong constant", "GELU's tanh approximation with a wrong constant (0.04715, 2 / pi)",
          _gelu_is(lambda x: _tanh_gelu(x, math.sqrt(2 / math.pi), 0.04715)),
          "this is the tanh approximation of GELU with 0.04715 where it has 0.044715, `tanh(sqrt(2 / pi) * (x + "
          f"0.044715 * x**3))`; the exercise asks for the exact form anyway: `{_ERF}`."),
    Entry("tanh approximation, wrong constant", None, _gelu_is(lambda x: _tanh_gelu(x, 2 / math.pi, 0.044715)),
          "this is the tanh approximation of GELU with 2 / pi where it has sqrt(2 / pi), `tanh(math.sqrt(2 / math.pi) "
          f"* (x + 0.044715 * x**3))`; the exercise asks for the exact form anyway: `{_ERF}`."),
    Entry("dtype not preserved", None,
          Output(lambda r: r.got.dtype != r.x0.dtype and dict(got_dtype=r.got.dtype, x_dtype=r.x0.dtype), "dtype"),
          "your result ({case}) has dtype {got_dtype}, the input {x_dtype}: keep the input's dtype (use math.sqrt(2) "
          "or a tensor created with dtype=x.dtype for the constant)."),
    *GRADIENT_PROBE,
    Entry("forbidden call", None, Probe("require_own_code")),
])


def _gelu_case(fn: Callable[..., Any], x: Tensor, case: str) -> None:
    x0 = x.clone()
    try:
        got = call_student(fn, x, context=f"calling gelu on {case}")
    except StudentError as err:  # math.erf (or math.exp...) on a tensor of several numbers
        line = student_line(err.exc) or ""
        GELU.detect("raised", SimpleNamespace(exc=err.exc, line=line), type=type(err.exc).__name__, case=case,
                    exc=err.exc, line=line)
        raise
    check_unchanged(["x"], [x], [x0], case)
    # float32's F.gelu is off by up to 1.2e-6 (the formula by 4.8e-7): the expected values come from float64,
    # compared within 2e-6, so that F.gelu itself passes the values and is named by the forbidden-call check
    expected = F.gelu(x0.double()).to(x0.dtype)
    GELU.detect("result", SimpleNamespace(got=got, x0=x0, expected=expected), case=case)
    expect_close("the result", got, expected, GELU.candidates(x0), atol=2e-6, rtol=1e-5, case=case)
    GELU.detect("dtype", SimpleNamespace(got=got, x0=x0), case=case)


@checker("gelu")
def check_gelu(fn: Any) -> str:
    require_function(fn, "gelu")
    B, L, D = _distinct_sizes([(2, 4), (5, 8), (3, 7)])
    tails = torch.tensor([-100.0, -30.0, -5.0, -1.5, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.5, 5.0, 30.0, 100.0])
    _gelu_case(fn, tails, "x from -100 to 100")
    _gelu_case(fn, 3.0 * torch.randn(B, L, D), f"x of shape ({B}, {L}, {D})")
    _gelu_case(fn, 2.0 * torch.randn(D, B, dtype=torch.float64), f"a float64 x of shape ({D}, {B})")
    _gelu_case(fn, torch.randn(()), "a 0-dim x, one number of shape ()")  # a constant torch.tensor([c]) shows
    gradient_probe(fn, F.gelu, dict(x=3.0 * torch.randn(B, L, D)), what="gelu", case=f"x of shape ({B}, {L}, {D})")
    # the exercise writes GELU from its formula: F.gelu / nn.GELU (or an alias) is not the exercise
    require_own_code(lambda: call_student(fn, torch.randn(3, 4), context="calling gelu"), {"gelu"}, "gelu",
                     "from its formula, 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), with torch operations only")
    return "random and extreme values, float32 and float64; same as F.gelu"


# ---------------------------------------------------------------- masked_mean_pool
def _pool_is(f: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Reference:
    """The candidate ``f(x, mask, m)`` on the case ``(x, mask)``, with ``m = mask.unsqueeze(-1)`` in x's dtype."""
    return Reference(lambda case: [({}, lambda: f(case[0], case[1], case[1].unsqueeze(-1).to(case[0].dtype)))])


def _first_n(x: Tensor, mask: Tensor, m: Tensor) -> Tensor:
    """The mean of the first n positions of each row, n its number of real tokens (trailing padding assumed)."""
    first_n = torch.arange(x.size(1))[None, :] < mask.sum(dim=1)[:, None]  # (B, L)
    return (x * first_n.unsqueeze(-1)).sum(dim=1) / m.sum(dim=1)


def _broadcast_sizes(r: Any) -> set[int] | None:
    """The two sizes of a broadcast error between ``(B, L, D)`` and a mask or a count without its last axis."""
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", str(r.exc))
    return {int(sizes[1]), int(sizes[2])} if isinstance(r.exc, RuntimeError) and sizes is not None else None


def _shape_is(*dims: str) -> Output:
    return Output(lambda r: isinstance(r.got, Tensor) and tuple(r.got.shape) == tuple(getattr(r, d) for d in dims),
                  "shape")


POOL = Catalogue("masked_mean_pool", "08", [
    Entry("not a function", None, Probe("require_function")),
    # a call raised (stage "raised": the exception, B, L, D, the dtype and the first line of the message)
    Entry("count without keepdim",
          "the real count mask.sum(dim=1) is (B,), not (B, 1): it does not broadcast over D",
          Output(lambda r: _broadcast_sizes(r) == {r.D, r.B}, "raised"),
          "your code raised RuntimeError: {first}. The count `mask.sum(dim=1)` has shape (B,) = ({B},), which lines "
          "up with the last axis of the sum (B, D) = ({B}, {D}): keep its axis, `mask.sum(dim=1, keepdim=True)`, "
          "shape (B, 1), which broadcasts over D."),
    Entry("mask not broadcast over D", "the pooling mask is not broadcast over the features",
          Output(lambda r: _broadcast_sizes(r) == {r.D, r.L}, "raised"),
          "your code raised RuntimeError: {first}. A (B, L) mask does not broadcast against x (B, L, D): give it a "
          "last axis of size 1 first, `mask.unsqueeze(-1)`, shape (B, L, 1)."),
    Entry("dtype not preserved", None,
          Output(lambda r: r.dtype != torch.float32 and ("dtype" in str(r.exc) or "scalar type" in str(r.exc)),
                 "raised"),
          "your code ({case}) raised {type}: {first}. Part of it has a fixed dtype (`.float()`, `.double()`): build "
          "the weights in x's dtype, `mask.unsqueeze(-1).to(x.dtype)`."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the result's shape and dtype (stage "shape": got, B, L, D; "dtype": got and x's dtype)
    Entry("wrong axis", None, _shape_is("B", "L"),
          "your result ({case}) has shape ({B}, {L}) = (B, L): you averaged over the features (the last axis, D). "
          "Average over the positions, axis 1, to get one D-vector per sequence (B, D)."),
    Entry("wrong axis", None, _shape_is("L", "D"),
          "your result ({case}) has shape ({L}, {D}) = (L, D): you averaged over the batch axis (0). Average over the "
          "positions, axis 1: (B, D)."),
    Entry("mean over the whole batch",
          "one mean over every real token of the batch (x[mask].mean(0)), not one per row", _shape_is("D"),
          "your result ({case}) has shape ({D},) = (D,): one vector for the whole batch (`x[mask].mean(0)`: indexing "
          "with the mask flattens the rows together). Each row needs its own mean, (B, D): `(x * m).sum(dim=1) / "
          "m.sum(dim=1)` with `m = mask.unsqueeze(-1)`."),
    Entry("kept the pooled axis", "the pooled axis is kept", _shape_is("B", "one", "D"),
          "your result ({case}) has shape ({B}, 1, {D}): the pooled axis was kept (keepdim=True in the sum). Return "
          "(B, D): sum with dim=1 and no keepdim (keep it only in the count, which must broadcast)."),
    Entry("dtype not preserved", None,
          Output(lambda r: isinstance(r.got, Tensor) and r.got.is_floating_point() and r.got.dtype != r.dtype
                 and dict(got_dtype=r.got.dtype), "dtype"),
          "your result ({case}) has dtype {got_dtype}, x {dtype}: a cast (`.double()`, `.float()`) changed it, and "
          "the next layer (`self.classifier`, an nn.Linear) then fails with 'mat1 and mat2 must have the same "
          "dtype'. Keep the count in x's dtype: `mask.sum(dim=1, keepdim=True).to(x.dtype)`, or weights "
          "`mask.unsqueeze(-1).to(x.dtype)`."),
    # the wrong values are one of these pools of (x, mask) (in this order; TransformerClassifier tries most on h)
    Entry("mean over padding", "the pooled mean includes padding", _pool_is(lambda x, mask, m: x.mean(dim=1)),
          "you averaged over every position, padding included (`x.mean(dim=1)`): a review's vector then depends on "
          "how much padding its batch needed. Sum x * mask over the positions and divide by each row's number of "
          "real tokens."),
    Entry("sum instead of mean", "a sum instead of a mean", _pool_is(lambda x, mask, m: (x * m).sum(dim=1)),
          "you summed the real positions but never divided by their number: divide by `mask.sum(dim=1)` (each row's "
          "own count, keepdim so that it broadcasts over D)."),
    Entry("divided by L", "divided by L instead of the real length",
          _pool_is(lambda x, mask, m: (x * m).sum(dim=1) / x.size(1)),
          "the padding is left out of the sum but counted in the division: you divided by L (all positions). Divide "
          "by each row's number of real tokens, `mask.sum(dim=1, keepdim=True)`."),
    Entry("divided by the batch's token count", "divided by the batch's token count",
          _pool_is(lambda x, mask, m: (x * m).sum(dim=1) / m.sum()),
          "you divided by `mask.sum()`, the real tokens of the whole batch; each row needs its own count: "
          "`mask.sum(dim=1, keepdim=True)`."),
    Entry("inverted mask", None, _pool_is(lambda x, mask, m: (x * (1 - m)).sum(dim=1) / (1 - m).sum(dim=1)),
          "you averaged over the padding and left out the real tokens: the mask is True on the real tokens (keep "
          "them), False on padding."),
    Entry("assumed trailing padding", None, _pool_is(_first_n),
          "you averaged the first n positions of each row (n = its number of real tokens), which is right only when "
          "the padding is at the end. The mask may mark padding anywhere: weight every position by its own mask "
          "value."),
    Entry("took the first position", "mean pooling replaced by the first position",
          _pool_is(lambda x, mask, m: x[:, 0]),
          "you returned the first position `x[:, 0]`, which is [CLS] pooling; this function averages the real "
          "positions."),
    Entry("max instead of mean", "a max instead of a mean",
          _pool_is(lambda x, mask, m: x.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)),
          "you took the maximum over the real positions; this function takes their mean."),
    Entry("padding not zeroed", "the pooled sum includes the padding, divided by the real count",
          _pool_is(lambda x, mask, m: x.sum(dim=1) / m.sum(dim=1)),
          "you divided by each row's number of real tokens, but summed every position, padding included "
          "(`x.sum(dim=1)`): zero the padding before the sum, `(x * m).sum(dim=1)` with `m = mask.unsqueeze(-1)`."),
    Entry("masked_fill on the real tokens",
          "masked_fill(mask, 0) zeroes the real tokens (True = real), not the padding",
          _pool_is(lambda x, mask, m: (x * (1 - m)).sum(dim=1) / m.sum(dim=1)),
          "`masked_fill(mask, 0)` fills where the mask is True, and True marks the real tokens: you zeroed them and "
          "summed the padding. Fill the padding instead: `x.masked_fill(~mask.unsqueeze(-1), 0)`."),
    Entry("divided by sqrt(count)", "the pooled sum divided by the square root of the real count",
          _pool_is(lambda x, mask, m: (x * m).sum(dim=1) / m.sum(dim=1).sqrt()),
          "you divided the sum by the square root of each row's number of real tokens (sentence-transformers' "
          "`mean_sqrt_len` pooling); the mean divides by the number itself: `m.sum(dim=1)`."),
    Entry("[CLS] left out of the mean", "the mean pool leaves out position 0 ([CLS]), which the reference counts",
          _pool_is(lambda x, mask, m: (x * m)[:, 1:].sum(dim=1) / m[:, 1:].sum(dim=1)),
          "you left position 0 out of the mean (`x[:, 1:]`, or `mask[:, 0] = False`): masked_mean_pool averages "
          "every position the mask marks True, position 0 included; it cannot know which token is [CLS], and this "
          "course's mean pooling counts [CLS] as a real token."),
    Entry("integer division", "an integer division (//, rounding_mode='floor') where a true one belongs: in the "
          "angles (an exponent 2i // d_model = 0, floored angles), the pooled sum // the count, or noam_lr's warm-up "
          "(a rate of 0)",
          _pool_is(lambda x, mask, m: torch.div((x * m).sum(dim=1), m.sum(dim=1), rounding_mode="floor")),
          "you divided with `//`, floor division: every mean is rounded down to a whole number. Divide with `/`: "
          "`(x * m).sum(dim=1) / m.sum(dim=1)`."),
    Entry("mean over the whole batch", None,
          _pool_is(lambda x, mask, m: x[mask].mean(dim=0).expand(x.size(0), -1)),
          "every row got the same vector, the mean of all the real tokens of the batch (`x[mask].mean(0)`: indexing "
          "with the mask flattens the rows together). Each row needs its own mean: `(x * m).sum(dim=1) / "
          "m.sum(dim=1)` with `m = mask.unsqueeze(-1)`."),
    Entry("count plus one", "the pooled sum divided by the real count plus 1",
          _pool_is(lambda x, mask, m: (x * m).sum(dim=1) / (m.sum(dim=1) + 1)),
          "you divided by each row's count plus 1 (`mask.sum(...) + 1`, a guard against dividing by 0?), which "
          "shrinks every mean. Divide by the count itself: every row has a real token; a guard that changes nothing "
          "then is `.clamp(min=1)`."),
    *GRADIENT_PROBE,
    Entry("wrong device", None, Probe("check_input_device")),
])


def _pool_mistakes(x: Tensor, mask: Tensor) -> list[Mistake]:
    """``(name, message, make)`` for each catalogued wrong pool of ``x (B, L, D)`` and ``mask (B, L)``."""
    return POOL.candidates((x, mask))


def _trailing_mask(B: int, L: int, shortest: int = 1) -> Tensor:
    """``(B, L)``: trailing padding, row 0 full, row 1 padded, the others random lengths >= ``shortest``."""
    lengths = torch.randint(shortest, L + 1, (B,))  # (B,)
    lengths[0], lengths[1] = L, randint(shortest, L - 2)
    return torch.arange(L)[None, :] < lengths[:, None]  # (B, L)


def _scattered_mask(B: int, L: int) -> Tensor:
    """``(B, L)``: padding anywhere, at least one real token and one pad per row; row 0
    starts with padding, so trailing-padding code shows."""
    while True:
        mask = torch.rand(B, L) < 0.6  # (B, L)
        mask[0, 0], mask[0, -1] = False, True
        ok = mask.any(dim=1).all() and (~mask).any(dim=1).all()
        if bool(ok) and not bool((mask == mask[0]).all()):
            return mask


def _pool_inputs(B: int, L: int, D: int, make_mask: Callable[[int, int], Tensor]) -> tuple[Tensor, Tensor]:
    """``x (B, L, D)`` and a ``(B, L)`` mask on which no two catalogued pools give the same numbers, nor
    one of them the right ones (but trailing-padding code, right on a trailing mask): the first match is
    named, so a batch of L real tokens, where dividing by L and by mask.sum() agree, would misname one."""
    while True:
        x = 2.0 * torch.randn(B, L, D) + torch.randn(1, L, 1)  # (B, L, D): positions differ on average
        mask = make_mask(B, L)  # (B, L)
        if not bool(mask[:, 1:].any(dim=1).all()):  # a row whose only real token is position 0: a mean
            continue  # without it divides 0 by 0, and such code is then told by its NaN, not named
        # an exact 0 in a real vector, in a row of 2+ real tokens: counting non-zeros is then wrong, and
        # gives a number (a row of one real token would give 0 / 0, told by its NaN, not by the values)
        real = torch.nonzero(mask & (mask.sum(dim=1, keepdim=True) >= 2))  # (n, 2): (row, position)
        if len(real) == 0:
            continue
        x[real[0, 0], real[0, 1], 0] = 0.0
        m = mask.unsqueeze(-1).float()  # (B, L, 1)
        same = "assumed trailing padding" if make_mask is _trailing_mask else None
        pools = torch.stack([(x * m).sum(dim=1) / m.sum(dim=1),
                             *(c() for name, _, c in _pool_mistakes(x, mask) if name != same)])  # (P, B, D)
        # matches(a, b) for every pair at once; NaN (0 / 0 of an inverted mask on a full row) matches nothing
        close = ((pools[:, None] - pools[None]).abs() <= 1e-5 + 1e-4 * pools[None].abs()).flatten(2).all(-1)
        if not bool(close.fill_diagonal_(False).any()):  # (P, P)
            return x, mask


@checker("masked_mean_pool")
def check_masked_mean_pool(fn: Any) -> str:
    require_function(fn, "masked_mean_pool")
    B, L, D = _distinct_sizes([(3, 5), (6, 9), (2, 8)])
    # padding anywhere first: every row has a pad there, so an inverted mask gives numbers, not 0 / 0;
    # float64 last: the result's dtype is x's (a float64 result of a float32 x fails the next nn.Linear)
    for make_mask, what, dtype in ((_scattered_mask, "padding anywhere", torch.float32),
                                   (_trailing_mask, "padding at the end", torch.float32),
                                   (_scattered_mask, "padding anywhere", torch.float64)):
        x, mask = _pool_inputs(B, L, D, make_mask)  # (B, L, D), (B, L)
        x = x.to(dtype)
        x0, mask0 = x.clone(), mask.clone()
        # the exact 0: real data has zeros too, so counting non-zero entries is not counting the tokens
        case = (f"x ({B}, {L}, {D}) in {dtype}, one real token's vector holding an exact 0, mask ({B}, {L}) "
                f"with {what}")
        try:
            got = call_student(fn, x, mask, context=f"calling masked_mean_pool({case})")
        except StudentError as err:
            first = str(err.exc).splitlines()[0] if str(err.exc) else ""
            POOL.detect("raised", SimpleNamespace(exc=err.exc, B=B, L=L, D=D, dtype=dtype), B=B, L=L, D=D,
                        case=case, type=type(err.exc).__name__, first=first)
            raise
        check_unchanged(["x", "mask"], [x, mask], [x0, mask0], case)
        POOL.detect("shape", SimpleNamespace(got=got, B=B, L=L, D=D, one=1), B=B, L=L, D=D, case=case)
        POOL.detect("dtype", SimpleNamespace(got=got, dtype=x0.dtype), dtype=x0.dtype, case=case)
        m = mask0.unsqueeze(-1).to(dtype)  # (B, L, 1)
        expected = (x0 * m).sum(dim=1) / m.sum(dim=1)  # (B, D)
        expect_close("the pooled vectors", got, expected, _pool_mistakes(x0, mask0), case=case)
        if dtype == torch.float32:
            x32, mask32, case32 = x0, mask0, case
    m = mask32.unsqueeze(-1).float()  # (B, L, 1)
    gradient_probe(fn, lambda x, mask: (x * m).sum(dim=1) / m.sum(dim=1), dict(x=x32, mask=mask32),
                   what="masked_mean_pool", case=case32)
    check_input_device(lambda: fn(x32.to("meta"), mask32.to("meta")), lambda: fn(x32.clone(), mask32.clone()),
                       "your masked_mean_pool", case32)
    return "padding at the end and anywhere, rows of different lengths, float32 and float64"


# ---------------------------------------------------------------- TransformerClassifier
def _classifier_variant(ref: TransformerClassifier, tokens: Tensor, pooling: str, *, pool: str | None = None,
                        mask_pad: int | None | str = "pad", encoder_mask: str = "padding", pe: int = 1,
                        scale: float = 0.5, pool_pad: int | None = None, post: str | None = None,
                        scale_after_pe: bool = False, pooler: bool | str = False, x_plus_pe_of_x: bool = False,
                        pool_with: Callable[[Tensor, Tensor], Tensor] | None = None, final_norm: bool = True,
                        pool_input: bool = False) -> Tensor:
    """The reference's logits with at most one deliberate mistake; the defaults are correct. ``pool``: the
    pooling done (default ``pooling``'s own); ``mask_pad``: the pad id the masks are built from (``"pad"``:
    the model's; ``None``: no mask); ``encoder_mask``: the mask the encoder gets; ``scale``: the embeddings times
    ``d_model ** scale``; ``pool_pad``: the pad id the mean pool alone uses; ``post``: after the head;
    ``scale_after_pe``: ``x + pe`` times ``sqrt(d_model)`` again; ``pooler``: tanh (True) or ``"relu"`` on the pooled vector;
    ``x_plus_pe_of_x``: ``x + positional_encoding(x)`` (the embeddings twice); ``pool_with``: a mean pool
    ``(h, mask (B, L)) -> (B, D)`` in place of the right one; ``final_norm``: the pre-norm encoder's final norm
    applied; ``pool_input``: the encoder's input pooled instead of its output."""  # noqa: E501
    pad = ref.pad_id if mask_pad == "pad" else mask_pad
    x = ref.embedding.embedding(tokens) * ref.embedding.d_model ** scale  # (B, L, D)
    for _ in range(pe):  # pe: how many times the table is added
        x = x + ref.positional_encoding(x) if x_plus_pe_of_x else ref.positional_encoding(x)
    if scale_after_pe:
        x = x * math.sqrt(ref.embedding.d_model)  # (B, L, D)
    mask = padding_mask(tokens, pad) if pad is not None else None  # (B, 1, L)
    if mask is not None:
        mask = {"padding": mask, "query axis": mask.transpose(1, 2), "inverted": ~mask,  # (B, L, 1) for the query axis
                "causal": mask & causal_mask(tokens.size(1))}[encoder_mask]  # (B, L, L) for the causal one
    # without the final norm: the layers alone, as a loop over self.encoder.layers runs them
    h = ref.encoder(x, mask) if final_norm else functools.reduce(lambda h, layer: layer(h, mask),
                                                                 ref.encoder.layers, x)  # (B, L, D)
    h = x if pool_input else h
    pad = pool_pad if pool_pad is not None else ref.pad_id if pad is None else pad
    real = (tokens != pad).unsqueeze(-1).float()  # (B, L, 1)
    per_key = padding_mask(tokens, ref.pad_id).unsqueeze(-1).float()  # (B, 1, L, 1): a pool given (B, 1, L)
    above = (tokens > ref.pad_id).unsqueeze(-1).float()  # (B, L, 1): the ids below pad_id taken for padding
    pools = {
        "cls": lambda: h[:, 0], "last": lambda: h[:, -1], "second": lambda: h[:, 1],
        "last real": lambda: h[torch.arange(h.size(0)), (tokens != ref.pad_id).sum(dim=1) - 1],
        "mean all": lambda: h.mean(dim=1), "sum": lambda: (h * real).sum(dim=1),
        "mean": lambda: (h * real).sum(dim=1) / real.sum(dim=1),  # (B, D)
        "mean without [CLS]": lambda: (h * real)[:, 1:].sum(dim=1) / real[:, 1:].sum(dim=1),  # position 0 left out
        "mean of padding": lambda: (h * (1 - real)).sum(dim=1) / (1 - real).sum(dim=1),  # 0 / 0 on a full row
        "(B, 1, L) mask": lambda: (h * per_key).sum(dim=1) / per_key.sum(dim=1),  # (B, B, L, D) summed: (B, L, D)
        "every position": lambda: h,  # (B, L, D): the classifier applied to each position
        "max all": lambda: h.amax(dim=1),  # padding included
        "batch mean": lambda: h[tokens != ref.pad_id].mean(dim=0),  # (D,): the mask's index flattens the batch
        "ids above pad": lambda: (h * above).sum(dim=1) / above.sum(dim=1),  # 0 / 0 in a row of none
    }
    pooled = pool_with(h, tokens != ref.pad_id) if pool_with else pools[pool or pooling]()  # (B, D)
    logits = ref.classifier({False: pooled, True: torch.tanh(pooled), "relu": F.relu(pooled)}[pooler])  # (B, C)
    return {None: logits, "softmax": logits.softmax(dim=-1), "log_softmax": logits.log_softmax(dim=-1)}[post]


def _embedding_factor(ref: TransformerClassifier, tokens: Tensor, encoder_inputs: list[Any]) -> float | None:
    """``c`` when the student's encoder got ``c * self.embedding(tokens) + pe`` with ``c`` not 1 (an extra
    scaling, ``* math.sqrt(64)`` with a hard-coded size too), else None."""
    x = encoder_inputs[0] if encoder_inputs else None
    e = ref.embedding(tokens).double()  # (B, L, D): already times sqrt(d_model)
    if not isinstance(x, Tensor) or x.shape != e.shape:
        return None
    pe = ref.positional_encoding(torch.zeros_like(e).float()).double()  # (B, L, D): the table (eval, no dropout)
    c = float(((x.double() - pe) * e).sum() / (e * e).sum())  # least squares
    if c <= 0 or abs(c - 1) < 1e-3 or not allclose(x.double(), c * e + pe, atol=1e-4):
        return None
    return c


def _calls_own_pool(cls: Any) -> bool:
    """True when ``cls.forward`` (or a function of its module it calls, or a lambda inside it) reads a global
    ``masked_mean_pool`` that is not the course's: the student's own, from the exercise before."""
    fn = getattr(getattr(cls, "forward", None), "__func__", getattr(cls, "forward", None))
    space = getattr(fn, "__globals__", None)
    if not isinstance(space, dict) or not hasattr(fn, "__code__"):
        return False
    codes, names = [fn.__code__], set()
    while codes:
        code = codes.pop()
        names |= set(code.co_names)
        codes += [c for c in code.co_consts if hasattr(c, "co_names")]  # lambdas, comprehensions
    helpers = [space[n].__code__ for n in names if n != "masked_mean_pool" and hasattr(space.get(n), "__code__")]
    names |= {n for code in helpers for n in code.co_names}  # one level down: a pool(self, h, tokens) helper
    own = space.get("masked_mean_pool")
    return "masked_mean_pool" in names and callable(own) and \
        not str(getattr(own, "__module__", "")).startswith("course_utils")


_OWN_POOL = (" Your forward calls your own `masked_mean_pool`, the exercise before: if that is where it happens, "
             "`check_masked_mean_pool(masked_mean_pool)` names it; fix it there, run its cell, then the cell of "
             "TransformerClassifier.")


def _v(when: Callable[[Any], bool] | None = None, **kw: Any) -> Reference:
    """The reference's logits on the case with these settings of :func:`_classifier_variant`; only on the cases
    where ``when(case)`` holds (a pooling, a mask the student's encoder got)."""
    return Reference(lambda c: [({}, lambda: _classifier_variant(c.ref, c.tokens, c.pooling, **kw))]
                     if when is None or when(c) else [])


def _cls(c: Any) -> bool:
    return c.pooling == "cls"


def _mean(c: Any) -> bool:
    return c.pooling == "mean"


def _query_axis(c: Any) -> bool:
    """With one layer, a (B, L, 1) mask gives what no mask gives: the mask the encoder got tells them apart."""
    return tuple(c.tokens.shape) + (1,) in {tuple(m.shape) if isinstance(m, Tensor) else None for m in c.masks}


def _not_passed(c: Any) -> bool:
    return not c.masks or any(m is None for m in c.masks)


def _scaled_by(c: Any) -> list[Candidate]:
    """The embeddings times an extra factor c > 1 (``* math.sqrt(64)`` with a hard-coded size too)."""
    factor, D = _embedding_factor(c.ref, c.tokens, c.inputs), c.ref.embedding.d_model
    if factor is None or factor <= 1:
        return []
    return [(dict(c=factor, cc=factor * factor),
             lambda: _classifier_variant(c.ref, c.tokens, c.pooling, scale=0.5 + math.log(factor) / math.log(D)))]


def _keyword_used(r: Any) -> dict[str, str] | None:
    """nn.TransformerEncoder's (and Hugging Face's) keyword the encoder was called with, from the TypeError."""
    used = next((k for k in _TORCH_ENCODER_KEYWORDS if f"unexpected keyword argument '{k}'" in str(r.exc)), None)
    return dict(used=used) if isinstance(r.exc, TypeError) and used is not None else None


def _refused(words: str) -> Output:
    """The course's encoder refused the mask with ``words`` (formatted with B and L)."""
    return Output(lambda r: isinstance(r.exc, (ValueError, TypeError)) and words.format(B=r.B, L=r.L) in str(r.exc),
                  "raised")


def _per_position(r: Any, pool: str) -> bool:
    """(B, L, C) logits that are the reference's with ``pool`` (a pool given (B, 1, L), or none at all)."""
    return r.shape == (r.B, r.L, r.C) and allclose(
        r.got.float(), _classifier_variant(r.ref, r.tokens, r.pooling, pool=pool), atol=_ATOL, equal_nan=True)


def _nan_rows(r: Any) -> bool:
    return r.pooling == "mean" and isinstance(r.got, Tensor) and r.got.dim() == 2 and bool(isnan(r.got).any())


def _nan_of_inverted(r: Any) -> dict[str, str] | None:
    """NaN logits in the rows without padding, as the mean over the padding gives them (0 / 0 there)."""
    if not _nan_rows(r):
        return None
    inverted = _classifier_variant(r.ref, r.tokens, r.pooling, pool="mean of padding")  # (B, C), NaN on full rows
    if not (r.got.shape == inverted.shape and allclose(r.got.float(), inverted, atol=_ATOL, equal_nan=True)):
        return None
    full = ", ".join(str(int(i)) for i in torch.nonzero(~(r.tokens == r.ref.pad_id).any(dim=1)).flatten())
    return dict(full=full)


def _pooled_dropped(r: Any) -> dict[str, str] | None:
    """In training mode, self.classifier's input is not the pooled encoder output: ``scaled`` says by how much
    it is dropped out, when it is."""
    if r.pooled.shape != r.expected.shape or matches(r.pooled, r.expected, atol=_ATOL):
        return None
    # a few entries: a small p may drop none of them, and every entry is then scaled by the same factor
    ratio = (r.pooled.double() / r.expected.double()).median().item()
    scale = dropout_scale(r.pooled, r.expected, atol=1e-5) or (
        ratio if ratio > 1 and allclose(r.pooled.double(), r.expected.double() * ratio, atol=1e-5) else None)
    return dict(scaled=f": it is dropped out (kept entries scaled by {scale:.3g} = 1 / (1 - p), p = "
                f"{1 - 1 / scale:.2g})" if scale is not None else "")


# told before the rest of masked_mean_pool's table is tried on h (the first position and the inverted mask are
# told by their own entries and their NaN; trailing padding is right on these tokens)
_TOLD_BEFORE = ("mean over padding", "sum instead of mean", "pooling ignored", "[CLS] left out of the mean",
                "took the first position", "inverted mask", "assumed trailing padding")
_FIX_MASK = "pass the (B, 1, L) bool mask `padding_mask(tokens, self.pad_id)`."

CLASSIFIER = Catalogue("TransformerClassifier", "08", [
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
          "TransformerClassifier should subclass nn.Module."),
    *(Entry(name, None, Probe("load_reference")) for name in ("wrong parameter shape", "missing submodule",
                                                               "unexpected parameters")),
    # forward raised (stage "raised": the exception, B and L)
    Entry("PyTorch encoder keyword",
          "the course's Encoder called with nn.TransformerEncoder's keywords (src_key_padding_mask=)",
          Output(_keyword_used, "raised"),
          "your forward ({case}) calls self.encoder with `{used}=`, a keyword of PyTorch's nn.TransformerEncoder "
          "(whose padding mask is (B, L) and True on the padding). self.encoder is the course's Encoder: "
          "forward(x, mask=None), with the mask True on the real tokens (may attend), shape (B, 1, L): "
          "`self.encoder(x, padding_mask(tokens, self.pad_id))`.{at}"),
    Entry("missing query axis", None, _refused("mask of shape ({B}, {L}) cannot"),
          "your forward ({case}) gives self.encoder a mask of shape ({B}, {L}) = (B, L): the course's attention "
          "needs the query axis, (B, 1, L): " + _FIX_MASK),
    Entry("extra head axis", "a mask with a head axis the contract does not have",
          _refused("mask of shape ({B}, 1, 1, {L}) cannot"),
          "your forward ({case}) gives self.encoder a mask of shape ({B}, 1, 1, {L}) = (B, 1, 1, L), with a head "
          "axis (Hugging Face's extended attention mask, `mask[:, None, None, :]`); the course's attention adds the "
          "head axis itself: " + _FIX_MASK),
    Entry("not a bool mask", None, _refused("mask must have dtype torch.bool"),
          "your forward ({case}) gives self.encoder a float or int mask (Hugging Face's 1/0 `attention_mask` "
          "habit); the course's masks are torch.bool, True = may attend: " + _FIX_MASK),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # two eval-mode calls differ (stage "random": what forward did to the parameters, if anything)
    Entry("parameters created in forward", "forward builds a layer (or re-draws parameters) on every call",
          Output(lambda r: bool(r.built) and dict(built=r.built), "random"),
          "in eval mode, two calls of forward ({case}) give different logits: {built}. The optimizer never sees "
          "such weights and training cannot change them. Build every layer once, in __init__ (self.classifier is "
          "there), and only call it in forward."),
    Entry("dropout ignores eval mode", None, Output(lambda r: True, "random"),
          "in eval mode, two calls of forward ({case}) give different logits: a dropout still acts after "
          "model.eval(). F.dropout(x, p, training=True) ignores the mode: pass `training=self.training`, or use an "
          "`nn.Dropout` module (or no extra dropout at all: the given modules already have theirs)."),
    # the logits' shape (stage "shape": got, its shape, the reference, tokens, pooling, B, L, C, D)
    Entry("mask broadcast wrongly", None, Output(lambda r: _per_position(r, "(B, 1, L) mask"), "shape"),
          "your logits ({case}) have shape ({B}, {L}, {C}) = (B, L, C), because the pooling got padding_mask's "
          "(B, 1, L) mask: a pool that multiplies by `mask.unsqueeze(-1)` then broadcasts (B, 1, L, 1) against "
          "(B, L, D) into (B, B, L, D), and the sum over axis 1 leaves (B, L, D). Pool with the (B, L) mask "
          "`tokens != self.pad_id`."),
    Entry("classified every position", "logits for every position instead of one per sequence",
          Output(lambda r: _per_position(r, "every position"), "shape"),
          "your logits ({case}) have shape ({B}, {L}, {C}) = (B, L, C): one prediction per position. A classifier "
          "gives one per sequence: pool the encoder's output to (B, D) first, then `self.classifier`."),
    Entry("mask broadcast wrongly", None, Output(lambda r: r.shape == (r.B, r.L, r.C), "shape"),
          "your logits ({case}) have shape ({B}, {L}, {C}) = (B, L, C), one row per position, although they are "
          "not the classifier applied to each position: the pooling kept the position axis. Most likely it got "
          "padding_mask's (B, 1, L) mask, whose extra axis broadcasts against (B, L, D) instead of selecting "
          "positions. Pool with the (B, L) mask `tokens != self.pad_id` (or `mask[:, 0]`), to (B, D)."),
    Entry("returns class ids", "forward returns argmax class ids, not logits",
          Output(lambda r: r.shape == (r.B,) and not r.got.is_floating_point() and dict(dtype=r.got.dtype), "shape"),
          "your forward ({case}) returns shape ({B},) of {dtype}: class ids (an argmax), not logits. Return the "
          "scores, `self.classifier(pooled)`, shape (B, num_classes): F.cross_entropy needs them, and the argmax "
          "is taken outside the model when a prediction is wanted."),
    Entry("[CLS] from the wrong position", "pooling reads another position than [CLS]",
          Output(lambda r: r.shape == (r.L, r.C), "shape"),
          "your logits ({case}) have shape ({L}, {C}) = (L, C): `h[0]` is the first review's vectors at every "
          "position, not position 0 of every review. [CLS] is position 0 of each row: `h[:, 0]`, (B, D)."),
    Entry("kept the pooled axis", None, Output(lambda r: r.shape == (r.B, 1, r.C), "shape"),
          "your logits ({case}) have shape ({B}, 1, {C}) = (B, 1, C): the pooled position axis was kept "
          "(`h[:, :1]`, or a sum with keepdim=True). Pool to (B, D): `h[:, 0]` for 'cls', "
          "`masked_mean_pool(h, tokens != self.pad_id)` for 'mean'."),
    Entry("classifier layer missing", "no classification layer", Output(lambda r: r.shape == (r.B, r.D), "shape"),
          "your forward ({case}) returns shape ({B}, {D}) = (B, D), the pooled vectors: apply `self.classifier` "
          "to get the logits (B, num_classes)."),
    Entry("mean over the whole batch", None,
          Output(lambda r: r.pooling == "mean" and r.shape == (r.C,) and allclose(
              r.got.float(), _classifier_variant(r.ref, r.tokens, r.pooling, pool="batch mean"), atol=_ATOL), "shape"),
          "your logits ({case}) have shape ({C},) = (num_classes,): one prediction for the whole batch. With "
          "pooling='mean' you averaged every real token of the batch together (`h[mask].mean(0)`: indexing with the "
          "mask flattens the rows together); each review needs its own mean, (B, D): `masked_mean_pool(h, tokens != "
          "self.pad_id)`."),
    # NaN logits from a mean pool (stage "nan"): 0 / 0 in the rows where it counts no position
    Entry("inverted mask", None, Output(_nan_of_inverted, "nan"),
          "the logits ({case}) contain NaN in the rows without padding (rows {full}): with pooling='mean' you "
          "averaged over the padding, not the real tokens (the mask is inverted: tokens == self.pad_id), so a row "
          "without padding divides 0 by a count of 0. The pool's mask is True on the real tokens: "
          "`masked_mean_pool(h, tokens != self.pad_id)`."),
    Entry("ids below pad_id as padding", None,
          Output(lambda r: _nan_rows(r) and allclose(r.got.float(), _classifier_variant(
              r.ref, r.tokens, r.pooling, pool="ids above pad"), atol=_ATOL, equal_nan=True) and dict(rows=", ".join(
              str(int(i)) for i in torch.nonzero(isnan(r.got).any(dim=1)).flatten())), "nan"),
          "the logits ({case}) contain NaN in rows {rows}: with pooling='mean' your mean pool's mask is `tokens > "
          "self.pad_id`, which takes every id below pad_id for padding (this model's pad_id is not 0), so a row "
          "whose real ids all lie below it averages nothing (0 / 0). Padding is `tokens == self.pad_id` and nothing "
          "else: `masked_mean_pool(h, tokens != self.pad_id)`."),
    Entry("NaN", None,
          Output(lambda r: _nan_rows(r) and dict(rows=", ".join(
              str(int(i)) for i in torch.nonzero(isnan(r.got).any(dim=1)).flatten())), "nan"),
          "the logits ({case}) contain NaN in rows {rows}: with pooling='mean' this is most likely 0 / 0, a mean "
          "that counts no position in these rows (its mask is False everywhere there). Pool the real tokens: "
          "`masked_mean_pool(h, tokens != self.pad_id)`, whose count is at least 1."),
    # the wrong logits are the reference's with one of these mistakes (in this order; the case: ref, tokens,
    # pooling, the masks and inputs the student's encoder got; {own} points to the student's own pool)
    Entry("[CLS] from the wrong position", None, _v(_cls, pool="last"),
          "you pooled the last position `h[:, -1]`; [CLS] is the first token of every sequence, position 0: "
          "`h[:, 0]`. (In a padded row the last position is padding.)"),
    Entry("[CLS] from the wrong position", None, _v(_cls, pool="second"),
          "you pooled position 1; [CLS] sits at position 0: `h[:, 0]`."),
    Entry("[CLS] from the wrong position", None, _v(_cls, pool="last real"),
          "you pooled each sequence's last real token; [CLS] is the first token, position 0: `h[:, 0]`."),
    Entry("pooling ignored", "the pooling argument has no effect", _v(_cls, pool="mean"),
          "with pooling='cls' your model averaged the positions; read self.pooling and take h[:, 0] for 'cls', the "
          "masked mean for 'mean'."),
    Entry("pooling ignored", None, _v(_cls, pool="mean all"),
          "with pooling='cls' your model averaged every position, padding included (`h.mean(dim=1)`); read "
          "self.pooling: take h[:, 0] for 'cls', and for 'mean' the masked mean, `masked_mean_pool(h, tokens != "
          "self.pad_id)`."),
    Entry("mean over padding", None, _v(_mean, pool="mean all"),
          "with pooling='mean' you averaged every position, padding included (`h.mean(dim=1)`); average only the "
          "real tokens: `masked_mean_pool(h, tokens != self.pad_id)`.{own}"),
    Entry("sum instead of mean", None, _v(_mean, pool="sum"),
          "with pooling='mean' you summed the real positions without dividing by their number: use "
          "`masked_mean_pool`.{own}"),
    Entry("pooling ignored", None, _v(_mean, pool="cls"),
          "with pooling='mean' your model took position 0 ([CLS]); read self.pooling and use the masked mean for "
          "'mean'."),
    Entry("[CLS] left out of the mean", None, _v(_mean, pool="mean without [CLS]"),
          "with pooling='mean' you left position 0 ([CLS]) out of the mean; this model's mean counts every real "
          "token, [CLS] included (as sentence-transformers' mean pooling does): `masked_mean_pool(h, tokens != "
          "self.pad_id)`.{own}"),
    # the rest of masked_mean_pool's table, on h and `tokens != pad_id`
    *(Entry(e.name, None, _v(_mean, pool_with=lambda h, real, e=e: e.detect.build((h, real))[0][1]()),
            "with pooling='mean' your mean of h over the real tokens is wrong (below, x is h and mask is "
            "`tokens != self.pad_id`): " + e.message + "{own}")
      for e in POOL.of(Reference) if e.name not in _TOLD_BEFORE),
    Entry("max instead of mean", None, _v(_mean, pool="max all"),
          "with pooling='mean' you took the maximum over every position, padding included (`h.max(dim=1)`); this "
          "pooling takes the mean of the real tokens: `masked_mean_pool(h, tokens != self.pad_id)`."),
    Entry("ids below pad_id as padding", None, _v(_mean, pool="ids above pad"),
          "with pooling='mean' your mean pool's mask is `tokens > self.pad_id`: it takes every id below pad_id for "
          "padding (this model's pad_id is not 0, and real tokens have smaller ids). Padding is `tokens == "
          "self.pad_id` and nothing else: `masked_mean_pool(h, tokens != self.pad_id)`."),
    Entry("missing final norm", "no final norm where the contract has one (pre-norm)",
          _v(lambda c: c.ref.encoder.norm is not None, final_norm=False),
          "the encoder's output skips its final norm: you looped over `self.encoder.layers` yourself, and a pre-norm "
          "Encoder (norm_first=True) ends with `self.encoder.norm` after its layers. Call the encoder as a whole, "
          "`h = self.encoder(x, mask)`: it runs the layers, then the final norm where there is one."),
    Entry("encoder output unused",
          "the pooled vector is read from the encoder's input (the embeddings), not its output", _v(pool_input=True),
          "the pooled vector is the encoder's input (the embeddings plus the positional table), not its output, so "
          "the encoder's work never reaches self.classifier (`x[:, 0]` read where `h[:, 0]` belongs, or the encoder "
          "skipped). Pool the encoder's output: `h = self.encoder(x, padding_mask(tokens, self.pad_id))`, then "
          "`h[:, 0]` for 'cls' or `masked_mean_pool(h, tokens != self.pad_id)` for 'mean'."),
    Entry("padding on the query axis", "the padding mask is laid along the query axis",
          _v(_query_axis, encoder_mask="query axis"),
          "the mask you give the encoder has shape ({B}, {L}, 1) = (B, L, 1): it blocks the padding as queries, not "
          "as keys, so every real token still attends to the padding. `padding_mask(tokens, self.pad_id)` has shape "
          "(B, 1, L): the padding on the key axis."),
    Entry("padding mask not passed", "the padding mask is not passed to the encoder", _v(_not_passed, mask_pad=None),
          "the encoder ran without a mask, so every token attends to the padding too: pass `padding_mask(tokens, "
          "self.pad_id)` (shape (B, 1, L)) to `self.encoder`."),
    Entry("inverted mask", None, _v(encoder_mask="inverted"),
          "your mask is True on the padding: the encoder attends only to the padding. True means 'may attend': "
          "`padding_mask(tokens, self.pad_id)`, i.e. `tokens != self.pad_id`."),
    Entry("causal mask in the encoder",
          "the encoder's mask is causal as well as padding (the encoder reads the whole input)",
          _v(encoder_mask="causal"),
          "your encoder mask is causal as well as padding: each token sees only the tokens before it. The encoder "
          "reads the whole input at once (a decoder's habit does not belong here): `padding_mask(tokens, "
          "self.pad_id)` only."),
    Entry("hard-coded pad id", None, _v(mask_pad=0),
          "your masks treat id 0 as padding; this model's padding id is self.pad_id: `padding_mask(tokens, "
          "self.pad_id)` and `tokens != self.pad_id`."),
    Entry("positional encoding missing", "no positional encoding is added", _v(pe=0),
          "the embeddings go into the encoder without self.positional_encoding: the encoder then cannot tell 'not "
          "good but bad' from 'bad but not good'. `x = self.positional_encoding(self.embedding(tokens))`."),
    Entry("positional encoding added twice",
          "the positional table added twice (two positional modules, or one called twice)", _v(pe=2),
          "the positional table is added twice (x + 2 pe): pass the embeddings through self.positional_encoding "
          "once, and through no second positional module."),
    Entry("embeddings added twice",
          "x + positional_encoding(x): the module already returns x + pe, so the embeddings count twice",
          _v(x_plus_pe_of_x=True),
          "the encoder got 2 x + pe: self.positional_encoding(x) already returns x + pe (the embeddings with the "
          "table added), so `x + self.positional_encoding(x)` counts the embeddings twice. Write `x = "
          "self.positional_encoding(x)`."),
    Entry("embeddings not scaled", None, _v(scale=0.0),
          "you called the inner nn.Embedding (`self.embedding.embedding`) and skipped TokenEmbedding's scaling by "
          "sqrt(d_model): call `self.embedding(tokens)`."),
    Entry("embeddings scaled twice", None, _v(scale=1.0),
          "the token embeddings are multiplied by d_model, not sqrt(d_model): TokenEmbedding already scales by "
          "sqrt(d_model), so do not multiply self.embedding(tokens) again."),
    Entry("embeddings scaled twice", None, _v(scale_after_pe=True),
          "the sum `x + pe` is multiplied by sqrt(d_model) after the positional encoding: TokenEmbedding already "
          "scales the embeddings by sqrt(d_model), and the positional table is added once, unscaled: "
          "`self.positional_encoding(self.embedding(tokens))`, nothing more."),
    Entry("activation on the pooled vector", "a ReLU between the pooled vector and the classifier head",
          _v(pooler="relu"),
          "you put a ReLU on the pooled vector before self.classifier: the encoder's output goes to the head as it "
          "is (its last step is a LayerNorm, or a residual sum in pre-norm): `self.classifier(pooled)`."),
    Entry("BERT pooler", "a tanh (BERT's pooler) on the pooled vector before the single linear head", _v(pooler=True),
          "you put a tanh on the pooled vector before self.classifier: that is BERT's pooler (a dense layer with "
          "tanh on [CLS], used by BERT's next-sentence head); this exercise's head is the single linear layer "
          "self.classifier on the pooled vector: `self.classifier(pooled)`."),
    Entry("embeddings scaled twice", None, Reference(_scaled_by),
          "the token embeddings are multiplied by an extra {c:.4g} (= sqrt({cc:.4g})) on top of TokenEmbedding's "
          "own sqrt(d_model) scaling (this model's d_model is {D}): self.embedding(tokens) is already scaled, so do "
          "not multiply it again."),
    Entry("hard-coded pad id", None, _v(_mean, pool_pad=0),
          "your mean pool treats id 0 as padding (the encoder's mask is right): this model's padding id is "
          "`self.pad_id`: `masked_mean_pool(h, tokens != self.pad_id)`."),
    Entry("returns probabilities", "probabilities (softmax) returned instead of logits", _v(post="softmax"),
          "forward applies softmax to the logits. Return the raw logits: F.cross_entropy applies log_softmax "
          "itself, and a softmax before it squashes the scores into [0, 1], which flattens the loss and slows "
          "learning (the argmax, and so the accuracy, would not show it)."),
    Entry("returns probabilities", None, _v(post="log_softmax"),
          "forward applies log_softmax to the logits, so it returns log-probabilities, not the raw logits that "
          "TransformerClassifier returns. Training would not notice (F.cross_entropy applies log_softmax itself, "
          "and log_softmax of log-probabilities changes nothing), nor the argmax, but code that treats the output "
          "as logits would: a temperature, or F.softmax for the probabilities, or a loss that does not normalise "
          "(F.binary_cross_entropy_with_logits). Return `self.classifier(pooled)`."),
    # a batch of one review (stage "one")
    Entry("batch axis squeezed", ".squeeze() on the logits drops the batch axis when B = 1",
          Output(lambda r: isinstance(r.got, Tensor) and tuple(r.got.shape) == (r.C,), "one"),
          "your logits ({case}) have shape ({C},), expected (1, {C}) = (B, num_classes): a `.squeeze()` drops "
          "every axis of size 1, and with B = 1 that is the batch axis, so `logits.argmax(dim=-1)` then gives one "
          "number where code expects one per review (and cross_entropy reads the classes as a batch). Return "
          "`self.classifier(pooled)` as it is; to drop one axis, name it: `.squeeze(1)`."),
    *GRADIENT_PROBE,
    # training mode, dropout=0.5 (stage "training": self.classifier's input and the pooled encoder output)
    Entry("mode not restored", None, Probe("check_modes_kept")),
    *(Entry(name, None, Probe("check_stack_input_dropout"))
      for name in ("dropout applied twice", "positional dropout missing", "dropout before adding", "wrong dropout")),
    Entry("dropout in the wrong place", None, Output(_pooled_dropped, "training"),
          "in {where} ({case}), the vector self.classifier gets is not the pooled encoder output{scaled}. The given "
          "modules already drop where the model needs it (after the positional table, inside the encoder's "
          "layers): remove the extra dropout between the pooling and `self.classifier`. (Hugging Face's "
          "BertForSequenceClassification does drop its pooled output; this exercise's model, with the modules it "
          "is given, does not.)"),
    Entry("wrong device", None, Probe("check_input_device")),
])

CATALOGUES = (GELU, POOL, CLASSIFIER)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


def _classifier_tokens(B: int, L: int, V: int, pad_id: int) -> Tensor:
    """``(B, L)`` ids in ``[0, V)``: real tokens never ``pad_id`` (some are 0), trailing
    padding of different lengths, row 0 full and row 1 padded."""
    ids = torch.randint(0, V - 1, (B, L))
    ids = ids + (ids >= pad_id).long()  # skip pad_id
    ids[:, 1] = 0  # real tokens with id 0, so a hard-coded 0 shows
    return torch.where(_trailing_mask(B, L, shortest=2), ids, torch.full_like(ids, pad_id))


_CLASSIFIER_PARTS = {
    "embedding": "TokenEmbedding(vocab_size, d_model)",
    "positional_encoding": "PositionalEncoding(d_model, max_len, dropout)",
    "encoder": "Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)",
    "classifier": "nn.Linear(d_model, num_classes)",
}


def _built_in_forward(model: nn.Module, run: Callable[[], Any]) -> tuple[Any, str | None]:
    """``run()``'s result and what it did to ``model``'s parameters, if anything: parameters
    created (``nn.Linear(...)`` inside forward, kept or not), or the model's own replaced or
    re-drawn (``self.classifier = nn.Linear(...)``, ``nn.init.normal_(...)`` in forward)."""
    before = {name: (id(p), p.detach().clone()) for name, p in model.named_parameters()}
    made: list[str] = []
    handle = nn.modules.module.register_module_parameter_registration_hook(
        lambda module, name, _: made.append(f"{type(module).__name__}.{name}"))
    try:
        out = run()
    finally:
        handle.remove()
    after = dict(model.named_parameters())
    if made:
        return out, (f"forward creates new parameters on every call ({', '.join(sorted(set(made)))}): a layer built "
                     "inside forward, such as nn.Linear(...)(v), starts from new random weights each time")
    changed = [name for name, (ident, value) in before.items() if name not in after or id(after[name]) != ident
               or not equal(after[name].detach(), value)]
    if changed:
        return out, (f"forward replaces or re-initialises `{changed[0]}` on every call (new random weights each "
                     "time)")
    return out, None


# nn.TransformerEncoder's (and Hugging Face's) keywords for the mask: the course's Encoder takes forward(x, mask)
_TORCH_ENCODER_KEYWORDS = ("src_key_padding_mask", "src_mask", "attention_mask", "key_padding_mask", "attn_mask",
                           "is_causal", "mask_check")


def _batch_of_one(model: nn.Module, ref: TransformerClassifier, tokens: Tensor, C: int, settings: str) -> None:
    """A batch of one review (row 1, padded): the logits are ``(1, C)`` (a ``.squeeze()`` gives ``(C,)``)."""
    one = tokens[1:2].clone()  # (1, L)
    case = f"{settings}, a batch of one review, tokens {tuple(one.shape)} with padding"
    got = call_student(model, one, context=f"running forward ({case})")
    CLASSIFIER.detect("one", SimpleNamespace(got=got, C=C), case=case, C=C)
    expect_close("the logits", got, ref(one), atol=_ATOL, case=case)


def _same(a: Tensor, b: Tensor) -> bool:
    return bool(((a == b) | (isnan(a) & isnan(b))).all())  # a NaN is no dropout


_P = 0.5  # 0 < p < 1: dropout applied twice shows (p = 1 zeroes the same entries once or twice)


def _training_probe(cls: Any, V: int, C: int, kwargs: dict[str, Any], tokens: Tensor, settings: str) -> None:
    """The same settings with ``dropout=0.5`` (eval mode is right by now): forward leaves the modes
    as it found them; eval mode is deterministic; in training mode the encoder gets dropout(x + pe)
    of its eval-mode input, and self.classifier gets exactly the pooled encoder output (the given
    modules hold every dropout). Watched with hooks."""
    kwargs = dict(kwargs, dropout=_P)
    shown = f"{settings}, dropout={_P}"
    model = call_student(cls, V, C, context=f"constructing TransformerClassifier({V}, {C}, {shown})", **kwargs)
    enc, head = getattr(model, "encoder", None), getattr(model, "classifier", None)
    if not (isinstance(model, nn.Module) and isinstance(enc, nn.Module) and isinstance(head, nn.Module)):
        return
    case = f"{shown}, tokens {tuple(tokens.shape)} with padding"
    check_modes_kept(model, lambda: call_student(model, tokens.clone(), context="running forward"),
                     "TransformerClassifier")
    seen: dict[str, Any] = {}
    handles = [enc.register_forward_pre_hook(lambda m, a, kw: seen.__setitem__("x", a[0] if a else kw.get("x")),
                                             with_kwargs=True),
               enc.register_forward_hook(lambda m, a, out: seen.__setitem__("h", out)),
               head.register_forward_pre_hook(lambda m, a: seen.__setitem__("pooled", a[0] if a else None))]
    runs = []
    try:
        with torch.no_grad():
            for training in (False,) * 4 + (True, True):  # four eval calls: a few pooled entries can repeat
                model.train(training)
                out = call_student(model, tokens.clone(), context=f"running forward ({case})")
                runs.append((dict(seen), out))
    finally:
        for h in handles:
            h.remove()
        model.eval()
    (clean, first), (train, _), (train_again, _) = runs[0], runs[-2], runs[-1]
    if isinstance(first, Tensor) and any(isinstance(again, Tensor) and first.shape == again.shape
                                         and not equal(first, again) for _, again in runs[1:-2]):
        CLASSIFIER.fail("dropout ignores eval mode", case=case)
    where = f"training mode, dropout={_P}"
    check_stack_input_dropout(train.get("x"), clean.get("x"), _P, "the embeddings", "the encoder", where,
                              train_again.get("x"))
    h, pooled = train.get("h"), train.get("pooled")
    if not (isinstance(h, Tensor) and isinstance(pooled, Tensor)):
        return
    real = (tokens != model.pad_id).unsqueeze(-1).to(h.dtype) if hasattr(model, "pad_id") else None  # (B, L, 1)
    expected = h[:, 0] if kwargs["pooling"] == "cls" or real is None else (h * real).sum(dim=1) / real.sum(dim=1)
    CLASSIFIER.detect("training", SimpleNamespace(pooled=pooled, expected=expected), where=where, case=case)


@checker("TransformerClassifier")
def check_transformer_classifier(cls: Any) -> str:
    require_module_class(cls, "TransformerClassifier")
    # both poolings; norm_first and activation only change the (given) __init__, so one pass each
    for pooling, norm_first, activation in (("cls", False, "gelu"), ("mean", True, "relu")):
        B, L, V, C, d_ff = _distinct_sizes([(2, 4), (6, 9), (11, 16), (3, 5), (10, 20)])
        H, d_k, num_layers, pad_id = 2, randint(3, 5), randint(1, 2), randint(2, V - 1)
        kwargs = dict(d_model=H * d_k, num_heads=H, num_layers=num_layers, d_ff=d_ff, dropout=0.0, max_len=L + 3,
                      norm_first=norm_first, activation=activation, pooling=pooling, pad_id=pad_id)
        settings_text = f"pooling={pooling!r}, norm_first={norm_first}, activation={activation!r}, pad_id={pad_id}"
        model = call_student(cls, V, C, context=f"constructing TransformerClassifier({V}, {C}, {settings_text})",
                             **kwargs)
        CLASSIFIER.detect("built", model)
        model.eval()
        randomise_parameters(model)  # fresh norms (ones and zeros) would hide a norm mix-up
        ref = TransformerClassifier(V, C, **kwargs).eval()
        params = load_reference(model, ref, "TransformerClassifier", _CLASSIFIER_PARTS,
                                optional_extra=() if norm_first else ("encoder.norm.",))
        tokens = _classifier_tokens(B, L, V, pad_id)  # (B, L)
        tokens0 = tokens.clone()
        case = f"{settings_text}, tokens ({B}, {L}) with padding"
        encoder_masks: list[Any] = []  # what the student's encoder is called with
        encoder_inputs: list[Any] = []

        def record(_: nn.Module, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
            encoder_masks.append(kw.get("mask", args[1] if len(args) > 1 else None))
            encoder_inputs.append(kw.get("x", args[0] if args else None))
        seen = model.encoder.register_forward_pre_hook(record, with_kwargs=True) \
            if isinstance(getattr(model, "encoder", None), nn.Module) else None
        with torch.no_grad():
            try:
                got = call_student(model, tokens, context=f"running forward ({case})")
            except StudentError as err:
                line = student_line(err.exc)
                CLASSIFIER.detect("raised", SimpleNamespace(exc=err.exc, B=B, L=L), case=case, B=B, L=L,
                                  at=f"\n    at {line}" if line else "")
                raise
            finally:
                if seen is not None:
                    seen.remove()
            check_unchanged(["tokens"], [tokens], [tokens0], case)
            expected = ref(tokens0)  # (B, C)
            # a wrong result: is it random? (a second call costs a right one nothing)
            again, built = (None, None) if isinstance(got, Tensor) and got.shape == expected.shape and matches(
                got, expected, atol=_ATOL) else _built_in_forward(model, lambda: call_student(
                    model, tokens, context=f"running forward again ({case})"))
            for _ in range(4):  # a dropout on a few pooled entries can draw one pattern twice: draw again
                if not (isinstance(got, Tensor) and isinstance(again, Tensor) and got.shape == again.shape
                        and _same(got, again)):
                    break
                again = call_student(model, tokens, context=f"running forward again ({case})")
            if isinstance(got, Tensor) and isinstance(again, Tensor) and got.shape == again.shape and \
                    not _same(got, again):
                CLASSIFIER.detect("random", SimpleNamespace(built=built), case=case)
            D = H * d_k
            if isinstance(got, Tensor):
                CLASSIFIER.detect("shape", SimpleNamespace(got=got, shape=tuple(got.shape), ref=ref, tokens=tokens0,
                                                           pooling=pooling, B=B, L=L, C=C, D=D),
                                  case=case, B=B, L=L, C=C, D=D)
            CLASSIFIER.detect("nan", SimpleNamespace(got=got, ref=ref, tokens=tokens0, pooling=pooling), case=case)
            seen_by_encoder = SimpleNamespace(ref=ref, tokens=tokens0, pooling=pooling, masks=encoder_masks,
                                              inputs=encoder_inputs)
            expect_close("the logits", got, expected, CLASSIFIER.candidates(
                seen_by_encoder, own=_OWN_POOL if _calls_own_pool(cls) else "", B=B, L=L, D=D), atol=_ATOL, case=case)
            _batch_of_one(model, ref, tokens0, C, settings_text)
        gradient_probe(model, ref, dict(tokens=tokens0), params, what="TransformerClassifier", case=case)
        _training_probe(cls, V, C, kwargs, tokens0, settings_text)
        with torch.no_grad():  # right so far: once more, with a tensor built without device= watched
            check_input_device(None, lambda: call_student(model, tokens0.clone(), context=f"running forward ({case})"),
                               "your TransformerClassifier", case, "build every new tensor from the tokens "
                               "(tokens != self.pad_id, torch.ones_like(tokens)) or with device=tokens.device")
    return "[CLS] and mean pooling, post- and pre-norm, GELU and ReLU, a non-zero pad id"


# ---------------------------------------------------------------- hints
register_hints("gelu", [
    "GELU(x) = x * Phi(x), where Phi is the cumulative distribution function of the standard normal "
    "distribution: the probability that a N(0, 1) variable is below x.",
    "Phi(x) = 0.5 * (1 + erf(x / sqrt(2))); torch.erf computes erf element-wise, math.sqrt(2) is the constant.",
    "Check yourself on three values: gelu(0) = 0, gelu(1) = 0.8413, gelu(-1) = -0.1587 (F.gelu gives the "
    "same). About 0.9214 at 1 means erf(x) instead of erf(x / sqrt(2)); 1.6827 means the 1/2 is missing.",
])
register_hints("masked_mean_pool", [
    "Give the mask a feature axis so that it broadcasts over D: m = mask.unsqueeze(-1), shape (B, L, 1), "
    "as float (mask.float() or .to(x.dtype)).",
    "x * m zeroes the padding; sum over the positions (dim=1) to get (B, D).",
    "Divide by each row's number of real tokens, m.sum(dim=1), shape (B, 1): it broadcasts over D. Not by "
    "L, not by the whole batch's count.",
])
register_hints("TransformerClassifier", [
    "Three steps: embed (self.embedding, then self.positional_encoding), encode with the padding mask, "
    "pool and classify.",
    "The mask: padding_mask(tokens, self.pad_id), shape (B, 1, L), True on real tokens; pass it to "
    "self.encoder(x, mask). The encoder's output h is (B, L, D).",
    "Pooling: h[:, 0] for 'cls' ([CLS] is at position 0); masked_mean_pool(h, tokens != self.pad_id) for "
    "'mean'. Then return self.classifier(pooled), shape (B, num_classes), with no softmax.",
])
