"""Checkers for notebook 02 (multi-head attention): ``split_heads``, ``merge_heads``,
``MultiHeadAttention``.

The student's code runs on fresh random inputs whose sizes all differ (``B``, ``H``, ``d_k``,
``L_q``, ``L_k``, ``D = H * d_k``), so a mixed-up axis shows as a wrong shape or wrong values.
A wrong result is compared with the reference computed with each catalogued mistake (split
without transpose, swapped projections or inputs, wrong scaling, mask handling, dropout in
the wrong place, ...); the first match is named in ``CheckResult.mistake``. The robustness
cases of ``scaled_dot_product_attention`` run here too, in its words.

Each exercise's mistakes are one table (:mod:`.catalogue`): ``SPLIT``, ``MERGE``, ``MHA``, in the
order the check tries them; ``MISTAKES`` lists their names.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..multihead import MultiHeadAttention, merge_heads, split_heads
from ._core import (
    Mistake,
    StudentError,
    allclose,
    call_student,
    check_dtype_follows,
    check_module_device,
    check_state_unchanged,
    check_unchanged,
    checker,
    describe_shape,
    dropout_pattern,
    expect_close,
    fail_eval_dropout,
    fail_fixed_p,
    fail_view_error,
    gradient_probe,
    matches,
    module_state,
    raised,
    randint,
    random_mask,
    register_hints,
    require_distinct_roles,
    require_module_class,
    student_line,
)
from ._pairing import build_student
from .attention import (
    SDPA,
    VERY_NEGATIVE_NOTE,
    require_tuple,
    robustness_diagnosis,
    sqrt_of_number,
    very_negative_inputs,
)
from .catalogue import DEVICE_PROBE, DTYPE_PROBE, GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Raises, Reference

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head_attention"]


# ---------------------------------------------------------------- shared helpers
def _head_dims() -> tuple[int, int, int, int, int]:
    """``B, H, d_k, L_q, L_k`` all different from each other and from ``D = H * d_k``."""
    while True:
        B, H, d_k, L_q, L_k = randint(2, 4), randint(2, 4), randint(3, 7), randint(4, 9), randint(4, 9)
        if len({B, H, d_k, L_q, L_k, H * d_k}) == 6:
            return B, H, d_k, L_q, L_k


def _call_heads(fn: Callable[..., Any], name: str, x: Tensor, *args: Any, case: str) -> tuple[Any, Tensor]:
    """``fn(x, *args)`` with the view error named and ``x`` checked unchanged; returns the result
    and a pristine copy of ``x``."""
    x0 = x.clone()
    try:
        got = call_student(fn, x, *args, context=f"calling {name}({case})")
    except StudentError as err:
        fail_view_error(err.exc, "x.transpose(1, 2) reorders the axes without moving the entries in memory",
                        ".reshape(...) (or .contiguous().view(...))")
        raise
    check_unchanged(["x"], [x], [x0], case)
    return got, x0


def _expect_value_error(make: Callable[[int, int], Any], call: str, width: str) -> None:
    """``make(D, H)`` with ``D % H != 0`` must raise a ValueError (the exercise asks for one)."""
    H = randint(3, 5)
    D = H * randint(2, 4) + randint(1, H - 1)  # not a multiple of H
    call = call.format(D=D, H=H)
    fields = dict(call=call, width=width, D=D, H=H)
    try:
        make(D, H)
    except ValueError as exc:
        SPLIT.detect("divisible", SimpleNamespace(exc=exc, D=D, H=H), **fields, said=repr(str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - the student's exception, reported as a diagnosis
        SPLIT.detect_raised(exc, "divisible", **fields, raised=raised(exc, inline=True))
    SPLIT.detect("divisible", SimpleNamespace(exc=None, D=D, H=H), **fields)


def _check_dtype_kept(fn: Callable[..., Any], name: str, x: Tensor, *args: Any) -> None:
    """Splitting and merging only move entries: a float64 input gives a float64 result."""
    case = f"x of shape {describe_shape(x)} in torch.float64"
    got, _ = _call_heads(fn, name, x, *args, case=case)
    SPLIT.detect("dtype", SimpleNamespace(got=got, x=x), name=name, case=case)



# ---------------------------------------------------------------- split_heads
_AXES = ("B", "L", "H", "d_k")


def _one(make: Callable[[Any], Any]) -> Reference:
    """One candidate, ``make(case)``, computed only when the student's result is wrong."""
    return Reference(lambda c: [({}, lambda: make(c))])


def _split_permutations(c: Any) -> list:
    return [(dict(order=", ".join(_AXES[i] for i in perm)), lambda perm=perm: c.blocks.permute(perm))
            for perm in itertools.permutations(range(4)) if perm not in ((0, 1, 2, 3), (0, 2, 1, 3))]


def _names_both(v: Any) -> bool:
    return all(re.search(rf"(?<!\d){n}(?!\d)", str(v.exc)) for n in (v.D, v.H))


# D % num_heads != 0 must raise a ValueError naming both (split_heads and MultiHeadAttention)
_DIVISIBLE = [
    Entry("error message without values",
          "a ValueError whose message leaves out the values the exercise asks it to name",
          Output(lambda v: v.exc is not None and not _names_both(v), "divisible"),
          "{call} raised ValueError({said}): the exercise asks for a message that names both sizes, {width} = {D} and "
          "num_heads = {H}, e.g. f\"{width} = {{{width}}} is not divisible by num_heads = {{num_heads}}\", so the "
          "caller sees what to change."),
    Entry("wrong error type", "an argument rule raises another exception than the ValueError asked for",
          Raises("", stage="divisible"),  # any exception but a ValueError
          "{call} raised {raised}; the exercise asks for a ValueError: check {width} % num_heads first and raise "
          "ValueError(...) with a message that names {width} and num_heads."),
    Entry("no divisibility check", "no ValueError when d_model is not divisible by num_heads",
          Output(lambda v: v.exc is None, "divisible"),
          "{call} did not raise: {D} features cannot be split into {H} equal heads. Check {width} % num_heads != 0 "
          "first and raise a ValueError that names {width} and num_heads."),
]

SPLIT = Catalogue("split_heads", "02", [
    Entry("view on a non-contiguous tensor", None, Probe("fail_view_error")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("view(B, H, L, d_k) without transpose",
          "heads split by a view to (B, H, L, d_k), mixing positions and features",
          _one(lambda c: c.x0.reshape(c.B, c.H, c.L, c.d_k)),
          "the shape is right but the heads got blocks of positions instead of slices of features: .view(B, H, L, d_k) "
          "straight from (B, L, D) does not move any feature. View as (B, L, H, d_k) first, then swap the L and H "
          "axes."),
    Entry("returns (B, L, H, d_k)", "split_heads forgets the transpose to (B, H, L, d_k)",
          Reference(lambda c: [(dict(shape=describe_shape(c.blocks)), c.blocks)]),
          "you returned shape (B, L, H, d_k) = {shape}: the features are split correctly but the head axis must come "
          "before the positions, (B, H, L, d_k). Swap axes 1 and 2."),
    Entry("heads take strided features", "each head takes every H-th feature instead of a contiguous slice",
          _one(lambda c: c.x0.view(c.B, c.L, c.d_k, c.H).permute(0, 3, 1, 2)),
          "head h got every H-th feature (h, h + H, h + 2H, ...) instead of the contiguous slice h*d_k .. (h+1)*d_k - "
          "1: split the last axis as (num_heads, d_k), not (d_k, num_heads)."),
    Entry("heads in reverse order", "head h gets the features of head H - 1 - h (the heads' order reversed)",
          _one(lambda c: c.blocks.transpose(1, 2).flip(1)),
          "the heads come out in reverse order: head h holds features (H-1-h)*d_k .. (H-h)*d_k - 1. Head h is features "
          "h*d_k .. (h+1)*d_k - 1, head 0 first: leave out the flip of the head axis (.flip(1), [::-1], "
          "reversed(...))."),
    Entry("transposed wrong axes", "the wrong axes are transposed", Reference(_split_permutations),
          "the features are split correctly but the axes end up in the order ({order}): after .view(B, L, H, d_k) swap "
          "only axes 1 and 2 (L and H) to get (B, H, L, d_k)."),
    *GRADIENT_PROBE,
    Entry("dtype not preserved", None,
          Output(lambda v: isinstance(v.got, Tensor) and v.got.dtype != v.x.dtype and dict(dtype=v.got.dtype), "dtype"),
          "{name}({case}) returns {dtype}: the heads only move entries, so the result keeps x's dtype (float16 and "
          "bfloat16 models call it too). Leave out the cast (.float()), or build new tensors with dtype=x.dtype; view, "
          "reshape and transpose keep the dtype."),
    *_DIVISIBLE,
])


@checker("split_heads")
def check_split_heads(fn: Callable[..., Any]) -> str:
    for _ in range(3):
        B, H, d_k, L, _L_k = _head_dims()
        D = H * d_k
        case = f"x of shape ({B}, {L}, {D}), num_heads={H}"
        got, x0 = _call_heads(fn, "split_heads", torch.randn(B, L, D), H, case=case)
        c = SimpleNamespace(x0=x0, B=B, L=L, H=H, d_k=d_k, blocks=x0.view(B, L, H, d_k))  # blocks (B, L, H, d_k)
        mistakes = SPLIT.candidates(c)
        expect_close("split_heads(x, num_heads)", got, split_heads(x0, H), mistakes, case=case)
    gradient_probe(fn, split_heads, dict(x=x0, num_heads=H), what="split_heads", case=case)
    _check_dtype_kept(fn, "split_heads", torch.randn(B, L, D, dtype=torch.float64), H)
    _expect_value_error(lambda D, H: fn(torch.randn(2, 3, D), H), "split_heads(x of shape (2, 3, {D}), {H})", "D")
    return "3 random shapes, compared value by value"  # the [OK] line stored in notebook 02


# ---------------------------------------------------------------- merge_heads
_MERGE_AXES = ("B", "H", "L", "d_k")


def _joined_along(c: Any) -> list:
    """torch.cat(x.unbind(axis), dim=-1) for the axes but the heads' (that one is right)."""
    B, H, L, d_k = c.B, c.H, c.L, c.d_k
    return [(dict(pieces=pieces, shape=shape, axis=axis), lambda axis=axis: torch.cat(c.x0.unbind(axis), dim=-1))
            for axis, pieces, shape in ((0, "batch items", f"(H, L, B * d_k) = ({H}, {L}, {B * d_k})"),
                                        (2, "positions", f"(B, H, L * d_k) = ({B}, {H}, {L * d_k})"),
                                        (-1, "single features", f"(B, H, d_k * L) = ({B}, {H}, {d_k * L})"))]


def _merge_permutations(c: Any) -> list:
    """x.transpose(2, 3) and the other permutes, then flattened (after the named orders)."""
    return [(dict(order=", ".join(_MERGE_AXES[i] for i in perm)),
             lambda perm=perm: c.x0.permute(perm).reshape(c.B, c.L, c.D))
            for perm in itertools.permutations(range(4)) if perm not in ((0, 1, 2, 3), (0, 2, 1, 3), (0, 2, 3, 1))]


MERGE = Catalogue("merge_heads", "02", [
    Entry("view on a non-contiguous tensor", None, Probe("fail_view_error")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("reshape without transpose", "heads split or merged by reshape alone, mixing positions and features",
          _one(lambda c: c.x0.reshape(c.B, c.L, c.D)),
          "the shape is right but positions and heads got mixed: a .view/.reshape(B, L, D) straight from (B, H, L, "
          "d_k) does not move the head axis. Swap axes 1 and 2 to get (B, L, H, d_k) first, then flatten the last two "
          "axes."),
    Entry("heads not flattened", "merge_heads returns (B, L, H, d_k) unflattened", _one(lambda c: c.x0.transpose(1, 2)),
          "you returned shape (B, L, H, d_k) = ({B}, {L}, {H}, {d_k}): the transpose is right, now flatten the last "
          "two axes into H * d_k."),
    Entry("features in wrong order", "merged features are in another order than the heads'",
          _one(lambda c: c.x0.permute(0, 2, 3, 1).reshape(c.B, c.L, c.D)),
          "the features come out ordered feature-major (feature j of every head, then j+1, ...) instead of "
          "head-major: head h's features belong at columns h*d_k .. (h+1)*d_k - 1. Transpose to (B, L, H, d_k), not "
          "(B, L, d_k, H), before flattening."),
    Entry("batch and positions swapped", "merge_heads mixes the batch and position axes (shows only when B == L)",
          _one(lambda c: c.x0.transpose(0, 2).reshape(c.B, c.L, c.D) if c.B == c.L else None),
          "with B == L = {L} the batch and position axes get mixed up: axis 0 (the batch) was swapped with axis 2 (the "
          "positions), x.transpose(0, 2). Swap axes 1 and 2 (heads and positions), whatever the sizes."),
    Entry("wrong axis", None, Reference(_joined_along),  # torch.cat(x.unbind(1), dim=-1) is right
          "your result has shape {shape}: it joins the {pieces} along the last axis (as torch.cat(x.unbind({axis}), "
          "dim=-1) does), not the heads. Unbind the head axis: torch.cat(x.unbind(1), dim=-1) joins the H (B, L, d_k) "
          "heads into (B, L, H * d_k), head h at columns h*d_k .. (h+1)*d_k - 1."),
    Entry("heads in reverse order", None, _one(lambda c: c.x0.flip(1).transpose(1, 2).reshape(c.B, c.L, c.D)),
          "the heads come out in reverse order: columns h*d_k .. (h+1)*d_k - 1 hold head H - 1 - h. Head h is features "
          "h*d_k .. (h+1)*d_k - 1, head 0 first: leave out the flip of the head axis (.flip(1), [::-1], "
          "reversed(...))."),
    Entry("transposed wrong axes", None, Reference(_merge_permutations),
          "the axes were put in the order ({order}) before flattening (as x.transpose(2, 3) or a permute does): swap "
          "only axes 1 and 2 (heads and positions) to get (B, L, H, d_k), then flatten the last two axes."),
    *GRADIENT_PROBE,
    SPLIT["dtype not preserved"],
])


@checker("merge_heads")
def check_merge_heads(fn: Callable[..., Any]) -> str:
    for i in range(3):
        B, H, d_k, L, _L_k = _head_dims()
        if i == 2:
            L = B  # batch and positions of one size: code that mixes up axes 0 and 2 keeps the right shape
        D = H * d_k
        # i > 0: what merge_heads receives in MultiHeadAttention, a transposed, non-contiguous view
        x = torch.randn(B, H, L, d_k) if i == 0 else split_heads(torch.randn(B, L, D), H)  # (B, H, L, d_k)
        kind = "a contiguous tensor" if i == 0 else "the output of split_heads"
        case = f"x of shape ({B}, {H}, {L}, {d_k}), {kind}"
        got, x0 = _call_heads(fn, "merge_heads", x, case=case)
        mistakes = MERGE.candidates(SimpleNamespace(x0=x0, B=B, L=L, H=H, d_k=d_k, D=D), B=B, L=L, H=H, d_k=d_k)
        expect_close("merge_heads(x)", got, merge_heads(x0), mistakes, case=case)
    gradient_probe(fn, merge_heads, dict(x=x0), what="merge_heads", case=case)
    _check_dtype_kept(fn, "merge_heads", torch.randn(B, H, L, d_k, dtype=torch.float64))
    return "3 random shapes, contiguous and transposed inputs"


# ---------------------------------------------------------------- MultiHeadAttention
_PROJ = ("w_q", "w_k", "w_v")
_INPUTS = ("query", "key", "value")


def _mha_variant(lin: dict[str, tuple[Tensor, Tensor]], query: Tensor, key: Tensor, value: Tensor,
                 mask: Tensor | None, H: int, *, proj: tuple[int, int, int] = (0, 1, 2),
                 inputs: tuple[int, int, int] = (0, 1, 2), split_transpose: bool = True, merge_transpose: bool = True,
                 scale: str = "sqrt(d_k)", mask_mode: str = "ok", use_w_o: bool = True,
                 flip_heads: bool = False) -> tuple[Tensor, Tensor] | None:
    """Multi-head attention with (at most) one deliberate mistake (``proj``, ``inputs``: which
    projection and input each role takes); ``None`` if it cannot run on these shapes."""
    try:
        src = (query, key, value)
        B, D = query.size(0), query.size(-1)
        d_k = D // H
        projected = [F.linear(src[i], *lin[_PROJ[j]]) for i, j in zip(inputs, proj)]  # each (B, L, D)

        def split(t: Tensor) -> Tensor:  # (B, H, L, d_k); without the transpose, heads = blocks of positions
            L = t.size(1)
            return t.view(B, L, H, d_k).transpose(1, 2) if split_transpose else t.reshape(B, H, L, d_k)

        q, k, v = (split(t) for t in projected)
        factor = {"sqrt(d_k)": math.sqrt(d_k), "none": 1.0, "sqrt(d_model)": math.sqrt(D), "d_k": float(d_k)}[scale]
        scores = q @ k.transpose(-2, -1) / factor  # (B, H, L_q, L_k)
        if mask is not None and mask_mode != "ignored":
            m = ~mask if mask_mode == "inverted" else mask
            if m.dim() == 3 and mask_mode == "axis after the queries":
                m = m.unsqueeze(2)  # (B, L_q, 1, L_k): lines up with the heads only when L_q == H
            elif m.dim() == 3 and mask_mode != "no head axis":
                m = m.unsqueeze(1)  # (B, 1, L_q or 1, L_k)
            scores = scores.masked_fill(~m, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)  # (B, H, L_q, L_k)
        context = weights @ v  # (B, H, L_q, d_k)
        context = context.flip(1) if flip_heads else context  # the heads in reverse order before w_o
        # (B, L_q, D); without the transpose, the inverse of the bad split
        merged = (context.transpose(1, 2) if merge_transpose else context).reshape(B, context.size(2), D)
        output = F.linear(merged, *lin["w_o"]) if use_w_o else merged
        return output, weights
    except RuntimeError:
        return None


def _mha(**settings: Any) -> Reference:
    """The reference module run on the case with these settings of :func:`_mha_variant`."""
    return Reference(lambda c: [({}, c.variant(**settings))])


def _mha_masked(**settings: Any) -> Reference:
    return Reference(lambda c: [({}, c.variant(**settings))] if c.mask is not None else [])


def _mask_no_head_axis(c: Any) -> list:
    if c.mask is None or c.mask.dim() != 3:
        return []
    return [(dict(mask=describe_shape(c.mask), with_head=_with_head_axis(c.mask)), c.variant(mask_mode="no head axis"))]


_SWAPS = [  # (keyword of _mha_variant, names, roles, verb, mistake, words after the list)
    ("proj", _PROJ, ("query", "key", "value"), "goes through", "projections swapped", "."),
    ("inputs", tuple(f"`{n}`" for n in _INPUTS), ("queries", "keys", "values"), "are computed from",
     "inputs swapped", " (queries come from `query`, keys from `key`, values from `value`)."),
]


def _swapped(keyword: str) -> Reference:
    """Every assignment of the projections (or the inputs) to the three roles but the right one
    (the inputs only when query, key and value differ)."""
    _, names, roles, verb, _, tail = next(swap for swap in _SWAPS if swap[0] == keyword)

    def build(c: Any) -> list:
        if keyword == "inputs" and not c.distinct_inputs:
            return []
        out = []
        for chosen in itertools.product(range(3), repeat=3):
            swaps = [f"the {roles[i]} {verb} {names[ch]} instead of {names[i]}"
                     for i, ch in enumerate(chosen) if ch != i]
            if swaps:
                out.append((dict(swaps="; ".join(swaps) + tail), c.variant(**{keyword: chosen})))
        return out

    return Reference(build)


_SPLIT_WORDS = ("the heads were split with .view(B, H, L, d_k) and no transpose, so each head got a block of positions "
                "instead of a slice of features. View as (B, L, H, d_k), then transpose(1, 2) (your split_heads from "
                "above does this).")


def _wrong_return(r: Any) -> dict[str, str] | None:
    """forward's result must be the tuple (output, weights), as scaled_dot_product_attention's."""
    result = r.result
    if isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(t, Tensor) for t in result):
        return None
    if isinstance(result, Tensor):
        return dict(got=f"a single tensor of shape {describe_shape(result)}")
    if isinstance(result, (tuple, list)):
        return dict(got=f"a {type(result).__name__} of {len(result)} items")
    return dict(got=type(result).__name__)


def _pure_dropout(r: Any) -> bool:
    """The output is the reference's after dropout: on the output (after w_o) or the merged heads."""
    return bool(dropout_pattern(r.out, r.ref_out, r.p) or dropout_pattern(r.merged, r.ref_merged, r.p, atol=1e-4))


MHA = Catalogue("MultiHeadAttention", "02", [
    Entry("not a class", None, Probe("require_module_class")),
    Entry("missing output projection", "the output projection (w_o, or the model's last Linear) is not applied",
          Output(lambda f: f.missing == ["w_o"], "projections"),
          "there is no output projection `w_o`: after merging the heads, mix them with self.w_o = nn.Linear(d_model, "
          "d_model)."),
    Entry("missing submodule", "a contract submodule (or its parameters) is absent or named differently",
          Output(lambda f: bool(f.missing) and dict(missing=", ".join(f.missing)), "projections"),
          "MultiHeadAttention needs four submodules w_q, w_k, w_v, w_o, each nn.Linear(d_model, d_model); missing: "
          "{missing}."),
    Entry("wrong submodule", "a submodule is built wrongly (type, size, heads) or computes something else",
          Output(lambda m: not isinstance(m.m, nn.Linear) and dict(type=type(m.m).__name__), "projection"),
          "`{n}` should be nn.Linear(d_model, d_model), got {type}."),
    Entry("wrong submodule", None,
          Output(lambda m: (m.m.in_features, m.m.out_features) != (m.D, m.D)
                 and dict(i=m.m.in_features, o=m.m.out_features), "projection"),
          "`{n}` should be nn.Linear(d_model, d_model) = nn.Linear({D}, {D}), got nn.Linear({i}, {o}): every "
          "projection maps D to D (all heads at once)."),
    Entry("wrong submodule", None, Output(lambda m: m.m.bias is None, "projection"),
          "`{n}` has no bias: use nn.Linear(d_model, d_model) (bias=True is the default)."),
    Entry("modules shared", None, Probe("require_distinct_roles")),
    # a call raised (after sqrt_of_number, scaled_dot_product_attention's)
    SDPA["sqrt of an int"],
    Entry("mask broadcast wrongly", "the mask is lined up with the wrong axes (e.g. the heads)",
          Output(lambda e: e.mask is not None and e.mask.dim() == 3 and e.mask.size(1) > 1 and e.after_queries(),
                 "shape error"),
          "your forward works without a mask but {said} with a {mask} mask ({case}).\n    The mask's new axis is after "
          "the queries: mask.unsqueeze(2) (or unsqueeze(-2)) gives ({B}, {L_q}, 1, {L_k}), which lines the queries up "
          "with the heads of the (B, H, L_q, L_k) scores. Instead, add the head axis: mask.unsqueeze(1) makes it "
          "{with_head}, which broadcasts over the heads."),
    Entry("mask broadcast wrongly", None, Output(lambda e: e.mask is not None, "shape error"),
          "your forward works without a mask but {said} with a {mask} mask ({case}).\n    {fix}"),
    Entry("fails for cross-attention", "the code fails when L_q differs from L_k",
          Output(lambda e: e.after_self_attention, "shape error"),
          "your forward works for self-attention but {said} for cross-attention ({case}).\n    Queries come from "
          "`query` (length L_q), keys and values from `key` and `value` (length L_k): reshape each with its own "
          "length, not the query's."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    Entry("wrong return", "the return value is not the contract's (a tuple for one tensor, or the reverse)",
          Output(_wrong_return, "pair"),
          "forward must return (output, weights): the output (B, L_q, D) and the attention weights (B, H, L_q, L_k) "
          "({case}). Yours returned {got}."),
    *SDPA.of(Output, "tuple"),  # a list: "not a tuple" (require_tuple)
    # the wrong result is the reference run with one of these mistakes (in this order; the first for the weights only)
    Entry("weights averaged over heads", "the returned weights are averaged over the heads",
          Reference(lambda c: [({}, lambda: (None, c.ref_w.mean(dim=1)))]),
          "the weights were averaged over the heads, giving (B, L_q, L_k); return one map per head, (B, H, L_q, L_k)."),
    Entry("split without transpose", "heads split without the transpose to (B, H, L, d_k)",
          _mha(split_transpose=False, merge_transpose=False), _SPLIT_WORDS),
    Entry("split without transpose", None, _mha(split_transpose=False), _SPLIT_WORDS),
    Entry("missing output projection", None, _mha(use_w_o=False),
          "the output skips the final projection: after merging the heads back to (B, L_q, D), pass the result "
          "through self.w_o."),
    Entry("heads in reverse order", None, _mha(flip_heads=True),
          "the heads reach w_o in reverse order: columns h*d_k .. (h+1)*d_k - 1 of the merged heads hold head H - 1 - "
          "h. Merge the context in its own head order, merge_heads(context), without a flip of the head axis "
          "(.flip(1), [::-1], reversed(...))."),
    Entry("no scaling", None, _mha(scale="none"),
          "the scores are not scaled: divide Q K^T by sqrt(d_k), the width of one head (scaled_dot_product_attention "
          "does it for you)."),
    Entry("scaled by sqrt(d_model)", "scores scaled by sqrt(d_model) instead of sqrt(d_k)", _mha(scale="sqrt(d_model)"),
          "the scores are divided by sqrt(d_model); each head's dot products have only d_k = d_model // num_heads "
          "terms, so divide by sqrt(d_k)."),
    Entry("scaled by d_k", None, _mha(scale="d_k"),
          "the scores are divided by d_k; divide by its square root, sqrt(d_k)."),
    Entry("mask ignored", None, _mha_masked(mask_mode="ignored"),
          "the mask has no effect: blocked keys still get attention weight. Pass the mask on to the attention "
          "(masked_fill where the mask is False)."),
    Entry("inverted mask", None, _mha_masked(mask_mode="inverted"),
          "the mask is inverted: True means 'may attend', so fill the scores where the mask is False (~mask or mask "
          "== 0), not where it is True."),
    Entry("mask broadcast wrongly", None, Reference(_mask_no_head_axis),
          "the check tried batch size B = num_heads with a {mask} mask, so a mask without the head axis broadcasts "
          "without an error, and your result is exactly what that gives: the mask lined up with the heads instead of "
          "the batch items. Before masking, add the head axis: mask.unsqueeze(1) turns a 3-D mask into {with_head}, "
          "which broadcasts over the heads."),
    Entry("projections swapped", "w_q, w_k, w_v used for the wrong inputs", _swapped("proj"), "{swaps}"),
    Entry("inputs swapped", "query, key and value passed in the wrong order", _swapped("inputs"), "{swaps}"),
    *GRADIENT_PROBE,
    DTYPE_PROBE,
    # scaled_dot_product_attention's robustness cases, in its words; and PyTorch's fused kernel's zero rows
    *SDPA.of(Output, "robust"),
    Entry("fully blocked row not uniform", None, Output(lambda z: z.zero_rows, "zero context"),
          "output ({case}): the rows of the queries whose keys are all blocked are w_o's bias alone, so their context "
          "(before w_o) is all zeros; every other row is right. That is what torch's F.scaled_dot_product_attention "
          "gives with a bool mask: its softmax gives such a row zero weights (and so does nan_to_num after a -inf "
          "fill). This course's attention fills blocked scores with torch.finfo(scores.dtype).min, so such a row gets "
          "uniform weights and its context is the mean of the values (notebook 01), as the weights you return say. "
          "To keep PyTorch's kernel, pass it that fill as an additive float mask: attn_mask = torch.zeros(mask.shape, "
          "dtype=q.dtype, device=q.device).masked_fill(~mask, torch.finfo(q.dtype).min)."),
    DEVICE_PROBE,
    # dropout (train mode, p = 0.3 and 0.6)
    Entry("dropout missing", "no dropout where the contract puts one",
          Raises("argument", (TypeError,), stage="dropout"),
          "MultiHeadAttention({D}, {H}, {p}) raised TypeError: {exc}. The signature is MultiHeadAttention(d_model, "
          "num_heads, dropout=0.0)."),
    Entry("dropout ignores eval mode", None, Probe("fail_eval_dropout")),
    Entry("weights returned after dropout", "the returned attention weights are the ones after dropout",
          Output(lambda r: r.weights_dropped, "dropout weights"),
          "in {case}: the weights you return are the weights after dropout: return them before dropout (they are what "
          "the notebook plots, and each row sums to 1); dropout only changes what multiplies the values."),
    Entry("dropout in the wrong place", "dropout acts somewhere other than the contract says",
          Output(lambda r: True, "dropout weights"),
          "in {case}: the weights you return differ from eval mode: dropout must not change the softmax. Apply it to "
          "the weights after the softmax (self.dropout(weights) @ v), not to the scores or the inputs."),
    Entry("dropout missing", None, Output(lambda r: matches(r.out, r.ref_out), "dropout output"),
          "in {case}: your output equals the one without dropout: dropout is never applied. Keep nn.Dropout(dropout) "
          "from __init__ and apply it to the attention weights before multiplying by the values: self.dropout(weights) "
          "@ v."),
    Entry("dropout on the output", "attention dropout on the output instead of on the weights",
          Output(lambda r: _pure_dropout(r) and dict(
              where="the output (after w_o)" if dropout_pattern(r.out, r.ref_out, r.p)
              else "the merged heads (before w_o)"),
              "dropout output"),
          "in {case}: dropout acts on {where} instead of on the attention weights. In the paper and in PyTorch, "
          "attention dropout drops whole attention links: self.dropout(weights) @ v."),
    Entry("hard-coded dropout p", None, Probe("fail_fixed_p")),
    Entry("dropout in the wrong place", None, Output(lambda r: True, "dropout scale"),
          "in {case}: the output is not what dropout on the attention weights gives (each weight either 0 or weight / "
          "(1 - p)). Apply dropout exactly once, to the weights after the softmax: self.dropout(weights) @ v."),
    *_DIVISIBLE,
])

CATALOGUES = (SPLIT, MERGE, MHA)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


_SHAPE_WORDS = ("size", "shape", "broadcast", "dimension", "expand")


def _with_head_axis(mask: Tensor) -> str:
    """``(B, 1, L_q or 1, L_k)`` in numbers: what ``mask.unsqueeze(1)`` gives."""
    return describe_shape(mask.unsqueeze(1))


def _axis_after_queries(model: nn.Module, lin: dict[str, tuple[Tensor, Tensor]], H: int, key: Tensor,
                        value: Tensor) -> bool:
    """After a (B, L_q, L_k) mask raised: does the model, run with L_q = H queries, give what
    mask.unsqueeze(2) gives? There (B, H, 1, L_k) broadcasts silently, head h taking query h's
    mask row for every query, so the result tells that axis apart from any other slip."""
    B, L_k, D = key.shape
    query, mask = torch.randn(B, H, D), random_mask(B, H, L_k)  # (B, L_q = H, D), (B, L_q, L_k)
    try:
        result = call_student(model, query, key, value, mask)
    except StudentError:
        return False
    wrong = _mha_variant(lin, query, key, value, mask, H, mask_mode="axis after the queries")
    return (wrong is not None and isinstance(result, (tuple, list)) and len(result) == 2
            and all(matches(got, ref) for got, ref in zip(result, wrong)))


_SDPA_REFUSAL = re.compile(r"^mask of shape \(([\d, ]*)\) cannot be broadcast[^;]*")


def _said(exc: BaseException) -> tuple[str, tuple[int, ...] | None]:
    """How the error is quoted, and the shape of the mask the student passed on when the course's
    sdpa refused it: only its first clause is quoted, the checker's diagnosis says the rest."""
    refusal = _SDPA_REFUSAL.match(str(exc)) if isinstance(exc, ValueError) else None
    if refusal is None:
        return f"raised {raised(exc, inline=True)}", None
    line = student_line(exc)
    passed = tuple(int(n) for n in refusal.group(1).replace(" ", "").split(",") if n)
    return (f"raised ValueError in scaled_dot_product_attention: {refusal.group(0)}"
            + (f" (at {line})" if line else "")), passed


def _mask_fix(mask: Tensor, passed: tuple[int, ...] | None) -> str:
    """What to do with a ``mask`` (2-D or 3-D, as the caller gave it) that the student passed on as
    ``passed`` (None: not known) to the (B, H, L_q, L_k) scores."""
    shown = tuple(mask.shape)
    became = f"Your code passed the {describe_shape(mask)} mask on as ({', '.join(map(str, passed))}). " if (
        passed is not None and passed != shown) else ""
    if mask.dim() == 2:
        return (became + "A 2-D mask already broadcasts to the (B, H, L_q, L_k) scores as it is, (L_q, L_k); only a 3-D "  # noqa: E501
                "mask needs the head axis (mask.unsqueeze(1) when mask.dim() == 3).")
    head = f"add the head axis: mask.unsqueeze(1) makes it {_with_head_axis(mask)}, which broadcasts over the heads."
    if passed is not None and passed == tuple(mask.unsqueeze(0).shape):
        return (became + "mask.unsqueeze(0) puts the new axis in front of the batch, so the batch axis lines up with "
                "the head axis H of the (B, H, L_q, L_k) scores. The head axis goes after the batch, so " + head)
    if became:
        return (became + "Against the (B, H, L_q, L_k) scores a mask lines up from the right, each axis 1 or the "
                "scores' size, such as (B, 1, 1, L_k) or (B, 1, L_q, L_k), so " + head)
    return ("The scores are (B, H, L_q, L_k), and a 3-D mask lines up with their last three axes (H, L_q, L_k), not "
            "with the batch. Before masking, " + head)


def _shape_error(exc: BaseException, mask: Tensor | None, case: str, after_self_attention: bool,
                 after_queries: Callable[[], bool]) -> None:
    """A shape error from torch (RuntimeError) or from the course's sdpa (ValueError, "mask ...
    cannot be broadcast"), on a case whose simpler sibling ran: name what differs.
    ``after_queries()``: whether the mask's new axis went after the queries (:func:`_axis_after_queries`)."""
    shape_words = any(w in str(exc).lower() for w in _SHAPE_WORDS)
    if not isinstance(exc, (RuntimeError, ValueError)) or isinstance(exc, NotImplementedError) or not shape_words:
        return
    said, passed = _said(exc)
    fields: dict[str, Any] = dict(said=said, case=case)
    if mask is not None:
        fields.update(mask=describe_shape(mask), with_head=_with_head_axis(mask), fix=_mask_fix(mask, passed),
                      **dict(zip(("B", "L_q", "L_k"), mask.shape)) if mask.dim() == 3 else {})
    MHA.detect("shape error", SimpleNamespace(mask=mask, after_queries=after_queries,
                                              after_self_attention=after_self_attention), **fields)


def _mha_case(model: nn.Module, ref: nn.Module, lin: dict[str, tuple[Tensor, Tensor]], H: int, query: Tensor,
              key: Tensor, value: Tensor, mask: Tensor | None, case: str, after_self_attention: bool) -> None:
    args: tuple[Tensor, ...] = (query, key, value) + ((mask,) if mask is not None else ())
    originals, state = [t.clone() for t in args], module_state(model)
    with torch.no_grad():
        ref_out, ref_w = ref(*originals)  # (B, L_q, D), (B, H, L_q, L_k)
        try:
            result = call_student(model, *args, context=f"running forward ({case})")
        except StudentError as err:
            sqrt_of_number(err.exc, "your forward", "d_model // num_heads")
            _shape_error(err.exc, mask, case, after_self_attention,
                         lambda: _axis_after_queries(model, lin, H, *originals[1:3]))
            raise
    check_unchanged([*_INPUTS, "mask"], args, originals, case)
    check_state_unchanged(model, state, case)  # before the values: a changed weight reads as wrong values
    out, w = _pair(result, case)

    def variant(**settings: Any) -> Callable[[], tuple[Tensor, Tensor] | None]:  # computed once, when asked
        return functools.cache(lambda: _mha_variant(lin, *originals[:3], mask, H, **settings))

    c = SimpleNamespace(mask=mask, ref_w=ref_w, distinct_inputs=key is not query and value is not key, variant=variant)
    mistakes = MHA.candidates(c)

    def candidates(part: int) -> list[Mistake]:
        return [(name, diag, lambda make=make: (make() or (None, None))[part]) for name, diag, make in mistakes]

    expect_close("output", out, ref_out, candidates(0), case=case)
    expect_close("weights", w, ref_w, candidates(1), case=case)


def _check_projections(model: nn.Module, D: int) -> dict[str, nn.Linear]:
    found = {n: getattr(model, n, None) for n in (*_PROJ, "w_o")}
    MHA.detect("projections", SimpleNamespace(missing=[n for n, m in found.items() if not isinstance(m, nn.Module)]))
    for n, m in found.items():
        MHA.detect("projection", SimpleNamespace(m=m, D=D), n=n, D=D)
    return found  # type: ignore[return-value]


def _randomise(projections: dict[str, nn.Linear], ref: nn.Module, D: int, orthogonal: tuple[str, ...] = ()) -> None:
    """Random weights (not the default init) in the student's projections, copied into the reference's."""
    with torch.no_grad():
        for n, lin_s in projections.items():
            lin_s.weight.copy_(_orthogonal(D) if n in orthogonal else torch.randn(D, D) / math.sqrt(D))
            lin_s.bias.copy_(torch.randn(D) * 0.5)
            getattr(ref, n).load_state_dict(lin_s.state_dict())


def _orthogonal(D: int) -> Tensor:
    return torch.linalg.qr(torch.randn(D, D, dtype=torch.float64))[0].float()  # (D, D)


def _check_dropout(cls: Any) -> None:
    """Train mode with ``dropout=p``: dropout acts exactly on the attention weights, with p.

    Exact for any drawn mask: ``w_o`` is orthogonal, so the merged context is recovered from
    the output, and ``L_k < d_k``, so each head's context row ``sum_k a_k v_k`` gives the
    coefficients ``a``: 0 or ``w_k / (1 - p)`` under dropout on the weights (see
    :func:`_weights_dropout_scale`). Two values of p catch a hard-coded one."""
    H, d_k, B = randint(2, 3), randint(8, 10), 2
    D, L_q, L_k = H * d_k, randint(3, 6), randint(3, 5)
    query, key, value = torch.randn(B, L_q, D), torch.randn(B, L_k, D), torch.randn(B, L_k, D)
    for p in (0.3, 0.6):
        case = f"training mode, dropout={p}, L_q={L_q}, L_k={L_k}, D={D}, num_heads={H}"
        try:
            model = call_student(cls, D, H, p, context=f"constructing MultiHeadAttention({D}, {H}, dropout={p})")
        except StudentError as err:
            MHA.detect_raised(err.exc, "dropout", D=D, H=H, p=p, exc=err.exc)
            raise
        ref = MultiHeadAttention(D, H, p).eval()
        _randomise(_check_projections(model, D), ref, D, orthogonal=("w_v", "w_o"))

        def forward(train: bool, case: str = case) -> tuple[Tensor, Tensor]:
            model.train(train)
            with torch.no_grad():
                return _pair(call_student(model, query, key, value, context=f"running forward ({case})"), case)

        with torch.no_grad():
            ref_out, ref_w = ref(query, key, value)  # (B, L_q, D), (B, H, L_q, L_k)
        out, w = forward(True)
        out_eval, _ = forward(False)
        if not matches(out_eval, ref_out):
            fail_eval_dropout("your output", f"eval mode, dropout={p}")
        if not matches(w, ref_w):
            MHA.detect("dropout weights", SimpleNamespace(weights_dropped=dropout_pattern(w, ref_w, p)), case=case)
        for _ in range(2):  # every link kept happens by chance (0.7 ** 36 at the smallest sizes): draw again
            out = forward(True)[0] if matches(out, ref_out) else out
        W_o, b_o = ref.w_o.weight.detach().double(), ref.w_o.bias.detach().double()
        merged = (out.detach().double() - b_o) @ W_o  # (B, L_q, D): W_o is orthogonal
        ref_merged = (ref_out.double() - b_o) @ W_o  # (B, L_q, D)
        dropped = SimpleNamespace(out=out, ref_out=ref_out, merged=merged, ref_merged=ref_merged, p=p)
        MHA.detect("dropout output", dropped, case=case)
        context = split_heads(merged, H)  # (B, H, L_q, d_k)
        W_v, b_v = ref.w_v.weight.detach().double(), ref.w_v.bias.detach().double()
        v = split_heads(F.linear(value.double(), W_v, b_v), H)  # (B, H, L_k, d_k)
        scale = _weights_dropout_scale(context, v, ref_w.double(), p)
        if scale is not None and abs(scale * (1 - p) - 1) < 1e-2:
            continue
        if scale is not None and scale > 1 + 1e-2:
            fail_fixed_p(scale, p, "the attention weights", case)
        MHA.detect("dropout scale", None, case=case)


def _weights_dropout_scale(context: Tensor, v: Tensor, weights: Tensor, p: float) -> float | None:
    """The ``s`` for which ``context`` (B, H, L_q, d_k) is ``(weights * keep * s) @ v`` with a 0/1
    ``keep``, trying ``1 / (1 - p)`` first, else the ratio of the kept large weights; None if neither.

    The coefficients ``context @ pinv(v)`` carry float32 noise: a weight of 1e-5 gives a ratio
    that is noise, and cannot tell kept from dropped (nor needs to: it moves nothing). So each
    link takes the nearer reading and the whole is judged on the context, with an absolute
    tolerance, not on ratios."""
    coeff = context @ torch.linalg.pinv(v)  # (B, H, L_q, L_k): context = coeff @ v
    big = weights > 0.05  # ratios well defined there; each row has a weight >= 1 / L_k
    ratio = coeff[big] / weights[big]
    kept = ratio > 0.5
    for s in [1 / (1 - p)] + ([float(ratio[kept].median())] if bool(kept.any()) else []):
        keep = (coeff - s * weights).abs() < coeff.abs()  # (B, H, L_q, L_k): nearer s * weight than 0
        if allclose((weights * keep * s) @ v, context, atol=1e-4):
            return s
    return None


def _pair(result: Any, case: str) -> tuple[Tensor, Tensor]:
    """forward's result must be the tuple (output, weights), as scaled_dot_product_attention's."""
    MHA.detect("pair", SimpleNamespace(result=result), case=case)
    require_tuple(result, "forward")
    return result[0], result[1]


def _robustness_cases(model: nn.Module, ref: nn.Module, B: int, L_q: int, L_k: int, D: int, H: int) -> None:
    """scaled_dot_product_attention's masked robustness cases, in its words: a query whose keys are
    all blocked, then every score about -150, made with identity ``w_q``, ``w_k`` in both modules."""
    mask = random_mask(B, L_q, L_k)  # (B, L_q, L_k)
    mask[:, 0] = False  # query 0 sees no key
    blocked = (*(torch.randn(B, n, D) for n in (L_q, L_k, L_k)), mask, "its first query row blocks every key")
    very_negative = (*very_negative_inputs(B, L_q, L_k, D // H, D, width=D), random_mask(B, L_q, L_k), VERY_NEGATIVE_NOTE)  # noqa: E501
    for query, key, value, mask, note in (blocked, very_negative):
        if note == VERY_NEGATIVE_NOTE:
            with torch.no_grad():
                for module in (model, ref):
                    for n in ("w_q", "w_k"):
                        getattr(module, n).weight.copy_(torch.eye(D))
                        getattr(module, n).bias.zero_()
        case = f"cross-attention, L_q={L_q}, L_k={L_k}, D={D}, num_heads={H}, mask {describe_shape(mask)}, {note}"
        with torch.no_grad():
            ref_out, ref_w = ref(query, key, value, mask)  # (B, L_q, D), (B, H, L_q, L_k)
            out, w = _pair(call_student(model, query, key, value, mask, context=f"running forward ({case})"), case)
        atol = 1e-4 if note == VERY_NEGATIVE_NOTE else 1e-5
        # the weights line up with the mask given a head axis, the output with the mask as it is
        for what, got, expected, m in (("weights", w, ref_w, mask.unsqueeze(1)), ("output", out, ref_out, mask)):
            if what == "output" and note != VERY_NEGATIVE_NOTE:
                _zero_context_rows(got, expected, mask, ref.w_o.bias.detach(), case)
            if not matches(got, expected, atol=atol):
                shape = tuple(expected.shape[:-1]) + (L_k,) if what == "weights" else tuple(mask.shape)
                robustness_diagnosis(note, f"{what} ({case})", what, got, expected, m, shape)
                expect_close(what, got, expected, case=case, atol=atol)


def _zero_context_rows(out: Any, ref_out: Tensor, mask: Tensor, b_o: Tensor, case: str) -> None:
    """Right everywhere but on the queries whose keys are all blocked, where the output is w_o's
    bias alone (a zero context): what PyTorch's fused attention gives with a bool mask."""
    blind = ~mask.any(-1)  # (B, L_q): queries that see no key
    if not isinstance(out, Tensor) or out.shape != ref_out.shape or not bool(blind.any()):
        return
    n = int(blind.sum())
    zero_rows = matches(out[blind], b_o.expand(n, -1)) and matches(out[~blind], ref_out[~blind])
    MHA.detect("zero context", SimpleNamespace(zero_rows=zero_rows), case=case)


@checker("MultiHeadAttention")
def check_multi_head_attention(cls: Any) -> str:
    require_module_class(cls, "MultiHeadAttention")
    B, H, d_k, L_q, L_k = _head_dims()
    D = H * d_k
    model = build_student(cls, "MultiHeadAttention", (D, H), {}, f"d_model={D}, num_heads={H}")  # eval mode
    projections = _check_projections(model, D)
    require_distinct_roles(model, MultiHeadAttention(D, H), "MultiHeadAttention")  # self.w_k = self.w_q

    ref = MultiHeadAttention(D, H).eval()
    _randomise(projections, ref, D)
    lin = {n: (getattr(ref, n).weight.detach(), getattr(ref, n).bias.detach()) for n in projections}

    x = torch.randn(B, L_q, D)
    _mha_case(model, ref, lin, H, x, x, x, None, f"self-attention, x of shape ({B}, {L_q}, {D})", False)
    query = torch.randn(B, L_q, D)
    key, value = torch.randn(B, L_k, D), torch.randn(B, L_k, D)
    cross = f"cross-attention, L_q={L_q}, L_k={L_k}, D={D}, num_heads={H}"
    _mha_case(model, ref, lin, H, query, key, value, None, cross + ", no mask", True)
    for mask in (random_mask(L_q, L_k), random_mask(B, 1, L_k), random_mask(B, L_q, L_k)):
        _mha_case(model, ref, lin, H, query, key, value, mask, cross + f", mask {describe_shape(mask)}", True)
    # B == H: a 3-D mask without the head axis broadcasts silently onto the heads
    q2, k2, v2 = torch.randn(H, L_q, D), torch.randn(H, L_k, D), torch.randn(H, L_k, D)
    for mask in (random_mask(H, 1, L_k), random_mask(H, L_q, L_k)):
        case = f"cross-attention, B = num_heads = {H}, mask {describe_shape(mask)}"
        _mha_case(model, ref, lin, H, q2, k2, v2, mask, case, True)

    mask = random_mask(B, L_q, L_k)  # (B, L_q, L_k), no fully blocked row
    params = [(f"{n}.{a}", getattr(projections[n], a), getattr(getattr(ref, n), a)) for n in projections for a in ("weight", "bias")]  # noqa: E501
    gradient_probe(model, ref, dict(query=query, key=key, value=value, mask=mask), params,
                   what="MultiHeadAttention", case=cross + f", mask {describe_shape(mask)}")
    mask = random_mask(B, 1, L_k)  # float64: a .float() cast shows; float16 fills are judged elsewhere
    check_dtype_follows(lambda: call_student(cls, D, H, context="constructing MultiHeadAttention"),
                        lambda m, dt: call_student(m, query.to(dt), key.to(dt), value.to(dt), mask,
                                                   context=f"running forward in {dt}"),
                        "MultiHeadAttention", cross + ", mask (B, 1, L_k)", dtypes=(torch.float64,))
    _robustness_cases(model, ref, B, L_q, L_k, D, H)  # last: it sets w_q and w_k to the identity
    check_module_device(model, (query, key, value, mask), "your forward", cross + ", mask (B, 1, L_k)")

    _check_dropout(cls)
    _expect_value_error(cls, "MultiHeadAttention({D}, {H})", "d_model")
    # the [OK] line stored in notebook 02 (dropout and the ValueError are named when they fail)
    return "self- and cross-attention, masks (L_q, L_k), (B, 1, L_k) and (B, L_q, L_k), random weights"


# ---------------------------------------------------------------- hints
register_hints(
    "split_heads",
    [
        "Each head should see every position, but only its own slice of d_k = D // num_heads "
        "features. Start from x of shape (B, L, D).",
        "First, if D % num_heads != 0, raise a ValueError whose message names both numbers, e.g. "
        "f\"D = {D} is not divisible by num_heads = {num_heads}\". Then cut the last axis into (num_heads, d_k): "
        "x.view(B, L, num_heads, d_k) has shape (B, L, H, d_k).",
        "Now move the head axis in front of the positions by swapping axes 1 and 2. (A direct "
        ".view(B, H, L, d_k) has the right shape but gives each head a block of positions.)",
    ],
)
register_hints(
    "merge_heads",
    [
        "merge_heads undoes split_heads: (B, H, L, d_k) -> (B, L, H*d_k), with head h's features "
        "at columns h*d_k .. (h+1)*d_k - 1.",
        "First bring the positions back next to the batch: swap axes 1 and 2 to get (B, L, H, d_k).",
        "Then flatten the last two axes. After a transpose the memory is not contiguous, so use "
        ".reshape(...) (or .contiguous().view(...)); a plain .view raises an error.",
    ],
)
register_hints(
    "MultiHeadAttention",
    [
        "In __init__: raise a ValueError unless d_model % num_heads == 0, with a message that names both "
        "numbers (f\"d_model = {d_model} is not divisible by num_heads = {num_heads}\"), store "
        "d_k = d_model // num_heads, and create four nn.Linear(d_model, d_model): w_q, w_k, w_v, w_o.",
        "In forward: project query with w_q, key with w_k and value with w_v, then split each "
        "into heads with split_heads: (B, H, L, d_k).",
        "Run scaled_dot_product_attention on the per-head tensors; a 3-D mask (B, 1, L_k) or "
        "(B, L_q, L_k) needs a head axis first, mask.unsqueeze(1). It has no dropout, so keep only "
        "its weights, `_, weights = scaled_dot_product_attention(q, k, v, mask)`, and compute "
        "context = self.dropout(weights) @ v, (B, H, L_q, d_k).",
        "Merge the heads back to (B, L_q, D) with merge_heads(context), apply w_o, and return "
        "(output, weights) with the weights before dropout, shape (B, H, L_q, L_k): one map per head.",
    ],
)
