"""Checkers for notebook 04 (the encoder): ``LayerNorm``, ``FeedForward``, ``EncoderLayer``, ``Encoder``.

Each checker builds the student's class itself with sizes that all differ (``B != L != D``, ``d_ff != D``,
``H != d_k``), in eval mode, for both ``norm_first`` settings, with random parameters (a fresh LayerNorm's ones
and zeros would hide a missing scale and shift) copied by name into the reference; inputs go through with and
without padding masks ``(B, 1, L)``. A wrong output is compared with the reference computed with each catalogued
mistake (for layers and stacks the generated families of :mod:`._blocks`); the first match is named. Sub-modules
of the student's own classes are first compared with the reference on their own, so that a bug there is not
blamed on the layer. Layers and stacks are compared with ``atol=1e-4`` (several sub-layers of float32 rounding);
every catalogued mistake differs by far more.

Each exercise's mistakes are one table, in the order tried: ``LN``, ``FF``, ``EL`` (EncoderLayer) and ``ENC``
(Encoder); the layer's and the stack's hold the generated families of :mod:`._blocks` as entries, setting by setting.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..encoder import Encoder, EncoderLayer
from ..layers import FeedForward, LayerNorm
from ..multihead import MultiHeadAttention
from ._blocks import (
    ATTENTION_PROBES,
    COURSE_PARTS_PROBE,
    DROPOUT_MODES_PROBE,
    EVAL_DROPOUT_PROBE,
    LOAD_REFERENCE_PROBE,
    P_PROBE,
    P_RATE,
    PART_DROPOUT_PROBE,
    STACK_PROBES,
    VERIFY_PART_PROBE,
    Block,
    Constant,
    FirstFeatures,
    Stack,
    attention_error,
    block_entries,
    branch_dropout_probe,
    build_stack,
    check_dropout,
    check_dropout_modes,
    check_dropout_rate,
    check_stack_dropout,
    course_parts,
    declared,
    dropout_entries,
    layer_dropout,
    layer_stage,
    once,
    reference,
    remembered,
    stack_dropout_entries,
    stack_entries,
    unused_final_norm,
    verify_part,
    weights_used,
)
from ._core import (
    Mistake,
    StudentError,
    call_student,
    check_dtype_follows,
    check_module_device,
    check_state_unchanged,
    check_unchanged,
    checker,
    describe_shape,
    expect_close,
    gradient_probe,
    matches,
    module_state,
    randint,
    register_hints,
    require_distinct_roles,
    require_module_class,
    require_own_code,
    student_line,
)
from ._pairing import load_reference, randomise_parameters
from .catalogue import DEVICE_PROBE, DTYPE_PROBE, GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Raises, Reference

__all__ = ["check_layer_norm", "check_feed_forward", "check_encoder_layer", "check_encoder"]

_ATOL = 1e-4  # whole layers and stacks; LayerNorm and FeedForward use expect_close's 1e-5

# the checker that tests each reference class, for "fix that one first" messages
_CHECK_OF = {LayerNorm: "check_layer_norm", FeedForward: "check_feed_forward",
             MultiHeadAttention: "check_multi_head_attention", EncoderLayer: "check_encoder_layer"}


# ---------------------------------------------------------------- shared helpers
def _dims() -> tuple[int, int, int, int, int, int]:
    """``B, L, D, H, d_k, d_ff`` with ``D = H * d_k``, ``H != d_k`` and all of ``B, L, D,
    H, d_ff`` different (so a mixed-up axis shows as a wrong shape or wrong values)."""
    while True:
        B, L, H, d_k = randint(2, 4), randint(5, 9), randint(2, 3), randint(3, 6)
        D = H * d_k
        d_ff = randint(D + 3, 2 * D + 5)
        if H != d_k and len({B, L, D, H, d_ff}) == 5:
            return B, L, D, H, d_k, d_ff


def _padding_mask(B: int, L: int) -> Tensor:
    """``(B, 1, L)``, ``True`` on each example's first ``length`` positions; example 0
    is full, example 1 padded, so the lengths always differ between examples."""
    lengths = torch.randint(1, L, (B,))  # (B,) each < L: padded
    lengths[0] = L
    lengths[1] = randint(1, L - 2)
    return (torch.arange(L) < lengths[:, None]).unsqueeze(1)  # (B, 1, L)


def _names(items: list[str], limit: int = 6) -> str:
    shown = ", ".join(f"`{n}`" for n in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _verify_part(path: str, part: nn.Module, ref_part: nn.Module, args: tuple[Any, ...], what: str) -> None:
    verify_part(path, part, ref_part, args, what, _CHECK_OF.get(type(ref_part), "its checker"), atol=_ATOL)


def _compare_without_and_with_mask(model: nn.Module, ref: nn.Module, x: Tensor, mask: Tensor, settings: str,
                                   mistakes_fn: Callable[[Tensor, Tensor | None], list[Mistake]]) -> None:
    """Run the student's layer or stack on ``x`` without a mask, then with the padding
    ``mask``; inputs must stay unchanged and the output must equal ``ref``'s, else
    ``mistakes_fn(x, mask)`` names the likely mistake. ``settings`` starts every case's text."""
    for m in (None, mask):
        x0 = x.clone()
        args = (x,) if m is None else (x, m)
        case = f"{settings}, " + ("no mask" if m is None else f"padding mask {describe_shape(m)}")
        with torch.no_grad():
            expected = once(lambda: ref(x0, m), type(ref).__name__, ref, x0, m)  # (B, L, D)
        try:
            got = _forward(model, args, case, attention=True)
        except StudentError as err:  # the attention's weights taken for its output?
            again = (x0.clone(),) + args[1:]
            weights_used(model, ("self_attn",), lambda mod: _forward(mod, again, case), expected,
                         type(ref).__name__, err.exc, case)
            raise
        check_unchanged(["x", "mask"], args, [x0, m], case)
        with torch.no_grad():
            check_dropout(lambda: _forward(model, (x0.clone(),) + args[1:], case), got, expected)
            expect_close("output", got, expected, mistakes_fn(x0, m), case=case, atol=_ATOL)


def _forward(model: nn.Module, args: tuple[Tensor, ...], case: str, attention: bool = False) -> Any:
    """The student's forward under ``no_grad``; the module's parameters and buffers must stay
    as they were (a changed weight would be misread as wrong values)."""
    state = module_state(model)
    with torch.no_grad():
        try:
            got = call_student(model, *args, context=f"running forward ({case})")
        except StudentError as err:
            exc = err.exc
            if attention:
                attention_error(exc, "code", case)
            raise
    check_state_unchanged(model, state, case)
    return got


# ---------------------------------------------------------------- LayerNorm
def _ln(x: Tensor, w: Tensor | None, b: Tensor | None, eps: float, *, dims: tuple[int, ...] = (-1,),
        correction: int = 0, eps_outside: bool = False, center: bool = True, rms: bool = False,
        swap: bool = False) -> Tensor:
    """Layer norm with (at most) one deliberate mistake; the defaults are correct.
    ``w`` / ``b`` ``None`` leave out the scale / the shift."""
    mean = x.mean(dim=dims, keepdim=True)  # (..., 1)
    var = (x * x).mean(dim=dims, keepdim=True) if rms else x.var(dim=dims, keepdim=True, correction=correction)
    xc = x - mean if center else x  # (B, L, D)
    y = xc / (var.sqrt() + eps if eps_outside else (var + eps).sqrt())  # (B, L, D)
    w, b = (b, w) if swap else (w, b)
    y = y if w is None else y * w
    return y if b is None else y + b


def _ln_with(**changes: Any) -> Reference:
    """The reference layer norm of the case with these changes to :func:`_ln`'s arguments."""
    return Reference(lambda c: [({}, lambda: _ln(c.x, **{"w": c.w, "b": c.b, "eps": c.eps, **changes}))])


def _other_eps(default: bool) -> Reference:
    """The layer norm with each other usual eps: for the default eps or for one given."""
    def build(c: Any) -> list:
        if c.default != default:
            return []
        return [(dict(other=f"{other:g}"), lambda other=other: _ln(c.x, c.w, c.b, other))
                for other in (1e-6, 1e-8, 1e-3, 1e-5) if other != c.eps]
    return Reference(build)


def _plain_tensor(m: Any) -> dict[str, str] | None:
    """The first of weight and bias that is a tensor attribute but not a registered parameter."""
    for n in ("weight", "bias"):
        attr = getattr(m.model, n, None)
        if not (isinstance(attr, nn.Parameter) and n in m.registered) and isinstance(attr, Tensor):
            return dict(n=n, init="ones" if n == "weight" else "zeros")
    return None


def _misshapen(m: Any) -> dict[str, Any] | None:
    for n, p in m.found.items():
        if tuple(p.shape) != (m.D,):
            return dict(n=n, shape=describe_shape(p))
    return None


LN = Catalogue("LayerNorm", "04", [
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
          "LayerNorm should subclass nn.Module."),
    # the parameters (stage "params": the module, its registered parameters, those found and missing)
    Entry("not a parameter", "a learnable tensor is not an nn.Parameter", Output(_plain_tensor, "params"),
          "`{n}` is a plain tensor, not an nn.Parameter, so it would never be trained: self.{n} = "
          "nn.Parameter(torch.{init}(d_model))."),
    Entry("no learnable scale and shift", "LayerNorm lacks its weight or bias",
          Output(lambda m: bool(m.missing) and not m.registered, "params"),
          "your LayerNorm has no learnable parameters: after normalising, the layer scales and shifts each feature "
          "with self.weight = nn.Parameter(torch.ones(d_model)) and self.bias = nn.Parameter(torch.zeros(d_model))."),
    Entry("missing parameter", "a contract parameter is missing",
          Output(lambda m: bool(m.missing) and dict(missing=", ".join(m.missing), yours=_names(list(m.registered))),
                 "params"),
          "LayerNorm needs two learnable parameters named weight and bias (as nn.LayerNorm); missing: {missing}. "
          "Yours are called {yours}."),
    Entry("wrong parameter shape", "a parameter has another shape than the reference's", Output(_misshapen, "params"),
          "`{n}` has shape {shape}, expected (d_model,) = ({D},): one value per feature."),
    Entry("wrong initial values", "parameters do not start at the contract's values",
          Output(lambda m: not (bool((m.found["weight"] == 1).all()) and bool((m.found["bias"] == 0).all())),
                 "params"),
          "a fresh LayerNorm should start with weight = ones and bias = zeros (so at first it only normalises): "
          "torch.ones(d_model) and torch.zeros(d_model)."),
    Entry("forbidden call", None, Probe("require_own_code")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    # the output is the layer norm with one of these mistakes (in this order; the case: x, w, b, eps, default)
    Entry("unbiased variance", "LayerNorm divides by D - 1 (torch.var default, torch.std)", _ln_with(correction=1),
          "you used the unbiased variance (dividing by D - 1, the default of torch.var and torch.std). Layer norm uses "
          "the biased one, the plain mean of the squared deviations: x.var(dim=-1, unbiased=False), or ((x - mean) ** "
          "2).mean(-1)."),
    Entry("unbiased variance", None, _ln_with(correction=1, eps_outside=True),
          "you divided by x.std(...) + eps: torch.std is unbiased (divides by D - 1) and eps belongs inside the square "
          "root. Use (x - mean) / torch.sqrt(var + eps) with var = x.var(dim=-1, unbiased=False)."),
    Entry("eps outside the square root", "eps added after the square root", _ln_with(eps_outside=True),
          "eps is added after the square root, sqrt(var) + eps; it goes inside: sqrt(var + eps). The difference shows "
          "on rows with a tiny variance."),
    Entry("no learnable scale and shift", None, _ln_with(w=None, b=None),
          "the output is normalised but never scaled and shifted: multiply by self.weight and add self.bias at the end "
          "(they start at ones and zeros, so a fresh layer hides this; the check uses random values)."),
    Entry("no learnable scale and shift", None, _ln_with(b=None),
          "the output is scaled by self.weight but self.bias is never added."),
    Entry("no learnable scale and shift", None, _ln_with(w=None),
          "self.bias is added but the output is never multiplied by self.weight."),
    Entry("weight and bias swapped", "LayerNorm's weight and bias exchanged", _ln_with(swap=True),
          "weight and bias are swapped: multiply by self.weight (the scale) and add self.bias (the shift), y = x_hat * "
          "weight + bias."),
    Entry("mean not subtracted", "LayerNorm does not subtract the mean", _ln_with(center=False),
          "the mean is never subtracted: normalise x - mean, not x."),
    Entry("mean not subtracted", None, _ln_with(center=False, rms=True),
          "you divided by the root mean square of x without subtracting the mean (that is RMSNorm, a later variant); "
          "layer norm centres first: (x - mean) / sqrt(var + eps)."),
    *(Entry("wrong axis", None, _ln_with(dims=dims),
            f"the mean and variance were taken over {where}; layer norm normalises each position's own D features: "
            "dim=-1, keepdim=True.")
      for dims, where in (((0,), "the batch axis (0)"), ((1,), "the position axis (1, or -2)"),
                          ((0, 1), "the batch and position axes"), ((1, 2), "a whole sequence (axes 1 and 2)"),
                          ((0, 1, 2), "the whole tensor"))),
    # before the other eps values: a code without eps matches 1e-12 as well, and "seems to be 1e-12" misleads
    Entry("eps ignored", "the eps argument is not used", _ln_with(eps=0.0),
          "eps has no effect: your code adds no eps (or a negligible one) to the variance. It keeps the division "
          "finite on rows of equal values: (x - mean) / torch.sqrt(var + self.eps), with self.eps = eps stored in "
          "__init__ (default 1e-5)."),
    Entry("wrong default eps", "the default eps is not the contract's (LayerNorm 1e-5, RMSNorm 1e-6)", _other_eps(True),
          "your default eps seems to be {other}; the exercise (and nn.LayerNorm) uses eps=1e-5: def __init__(self, "
          "d_model, eps=1e-5)."),
    Entry("eps ignored", None, _other_eps(False),
          "LayerNorm(d_model, eps={eps}) behaves as if eps were {other}: store the eps argument (self.eps = eps) and "
          "use it in forward."),
    # 2-D and 4-D input (stage "ranks")
    Entry("fixed axis", "a fixed axis (dim=2) instead of the last one (-1): wrong on 2-D or 4-D input",
          Raises("", stage="ranks"),  # any exception where 3-D input ran
          "your LayerNorm works on 3-D input but raised {type} on x of shape {shape}: {first}{at}\n    The input is "
          "(..., d_model): use dim=-1 (not a fixed axis such as 2) and keepdim=True."),
    Entry("fixed axis", None, Reference(lambda c: [({}, lambda k=k: _ln(c.x, c.w, c.b, 1e-5, dims=(k,)))
                                                   for k in range(c.x.dim() - 1)], "ranks"),
          "normalised over a fixed axis instead of the last one: use dim=-1, keepdim=True."),
    # rows of mean about 3000 (stage "large mean": right once shifted to mean 0)
    Entry("unstable variance", "variance as E[x^2] - E[x]^2, which cancels catastrophically on rows with a large mean",
          Output(lambda m: m.right_when_centred(), "large mean"),
          "output ({case}) is far off although the same rows shifted to mean 0 are right: the variance loses its "
          "precision when the mean is large. E[x^2] - E[x]^2 subtracts two nearly equal big numbers (about 9e6 here, "
          "where float32 steps by 1). Subtract the mean first: ((x - mean) ** 2).mean(-1, keepdim=True), or "
          "x.var(-1, unbiased=False, keepdim=True)."),
    *GRADIENT_PROBE,
    DTYPE_PROBE,
    DEVICE_PROBE,
])


def _ln_inputs(B: int, L: int, D: int) -> Tensor:
    """``(B, L, D)`` rows with very different scales and offsets, including rows whose
    variance is about eps=1e-5 (there eps inside or outside the root differs)."""
    scale = torch.exp(torch.empty(B, L, 1).uniform_(math.log(1e-3), math.log(3.0)))  # (B, L, 1)
    scale[0, 0], scale[-1, -1] = 2e-3, 5e-3
    offset = 2 * torch.randn(B, L, 1)  # (B, L, 1): the mean matters
    return scale * (torch.randn(B, L, D) + offset)  # (B, L, D)


def _ln_params(model: nn.Module, D: int) -> tuple[nn.Parameter, nn.Parameter]:
    registered = dict(model.named_parameters())
    found = {n: getattr(model, n) for n in ("weight", "bias")
             if isinstance(getattr(model, n, None), nn.Parameter) and n in registered}
    LN.detect("params", SimpleNamespace(model=model, registered=registered, found=found, D=D,
                                        missing=[n for n in ("weight", "bias") if n not in found]), D=D)
    return found["weight"], found["bias"]


def _ln_case(model: nn.Module, w: Tensor, b: Tensor, eps: float, x: Tensor, case: str, default: bool) -> None:
    x0 = x.clone()
    got = _forward(model, (x,), case)
    check_unchanged(["x"], [x], [x0], case)
    w0, b0 = w.detach().clone(), b.detach().clone()
    expected = _ln(x0, w0, b0, eps)  # (B, L, D)
    c = SimpleNamespace(x=x0, w=w0, b=b0, eps=eps, default=default)
    expect_close("output", got, expected, LN.candidates(c, eps=f"{eps:.3g}"), case=case)


_LN_BUILTINS = {"layer_norm", "native_layer_norm"}
_LN_FORMULA = "weight * (x - mean) / sqrt(var + eps) + bias over the last axis"


def _ln_other_ranks(model: nn.Module, w: Tensor, b: Tensor, L: int, D: int) -> None:
    """2-D and 4-D input: the contract's shape is (..., D), so only the last axis counts."""
    for shape in ((L, D), (2, 2, L, D)):
        x = _ln_inputs(*shape[-3:]) if len(shape) > 2 else _ln_inputs(1, L, D)[0]  # (*shape)
        x = x.expand(shape).clone() + torch.randn(shape)  # (*shape): rows differ on every axis
        case = f"x of shape {describe_shape(x)}: the input is (..., d_model), normalise over the last axis only"
        try:
            got = _forward(model, (x,), case)
        except StudentError as err:
            line, said = student_line(err.exc), str(err.exc).strip()
            LN.detect_raised(err.exc, "ranks", type=type(err.exc).__name__, shape=describe_shape(x),
                             first=said.splitlines()[0] if said else "", at=f"\n    at {line}" if line else "")
            raise
        w0, b0 = w.detach().clone(), b.detach().clone()
        fixed = LN.candidates(SimpleNamespace(x=x, w=w0, b=b0), "ranks")
        expect_close("output", got, _ln(x, w0, b0, 1e-5), fixed, case=case)


def _ln_large_mean(model: nn.Module, w: Tensor, b: Tensor, B: int, L: int, D: int) -> None:
    """Rows with mean about 3000 and spread 1: var = E[x^2] - E[x]^2 then cancels in float32
    (E[x^2] is about 9e6, where float32 steps by 1) and is off by hundreds."""
    centred = torch.randn(B, L, D)  # (B, L, D)
    x = centred + 3000.0
    case = f"x of shape ({B}, {L}, {D}), rows with mean about 3000 and standard deviation about 1"
    got = _forward(model, (x,), case)
    w0, b0 = w.detach().clone(), b.detach().clone()
    expected = _ln(x.double(), w0.double(), b0.double(), 1e-5).float()  # (B, L, D)
    if matches(got, expected, atol=2e-2, rtol=1e-2):
        return
    LN.detect("large mean", SimpleNamespace(right_when_centred=lambda: matches(
        _forward(model, (x - 3000.0,), case), _ln(x - 3000.0, w0, b0, 1e-5), atol=1e-3, rtol=1e-3)), case=case)
    expect_close("output", got, expected, case=case, atol=2e-2, rtol=1e-2)


@checker("LayerNorm")
def check_layer_norm(cls: Any) -> str:
    require_module_class(cls, "LayerNorm")
    B, L, D, _H, _d_k, _d_ff = _dims()
    model = call_student(cls, D, context=f"constructing LayerNorm(d_model={D})")
    LN.detect("built", model)
    w, b = _ln_params(model, D)
    model.eval()
    randomise_parameters(model)  # ones and zeros would hide a missing (or swapped) scale and shift
    x = _ln_inputs(B, L, D)
    case = f"x of shape {describe_shape(x)}, default eps, random weight and bias"
    require_own_code(lambda: _forward(model, (x,), case), _LN_BUILTINS, "LayerNorm", _LN_FORMULA)
    for shape in ((B, L, D), (L, B, D)):
        case = f"x of shape {describe_shape(torch.empty(shape))}, default eps, random weight and bias"
        _ln_case(model, w, b, 1e-5, _ln_inputs(*shape), case, default=True)
    _ln_other_ranks(model, w, b, L, D)
    _ln_large_mean(model, w, b, B, L, D)
    ref_w, ref_b = (nn.Parameter(t.detach().clone()) for t in (w, b))
    gradient_probe(model, lambda x: _ln(x, ref_w, ref_b, 1e-5), dict(x=torch.randn(B, L, D) + 1),
                   [("weight", w, ref_w), ("bias", b, ref_b)], what="LayerNorm", case=f"x of shape ({B}, {L}, {D})")

    eps = round(float(torch.empty(()).uniform_(0.1, 0.5)), 2)
    model = call_student(cls, D, eps, context=f"constructing LayerNorm(d_model={D}, eps={eps})")
    w, b = _ln_params(model, D)
    model.eval()
    randomise_parameters(model)
    case = f"x of shape ({B}, {L}, {D}), eps={eps}"
    _ln_case(model, w, b, eps, _ln_inputs(B, L, D), case, default=False)
    check_dtype_follows(lambda: call_student(cls, D, context="constructing LayerNorm"),
                        lambda m, dt: _forward(m, (x.to(dt),), f"x in {dt}"), "LayerNorm",
                        f"x of shape ({B}, {L}, {D})")
    check_module_device(model, (x,), "your LayerNorm", f"x of shape ({B}, {L}, {D}), eps={eps}")
    return "default and large eps, rows of tiny and large variance, random weight and bias"


# ---------------------------------------------------------------- FeedForward
_ACTIVATIONS: tuple[tuple[str, Callable[[Tensor], Tensor]], ...] = (
    ("GELU", F.gelu), ("GELU (tanh approximation)", lambda h: F.gelu(h, approximate="tanh")), ("SiLU (swish)", F.silu),
    ("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("LeakyReLU", F.leaky_relu), ("ELU", F.elu),
)


def _ff_linears(model: nn.Module, D: int, d_ff: int) -> tuple[nn.Linear, nn.Linear]:
    found = {n: getattr(model, n, None) for n in ("linear1", "linear2")}
    children = [n for n, _ in model.named_children()]
    FF.detect("linears", [n for n, m in found.items() if not isinstance(m, nn.Module)],
              yours=f" (yours: {_names(children)})" if children else "")
    for n, (i, o) in (("linear1", (D, d_ff)), ("linear2", (d_ff, D))):
        FF.detect("linear", SimpleNamespace(m=found[n], i=i, o=o), n=n, i=i, o=o,
                  sizes="d_model, d_ff" if n == "linear1" else "d_ff, d_model")
    return found["linear1"], found["linear2"]  # type: ignore[return-value]


def _ff(make: Callable[[Any], Tensor]) -> Reference:
    """One candidate: ``make(case)`` (the case: x and the reference's linear1, linear2)."""
    return Reference(lambda c: [({}, lambda: make(c))])


def _right_ff(c: Any) -> Tensor:
    return c.l2(F.relu(c.l1(c.x)))  # (B, L, D)


def _norms(place: Callable[[Any, Callable[[Tensor], Tensor]], Tensor]) -> Reference:
    """A norm inside the feed-forward: the student's own norm modules (with their random
    parameters), then a plain layer norm."""
    return Reference(lambda c: [({}, lambda n=n: place(c, n))
                                for n in (*c.norms, functools.partial(F.layer_norm, normalized_shape=(c.x.size(-1),)))])


_INSIDE = ("the layer around it (EncoderLayer) adds the residual and normalises; FeedForward returns only "
           "linear2(relu(linear1(x))).")
_FF_DROPOUT_WHERE = "it belongs on the hidden activations, linear2(dropout(relu(linear1(x))))"

FF = Catalogue("FeedForward", "04", declared([
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
          "FeedForward should subclass nn.Module."),
    # the two linear layers (stage "linears": the missing names; "linear": each one)
    Entry("missing submodule", None, Output(lambda missing: bool(missing) and dict(missing=", ".join(missing)),
                                            "linears"),
          "FeedForward needs two submodules, linear1 = nn.Linear(d_model, d_ff) and linear2 = nn.Linear(d_ff, "
          "d_model); missing: {missing}{yours}. An nn.Sequential is fine as long as the two layers are also "
          "self.linear1 and self.linear2."),
    Entry("wrong submodule", None, Output(lambda lin: not isinstance(lin.m, nn.Linear)
                                          and dict(type=type(lin.m).__name__), "linear"),
          "`{n}` should be an nn.Linear, got {type}."),
    Entry("wrong submodule", None, Output(lambda lin: isinstance(lin.m, nn.modules.lazy.LazyModuleMixin), "linear"),
          "`{n}` is an nn.LazyLinear: its input size stays unknown (in_features=0) until the first call, so its "
          "weights cannot be set or counted before that. Give the sizes: nn.Linear({i}, {o}) here, "
          "nn.Linear({sizes})."),
    Entry("wrong submodule", None, Output(lambda lin: (lin.m.in_features, lin.m.out_features) != (lin.i, lin.o)
                                          and dict(got_i=lin.m.in_features, got_o=lin.m.out_features), "linear"),
          "`{n}` should be nn.Linear({sizes}) = nn.Linear({i}, {o}), got nn.Linear({got_i}, {got_o}): the network "
          "widens D to d_ff, then narrows back to D."),
    Entry("wrong submodule", None, Output(lambda lin: lin.m.bias is None, "linear"),
          "`{n}` has no bias: keep nn.Linear's default bias=True."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    Entry("dropout ignores eval mode", None, Probe("check_dropout")),
    # the output is the reference's with one of these mistakes (in this order)
    Entry("activation missing", "FeedForward has no activation", _ff(lambda c: c.l2(c.l1(c.x))),
          "there is no activation between the two linear layers, so together they are just one linear map: apply ReLU "
          "to linear1's output, linear2(relu(linear1(x)))."),
    Entry("activation after the second linear layer", "the activation is applied after linear2",
          _ff(lambda c: F.relu(c.l2(c.l1(c.x)))),
          "ReLU is applied after linear2 instead of between the layers: linear2(relu(linear1(x))), with nothing after "
          "linear2."),
    Entry("activation after the second linear layer", None, _ff(lambda c: F.relu(_right_ff(c))),
          "ReLU is applied between the layers (right) and again after linear2 (wrong): the output must be able to go "
          "negative, return linear2(relu(linear1(x)))."),
    Entry("residual inside the feed-forward", "FeedForward adds its input back (the layer does that)",
          _ff(lambda c: c.x + _right_ff(c)), "the feed-forward adds its input back, x + ...: " + _INSIDE),
    Entry("norm inside the feed-forward", "FeedForward applies a layer norm (the layer does that)",
          _norms(lambda c, n: n(_right_ff(c))), "the feed-forward normalises its output: " + _INSIDE),
    Entry("norm inside the feed-forward", None, _norms(lambda c, n: c.l2(F.relu(c.l1(n(c.x))))),
          "the feed-forward normalises its input: " + _INSIDE),
    Entry("norm inside the feed-forward", None, _norms(lambda c, n: n(c.x + _right_ff(c))),
          "the feed-forward computes norm(x + ...), a whole residual sub-layer: " + _INSIDE),
    Entry("wrong activation", "another activation than the one asked for",
          Reference(lambda c: [(dict(act=name), lambda act=act: c.l2(act(c.l1(c.x)))) for name, act in _ACTIVATIONS]),
          "you used {act} between the layers; the paper (and this course) uses ReLU, max(0, x): torch.relu or "
          "nn.ReLU()."),
    *GRADIENT_PROBE,
    # dropout, p = P_PROBE: training mode deterministic (stage "dropout": the module's outputs, check_dropout_modes)
    Entry("dropout missing", None, Reference(lambda c: [({}, c.no_drop)], "dropout"),
          "no dropout is applied to the hidden activations in training mode: create nn.Dropout(dropout) in __init__ "
          "and apply it to relu(linear1(x)) before linear2."),
    Entry("dropout in the wrong place", None, Reference(lambda c: [({}, c.zero)], "dropout"),
          "dropout acts on the output of linear2 (instead of, or besides, the hidden activations); "
          + _FF_DROPOUT_WHERE + ", and only there (the encoder layer adds its own dropout on the output)."),
    Entry("dropout in the wrong place", None, Reference(lambda c: [({}, c.on_input)], "dropout"),
          "dropout is applied to the input x; " + _FF_DROPOUT_WHERE + "."),
    Entry("wrong dropout", None, Probe("check_dropout_rate")),
    Entry("hard-coded dropout p", None, Probe("check_dropout_rate")),
    Entry("wrong dropout rate", None, Probe("check_dropout_rate")),
    Entry("dropout applied twice", None, Probe("check_dropout_rate")),
], before=(LN,)))


@checker("FeedForward")
def check_feed_forward(cls: Any) -> str:
    require_module_class(cls, "FeedForward")
    B, L, D, _H, _d_k, d_ff = _dims()
    what = f"FeedForward(d_model={D}, d_ff={d_ff}"
    model = call_student(cls, D, d_ff, 0.0, context=f"constructing {what}, dropout=0.0)")
    FF.detect("built", model)
    _ff_linears(model, D, d_ff)
    model.eval()
    randomise_parameters(model)  # biases around 0: ReLU keeps some hidden units and drops others

    def load(ref: nn.Module, student: nn.Module) -> None:
        l1, l2 = _ff_linears(student, D, d_ff)
        ref.linear1.load_state_dict(l1.state_dict())
        ref.linear2.load_state_dict(l2.state_dict())

    ref = FeedForward(D, d_ff).eval()
    load(ref, model)
    for shape in ((B, L, D), (L, B, D)):
        x = torch.randn(shape)
        x0 = x.clone()
        case = f"x of shape {describe_shape(x)}, d_ff={d_ff}"
        got = _forward(model, (x,), case)
        check_unchanged(["x"], [x], [x0], case)
        with torch.no_grad():
            expected = ref(x0)  # (B, L, D)
            check_dropout(lambda: _forward(model, (x0.clone(),), case), got, expected)  # F.dropout(h, p) in eval mode
            norms = tuple(m for m in model.modules() if "norm" in type(m).__name__.lower())
            mistakes = FF.candidates(SimpleNamespace(x=x0, l1=ref.linear1, l2=ref.linear2, norms=norms))
            expect_close("output", got, expected, mistakes, case=case)
    l1, l2 = _ff_linears(model, D, d_ff)
    params = [(f"{n}.{a}", getattr(m, a), getattr(getattr(ref, n), a)) for n, m in (("linear1", l1), ("linear2", l2))
              for a in ("weight", "bias")]
    gradient_probe(model, ref, dict(x=x0), params, what="FeedForward", case=case)

    # dropout: p = P_PROBE makes training mode deterministic (every dropout zeroes its input)
    model = call_student(cls, D, d_ff, P_PROBE, context=f"constructing {what}, dropout={P_PROBE})")
    randomise_parameters(model)
    ref = FeedForward(D, d_ff, P_PROBE)
    load(ref, model)
    x = torch.randn(B, L, D)
    with torch.no_grad():
        no_drop = ref.eval()(x)  # (B, L, D)
        zero = torch.zeros_like(x)
        on_input = ref.linear2(F.relu(ref.linear1(zero)))  # (B, L, D)
    dropped = SimpleNamespace(no_drop=no_drop, zero=zero, on_input=on_input)
    check_dropout_modes(model, ref, lambda m: _forward(m, (x.clone(),), "dropout"), "FeedForward",
                        lambda: FF.candidates(dropped, "dropout"))
    # 0 < p < 1: one dropout with the given p (p = 1 above cannot tell one dropout from two)
    model = call_student(cls, D, d_ff, P_RATE, context=f"constructing {what}, dropout={P_RATE:g})")
    stubs = {"linear1": Constant(2.0, width=d_ff), "linear2": FirstFeatures(D)}  # relu(2) = 2 reaches the output
    check_dropout_rate(model, lambda m: _forward(m, (x.clone(),), "dropout"), stubs, torch.full_like(x, 2.0),
                       "FeedForward", "the hidden activations")
    return "two input shapes, random weights, dropout in training and eval mode"


# ---------------------------------------------------------------- EncoderLayer
_LAYER_WORDS = {"self_attn": "MultiHeadAttention(d_model, num_heads, dropout)",
                "feed_forward": "FeedForward(d_model, d_ff, dropout)", "norm1": "LayerNorm(d_model)",
                "norm2": "LayerNorm(d_model)"}
_BLOCK = Block(
    "EncoderLayer",
    ("self", "ff"),
    word={"self": "self-attention", "ff": "the feed-forward"},
    short={"self": "attention", "ff": "feed-forward"},
    attn={"self": ("in", "in", "self_attn", "mask")},
    lost={"self": "the mask has no effect: pass it on to the attention, self.self_attn(h, h, h, mask)."},
    names={  # catalogue names from before the generator
        "mask not passed": "mask not passed on",
        ("sub-layer skipped", "self"): "feed-forward on the layer input",
        ("sub-layer reads the layer input", "ff"): "feed-forward on the layer input",
    },
)


def _missing_parts(model: nn.Module) -> dict[str, str] | None:
    missing = [n for n in _LAYER_WORDS if not isinstance(getattr(model, n, None), nn.Module)]
    if not missing:
        return None
    children = [n for n, _ in model.named_children()]
    return dict(missing=", ".join(missing), yours=f". Yours: {_names(children)}." if children else ".")


_RUN_PROBES = [Entry("input modified in place", None, Probe("check_unchanged")),  # where the inputs run
               Entry("parameters modified in place", None, Probe("check_state_unchanged")), *EVAL_DROPOUT_PROBE]

EL = Catalogue("EncoderLayer", "04", declared([
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
          "EncoderLayer should subclass nn.Module."),
    *COURSE_PARTS_PROBE,
    Entry("missing submodule", None, Output(_missing_parts, "submodules"),
          "EncoderLayer needs the submodules {needed} (the check copies parameters by these names); missing: "
          "{missing}{yours}"),
    Entry("modules shared", None, Probe("require_distinct_roles")),
    *LOAD_REFERENCE_PROBE,
    Entry("wrong submodule", None, Output(lambda m: isinstance(m.heads, int) and m.heads != m.H
                                          and dict(heads=m.heads), "heads"),
          "your EncoderLayer's self_attn has num_heads={heads}, but the layer was built with num_heads={H}: pass "
          "num_heads on, MultiHeadAttention(d_model, num_heads, dropout)."),
    *VERIFY_PART_PROBE,
    *ATTENTION_PROBES,
    *_RUN_PROBES,
    # the output is the reference's with one generated mistake (._blocks), for each norm_first and mask given
    *block_entries(_BLOCK, ("mask",)),
    *GRADIENT_PROBE,
    # dropout = P_PROBE in training mode: where the sub-layers' dropout goes; then 0 < p < 1
    *DROPOUT_MODES_PROBE,
    *dropout_entries(_BLOCK),
    *PART_DROPOUT_PROBE,
    *branch_dropout_probe(memory=False),
], before=(LN, FF)))


def _block_mistakes(ref: nn.Module, x: Tensor, mask: Tensor | None, norm_first: bool) -> list[Mistake]:
    """What ``ref`` (with the student's parameters) returns with each generated mistake."""
    case = SimpleNamespace(ref=ref, x=x, memory=None, masks={"mask": mask}, norm_first=norm_first, drop=None,
                           present=frozenset() if mask is None else frozenset({"mask"}))
    return remembered(EL.candidates(case, "values"), "EncoderLayer", ref, x, mask, norm_first)


def _build_layer(cls: Any, D: int, H: int, d_ff: int, p: float, norm_first: bool, roles: bool = True) -> nn.Module:
    args = f"d_model={D}, num_heads={H}, d_ff={d_ff}, dropout={p}, norm_first={norm_first}"
    model = call_student(cls, D, H, d_ff, dropout=p, norm_first=norm_first,
                         context=f"constructing EncoderLayer({args})")
    EL.detect("built", model)
    course_parts(model, "EncoderLayer")
    EL.detect("submodules", model, needed=", ".join(_LAYER_WORDS))
    if roles:  # one module under two names (self.norm2 = self.norm1) would look like two equal copies
        require_distinct_roles(model, reference(EncoderLayer, D, H, d_ff, p, norm_first), "EncoderLayer")
    return model


def _layer_sizes() -> tuple[int, int, int, int, int]:
    B, L, D, H, _d_k, d_ff = _dims()
    return B, L, D, H, d_ff


def _layer_values(cls: Any, B: int, L: int, D: int, H: int, d_ff: int, norm_first: bool, full: bool = True) -> None:
    """Eval mode: the reference's output with and without a mask (else a generated structural
    mistake is named); ``full``: also shared roles and the gradient probe."""
    model = _build_layer(cls, D, H, d_ff, 0.0, norm_first, roles=full).eval()
    randomise_parameters(model)  # distinct norm parameters make norm1/norm2 mix-ups visible
    ref = reference(EncoderLayer, D, H, d_ff, 0.0, norm_first).eval()
    params = load_reference(model, ref, "EncoderLayer", _LAYER_WORDS)
    x = torch.randn(B, L, D)
    mask = _padding_mask(B, L)
    EL.detect("heads", SimpleNamespace(heads=getattr(model.self_attn, "num_heads", None), H=H), H=H)
    with torch.no_grad():
        y = ref.norm1(x)  # (B, L, D): a typical sub-layer input
    for name, args in (("norm1", (x,)), ("norm2", (x,)), ("feed_forward", (y,)), ("self_attn", (y, y, y, mask))):
        _verify_part(name, getattr(model, name), getattr(ref, name), args, "EncoderLayer")
    case = f"norm_first={norm_first}, x of shape ({B}, {L}, {D}), d_model={D}, num_heads={H}, d_ff={d_ff}"
    _compare_without_and_with_mask(model, ref, x, mask, case, lambda x0, m: _block_mistakes(ref, x0, m, norm_first))
    if full:
        gradient_probe(model, ref, dict(x=x, mask=mask), params, what="EncoderLayer", case=case)


def _layer_dropout(cls: Any, B: int, L: int, D: int, H: int, d_ff: int, norm_first: bool) -> None:
    def build(p: float) -> nn.Module:
        model = _build_layer(cls, D, H, d_ff, p, norm_first)
        randomise_parameters(model)
        return model

    layer_dropout(_BLOCK, build, lambda p: reference(EncoderLayer, D, H, d_ff, p, norm_first), _LAYER_WORDS,
                  lambda: (torch.randn(B, L, D), None, {"mask": _padding_mask(B, L)}),
                  lambda m, x, _, masks: _forward(m, (x.clone(), masks["mask"]), "dropout", attention=True), norm_first,
                  EL)


@checker("EncoderLayer")
def check_encoder_layer(cls: Any) -> str:
    require_module_class(cls, "EncoderLayer")
    sizes = _layer_sizes()
    for norm_first in (False, True):
        _layer_values(cls, *sizes, norm_first=norm_first)
    for norm_first in (False, True):  # after both settings' structure: the probe assumes it is right
        _layer_dropout(cls, *sizes, norm_first=norm_first)
    return "post-norm and pre-norm, with and without padding masks, random weights and norms, dropout"


_check_layer_stage = layer_stage("EncoderLayer", _layer_sizes, _layer_values, _layer_dropout)


# ---------------------------------------------------------------- Encoder
_ENCODER_WORDS = {"layers": "nn.ModuleList of num_layers EncoderLayer", "norm": "LayerNorm(d_model), only when norm_first=True"}  # noqa: E501
_STACK = Stack("Encoder", "EncoderLayer", ("mask",), "x = layer(x, mask)", {"masks not passed on": "mask not passed on"})  # noqa: E501


ENC = Catalogue("Encoder", "04", declared([
    Entry("not a class", None, Probe("require_module_class")),
    *STACK_PROBES,
    *VERIFY_PART_PROBE,
    *ATTENTION_PROBES,
    *_RUN_PROBES,
    # the output is the reference stack's with one generated mistake (._blocks), for each norm_first and mask given
    *stack_entries(_STACK, memory=False),
    Entry("unused final norm", None, Probe("unused_final_norm")),
    *GRADIENT_PROBE,
    *DROPOUT_MODES_PROBE,
    *stack_dropout_entries(),
], before=(LN, FF, EL)))


def _stack_mistakes(model: nn.Module, ref: nn.Module, x: Tensor, mask: Tensor | None, norm_first: bool) -> list[Mistake]:  # noqa: E501
    masks = {"mask": mask}
    case = SimpleNamespace(ref=ref, x=x, memory=None, masks=masks, with_causal=masks, norm_first=norm_first,
                           present=frozenset() if mask is None else frozenset({"mask"}),
                           own_norm=getattr(model, "norm", None), D=x.size(-1))
    return ENC.candidates(case, "values")


@checker("Encoder")
def check_encoder(cls: Any) -> str:
    require_module_class(cls, "Encoder")
    B, L, D, H, _d_k, d_ff = _dims()
    n = randint(2, 3)
    for norm_first in (False, True):
        model, ref, params = build_stack(cls, _STACK, Encoder, (n, D, H, d_ff), 0.0, norm_first, _ENCODER_WORDS)
        x = torch.randn(B, L, D)
        mask = _padding_mask(B, L)
        for i, (layer, ref_layer) in enumerate(zip(model.layers, ref.layers)):
            _verify_part(f"layers[{i}]", layer, ref_layer, (x, mask), "Encoder")
        if norm_first:
            _verify_part("norm", model.norm, ref.norm, (x,), "Encoder")
        case = f"norm_first={norm_first}, x of shape ({B}, {L}, {D}), num_layers={n}, d_model={D}, num_heads={H}, d_ff={d_ff}"  # noqa: E501
        _compare_without_and_with_mask(model, ref, x, mask, case, lambda x0, m: _stack_mistakes(model, ref, x0, m, norm_first))  # noqa: E501
        unused_final_norm(model, norm_first, "Encoder")
        gradient_probe(model, ref, dict(x=x, mask=mask), params, what="Encoder", case=case)
    model, ref, _ = build_stack(cls, _STACK, Encoder, (n, D, H, d_ff), P_PROBE, True, _ENCODER_WORDS)
    x, mask = torch.randn(B, L, D), _padding_mask(B, L)
    check_stack_dropout(model, ref, _STACK, lambda m, h: _forward(m, (h, mask), "dropout", attention=True), x, ENC)
    return "2-3 layers, post-norm and pre-norm, with and without padding masks, random weights, dropout"


CATALOGUES = (LN, FF, EL, ENC)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints("LayerNorm", [
    "Redo §1's four numbers by hand first. For x of shape (B, L, D), over which axis do the mean and "
    "the variance run, and what shape must they keep so that x - mean still works?",
    "In __init__ store eps and create self.weight = nn.Parameter(torch.ones(d_model)) and "
    "self.bias = nn.Parameter(torch.zeros(d_model)).",
    "In forward take mean and var over dim=-1 with keepdim=True so they broadcast back over "
    "(B, L, D). The variance is the biased one (unbiased=False: divide by D, not D - 1).",
    "eps goes inside the square root: (x - mean) / torch.sqrt(var + self.eps), then "
    "multiply by self.weight and add self.bias.",
])
register_hints("FeedForward", [
    "Read FFN(x) = max(0, x W1 + b1) W2 + b2 from left to right: how many linear layers is that, what is the "
    "size in the middle, and where does max(0, .) sit? Does one position ever look at another?",
    "In __init__: self.linear1 = nn.Linear(d_model, d_ff), self.linear2 = nn.Linear(d_ff, "
    "d_model), and nn.Dropout(dropout).",
    "The non-linearity is ReLU, between the two layers only; dropout goes on the hidden "
    "activations, after ReLU and before linear2. Nothing comes after linear2: forward is "
    "return self.linear2(self.dropout(torch.relu(self.linear1(x)))).",
])
register_hints("EncoderLayer", [
    "Draw the layer as two boxes, each with an arrow that skips around it. Which box comes first, what do "
    "its queries, keys and values read, and where does the norm sit: after the skip arrow rejoins "
    "(norm_first=False) or before the box (norm_first=True)?",
    "In __init__ build self_attn = MultiHeadAttention(d_model, num_heads, dropout), "
    "feed_forward = FeedForward(d_model, d_ff, dropout), norm1 and norm2 = LayerNorm(d_model), "
    "and self.dropout1, self.dropout2 = nn.Dropout(dropout) for the two sub-layer outputs.",
    "self.self_attn(x, x, x, mask) returns (output, weights): use the output, and pass the "
    "mask on. norm1 belongs to the attention sub-layer, norm2 to the feed-forward one.",
    "Post-norm (norm_first=False): x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)[0])), then x = "
    "self.norm2(x + self.dropout2(self.feed_forward(x))). Pre-norm (norm_first=True): h = self.norm1(x); x = x + "
    "self.dropout1(self.self_attn(h, h, h, mask)[0]); then x = x + self.dropout2(self.feed_forward(self.norm2(x))): "
    "only the sub-layer's input is normalised, never x itself.",
])
register_hints("Encoder", [
    "What does the second layer read: the encoder's input or the first layer's output? Which layers need "
    "the mask? And what does a pre-norm layer leave un-normalised at the very end of the stack?",
    "Build a new EncoderLayer for each position and keep them in an nn.ModuleList (a plain "
    "list hides their parameters from PyTorch; [layer] * n shares one layer's weights).",
    "Pre-norm layers never normalise the residual stream, so with norm_first=True add a final "
    "LayerNorm, self.norm, after the last layer; with norm_first=False there is none.",
])
