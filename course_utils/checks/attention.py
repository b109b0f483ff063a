"""Checkers for notebook 01 (attention): scaled dot-product attention and the two masks.

The student's function runs on fresh random inputs of awkward shapes (2-D to 4-D,
``L_q != L_k != d_k != d_v``, masks that block different keys in each row, a non-zero
``pad_id``) and is compared with :mod:`course_utils.attention`; a wrong result is compared
with the reference run with each catalogued mistake to name it. The mild cases come first
(every mask row sees a key and blocks one, scores of order 1); then the robustness cases:
fully blocked query rows (uniform weights from the ``finfo(dtype).min`` fill, NaN from
``-inf``), large scores (a written-out softmax overflows), scores near -150 (a fill such as
-30 leaks) and half precision (the fill must fit the dtype).

Each exercise's mistakes are one table (:mod:`.catalogue`): ``SDPA``, ``CAUSAL``, ``PADDING``,
in the order the check tries them; ``MISTAKES`` lists their names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ..attention import causal_mask as _ref_causal_mask
from ..attention import padding_mask as _ref_padding_mask
from ..attention import scaled_dot_product_attention as _ref_attention
from ._core import (
    StudentError,
    call_student,
    check_input_device,
    check_unchanged,
    checker,
    describe_shape,
    equal,
    expect_close,
    fail,
    gradient_probe,
    isfinite,
    matches,
    raised,
    randint,
    random_mask,
    register_hints,
    require_function,
    student_line,
)
from .catalogue import GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Raises, Reference

__all__ = ["check_scaled_dot_product_attention", "check_causal_mask", "check_padding_mask"]


# ---------------------------------------------------------------- scaled_dot_product_attention's table
def _run(c: _Case, scale: float | None = None, dim: int = -1, mode: str = "fill", masked: bool = True) -> list:
    """One candidate: the reference run on case ``c`` with these settings (``scale`` divides the scores)."""
    return [({}, lambda: _attention_variant(c.query, c.key, c.value, c.mask if masked else None,
                                            math.sqrt(c.d_k) if scale is None else scale, dim, mode))]


def _wrong_dimensions(c: _Case) -> list:
    """The scores divided by the square root of each other size of the case."""
    named = {"d_v (the last dim of value)": c.value.size(-1), "L_k (the number of keys)": c.key.size(-2),
             "L_q (the number of queries)": c.query.size(-2)}
    for i, size in enumerate(c.query.shape[:-2]):
        named.setdefault(f"a batch dim (query.size({i}))", size)
    return [(dict(size=size, words=words), _run(c, math.sqrt(size))[0][1])
            for words, size in named.items() if size != c.d_k]


def _wrong_axes(c: _Case) -> list:
    ndim = len(c.scores_shape)
    axes = {dim: f"a batch dim (dim={dim})" for dim in range(ndim - 2)} | {ndim - 2: "the queries (dim=-2)"}
    return [(dict(axis=axis), _run(c, dim=dim)[0][1]) for dim, axis in axes.items()]


def _masked(**settings: Any) -> Callable[[_Case], list]:
    return lambda c: _run(c, **settings) if c.mask is not None else []


def _raw_scores(c: _Case) -> list:
    if c.mask is not None:
        return []
    scores = c.query @ c.key.transpose(-2, -1)  # (..., L_q, L_k)
    return [({}, lambda s=s: (None, s)) for s in (scores / math.sqrt(c.d_k), scores)]


def _value_transposed(c: _Case) -> list:
    return [({}, lambda: (_ref_attention(c.query, c.key, c.value, c.mask)[0].transpose(-2, -1), None))]


def _usable(r: Any) -> bool:
    """A robustness case's wrong result that a robustness story can explain."""
    return bool(r.note) and isinstance(r.got, Tensor) and r.got.shape == r.ref.shape and r.got.is_floating_point()


def _only_blind_rows_wrong(r: Any) -> bool:
    """Masked robustness case: right everywhere but on the queries that see no key."""
    blind = ~r.mask.expand(r.scores_shape).any(-1)  # (..., L_q): queries that see no key
    return matches(torch.where(blind.unsqueeze(-1), r.ref, r.got), r.ref)


def _leak(r: Any) -> dict[str, str] | None:
    if not (_usable(r) and r.mask is not None and r.note == VERY_NEGATIVE_NOTE and r.what == "weights"):
        return None
    leak = r.got.masked_select(~r.mask.expand(r.scores_shape))
    if bool(isfinite(r.got).all()) and bool((leak != 0).any()):
        return dict(leak=f"{float(leak.abs().max()):.3g}")
    return None


def _blind_rows(r: Any) -> dict[str, str] | None:
    if not (_usable(r) and r.mask is not None and _only_blind_rows_wrong(r)):
        return None
    blind = ~r.mask.expand(r.scores_shape).any(-1)  # (..., L_q)
    zero = bool((r.got[blind] == 0).all())
    return dict(rows="all 0 (nan_to_num after the softmax does that, and so does F.scaled_dot_product_attention)"
                if zero else "not what the finite fill gives")


def _finite(r: Any) -> bool:
    return bool(isfinite(r.got).all(-1).all())


# torch.sqrt(query.size(-1)): torch's math takes tensors only, d_k is a Python int
_SQRT_OF_NUMBER = r"\b(?P<fn>r?sqrt)\(\): argument 'input' \(position 1\) must be Tensor, not (?P<type>int|float)"
_VALUE_FIRST = re.compile(r"(?<![\w.])(value|values|v|V|val)\s*@|(matmul|bmm)\(\s*(value|values|v|V|val)\s*,"
                          r"|(?<![\w.])(value|values|v|V|val)\.(matmul|bmm)\(")


def _value_first(calls: _Calls) -> bool:
    """Every call raised, at a line that multiplies the values first."""
    exc = calls.failed[0][1].exc
    line = student_line(exc) or ""
    return not calls.ok and isinstance(exc, RuntimeError) and bool(_VALUE_FIRST.search(line.split(":", 1)[-1]))


def _only_exact_shape(calls: _Calls) -> bool:
    """Only calls with a mask raised: those whose mask merely broadcasts to the scores."""
    return all(tuple(c.mask.shape) != c.scores_shape for c, _ in calls.failed) and any(
        c.mask is not None and tuple(c.mask.shape) == c.scores_shape for c in calls.ok)


_HALF = r"^(?=[\s\S]*(?:Half|BFloat16))(?=[\s\S]*Float)"  # a float32 tensor mixed into a half-precision one

SDPA = Catalogue("scaled_dot_product_attention", "01", [
    Entry("not a function", None, Probe("require_function")),
    # some calls raised (stage "raised", the calls that raised; "sqrt": the first exception)
    Entry("sqrt of an int",
          "torch.sqrt(d_k) on a Python int, which raises TypeError (math.sqrt(d_k) or d_k ** 0.5)",
          Raises(_SQRT_OF_NUMBER, (TypeError,), stage="sqrt"),
          "{who} raised {raised}\n    torch.{fn} takes a tensor, not a Python {type} (d_k = {d_k} is an int): take "
          "the square root with math.sqrt(d_k) or d_k ** 0.5, a Python float that divides the scores."),
    Entry("transpose only works for 2-D", "key.T / transpose(0, 1) instead of the last two axes",
          Output(lambda calls: bool(calls.plain) and calls.plain_ok == {2}, "raised"),
          "{where}. Transposing with key.T or key.transpose(0, 1) only swaps the right axes of a 2-D tensor: use "
          "key.transpose(-2, -1) so it works with any number of batch dims.{raised_at}"),
    Entry("only works for 3-D", "the code assumes exactly one batch dim",
          Output(lambda calls: bool(calls.plain) and 3 in calls.plain_ok, "raised"),
          "{where}: it is written for 3-D inputs only. Write it for any number of leading dims: key.transpose(-2, -1) "
          "(not transpose(1, 2) or permute(0, 2, 1)), @ or torch.matmul (not torch.bmm), and negative axes such as "
          "softmax(dim=-1).{raised_at}"),
    Entry("fails for some numbers of dims", "the code fails for some numbers of leading dims",
          Output(lambda calls: bool(calls.plain and calls.plain_ok), "raised"),
          "{where}. Use negative axes (key.transpose(-2, -1), softmax(dim=-1)) and @ so the code works with any "
          "number of leading dims.{raised_at}"),
    Entry("mask=None not handled", "the code fails when the mask is None",
          Output(lambda calls: bool(calls.plain and calls.ok), "raised"),
          "your code fails when no mask is given (mask=None) but runs with one: skip the masking step when the mask "
          "is None (`if mask is not None:`).{raised_at}"),
    Entry("if mask", "`if mask:` on a tensor instead of `if mask is not None:`",
          Output(lambda calls: not calls.plain and "Boolean value of Tensor" in str(calls.failed[0][1].exc), "raised"),
          "`if mask:` asks for the truth value of a whole tensor, which raises. Test whether a mask was given with "
          "`if mask is not None:`.{on}"),
    Entry("mask not broadcast", "a mask of fewer dims than the scores is not broadcast",
          Output(lambda calls: not calls.plain and _only_exact_shape(calls), "raised"),
          "your code works when the mask has exactly the shape of the scores but fails when it only broadcasts to "
          "them (e.g. (L_q, L_k) for every batch item, or (B, 1, L_k)). Indexing with a mask (`scores[~mask] = ...`) "
          "needs the exact shape, and an axis added to the mask (mask.unsqueeze(1)) lines it up with the wrong axes "
          "of the scores; pass the mask as it is to masked_fill or torch.where, which broadcast it.{on}"),
    Entry("fails with a mask", "the code fails whenever a mask is given",
          Output(lambda calls: not calls.plain, "raised"), "your code fails when a mask is given.{on}"),
    Entry("value on the wrong side", "the values multiply the weights from the wrong side",
          Output(_value_first, "raised"),
          "the values are multiplied on the wrong side: the output is weights @ value, (..., L_q, L_k) @ "
          "(..., L_k, d_v) -> (..., L_q, d_v).{on}"),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the result is not (output, weights) (stage "return"; "tuple": MultiHeadAttention's forward too)
    Entry("only the output returned", "the weights are not returned",
          Output(lambda r: isinstance(r.result, Tensor) and r.result.shape == r.out.shape, "return"),
          "your function returns only the output; return the attention weights too, as a tuple: "
          "`return output, weights`."),
    Entry("not a tuple", "the result is not an (output, weights) tuple",
          Output(lambda r: isinstance(r.result, Tensor) and dict(shape=describe_shape(r.result)), "return"),
          "your function returns a single tensor of shape {shape} (on {case}); it must return a tuple (output, "
          "weights)."),
    Entry("not a tuple", None, Output(lambda r: r.result is None, "return"),
          "your function returns None: end it with `return output, weights`."),
    Entry("not a tuple", None,
          Output(lambda r: not isinstance(r.result, tuple) and dict(type=type(r.result).__name__), ("return", "tuple")),
          "{who} returns a {type}; return a tuple (output, weights): `return output, weights`."),
    Entry("not a tuple", None, Output(lambda r: len(r.result) != 2 and dict(n=len(r.result)), "return"),
          "your function returns a tuple of {n} things; return exactly two: `return output, weights`."),
    Entry("wrong return order", "(weights, output) returned instead of (output, weights)",
          Output(lambda r: tuple(t.shape if isinstance(t, Tensor) else None for t in r.result)
                 == (r.w.shape, r.out.shape), "return"),
          "the return order is swapped: you return (weights, output); the exercise asks for `return output, weights`."),
    # right on the mild cases, wrong on a robustness case (stage "robust"; MultiHeadAttention's too)
    Entry("softmax overflows", "a written-out softmax overflows on large scores",
          Output(lambda r: _usable(r) and r.mask is None and not _finite(r), "robust"),
          "{on} contains NaN or inf, although your code is right when the scores are of order 1. Written out as "
          "exp(scores) / exp(scores).sum(...), the softmax overflows: exp(x) is inf in float32 above x = 88.7, and "
          "inf / inf = NaN; with one max subtracted for the whole tensor, rows far below it underflow to 0 / 0 = NaN "
          "instead. Use torch.softmax(scores, dim=-1), which subtracts each row's own max first (or subtract "
          "scores.amax(-1, keepdim=True) yourself)."),
    Entry("fill not negative enough", "a finite fill for blocked scores that allowed scores can fall below (e.g. -30)",
          Output(_leak, "robust"),
          "{on}: blocked keys get weight (up to {leak}), although your code is right on scores of order 1. The fill "
          "value is not negative enough: a fill of, say, -30 is above every allowed score here, so the blocked keys "
          "win. Fill with the most negative number of the scores' dtype, torch.finfo(scores.dtype).min, so a blocked "
          "weight is exactly 0."),
    Entry("filled with -inf", "blocked scores filled with -inf: a fully blocked row becomes NaN",
          Output(lambda r: _usable(r) and r.mask is not None and _only_blind_rows_wrong(r) and not _finite(r),
                 "robust"),
          "{on}: the rows of the queries whose keys are all blocked are NaN (a padding query, say). That is what a "
          "fill with float('-inf') gives: softmax(-inf, ..., -inf) = 0 / 0 = NaN there, and one NaN spreads through "
          "every later layer and into the loss. Fill with the most negative finite number, "
          "torch.finfo(scores.dtype).min (not -1e9, which float16 cannot hold): such a row then gets uniform weights, "
          "finite, and the loss ignores it anyway."),
    Entry("fully blocked row not uniform", "a query with every key blocked does not get uniform weights",
          Output(_blind_rows, "robust"),
          "{on}: the rows of the queries whose keys are all blocked are {rows}. With blocked scores filled with "
          "torch.finfo(scores.dtype).min, every score of such a row is the same, so its weights are uniform (1/L_k "
          "each) and its output is the mean of the values. Fill the scores before the softmax, and leave the "
          "softmax's result as it is."),
    # the wrong result is the reference run with one of these mistakes (in this order)
    Entry("no scaling", "scores not divided by sqrt(d_k)", Reference(lambda c: _run(c, 1.0)),
          "the scores are not scaled: divide query @ key^T by sqrt(d_k) before the softmax (without it, large d_k "
          "pushes the softmax towards one-hot weights)."),
    Entry("scaled by d_k", "scores divided by d_k instead of sqrt(d_k)", Reference(lambda c: _run(c, float(c.d_k))),
          "the scores are divided by d_k = {d_k} instead of sqrt(d_k): take the square root (math.sqrt(d_k) or "
          "d_k ** 0.5)."),
    Entry("multiplied by sqrt(d_k)", "scores multiplied by sqrt(d_k) instead of divided",
          Reference(lambda c: _run(c, 1.0 / math.sqrt(c.d_k))),
          "the scores are multiplied by sqrt(d_k): divide by it instead."),
    Entry("scaled by the wrong dimension", "scores scaled by another size than d_k", Reference(_wrong_dimensions),
          "the scores are divided by sqrt({size}), the square root of {words}, instead of sqrt(d_k) = sqrt({d_k}): "
          "d_k is the last dimension of query and key, query.size(-1)."),
    Entry("softmax over the wrong axis", "the softmax runs over the queries instead of the keys",
          Reference(_wrong_axes),
          "the softmax runs over {axis} instead of over the keys: use softmax(dim=-1), so each query's weights over "
          "the keys sum to 1."),
    Entry("inverted mask", "True and False swapped (True must mean: may attend)", Reference(_masked(mode="inverted")),
          "the mask is inverted: you block the keys where the mask is True. In this course True = may attend, so fill "
          "the scores where the mask is False (~mask)."),
    Entry("mask ignored", "the mask has no effect", Reference(_masked(masked=False)),
          "the mask is ignored: the weights are the same as without a mask. Fill the scores where the mask is False "
          "with a very negative number before the softmax."),
    Entry("mask applied after the softmax", "the mask zeroes the weights after the softmax (rows no longer sum to 1)",
          Reference(_masked(mode="after")),
          "the mask is applied after the softmax: the blocked weights are zero but each row no longer sums to 1. Mask "
          "the scores before the softmax instead."),
    Entry("mask filled with 0", "blocked scores set to 0 instead of a large negative number",
          Reference(_masked(mode="zero")),
          "the blocked scores are set to 0, which still gives them weight (exp(0) = 1). Fill them with a very negative "
          "finite number (torch.finfo(scores.dtype).min which follows the dtype; -1e9 overflows float16) so their "
          "weight becomes 0."),
    Entry("scores returned as weights", "the scores before the softmax are returned as the weights",
          Reference(_raw_scores),
          "the weights you return are the scores before the softmax: return softmax(scores) (each row sums to 1) as "
          "the weights."),
    Entry("value on the wrong side", None, Reference(_value_transposed),
          "the output is transposed: (..., d_v, L_q) instead of (..., L_q, d_v). Multiply the weights by the values "
          "with the weights on the left: weights @ value."),
    *GRADIENT_PROBE,
    # half precision (stage "half": the exception; "half result": the result)
    Entry("dtype not preserved", None, Raises(_HALF, (RuntimeError,), stage="half"),
          "on {case} your code raised {raised}\n    A float32 tensor got mixed into the {dtype} computation and "
          "promoted part of it: (~mask) * number and torch.tensor(...) are float32. Keep the scores' dtype: "
          "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)."),
    Entry("fill overflows half precision", "a fill (-1e9, float32's min) that float16/bfloat16 cannot hold",
          Raises("overflow", stage="half"),
          "on {case} your code raised {raised}\n    The fill value does not fit in {dtype}: -1e9 is beyond float16's "
          "range (about -65504), and torch.finfo(torch.float32).min beyond both half-precision types. Use the most "
          "negative number of the scores' own dtype, torch.finfo(scores.dtype).min."),
    Entry("dtype not preserved", None,
          Output(lambda r: isinstance(r.got, Tensor) and r.got.dtype != r.dtype and dict(got_dtype=r.got.dtype),
                 "half result"),
          "{what} (on {case}) has dtype {got_dtype}: your code changes the dtype (a .float() or a float32 tensor mixed "
          "in). Keep the input's dtype, so half-precision training stays in half precision."),
    Entry("wrong device", None, Probe("check_input_device")),
    Entry("parameter renamed", None, Probe("require_contract_parameters")),
])

# ---------------------------------------------------------------- the masks' tables
# what compare_mask itself says, for every bool mask (causal_mask, padding_mask, and notebook 06's)
_MASK_ENTRIES = [
    Entry("not a tensor", None,
          Output(lambda m: not isinstance(m.got, Tensor) and dict(
              type=type(m.got).__name__, forgot=" Did you forget `return`?" if m.got is None else ""), "mask type"),
          "{what} should return a torch.Tensor of dtype torch.bool, but your code returned {type}.{forgot}"),
    Entry("wrong device", None,
          Output(lambda m: m.got.device.type != m.ref.device.type and dict(device=m.got.device, expected=m.ref.device),
                 "mask type"),
          "{what} returned a tensor on device {device}, expected {expected}."),
    Entry("wrong shape", None,
          Output(lambda m: m.got.shape != m.ref.shape
                 and dict(shape=describe_shape(m.got), expected=describe_shape(m.ref)), "mask shape"),
          "{what} has shape {shape}, expected {expected}."),
    Entry("additive float mask", "an additive 0/-inf float mask instead of a bool mask",
          Output(lambda m: _additive(m), "mask pattern"),
          "{what} is an additive float mask (0 where allowed, {fill} where blocked), the convention of nn.Transformer. "
          "This course uses a bool mask instead: True = may attend, False = blocked."),
    Entry("not a bool mask", "the mask is a float or int tensor, not torch.bool",
          Output(lambda m: m.got.dtype != torch.bool and dict(
              dtype=m.got.dtype, right=" The True/False pattern is right;" if equal(m.pattern, m.ref) else ""),
              "mask dtype"),
          "{what} has dtype {dtype}, expected torch.bool.{right} a mask must be a bool tensor (True = may attend): "
          "build it from a comparison or convert it with .bool()."),
    Entry("values differ", None, Output(lambda m: _wrong_entries(m), "mask values"),
          "{what}: {n} of {numel} entries are wrong; the first: {shown}.{meaning}"),
]
_MASKS = Catalogue("a bool mask", "01", _MASK_ENTRIES)  # not an exercise: the entries both masks' tables share


def _additive(m: Any) -> dict[str, str] | None:
    """nn.Transformer's convention: 0 where allowed, -inf (or a big negative) where blocked."""
    if not (m.got.is_floating_point() and (~m.ref).any()):
        return None
    blocked, allowed = m.got[~m.ref].double(), m.got[m.ref].double()
    if bool((allowed == 0).all()) and bool((blocked < -1e3).all()):
        return dict(fill=f"{float(blocked.max()):.3g}")
    return None


def _wrong_entries(m: Any) -> dict[str, Any] | None:
    """The entries whose pattern is wrong, the first three shown with ``m.entry(index)``'s words."""
    wrong = torch.nonzero(m.pattern.cpu() != m.ref.cpu()).tolist()  # (n, dim) indices, row-major order
    if not wrong:
        return None
    shown = "; ".join(f"[{', '.join(map(str, idx))}]{m.entry(tuple(idx))} should be {not bool(m.pattern[tuple(idx)])}"
                      for idx in wrong[:3])
    return dict(n=len(wrong), numel=m.ref.numel(), shown=shown, meaning=f" {m.meaning}".rstrip())


def _causal_variants(c: int) -> dict[str, Tensor]:
    ones = torch.ones(c, c, dtype=torch.bool)
    return {"upper triangle": ones.triu(), "inverted mask": ones.triu(1), "diagonal excluded": ones.tril(-1),
            "diagonal shifted": ones.tril(1)}


def _causal(name: str) -> Reference:
    """``name``'s mask of size ``c`` (the case is the size)."""
    return Reference(lambda c: [({}, _causal_variants(c)[name])])


def _batched(m: Any) -> bool:
    size = m.ref.size(-1)
    return m.got.numel() == size * size and m.got.dim() > 2 and all(s == 1 for s in m.got.shape[:-2])


CAUSAL = Catalogue("causal_mask", "01", [
    Entry("not a function", None, Probe("require_function")),
    Entry("wrong shape", None, Output(_batched, "shape"),
          "{what} has shape {shape}: return exactly (size, size); it broadcasts over the batch by itself."),
    *_MASK_ENTRIES[:4],
    # the pattern (read as bool) is one of these, in this order (the first three also in notebook 06's make_tgt_mask)
    Entry("upper triangle", "the causal mask lets each position see the future instead of the past",
          _causal("upper triangle"),
          "True above the diagonal instead of below it (the mask is transposed): query i would see the future keys "
          "i..size-1. Keep the lower triangle with the diagonal (torch.tril)."),
    Entry("inverted mask", None, _causal("inverted mask"),
          "the mask is inverted: True marks the future keys, the blocked ones. In this course True = may attend: the "
          "keys on and below the diagonal."),
    Entry("diagonal excluded", "the causal mask hides the diagonal (a position cannot see itself)",
          _causal("diagonal excluded"),
          "the diagonal is False, so a token cannot see itself. Query i may attend to keys 0..i, itself included: keep "
          "the diagonal (torch.tril with the default diagonal=0)."),
    Entry("diagonal shifted", "the causal mask is tril(1): each position also sees the next token",
          _causal("diagonal shifted"),
          "True also just above the diagonal (tril(diagonal=1)): query i sees key i + 1, the next token, which it must "
          "not know yet. Keep torch.tril with the default diagonal=0."),
    *_MASK_ENTRIES[4:],
    # the device argument
    Entry("no device parameter", "the function lacks the device parameter",
          Raises(r"keyword argument 'device'", (TypeError,), stage="device"),
          "your function has no `device` parameter; the signature is causal_mask(size, device=None).\n    your code "
          "raised {raised}"),
    Entry("device ignored", "the device argument is not used",
          Output(lambda d: isinstance(d.got, Tensor) and d.got.device != d.expected, "device"),
          "{call} returned a tensor on {device}: create the mask on the device you are given (device=device), so it "
          "lands where the scores are."),
    Entry("device ignored", None, Output(lambda d: isinstance(d.got, Tensor) and d.got.device.type != "meta", "meta"),
          "causal_mask({size}, device='meta') returned a tensor on {device}: the `device` argument is ignored. Create "
          "the mask on that device (pass device=device when you create the tensor), so it lands where the scores are "
          "(the GPU on Colab)."),
])


def _padding_variants(case: tuple[Tensor, int]) -> dict[str, list[tuple[dict[str, Any], Tensor]]]:
    """The catalogued wrong padding masks of ``tokens``, by name, each ``(fields, mask (B, 1, L))``."""
    tokens, pad_id = case
    B, L = tokens.shape
    is_pad = tokens == pad_id  # (B, L)
    first_pad = torch.where(is_pad.any(1), is_pad.int().argmax(1), L)  # (B,): a length, d2l's valid_len
    n_real = (~is_pad).sum(1)  # (B,)
    positions = torch.arange(L)  # (L,)
    below = sorted(set(tokens[tokens < pad_id].tolist()))  # real ids, never empty when pad_id != 0 (a real 0)
    return {
        "inverted mask": [({}, ~_ref_padding_mask(tokens, pad_id))],
        "hard-coded pad id": [({}, m.unsqueeze(1)) for m in (tokens != 0, tokens == 0)] if pad_id != 0 else [],
        "ids below pad_id as padding": [(dict(below=below), (tokens > pad_id).unsqueeze(1))] if pad_id != 0 else [],
        "assumed trailing padding": [
            (dict(which="every position from the first pad id on is"), (positions < first_pad[:, None]).unsqueeze(1)),
            (dict(which="the first n tokens of each row (n = its number of real tokens) are taken as real and the "
                        "rest is"), (positions < n_real[:, None]).unsqueeze(1)),
        ],
    }


def _padding(name: str) -> Reference:
    """``name``'s masks for the case ``(tokens, pad_id)``."""
    return Reference(lambda case: _padding_variants(case)[name])


PADDING = Catalogue("padding_mask", "01", [
    Entry("not a function", None, Probe("require_function")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameter renamed", None, Probe("require_contract_parameters")),
    Entry("missing query axis", "a padding mask of shape (B, L) without the query axis (B, 1, L)",
          Output(lambda m: tuple(m.got.shape) == (m.B, m.L), "shape"),
          "{what} has shape (B, L) = {shape}, expected (B, 1, L) = ({B}, 1, {L}): add the query axis in the middle "
          "(unsqueeze(1)) so the mask broadcasts over the queries of the (B, L_q, L_k) scores. A (B, L) mask would "
          "broadcast as (1, B, L) and mix up the batch items."),
    Entry("wrong axis", "the operation runs over the wrong axis",
          Output(lambda m: m.got.numel() == m.B * m.L and m.got.dim() == 3, "shape"),
          "{what} has shape {shape}, expected (B, 1, L) = ({B}, 1, {L}): the new axis of size 1 goes in the middle "
          "(unsqueeze(1)), where the queries are, so each query row sees the same keys."),
    *_MASK_ENTRIES[:4],
    # the pattern is one of these, in this order
    Entry("inverted mask", None, _padding("inverted mask"),
          "the mask is inverted: it is True at the padding. In this course True = may attend, so the mask is True at "
          "the real tokens (tokens != pad_id)."),
    Entry("hard-coded pad id", "padding recognised by a fixed id (0) instead of the pad_id argument",
          _padding("hard-coded pad id"),
          "the mask treats the token id 0 as padding, but pad_id is {pad_id} here: compare with the pad_id argument, "
          "not a hard-coded 0 (`tokens.bool()` also compares with 0)."),
    Entry("ids below pad_id as padding",
          "padding found with tokens > pad_id: real ids smaller than pad_id count as padding",
          _padding("ids below pad_id as padding"),
          "the real tokens with ids smaller than pad_id ({below}) are marked as padding too: `tokens > pad_id` assumes "
          "pad_id is the smallest id. Compare for inequality: tokens != pad_id."),
    Entry("assumed trailing padding", "padding assumed at the end of each row", _padding("assumed trailing padding"),
          "{which} marked as padding, as if each row were its real tokens followed by padding (a mask built from "
          "lengths, d2l's valid_len habit). Padding is wherever the pad id is, at the start or in the middle too: "
          "compare the ids themselves, tokens != pad_id."),
    *_MASK_ENTRIES[4:],
    Entry("wrong device", None, Probe("check_input_device")),
])

CATALOGUES = (SDPA, CAUSAL, PADDING)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- shared helpers
def compare_mask(what: str, got: Any, ref: Tensor, candidates: list[tuple[str, str, Tensor]],
                shape_diagnosis: Callable[[Tensor], None] | None = None, meaning: str = "",
                entry: Callable[[tuple[int, ...]], str] = lambda idx: "") -> None:
    """Compare a student's bool mask with ``ref``. ``candidates`` are ``(name, message, the
    mask with that mistake)``, compared with the pattern read as bool (``!= 0``): a float mask
    with a wrong pattern gets the pattern diagnosis first, the dtype one after. Any other
    wrong pattern is shown by its first wrong entries; ``entry(index)`` adds words to each
    (the token there), ``meaning`` says what an entry means."""
    m = SimpleNamespace(got=got, ref=ref, pattern=None, meaning=meaning, entry=entry)
    _MASKS.detect("mask type", m, what=what)
    if got.shape != ref.shape:
        if shape_diagnosis is not None:
            shape_diagnosis(got)
        _MASKS.detect("mask shape", m, what=what)
    if got.dtype != torch.bool:
        _MASKS.detect("mask pattern", m, what=what)
    m.pattern = got if got.dtype == torch.bool else got != 0
    if not equal(m.pattern, ref):
        for name, message, candidate in candidates:
            if equal(m.pattern, candidate):
                fail(f"{what}: {message}", mistake=name)
    _MASKS.detect("mask dtype", m, what=what)
    _MASKS.detect("mask values", m, what=what)
    expect_close(what, got, ref)


# ---------------------------------------------------------------- scaled_dot_product_attention
_RANK_WORDS = {
    2: "2-D input (L_q, d_k) with no batch dims",
    3: "3-D input (B, L_q, d_k)",
    4: "4-D input (B, H, L_q, d_k)",
}


@dataclass
class _Case:
    rank: int
    query: Tensor
    key: Tensor
    value: Tensor
    mask: Tensor | None
    note: str = ""  # what a robustness case tests, said in every message about it

    @property
    def inputs(self) -> list[Tensor]:
        return [t for t in (self.query, self.key, self.value, self.mask) if t is not None]

    @property
    def d_k(self) -> int:
        return self.query.size(-1)

    @property
    def scores_shape(self) -> tuple[int, ...]:
        return tuple(self.query.shape[:-1]) + (self.key.size(-2),)

    def describe(self) -> str:
        mask = f"mask {describe_shape(self.mask)}" if self.mask is not None else "no mask"
        return (f"{self.rank}-D input: query {describe_shape(self.query)}, key {describe_shape(self.key)}, value "
                f"{describe_shape(self.value)}, {mask}" + (f", {self.note}" if self.note else ""))


def _attention_cases() -> list[_Case]:
    """Cases without a mask first (they isolate scaling and softmax mistakes), then masked ones."""
    # four different sizes in 4..9: no two scalings coincide (d_k**2 >= 16 > 9) and no
    # wrongly transposed product can line up by chance with the batch dims 2 and 3
    L_q, L_k, d_k, d_v = (int(s) + 4 for s in torch.randperm(6)[:4])
    B = int(torch.randint(2, 4, ()))

    def qkv(*lead: int) -> tuple[Tensor, Tensor, Tensor]:
        return torch.randn(*lead, L_q, d_k), torch.randn(*lead, L_k, d_k), torch.randn(*lead, L_k, d_v)

    lengths = torch.randint(1, L_k, (B,))  # each padded sequence keeps >= 1 real key
    pad = (torch.arange(L_k) < lengths[:, None]).unsqueeze(1)  # (B, 1, L_k), padding style
    # some queries (1 .. L_q - 1 of them, in every batch item) see no key at all
    blocked = random_mask(B, L_q, L_k)  # (B, L_q, L_k)
    blocked[:, torch.randperm(L_q)[: randint(1, L_q - 1)]] = False
    # scores of order 36 after scaling, and one of exactly 200 in every batch item (key 0
    # lined up with query 0): exp overflows float32 above 88.7
    big_q, big_k, big_v = qkv(B)
    big_q, big_k = big_q * 6, big_k * 6
    q0 = big_q[:, :1]  # (B, 1, d_k)
    big_k[:, :1] = q0 * (200 * math.sqrt(d_k) / (q0 * q0).sum(-1, keepdim=True))
    return [
        _Case(3, *qkv(B), None),
        _Case(2, *qkv(), None),
        _Case(4, *qkv(2, 3), None),
        _Case(3, *qkv(B), random_mask(B, L_q, L_k)),
        _Case(2, *qkv(), random_mask(L_q, L_k)),
        _Case(3, *qkv(B), pad),
        _Case(4, *qkv(2, 3), random_mask(L_q, L_k)),  # broadcast over both batch dims
        _Case(4, *qkv(2, 3), random_mask(2, 3, L_q, L_k)),
        # large scores before blocked rows: a written-out softmax is NaN on both, for this reason
        _Case(3, big_q, big_k, big_v, None, note="large scores (up to 200 after scaling)"),
        _Case(3, *qkv(B), blocked, note="some queries with every key blocked"),
        # every score about -150: a finite fill such as -30 then outweighs the allowed keys
        _Case(3, *very_negative_inputs(B, L_q, L_k, d_k, d_v), random_mask(B, L_q, L_k), note=VERY_NEGATIVE_NOTE),
    ]


VERY_NEGATIVE_NOTE = "every score about -150 after scaling"


def very_negative_inputs(B: int, L_q: int, L_k: int, d_k: int, d_v: int, width: int | None = None) -> tuple[Tensor, Tensor, Tensor]:  # noqa: E501
    """Queries and keys pointing in opposite directions: every score near -150. ``width``:
    their features, ``d_k`` unless heads of ``d_k`` each share them (multi-head attention)."""
    width = width or d_k
    q = 1 + 0.05 * torch.randn(B, L_q, width)  # (B, L_q, width)
    k = -(1 + 0.05 * torch.randn(B, L_k, width)) * (150 / math.sqrt(d_k))  # (B, L_k, width): q.k / sqrt(d_k) ~ -150 per head  # noqa: E501
    return q, k, torch.randn(B, L_k, d_v)


def _attention_variant(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scale: float,
                       softmax_dim: int = -1, mask_mode: str = "fill") -> tuple[Tensor, Tensor]:
    """The reference computation with one mistake built in (``scale`` divides the scores)."""
    scores = query @ key.transpose(-2, -1) / scale  # (..., L_q, L_k)
    if mask is not None and mask_mode != "after":
        blocked = mask if mask_mode == "inverted" else ~mask
        scores = scores.masked_fill(blocked, 0.0 if mask_mode == "zero" else torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=softmax_dim)  # (..., L_q, L_k)
    if mask is not None and mask_mode == "after":
        weights = weights * mask  # zeroed but not renormalised
    return weights @ value, weights  # (..., L_q, d_v), (..., L_q, L_k)


@dataclass
class _Calls:
    """The first call of each case: its result or the error it raised."""

    runs: list[tuple[_Case, list[Tensor], Any, StudentError | None]]

    @property
    def failed(self) -> list[tuple[_Case, StudentError]]:
        return [(c, e) for c, _, _, e in self.runs if e is not None]

    @property
    def plain(self) -> list[tuple[_Case, StudentError]]:  # calls without a mask that raised
        return [(c, e) for c, e in self.failed if c.mask is None]

    @property
    def plain_ok(self) -> set[int]:  # the ranks that ran without a mask
        return {c.rank for c, _, _, e in self.runs if c.mask is None and e is None}

    @property
    def ok(self) -> list[_Case]:
        return [c for c, _, _, e in self.runs if e is None]


def sqrt_of_number(exc: BaseException, who: str = "your code", d_k: str = "query.size(-1)") -> None:
    """Name ``torch.sqrt(d_k)`` on a Python number (a TypeError), here and in MultiHeadAttention
    (``d_k``: how the exercise gets it)."""
    SDPA.detect_raised(exc, "sqrt", who=who, raised=raised(exc), d_k=d_k)


def _diagnose_exceptions(runs: list[tuple[_Case, list[Tensor], Any, StudentError | None]]) -> None:
    """Some calls raised: name the pattern (which ranks, with or without a mask) if there is one."""
    calls = _Calls(runs)
    failed, plain = calls.failed, calls.plain
    sqrt_of_number(failed[0][1].exc)

    def on(case: _Case, err: StudentError) -> str:
        return f"\n    On {case.describe()}: your code raised {raised(err.exc)}"

    where = ""
    if plain and calls.plain_ok:
        fails = " and ".join(_RANK_WORDS[r] for r in sorted({c.rank for c, _ in plain}))
        works = " and ".join(_RANK_WORDS[r] for r in sorted(calls.plain_ok))
        where = f"your code runs on {works} but raises on {fails}"
    SDPA.detect("raised", calls, where=where, raised_at=on(*plain[0]) if plain else "", on=on(*failed[0]))
    raise failed[0][1]  # the decorator reports it (or "not implemented yet" for a stub)


def robustness_diagnosis(
    note: str, on: str, what: str, got: Any, ref: Tensor, mask: Tensor | None, scores_shape: tuple[int, ...]
) -> None:
    """On a robustness case (``note``; ``""``: a mild one), name why code right on the mild cases goes
    wrong here, for any attention (multi-head too); return if that is not the story. ``on`` names the
    case, ``what`` is ``"weights"`` or ``"output"``, ``mask`` lines up with ``scores_shape``."""
    SDPA.detect("robust", SimpleNamespace(note=note, what=what, got=got, ref=ref, mask=mask, scores_shape=scores_shape),
                on=on)


def require_tuple(result: Any, who: str = "your function") -> None:
    """The contract's (output, weights) is a tuple: a list is named, here and in MultiHeadAttention."""
    SDPA.detect("tuple", SimpleNamespace(result=result), who=who)


def _unpack(result: Any, case: _Case, ref_out: Tensor, ref_w: Tensor) -> tuple[Any, Any]:
    """Check the return is a tuple (output, weights); name the usual slips."""
    SDPA.detect("return", SimpleNamespace(result=result, out=ref_out, w=ref_w), case=case.describe(),
                who="your function")
    return result


def _low_precision_case(fn: Callable[..., Any], dtype: torch.dtype) -> None:
    """Half-precision input (mixed-precision training): the fill must fit the dtype (``-1e9``
    and ``torch.finfo(torch.float32).min`` do not fit float16, the latter not bfloat16), and
    the results keep the input's dtype."""
    B, L_q, L_k, d_k = 2, randint(3, 6), randint(3, 6), 8
    q, k, v = (torch.randn(B, n, d_k).to(dtype) for n in (L_q, L_k, L_k))
    case = _Case(3, q, k, v, random_mask(B, L_q, L_k), note=f"{dtype} input")
    try:
        result = call_student(fn, q, k, v, case.mask)
    except StudentError as err:
        SDPA.detect_raised(err.exc, "half", case=case.describe(), raised=raised(err.exc), dtype=dtype)
        raise
    # compared with float32 arithmetic on the same inputs: bfloat16 keeps 8 significant bits, so forms
    # that are equal in exact arithmetic (the query scaled before the product) differ by up to 0.03
    ref_out, ref_w = _ref_attention(q.float(), k.float(), v.float(), case.mask)
    atol, rtol = (1e-2, 1e-2) if dtype == torch.float16 else (6e-2, 2e-2)
    got_out, got_w = _unpack(result, case, ref_out, ref_w)
    for what, got, ref in (("weights", got_w, ref_w), ("output", got_out, ref_out)):
        SDPA.detect("half result", SimpleNamespace(got=got, dtype=dtype), what=what, case=case.describe())
        expect_close(what, got, ref, case=f"on {case.describe()}", atol=atol, rtol=rtol)


@checker("scaled_dot_product_attention")
def check_scaled_dot_product_attention(fn: Callable[..., Any]) -> str:
    """Check ``fn(query, key, value, mask=None) -> (output, weights)`` against the reference."""
    require_function(fn, "scaled_dot_product_attention")
    cases = _attention_cases()
    runs: list[tuple[_Case, list[Tensor], Any, StudentError | None]] = []
    for case in cases:
        given = [t.clone() for t in case.inputs]  # the originals stay pristine for the comparisons
        try:
            runs.append((case, given, call_student(fn, *given), None))
        except StudentError as err:
            runs.append((case, given, None, err))
    if any(err is not None for *_, err in runs):
        _diagnose_exceptions(runs)

    for case, given, _, _ in runs:
        check_unchanged(("query", "key", "value", "mask"), given, case.inputs, f"on {case.describe()}")

    for case, _, result, _ in runs:
        ref_out, ref_w = _ref_attention(case.query, case.key, case.value, case.mask)
        got_out, got_w = _unpack(result, case, ref_out, ref_w)
        mistakes = SDPA.candidates(case, d_k=case.d_k)
        # scores near -150 carry float32 rounding of about 1e-5 into the weights
        atol = 1e-4 if case.note == VERY_NEGATIVE_NOTE else 1e-5
        for what, got, ref, index in (("weights", got_w, ref_w, 1), ("output", got_out, ref_out, 0)):
            if matches(got, ref, atol=atol):
                continue
            on = f"{what} (on {case.describe()})"
            robustness_diagnosis(case.note, on, what, got, ref, case.mask, case.scores_shape)
            for name, message, make in mistakes:
                candidate = make()[index]
                if candidate is not None and matches(got, candidate):
                    fail(f"{what} (on {case.describe()}): {message}", mistake=name)
            expect_close(what, got, ref, case=f"on {case.describe()}", atol=atol)
    masked = cases[3]  # 3-D with a mask, no fully blocked row: the gradient there is the plain softmax's
    gradient_probe(fn, _ref_attention, dict(zip(("query", "key", "value", "mask"), masked.inputs)),
                   what="attention", case=f"on {masked.describe()}")
    for dtype in (torch.float16, torch.bfloat16):
        _low_precision_case(fn, dtype)
    for case in (cases[0], cases[3]):  # on 'meta' too: no mask (a default mask built on the CPU shows), a mask
        meta = [t.to("meta") for t in case.inputs]
        check_input_device(lambda: fn(*meta), lambda: fn(*case.inputs), "your function", f"on {case.describe()}")
    # the [OK] line counts the mild cases only: it is stored in the executed notebooks, and the
    # two robustness cases (fully blocked rows, large scores) are named in the failures
    mild = sum(not case.note for case in cases)
    return f"{mild} cases: 2-D, 3-D and 4-D inputs, with and without masks"


# ---------------------------------------------------------------- causal_mask
def causal_mask_candidates(size: int) -> list[tuple[str, str, Tensor]]:
    """The causal table's wrong masks of ``size`` but tril(1), which make_tgt_mask words its own way."""
    return [c for c in CAUSAL.candidates(size) if c[0] != "diagonal shifted"]


def _causal_shape(size: int) -> Callable[[Tensor], None]:
    return lambda got: CAUSAL.detect("shape", SimpleNamespace(got=got, ref=_ref_causal_mask(size)),
                                     what=f"causal_mask({size})", shape=describe_shape(got))


_CAUSAL_MEANING = "Entry [i, j] is True when query i may attend to key j: j <= i."


@checker("causal_mask")
def check_causal_mask(fn: Callable[..., Any]) -> str:
    """Check ``fn(size, device=None) -> BoolTensor (size, size)``, True on and below the diagonal."""
    require_function(fn, "causal_mask")
    small = int(torch.randint(2, 6, ()))
    large = int(torch.randint(6, 13, ()))
    for size in (large, small, 1):  # size 1 last: there the mistakes look alike
        got = call_student(fn, size)
        compare_mask(f"causal_mask({size})", got, _ref_causal_mask(size), CAUSAL.candidates(size),
                    _causal_shape(size), _CAUSAL_MEANING)

    devices: list[Any] = ["cpu", torch.device("cpu"), None]
    if torch.cuda.is_available():
        devices.append("cuda")
    for device in devices:
        try:
            got = call_student(fn, small, device=device)
        except StudentError as err:
            CAUSAL.detect_raised(err.exc, "device", raised=raised(err.exc))
            raise
        call = f"causal_mask({small}, device={device!r})"
        expected = _ref_causal_mask(small, device=device)
        CAUSAL.detect("device", SimpleNamespace(got=got, expected=expected.device), call=call,
                      device=getattr(got, "device", None))
        candidates = [(n, m, t.to(expected.device)) for n, m, t in CAUSAL.candidates(small)]
        compare_mask(call, got, expected, candidates, meaning=_CAUSAL_MEANING)

    # "meta" exists on every machine, so an ignored device shows without a GPU; code that
    # cannot run there (a rare way of building the mask) is not the student's mistake
    try:
        on_meta = fn(small, device="meta")
    except Exception:  # noqa: BLE001 - see above
        on_meta = None
    CAUSAL.detect("meta", SimpleNamespace(got=on_meta), size=small, device=getattr(on_meta, "device", None))
    return "three sizes including 1, and the device argument"


# ---------------------------------------------------------------- padding_mask
def _padding_cases() -> list[tuple[Tensor, int]]:
    """(tokens (B, L), pad_id): pad 0 at the ends, a non-zero pad_id with real 0 tokens, scattered pads."""
    vocab, cases = 20, []
    for layout in ("end, pad 0", "end, pad non-zero", "scattered"):
        B, L = randint(2, 3), randint(5, 9)
        pad_id = 0 if layout == "end, pad 0" else randint(1, vocab - 1)
        tokens = torch.randint(vocab - 1, (B, L))
        tokens = tokens + (tokens >= pad_id).long()  # every id but pad_id
        if layout == "scattered":
            real = random_mask(B, L, p_true=0.6)
        else:
            lengths = torch.randint(1, L, (B,))  # every row padded ...
            lengths[int(torch.randint(B, ()))] = L  # ... but one, as in a real batch
            real = torch.arange(L) < lengths[:, None]  # (B, L)
        if pad_id != 0:  # a real token 0, so comparing with 0 instead of pad_id shows
            row = int(torch.randint(B, ()))
            tokens[row, int(torch.nonzero(real[row])[0])] = 0
        cases.append((tokens.masked_fill(~real, pad_id), pad_id))
    return cases


def padding_shape_diagnosis(B: int, L: int, what: str) -> Callable[[Tensor], None]:
    return lambda got: PADDING.detect("shape", SimpleNamespace(got=got, B=B, L=L), what=what, B=B, L=L,
                                      shape=describe_shape(got))


def _padding_candidates(tokens: Tensor, pad_id: int) -> list[tuple[str, str, Tensor]]:
    """The catalogued wrong padding masks of ``tokens``, each ``(name, message, mask (B, 1, L))``."""
    return PADDING.candidates((tokens, pad_id), pad_id=pad_id)


@checker("padding_mask")
def check_padding_mask(fn: Callable[..., Any]) -> str:
    """Check ``fn(tokens (B, L), pad_id) -> BoolTensor (B, 1, L)``, True where tokens != pad_id."""
    require_function(fn, "padding_mask")
    cases = _padding_cases()
    for tokens, pad_id in cases:
        given = tokens.clone()
        got = call_student(fn, given, pad_id)
        what = f"padding_mask(tokens of shape {describe_shape(tokens)}, pad_id={pad_id})"
        check_unchanged(["tokens"], [given], [tokens], what)
        candidates = _padding_candidates(tokens, pad_id)
        if len({n for n, _, c in candidates if isinstance(got, Tensor) and got.device == c.device
                 and got.shape == c.shape and equal(got, c)}) > 1:
            # two mistakes give this mask here: judge the rows reversed too (padding first), which tell them apart
            flipped = tokens.flip(1)
            again = call_student(fn, flipped.clone(), pad_id)
            if isinstance(again, Tensor):
                tokens, got, what = flipped, again, what.replace("tokens of", "the rows reversed, tokens of")
                candidates = _padding_candidates(tokens, pad_id)
        B, L = tokens.shape
        compare_mask(what, got, _ref_padding_mask(tokens, pad_id), candidates, padding_shape_diagnosis(B, L, what),
                    f"Entry [b, 0, j] is True when token j of row b is a real token (not pad_id = {pad_id}).",
                    lambda idx, tokens=tokens: f" (token {int(tokens[idx[0], idx[-1]])})")
    tokens, pad_id = cases[0]
    check_input_device(lambda: fn(tokens.to("meta"), pad_id), lambda: fn(tokens.clone(), pad_id), "your padding_mask",
                       f"tokens of shape {describe_shape(tokens)}, pad_id={pad_id}")
    return f"{len(cases)} batches, pad_id 0 and non-zero"


# ---------------------------------------------------------------- hints
register_hints(
    "scaled_dot_product_attention",
    [
        "Follow the formula softmax(Q K^T / sqrt(d_k)) V one step at a time: scores, then the mask, then "
        "the softmax, then the weighted sum of the values. The scores have shape (..., L_q, L_k).",
        "Transpose only the last two axes of the key, whatever the number of batch dims: "
        "key.transpose(-2, -1). d_k is the last dim of query: query.size(-1). The @ operator broadcasts "
        "over the leading dims.",
        "Masking: where the mask is False, replace the score by the most negative finite number of its "
        "dtype BEFORE the softmax: scores.masked_fill(~mask, torch.finfo(scores.dtype).min). Not -inf: a "
        "row with every key blocked would become NaN. Skip this step when mask is None. The softmax runs "
        "over the keys, the last axis: dim=-1.",
        "The weights are the softmax result, (..., L_q, L_k); the output is the weights times the values "
        "(weights on the left), (..., L_q, d_v). Return both, output first.",
    ],
)
register_hints(
    "causal_mask",
    [
        "Row i is query position i; it may look at keys 0..i (itself and the past), never at later ones. "
        "Draw the mask for size 4: which entries are True?",
        "The True entries form the lower triangle, diagonal included. torch.tril keeps the lower "
        "triangle of a matrix.",
        "Start from torch.ones(size, size, dtype=torch.bool, device=device) and keep its lower triangle "
        "with torch.tril (or .tril()): the result is then bool and on the right device.",
    ],
)
register_hints(
    "padding_mask",
    [
        "A key may be attended to when it is a real token, not padding. Compare the tokens with pad_id "
        "element by element: True = may attend.",
        "Comparing gives a (B, L) bool tensor; the mask must be (B, 1, L), so that it broadcasts over the "
        "queries of the (B, L_q, L_k) scores.",
        "Insert the middle axis with unsqueeze(1) (or indexing with None). Use the pad_id argument, never "
        "a hard-coded 0.",
    ],
)
