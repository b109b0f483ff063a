"""Checkers for notebook 04 (the encoder): ``LayerNorm``, ``FeedForward``, ``EncoderLayer``, ``Encoder``.

Each checker builds the student's class itself with sizes that all differ (``B != L != D``, ``d_ff != D``,
``H != d_k``), in eval mode, for both ``norm_first`` settings, with random parameters (a fresh LayerNorm's ones
and zeros would hide a missing scale and shift) copied by name into the reference; inputs go through with and
without padding masks ``(B, 1, L)``. A wrong output is compared with the reference computed with each catalogued
mistake (for layers and stacks the generated families of :mod:`._blocks`); the first match is named. Sub-modules
of the student's own classes are first compared with the reference on their own, so that a bug there is not
blamed on the layer. Layers and stacks are compared with ``atol=1e-4`` (several sub-layers of float32 rounding);
every catalogued mistake differs by far more.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..encoder import Encoder, EncoderLayer
from ..layers import FeedForward, LayerNorm
from ..multihead import MultiHeadAttention
from ._blocks import (
    P_PROBE,
    P_RATE,
    Block,
    Constant,
    FirstFeatures,
    Stack,
    attention_error,
    build_stack,
    check_dropout,
    check_dropout_modes,
    check_dropout_rate,
    check_stack_dropout,
    course_parts,
    layer_dropout,
    layer_stage,
    once,
    reference,
    remembered,
    run_block,
    run_stack,
    stack_mistakes,
    structural_mistakes,
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
    fail,
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


_LN_MISTAKES: tuple[tuple[str, str, dict[str, Any]], ...] = (  # (name, diagnosis, changes to _ln's arguments)
    ("unbiased variance", "you used the unbiased variance (dividing by D - 1, the default of torch.var and torch.std). "
     "Layer norm uses the biased one, the plain mean of the squared deviations: x.var(dim=-1, unbiased=False), or "
     "((x - mean) ** 2).mean(-1).", dict(correction=1)),
    ("unbiased variance", "you divided by x.std(...) + eps: torch.std is unbiased (divides by D - 1) and eps belongs "
     "inside the square root. Use (x - mean) / torch.sqrt(var + eps) with var = x.var(dim=-1, unbiased=False).",
     dict(correction=1, eps_outside=True)),
    ("eps outside the square root", "eps is added after the square root, sqrt(var) + eps; it goes inside: "
     "sqrt(var + eps). The difference shows on rows with a tiny variance.", dict(eps_outside=True)),
    ("no learnable scale and shift", "the output is normalised but never scaled and shifted: multiply by self.weight "
     "and add self.bias at the end (they start at ones and zeros, so a fresh layer hides this; the check uses random "
     "values).", dict(w=None, b=None)),
    ("no learnable scale and shift", "the output is scaled by self.weight but self.bias is never added.", dict(b=None)),
    ("no learnable scale and shift", "self.bias is added but the output is never multiplied by self.weight.",
     dict(w=None)),
    ("weight and bias swapped", "weight and bias are swapped: multiply by self.weight (the scale) and add self.bias "
     "(the shift), y = x_hat * weight + bias.", dict(swap=True)),
    ("mean not subtracted", "the mean is never subtracted: normalise x - mean, not x.", dict(center=False)),
    ("mean not subtracted", "you divided by the root mean square of x without subtracting the mean (that is RMSNorm, "
     "a later variant); layer norm centres first: (x - mean) / sqrt(var + eps).", dict(center=False, rms=True)),
    *(("wrong axis", f"the mean and variance were taken over {where}; layer norm normalises each position's own D "
       "features: dim=-1, keepdim=True.", dict(dims=dims))
      for dims, where in (((0,), "the batch axis (0)"), ((1,), "the position axis (1, or -2)"),
                          ((0, 1), "the batch and position axes"), ((1, 2), "a whole sequence (axes 1 and 2)"),
                          ((0, 1, 2), "the whole tensor"))),
    # before the other eps values: a code without eps matches 1e-12 as well, and "seems to be 1e-12" misleads
    ("eps ignored", "eps has no effect: your code adds no eps (or a negligible one) to the variance. It keeps the "
     "division finite on rows of equal values: (x - mean) / torch.sqrt(var + self.eps), with self.eps = eps stored "
     "in __init__ (default 1e-5).", dict(eps=0.0)),
)


def _ln_mistakes(x: Tensor, w: Tensor, b: Tensor, eps: float, default: bool) -> list[Mistake]:
    out: list[Mistake] = [(name, text, lambda kw=kw: _ln(x, **{"w": w, "b": b, "eps": eps, **kw}))
                          for name, text, kw in _LN_MISTAKES]
    for other in (o for o in (1e-6, 1e-8, 1e-3, 1e-5) if o != eps):
        text = (f"your default eps seems to be {other:g}; the exercise (and nn.LayerNorm) uses eps=1e-5: "
                "def __init__(self, d_model, eps=1e-5)." if default else f"LayerNorm(d_model, eps={eps:.3g}) behaves "
                f"as if eps were {other:g}: store the eps argument (self.eps = eps) and use it in forward.")
        out.append(("wrong default eps" if default else "eps ignored", text, lambda other=other: _ln(x, w, b, other)))
    return out


def _ln_inputs(B: int, L: int, D: int) -> Tensor:
    """``(B, L, D)`` rows with very different scales and offsets, including rows whose
    variance is about eps=1e-5 (there eps inside or outside the root differs)."""
    scale = torch.exp(torch.empty(B, L, 1).uniform_(math.log(1e-3), math.log(3.0)))  # (B, L, 1)
    scale[0, 0], scale[-1, -1] = 2e-3, 5e-3
    offset = 2 * torch.randn(B, L, 1)  # (B, L, 1): the mean matters
    return scale * (torch.randn(B, L, D) + offset)  # (B, L, D)


def _ln_params(model: nn.Module, D: int) -> tuple[nn.Parameter, nn.Parameter]:
    registered = dict(model.named_parameters())
    found = {}
    missing = []
    for n in ("weight", "bias"):
        attr = getattr(model, n, None)
        if isinstance(attr, nn.Parameter) and n in registered:
            found[n] = attr
        elif isinstance(attr, Tensor):
            fail(f"`{n}` is a plain tensor, not an nn.Parameter, so it would never be trained: "
                 f"self.{n} = nn.Parameter(torch.{'ones' if n == 'weight' else 'zeros'}(d_model)).",
                 mistake="not a parameter")
        else:
            missing.append(n)
    if missing and not registered:
        fail("your LayerNorm has no learnable parameters: after normalising, the layer scales "
             "and shifts each feature with self.weight = nn.Parameter(torch.ones(d_model)) and "
             "self.bias = nn.Parameter(torch.zeros(d_model)).", mistake="no learnable scale and shift")
    if missing:
        fail(f"LayerNorm needs two learnable parameters named weight and bias (as nn.LayerNorm); "
             f"missing: {', '.join(missing)}. Yours are called {_names(list(registered))}.",
             mistake="missing parameter")
    for n, p in found.items():
        if tuple(p.shape) != (D,):
            fail(f"`{n}` has shape {describe_shape(p)}, expected (d_model,) = ({D},): one value per feature.",
                 mistake="wrong parameter shape")
    if not (bool((found["weight"] == 1).all()) and bool((found["bias"] == 0).all())):
        fail("a fresh LayerNorm should start with weight = ones and bias = zeros (so at first it "
             "only normalises): torch.ones(d_model) and torch.zeros(d_model).", mistake="wrong initial values")
    return found["weight"], found["bias"]


def _ln_case(model: nn.Module, w: Tensor, b: Tensor, eps: float, x: Tensor, case: str, default: bool) -> None:
    x0 = x.clone()
    got = _forward(model, (x,), case)
    check_unchanged(["x"], [x], [x0], case)
    w0, b0 = w.detach().clone(), b.detach().clone()
    expected = _ln(x0, w0, b0, eps)  # (B, L, D)
    expect_close("output", got, expected, _ln_mistakes(x0, w0, b0, eps, default), case=case)


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
            line = student_line(err.exc)
            fail(f"your LayerNorm works on 3-D input but raised {type(err.exc).__name__} on x of shape "
                 f"{describe_shape(x)}: {str(err.exc).strip().splitlines()[0] if str(err.exc).strip() else ''}"
                 + (f"\n    at {line}" if line else "")
                 + "\n    The input is (..., d_model): use dim=-1 (not a fixed axis such as 2) and keepdim=True.",
                 mistake="fixed axis")
        w0, b0 = w.detach().clone(), b.detach().clone()
        fixed = [("fixed axis", "normalised over a fixed axis instead of the last one: use dim=-1, keepdim=True.",
                  lambda k=k: _ln(x, w0, b0, 1e-5, dims=(k,))) for k in range(x.dim() - 1)]  # fmt: skip
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
    if matches(_forward(model, (x - 3000.0,), case), _ln(x - 3000.0, w0, b0, 1e-5), atol=1e-3, rtol=1e-3):
        fail(f"output ({case}) is far off although the same rows shifted to mean 0 are right: the variance "
             "loses its precision when the mean is large. E[x^2] - E[x]^2 subtracts two nearly equal big "
             "numbers (about 9e6 here, where float32 steps by 1). Subtract the mean first: "
             "((x - mean) ** 2).mean(-1, keepdim=True), or x.var(-1, unbiased=False, keepdim=True).",
             mistake="unstable variance")
    expect_close("output", got, expected, case=case, atol=2e-2, rtol=1e-2)


@checker("LayerNorm")
def check_layer_norm(cls: Any) -> str:
    require_module_class(cls, "LayerNorm")
    B, L, D, _H, _d_k, _d_ff = _dims()
    model = call_student(cls, D, context=f"constructing LayerNorm(d_model={D})")
    if not isinstance(model, nn.Module):
        fail("LayerNorm should subclass nn.Module.", mistake="not a class")
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
    missing = [n for n, m in found.items() if not isinstance(m, nn.Module)]
    if missing:
        children = [n for n, _ in model.named_children()]
        fail("FeedForward needs two submodules, linear1 = nn.Linear(d_model, d_ff) and linear2 = "
             f"nn.Linear(d_ff, d_model); missing: {', '.join(missing)}"
             + (f" (yours: {_names(children)})" if children else "")
             + ". An nn.Sequential is fine as long as the two layers are also self.linear1 and self.linear2.",
             mistake="missing submodule")
    for n, (i, o) in (("linear1", (D, d_ff)), ("linear2", (d_ff, D))):
        m = found[n]
        if not isinstance(m, nn.Linear):
            fail(f"`{n}` should be an nn.Linear, got {type(m).__name__}.", mistake="wrong submodule")
        if isinstance(m, nn.modules.lazy.LazyModuleMixin):
            fail(f"`{n}` is an nn.LazyLinear: its input size stays unknown (in_features=0) until the first "
                 f"call, so its weights cannot be set or counted before that. Give the sizes: nn.Linear({i}, {o}) "
                 f"here, nn.Linear({'d_model, d_ff' if n == 'linear1' else 'd_ff, d_model'}).",
                 mistake="wrong submodule")
        if (m.in_features, m.out_features) != (i, o):
            fail(f"`{n}` should be nn.Linear({'d_model, d_ff' if n == 'linear1' else 'd_ff, d_model'}) = "
                 f"nn.Linear({i}, {o}), got nn.Linear({m.in_features}, {m.out_features}): the network "
                 "widens D to d_ff, then narrows back to D.", mistake="wrong submodule")
        if m.bias is None:
            fail(f"`{n}` has no bias: keep nn.Linear's default bias=True.", mistake="wrong submodule")
    return found["linear1"], found["linear2"]  # type: ignore[return-value]


def _ff_mistakes(x: Tensor, l1: nn.Linear, l2: nn.Linear, norms: tuple[nn.Module, ...] = ()) -> list[Mistake]:
    """``norms``: the student's own norm modules, tried inside the feed-forward (with their
    random parameters) besides a plain layer norm."""
    h = l1(x)  # (B, L, d_ff)
    out: list[Mistake] = [
        ("activation missing", "there is no activation between the two linear layers, so together they are just one "
         "linear map: apply ReLU to linear1's output, linear2(relu(linear1(x))).", lambda: l2(h)),
        ("activation after the second linear layer", "ReLU is applied after linear2 instead of between the layers: "
         "linear2(relu(linear1(x))), with nothing after linear2.", lambda: F.relu(l2(h))),
        ("activation after the second linear layer", "ReLU is applied between the layers (right) and again after "
         "linear2 (wrong): the output must be able to go negative, return linear2(relu(linear1(x))).",
         lambda: F.relu(l2(F.relu(h)))),
    ]
    ff = l2(F.relu(h))  # (B, L, D): the right output
    inside = ("the layer around it (EncoderLayer) adds the residual and normalises; FeedForward returns only "
              "linear2(relu(linear1(x))).")
    out.append(("residual inside the feed-forward", f"the feed-forward adds its input back, x + ...: {inside}",
                lambda: x + ff))
    for norm in (*norms, functools.partial(F.layer_norm, normalized_shape=(x.size(-1),))):
        out += [
            ("norm inside the feed-forward", f"the feed-forward normalises its output: {inside}", lambda n=norm: n(ff)),
            ("norm inside the feed-forward", f"the feed-forward normalises its input: {inside}",
             lambda n=norm: l2(F.relu(l1(n(x))))),
            ("norm inside the feed-forward", "the feed-forward computes norm(x + ...), a whole residual sub-layer: "
             f"{inside}", lambda n=norm: n(x + ff)),
        ]
    return out + [("wrong activation", f"you used {name} between the layers; the paper (and this course) uses ReLU, "
                   "max(0, x): torch.relu or nn.ReLU().", lambda act=act: l2(act(h))) for name, act in _ACTIVATIONS]


@checker("FeedForward")
def check_feed_forward(cls: Any) -> str:
    require_module_class(cls, "FeedForward")
    B, L, D, _H, _d_k, d_ff = _dims()
    what = f"FeedForward(d_model={D}, d_ff={d_ff}"
    model = call_student(cls, D, d_ff, 0.0, context=f"constructing {what}, dropout=0.0)")
    if not isinstance(model, nn.Module):
        fail("FeedForward should subclass nn.Module.", mistake="not a class")
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
            mistakes = _ff_mistakes(x0, ref.linear1, ref.linear2, norms)
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
    where = "it belongs on the hidden activations, linear2(dropout(relu(linear1(x))))"
    check_dropout_modes(
        model, ref, lambda m: _forward(m, (x.clone(),), "dropout"), "FeedForward",
        lambda: [
            ("dropout missing", "no dropout is applied to the hidden activations in training mode: create "
             "nn.Dropout(dropout) in __init__ and apply it to relu(linear1(x)) before linear2.", no_drop),
            ("dropout in the wrong place", f"dropout acts on the output of linear2 (instead of, or besides, the "
             f"hidden activations); {where}, and only there (the encoder layer adds its own dropout on the "
             "output).", zero),
            ("dropout in the wrong place", f"dropout is applied to the input x; {where}.", on_input),
        ],
    )  # fmt: skip
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


def _block_mistakes(ref: nn.Module, x: Tensor, mask: Tensor | None, norm_first: bool) -> list[Mistake]:
    """What ``ref`` (with the student's parameters) returns with each generated mistake."""
    return remembered([
        (name, text, lambda mut=mut: run_block(ref, _BLOCK, x, None, {"mask": mask}, norm_first, mut))
        for name, text, mut in structural_mistakes(_BLOCK, norm_first, set() if mask is None else {"mask"})
    ], "EncoderLayer", ref, x, mask, norm_first)


def _build_layer(cls: Any, D: int, H: int, d_ff: int, p: float, norm_first: bool, roles: bool = True) -> nn.Module:
    args = f"d_model={D}, num_heads={H}, d_ff={d_ff}, dropout={p}, norm_first={norm_first}"
    model = call_student(cls, D, H, d_ff, dropout=p, norm_first=norm_first, context=f"constructing EncoderLayer({args})")  # noqa: E501
    if not isinstance(model, nn.Module):
        fail("EncoderLayer should subclass nn.Module.", mistake="not a class")
    course_parts(model, "EncoderLayer")
    missing = [n for n in _LAYER_WORDS if not isinstance(getattr(model, n, None), nn.Module)]
    if missing:
        children = [n for n, _ in model.named_children()]
        fail(f"EncoderLayer needs the submodules {', '.join(_LAYER_WORDS)} (the check copies parameters by these "
             f"names); missing: {', '.join(missing)}" + (f". Yours: {_names(children)}." if children else "."),
             mistake="missing submodule")
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
    heads = getattr(model.self_attn, "num_heads", None)
    if isinstance(heads, int) and heads != H:
        fail(f"your EncoderLayer's self_attn has num_heads={heads}, but the layer was built with num_heads={H}: pass "
             "num_heads on, MultiHeadAttention(d_model, num_heads, dropout).", mistake="wrong submodule")
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
                  lambda m, x, _, masks: _forward(m, (x.clone(), masks["mask"]), "dropout", attention=True), norm_first)


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


def _stack_mistakes(model: nn.Module, ref: nn.Module, x: Tensor, mask: Tensor | None, norm_first: bool) -> list[Mistake]:  # noqa: E501
    own = getattr(model, "norm", None)
    return [(name, text, lambda mut=mut: run_stack(ref, x, None, {"mask": mask}, mut))
            for name, text, mut in stack_mistakes(_STACK, norm_first, set() if mask is None else {"mask"}, own,
                                                  x.size(-1), False)]


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
    check_stack_dropout(model, ref, _STACK, lambda m, h: _forward(m, (h, mask), "dropout", attention=True), x)
    return "2-3 layers, post-norm and pre-norm, with and without padding masks, random weights, dropout"


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
