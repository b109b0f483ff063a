"""Checkers for notebook 01 (attention): scaled dot-product attention and the two masks.

The student's function runs on fresh random inputs of awkward shapes (2-D to 4-D,
``L_q != L_k != d_k != d_v``, masks that block different keys in each row, a non-zero
``pad_id``) and is compared with :mod:`course_utils.attention`; a wrong result is compared
with the reference run with each catalogued mistake (``MISTAKES``) to name it. The mild
cases come first (every mask row sees a key and blocks one, scores of order 1); then the
robustness cases: fully blocked query rows (uniform weights from the ``finfo(dtype).min``
fill, NaN from ``-inf``), large scores (a written-out softmax overflows), scores near -150
(a fill such as -30 leaks) and half precision (the fill must fit the dtype).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
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

__all__ = ["check_scaled_dot_product_attention", "check_causal_mask", "check_padding_mask"]

# The names a failed check can report in ``CheckResult.mistake`` (besides the generic ones of
# ``expect_close`` and ``call_student``); tests/test_checks_attention.py tests each of them.
MISTAKES: dict[str, list[str]] = {
    "scaled_dot_product_attention": [
        "not a function", "no scaling", "scaled by d_k", "multiplied by sqrt(d_k)", "scaled by the wrong dimension",
        "softmax over the wrong axis", "inverted mask", "mask ignored", "mask applied after the softmax",
        "mask filled with 0", "filled with -inf", "fully blocked row not uniform", "softmax overflows",
        "fill not negative enough", "fill overflows half precision", "dtype not preserved",
        "scores returned as weights", "value on the wrong side", "transpose only works for 2-D", "only works for 3-D",
        "fails for some numbers of dims", "if mask", "mask=None not handled", "mask not broadcast",
        "fails with a mask", "wrong return order", "only the output returned", "not a tuple",
        "input modified in place", "gradient blocked", "gradient differs", "backward fails", "wrong device",
        "parameter renamed", "sqrt of an int",
    ],
    "causal_mask": [
        "not a function", "not a tensor", "upper triangle", "inverted mask", "diagonal excluded", "diagonal shifted",
        "additive float mask", "not a bool mask", "wrong shape", "wrong device", "no device parameter",
        "device ignored",
    ],
    "padding_mask": [
        "not a function", "not a tensor", "inverted mask", "missing query axis", "wrong axis", "hard-coded pad id",
        "ids below pad_id as padding",
        "additive float mask", "not a bool mask", "wrong shape", "wrong device", "input modified in place",
        "parameter renamed",
    ],
}


# ---------------------------------------------------------------- shared helpers
def compare_mask(what: str, got: Any, ref: Tensor, candidates: list[tuple[str, str, Tensor]],
                shape_diagnosis: Callable[[Tensor], None] | None = None, meaning: str = "",
                entry: Callable[[tuple[int, ...]], str] = lambda idx: "") -> None:
    """Compare a student's bool mask with ``ref``. ``candidates`` are ``(name, message, the
    mask with that mistake)``, compared with the pattern read as bool (``!= 0``): a float mask
    with a wrong pattern gets the pattern diagnosis first, the dtype one after. Any other
    wrong pattern is shown by its first wrong entries; ``entry(index)`` adds words to each
    (the token there), ``meaning`` says what an entry means."""
    if not isinstance(got, Tensor):
        fail(f"{what} should return a torch.Tensor of dtype torch.bool, but your code returned {type(got).__name__}."
             + (" Did you forget `return`?" if got is None else ""), mistake="not a tensor")
    if got.device.type != ref.device.type:
        fail(f"{what} returned a tensor on device {got.device}, expected {ref.device}.", mistake="wrong device")
    if got.shape != ref.shape:
        if shape_diagnosis is not None:
            shape_diagnosis(got)
        fail(f"{what} has shape {describe_shape(got)}, expected {describe_shape(ref)}.", mistake="wrong shape")
    if got.dtype == torch.bool:
        pattern = got
    else:
        if got.is_floating_point() and (~ref).any():
            # nn.Transformer's convention: 0 where allowed, -inf (or a big negative) where blocked
            blocked, allowed = got[~ref].double(), got[ref].double()
            if bool((allowed == 0).all()) and bool((blocked < -1e3).all()):
                fail(f"{what} is an additive float mask (0 where allowed, {float(blocked.max()):.3g} where blocked), "
                     "the convention of nn.Transformer. This course uses a bool mask instead: True = may attend, "
                     "False = blocked.", mistake="additive float mask")
        pattern = got != 0
    if not equal(pattern, ref):
        for name, message, candidate in candidates:
            if equal(pattern, candidate):
                fail(f"{what}: {message}", mistake=name)
    if got.dtype != torch.bool:
        right = " The True/False pattern is right;" if equal(pattern, ref) else ""
        fail(f"{what} has dtype {got.dtype}, expected torch.bool.{right} a mask must be a bool tensor (True = may "
             "attend): build it from a comparison or convert it with .bool().", mistake="not a bool mask")
    wrong = torch.nonzero(pattern.cpu() != ref.cpu()).tolist()  # (n, dim) indices, row-major order
    if wrong:
        shown = "; ".join(f"[{', '.join(map(str, idx))}]{entry(tuple(idx))} should be {not bool(pattern[tuple(idx)])}"
                          for idx in wrong[:3])
        fail(f"{what}: {len(wrong)} of {ref.numel()} entries are wrong; the first: {shown}. {meaning}".rstrip(),
             mistake="values differ")
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


def _attention_mistakes(case: _Case) -> list[tuple[str, str, Callable[[], tuple[Tensor | None, Tensor | None]]]]:
    """``(name, message, () -> (output, weights) with that mistake)``, in the order tried."""
    q, k, v, m = case.query, case.key, case.value, case.mask
    d_k = q.size(-1)
    root = math.sqrt(d_k)

    def with_(scale: float = root, dim: int = -1, mode: str = "fill", mask: Tensor | None = m):
        return lambda: _attention_variant(q, k, v, mask, scale, dim, mode)

    out: list[tuple[str, str, Callable[[], tuple[Tensor | None, Tensor | None]]]] = [
        ("no scaling", "the scores are not scaled: divide query @ key^T by sqrt(d_k) before the "
         "softmax (without it, large d_k pushes the softmax towards one-hot weights).", with_(1.0)),
        ("scaled by d_k", f"the scores are divided by d_k = {d_k} instead of sqrt(d_k): take the square "
         "root (math.sqrt(d_k) or d_k ** 0.5).", with_(float(d_k))),
        ("multiplied by sqrt(d_k)", "the scores are multiplied by sqrt(d_k): divide by it instead.",
         with_(1.0 / root)),
    ]
    named = {"d_v (the last dim of value)": v.size(-1), "L_k (the number of keys)": k.size(-2),
             "L_q (the number of queries)": q.size(-2)}
    for i, size in enumerate(q.shape[:-2]):
        named.setdefault(f"a batch dim (query.size({i}))", size)
    out += [("scaled by the wrong dimension", f"the scores are divided by sqrt({size}), the square root of {words}, "
             f"instead of sqrt(d_k) = sqrt({d_k}): d_k is the last dimension of query and key, query.size(-1).",
             with_(math.sqrt(size))) for words, size in named.items() if size != d_k]
    ndim = len(case.scores_shape)
    axes = {dim: f"a batch dim (dim={dim})" for dim in range(ndim - 2)} | {ndim - 2: "the queries (dim=-2)"}
    out += [("softmax over the wrong axis", f"the softmax runs over {axis} instead of over the keys: use "
             "softmax(dim=-1), so each query's weights over the keys sum to 1.", with_(dim=dim))
            for dim, axis in axes.items()]
    if m is not None:
        out += [
            ("inverted mask", "the mask is inverted: you block the keys where the mask is True. In this "
             "course True = may attend, so fill the scores where the mask is False (~mask).",
             with_(mode="inverted")),
            ("mask ignored", "the mask is ignored: the weights are the same as without a mask. Fill the "
             "scores where the mask is False with a very negative number before the softmax.",
             with_(mask=None)),
            ("mask applied after the softmax", "the mask is applied after the softmax: the blocked weights "
             "are zero but each row no longer sums to 1. Mask the scores before the softmax instead.",
             with_(mode="after")),
            ("mask filled with 0", "the blocked scores are set to 0, which still gives them weight "
             "(exp(0) = 1). Fill them with a very negative finite number (torch.finfo(scores.dtype).min "
             "which follows the dtype; -1e9 overflows float16) so their weight becomes 0.", with_(mode="zero")),
        ]
    else:
        scores = q @ k.transpose(-2, -1)  # (..., L_q, L_k)
        out += [("scores returned as weights", "the weights you return are the scores before the softmax: return "
                 "softmax(scores) (each row sums to 1) as the weights.", lambda s=s: (None, s))
                for s in (scores / root, scores)]
    return out + [("value on the wrong side", "the output is transposed: (..., d_v, L_q) instead of (..., L_q, d_v). "
                   "Multiply the weights by the values with the weights on the left: weights @ value.",
                   lambda: (_ref_attention(q, k, v, m)[0].transpose(-2, -1), None))]


# torch.sqrt(query.size(-1)): torch's math takes tensors only, d_k is a Python int
_SQRT_OF_NUMBER = re.compile(r"\b(r?sqrt)\(\): argument 'input' \(position 1\) must be Tensor, not (int|float)")


def sqrt_of_number(exc: BaseException, who: str = "your code", d_k: str = "query.size(-1)") -> None:
    """Name ``torch.sqrt(d_k)`` on a Python number (a TypeError), here and in MultiHeadAttention
    (``d_k``: how the exercise gets it)."""
    found = _SQRT_OF_NUMBER.search(str(exc)) if isinstance(exc, TypeError) else None
    if found:
        fail(f"{who} raised {raised(exc)}\n    torch.{found[1]} takes a tensor, not a Python {found[2]} (d_k = {d_k} "
             "is an int): take the square root with math.sqrt(d_k) or d_k ** 0.5, a Python float that divides the "
             "scores.", mistake="sqrt of an int")


_VALUE_FIRST = re.compile(r"(?<![\w.])(value|values|v|V|val)\s*@|(matmul|bmm)\(\s*(value|values|v|V|val)\s*,"
                          r"|(?<![\w.])(value|values|v|V|val)\.(matmul|bmm)\(")


def _diagnose_exceptions(runs: list[tuple[_Case, list[Tensor], Any, StudentError | None]]) -> None:
    """Some calls raised: name the pattern (which ranks, with or without a mask) if there is one."""
    failed = [(c, e) for c, _, _, e in runs if e is not None]
    plain = [(c, e) for c, e in failed if c.mask is None]
    plain_ok = {c.rank for c, _, _, e in runs if c.mask is None and e is None}
    ok = [c for c, _, _, e in runs if e is None]
    sqrt_of_number(failed[0][1].exc)

    def on(case: _Case, err: StudentError) -> str:
        return f"\n    On {case.describe()}: your code raised {raised(err.exc)}"

    if plain and plain_ok:
        fails = " and ".join(_RANK_WORDS[r] for r in sorted({c.rank for c, _ in plain}))
        works = " and ".join(_RANK_WORDS[r] for r in sorted(plain_ok))
        where, raised_at = f"your code runs on {works} but raises on {fails}", on(*plain[0])
        if plain_ok == {2}:
            fail(f"{where}. Transposing with key.T or key.transpose(0, 1) only swaps the right axes of a 2-D "
                 f"tensor: use key.transpose(-2, -1) so it works with any number of batch dims.{raised_at}",
                 mistake="transpose only works for 2-D")
        if 3 in plain_ok:
            fail(f"{where}: it is written for 3-D inputs only. Write it for any number of leading dims: "
                 "key.transpose(-2, -1) (not transpose(1, 2) or permute(0, 2, 1)), @ or torch.matmul (not "
                 f"torch.bmm), and negative axes such as softmax(dim=-1).{raised_at}", mistake="only works for 3-D")
        fail(f"{where}. Use negative axes (key.transpose(-2, -1), softmax(dim=-1)) and @ so the code works with any "
             f"number of leading dims.{raised_at}", mistake="fails for some numbers of dims")
    if plain and ok:  # every call without a mask raised, some with a mask ran
        fail("your code fails when no mask is given (mask=None) but runs with one: skip the masking step when the "
             f"mask is None (`if mask is not None:`).{on(*plain[0])}", mistake="mask=None not handled")
    if not plain:  # only calls with a mask raised
        case, err = failed[0]
        if "Boolean value of Tensor" in str(err.exc):
            fail("`if mask:` asks for the truth value of a whole tensor, which raises. Test whether a mask was "
                 f"given with `if mask is not None:`.{on(case, err)}", mistake="if mask")
        if all(tuple(c.mask.shape) != c.scores_shape for c, _ in failed) and any(
            c.mask is not None and tuple(c.mask.shape) == c.scores_shape for c in ok
        ):
            fail("your code works when the mask has exactly the shape of the scores but fails when it only "
                 "broadcasts to them (e.g. (L_q, L_k) for every batch item, or (B, 1, L_k)). Indexing with a mask "
                 "(`scores[~mask] = ...`) needs the exact shape, and an axis added to the mask (mask.unsqueeze(1)) "
                 "lines it up with the wrong axes of the scores; pass the mask as it is to masked_fill or "
                 f"torch.where, which broadcast it.{on(case, err)}", mistake="mask not broadcast")
        fail(f"your code fails when a mask is given.{on(case, err)}", mistake="fails with a mask")
    # every call raised
    case, first = failed[0]
    line = student_line(first.exc) or ""
    if isinstance(first.exc, RuntimeError) and _VALUE_FIRST.search(line.split(":", 1)[-1]):
        fail("the values are multiplied on the wrong side: the output is weights @ value, (..., L_q, L_k) @ "
             f"(..., L_k, d_v) -> (..., L_q, d_v).{on(case, first)}", mistake="value on the wrong side")
    raise first  # the decorator reports it (or "not implemented yet" for a stub)


def robustness_diagnosis(
    note: str, on: str, what: str, got: Any, ref: Tensor, mask: Tensor | None, scores_shape: tuple[int, ...]
) -> None:
    """On a robustness case (``note``; ``""``: a mild one), name why code right on the mild cases goes
    wrong here, for any attention (multi-head too); return if that is not the story. ``on`` names the
    case, ``what`` is ``"weights"`` or ``"output"``, ``mask`` lines up with ``scores_shape``."""
    if not note or not isinstance(got, Tensor) or got.shape != ref.shape or not got.is_floating_point():
        return
    finite_rows = isfinite(got).all(-1)  # (..., L_q)
    if mask is None:  # large scores
        if not bool(finite_rows.all()):
            fail(
                f"{on} contains NaN or inf, although your code is right when the scores are of order 1. "
                "Written out as exp(scores) / exp(scores).sum(...), the softmax overflows: exp(x) is inf in "
                "float32 above x = 88.7, and inf / inf = NaN; with one max subtracted for the whole tensor, "
                "rows far below it underflow to 0 / 0 = NaN instead. Use torch.softmax(scores, dim=-1), which "
                "subtracts each row's own max first (or subtract scores.amax(-1, keepdim=True) yourself).",
                mistake="softmax overflows",
            )
        return
    if note == VERY_NEGATIVE_NOTE and what == "weights":
        leak = got.masked_select(~mask.expand(scores_shape))
        if bool(isfinite(got).all()) and bool((leak != 0).any()):
            fail(
                f"{on}: blocked keys get weight (up to {float(leak.abs().max()):.3g}), although your code is right "
                "on scores of order 1. The fill value is not negative enough: a fill of, say, -30 is above "
                "every allowed score here, so the blocked keys win. Fill with the most negative number of the "
                "scores' dtype, torch.finfo(scores.dtype).min, so a blocked weight is exactly 0.",
                mistake="fill not negative enough",
            )
    blind = ~mask.expand(scores_shape).any(-1)  # (..., L_q): queries that see no key
    if not matches(torch.where(blind.unsqueeze(-1), ref, got), ref):
        return  # wrong elsewhere too: another mistake
    if not bool(finite_rows.all()):
        fail(
            f"{on}: the rows of the queries whose keys are all blocked are NaN (a padding query, say). "
            "That is what a fill with float('-inf') gives: softmax(-inf, ..., -inf) = 0 / 0 = NaN there, and one NaN "
            "spreads through every later layer and into the loss. Fill with the most negative finite "
            "number, torch.finfo(scores.dtype).min (not -1e9, which float16 cannot hold): such a row then gets uniform weights, "  # noqa: E501
            "finite, and the loss ignores it anyway.",
            mistake="filled with -inf",
        )
    zero = bool((got[blind] == 0).all())
    fail(
        f"{on}: the rows of the queries whose keys are all blocked are "
        + ("all 0 (nan_to_num after the softmax does that, and so does F.scaled_dot_product_attention)"
           if zero else "not what the finite fill gives")
        + ". With blocked scores filled with torch.finfo(scores.dtype).min, every score of such a row "
        "is the same, so its weights are uniform (1/L_k each) and its output is the mean of the values. "
        "Fill the scores before the softmax, and leave the softmax's result as it is.",
        mistake="fully blocked row not uniform",
    )


def require_tuple(result: Any, who: str = "your function") -> None:
    """The contract's (output, weights) is a tuple: a list is named, here and in MultiHeadAttention."""
    if not isinstance(result, tuple):
        fail(f"{who} returns a {type(result).__name__}; return a tuple (output, weights): `return output, weights`.",
             mistake="not a tuple")


def _unpack(result: Any, case: _Case, ref_out: Tensor, ref_w: Tensor) -> tuple[Any, Any]:
    """Check the return is a tuple (output, weights); name the usual slips."""
    if isinstance(result, Tensor) and result.shape == ref_out.shape:
        fail("your function returns only the output; return the attention weights too, as a tuple: "
             "`return output, weights`.", mistake="only the output returned")
    if isinstance(result, Tensor):
        fail(f"your function returns a single tensor of shape {describe_shape(result)} (on {case.describe()}); it "
             "must return a tuple (output, weights).", mistake="not a tuple")
    if result is None:
        fail("your function returns None: end it with `return output, weights`.", mistake="not a tuple")
    require_tuple(result)
    if len(result) != 2:
        fail(f"your function returns a tuple of {len(result)} things; return exactly two: `return output, weights`.",
             mistake="not a tuple")
    first, second = result
    shapes = tuple(t.shape if isinstance(t, Tensor) else None for t in result)
    if shapes == (ref_w.shape, ref_out.shape):
        fail("the return order is swapped: you return (weights, output); the exercise asks for `return output, weights`.",  # noqa: E501
             mistake="wrong return order")
    return first, second


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
        msg = str(err.exc)
        mixed = isinstance(err.exc, RuntimeError) and ("Half" in msg or "BFloat16" in msg) and "Float" in msg
        for found, advice, name in (
            (mixed, f"A float32 tensor got mixed into the {dtype} computation and promoted part of it: (~mask) * "
             "number and torch.tensor(...) are float32. Keep the scores' dtype: scores.masked_fill(~mask, "
             "torch.finfo(scores.dtype).min).", "dtype not preserved"),
            ("overflow" in msg, f"The fill value does not fit in {dtype}: -1e9 is beyond float16's range (about "
             "-65504), and torch.finfo(torch.float32).min beyond both half-precision types. Use the most negative "
             "number of the scores' own dtype, torch.finfo(scores.dtype).min.", "fill overflows half precision"),
        ):
            if found:
                fail(f"on {case.describe()} your code raised {raised(err.exc)}\n    {advice}", mistake=name)
        raise
    # compared with float32 arithmetic on the same inputs: bfloat16 keeps 8 significant bits, so forms
    # that are equal in exact arithmetic (the query scaled before the product) differ by up to 0.03
    ref_out, ref_w = _ref_attention(q.float(), k.float(), v.float(), case.mask)
    atol, rtol = (1e-2, 1e-2) if dtype == torch.float16 else (6e-2, 2e-2)
    got_out, got_w = _unpack(result, case, ref_out, ref_w)
    for what, got, ref in (("weights", got_w, ref_w), ("output", got_out, ref_out)):
        if isinstance(got, Tensor) and got.dtype != dtype:
            fail(f"{what} (on {case.describe()}) has dtype {got.dtype}: your code changes the dtype (a .float() or a "
                 "float32 tensor mixed in). Keep the input's dtype, so half-precision training stays in half "
                 "precision.",
                 mistake="dtype not preserved")
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
        mistakes = _attention_mistakes(case)
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
    ones = torch.ones(size, size, dtype=torch.bool)
    return [
        ("upper triangle", "True above the diagonal instead of below it (the mask is transposed): query i "
         "would see the future keys i..size-1. Keep the lower triangle with the diagonal (torch.tril).",
         ones.triu()),
        ("inverted mask", "the mask is inverted: True marks the future keys, the blocked ones. In this course "
         "True = may attend: the keys on and below the diagonal.", ones.triu(1)),
        ("diagonal excluded", "the diagonal is False, so a token cannot see itself. Query i may attend to "
         "keys 0..i, itself included: keep the diagonal (torch.tril with the default diagonal=0).",
         ones.tril(-1)),
    ]


def _causal_mask_candidates(size: int) -> list[tuple[str, str, Tensor]]:
    """:func:`causal_mask_candidates` (shared with make_tgt_mask, which words tril(1) its own way) and tril(1)."""
    return causal_mask_candidates(size) + [
        ("diagonal shifted", "True also just above the diagonal (tril(diagonal=1)): query i sees key i + 1, the "
         "next token, which it must not know yet. Keep torch.tril with the default diagonal=0.",
         torch.ones(size, size, dtype=torch.bool).tril(1))]


def _causal_shape(size: int) -> Callable[[Tensor], None]:
    def diagnose(got: Tensor) -> None:
        if got.numel() == size * size and got.dim() > 2 and all(s == 1 for s in got.shape[:-2]):
            fail(f"causal_mask({size}) has shape {describe_shape(got)}: return exactly (size, size); it broadcasts "
                 "over the batch by itself.", mistake="wrong shape")

    return diagnose


_CAUSAL_MEANING = "Entry [i, j] is True when query i may attend to key j: j <= i."


@checker("causal_mask")
def check_causal_mask(fn: Callable[..., Any]) -> str:
    """Check ``fn(size, device=None) -> BoolTensor (size, size)``, True on and below the diagonal."""
    require_function(fn, "causal_mask")
    small = int(torch.randint(2, 6, ()))
    large = int(torch.randint(6, 13, ()))
    for size in (large, small, 1):  # size 1 last: there the mistakes look alike
        got = call_student(fn, size)
        compare_mask(f"causal_mask({size})", got, _ref_causal_mask(size), _causal_mask_candidates(size),
                    _causal_shape(size), _CAUSAL_MEANING)

    devices: list[Any] = ["cpu", torch.device("cpu"), None]
    if torch.cuda.is_available():
        devices.append("cuda")
    for device in devices:
        try:
            got = call_student(fn, small, device=device)
        except StudentError as err:
            if isinstance(err.exc, TypeError) and "keyword argument 'device'" in str(err.exc):
                fail("your function has no `device` parameter; the signature is causal_mask(size, device=None).\n"
                     f"    your code raised {raised(err.exc)}", mistake="no device parameter")
            raise
        call = f"causal_mask({small}, device={device!r})"
        expected = _ref_causal_mask(small, device=device)
        if isinstance(got, Tensor) and got.device != expected.device:
            fail(f"{call} returned a tensor on {got.device}: create the mask on the device you are given "
                 "(device=device), so it lands where the scores are.", mistake="device ignored")
        candidates = [(n, m, t.to(expected.device)) for n, m, t in _causal_mask_candidates(small)]
        compare_mask(call, got, expected, candidates, meaning=_CAUSAL_MEANING)

    # "meta" exists on every machine, so an ignored device shows without a GPU; code that
    # cannot run there (a rare way of building the mask) is not the student's mistake
    try:
        on_meta = fn(small, device="meta")
    except Exception:  # noqa: BLE001 - see above
        on_meta = None
    if isinstance(on_meta, Tensor) and on_meta.device.type != "meta":
        fail(f"causal_mask({small}, device='meta') returned a tensor on {on_meta.device}: the `device` argument is "
             "ignored. Create the mask on that device (pass device=device when you create the tensor), so it lands "
             "where the scores are (the GPU on Colab).", mistake="device ignored")
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
    def diagnose(got: Tensor) -> None:
        if tuple(got.shape) == (B, L):
            fail(f"{what} has shape (B, L) = {describe_shape(got)}, expected (B, 1, L) = ({B}, 1, {L}): add the "
                 "query axis in the middle (unsqueeze(1)) so the mask broadcasts over the queries of the (B, L_q, "
                 "L_k) scores. A (B, L) mask would broadcast as (1, B, L) and mix up the batch items.",
                 mistake="missing query axis")
        if got.numel() == B * L and got.dim() == 3:
            fail(f"{what} has shape {describe_shape(got)}, expected (B, 1, L) = ({B}, 1, {L}): the new axis of size "
                 "1 goes in the middle (unsqueeze(1)), where the queries are, so each query row sees the same keys.",
                 mistake="wrong axis")

    return diagnose


def _padding_candidates(tokens: Tensor, pad_id: int) -> list[tuple[str, str, Tensor]]:
    """The catalogued wrong padding masks of ``tokens``, each ``(name, message, mask (B, 1, L))``."""
    B, L = tokens.shape
    ref = _ref_padding_mask(tokens, pad_id)  # (B, 1, L)
    candidates = [("inverted mask", "the mask is inverted: it is True at the padding. In this course True = may "
                   "attend, so the mask is True at the real tokens (tokens != pad_id).", ~ref)]
    zero_words = (f"the mask treats the token id 0 as padding, but pad_id is {pad_id} here: compare with the "
                  "pad_id argument, not a hard-coded 0 (`tokens.bool()` also compares with 0).")
    if pad_id != 0:
        candidates += [("hard-coded pad id", zero_words, m.unsqueeze(1)) for m in (tokens != 0, tokens == 0)]
        below = sorted(set(tokens[tokens < pad_id].tolist()))  # real ids, never empty (a real 0)
        candidates.append(("ids below pad_id as padding", f"the real tokens with ids smaller than pad_id ({below}"
                           ") are marked as padding too: `tokens > pad_id` assumes pad_id is the smallest id. "
                           "Compare for inequality: tokens != pad_id.", (tokens > pad_id).unsqueeze(1)))
    is_pad = tokens == pad_id  # (B, L)
    first_pad = torch.where(is_pad.any(1), is_pad.int().argmax(1), L)  # (B,): a length, d2l's valid_len
    n_real = (~is_pad).sum(1)  # (B,)
    trailing = ("{} marked as padding, as if each row were its real tokens followed by padding (a mask built from "
                "lengths, d2l's valid_len habit). Padding is wherever the pad id is, at the start or in the middle "
                "too: compare the ids themselves, tokens != pad_id.").format
    positions = torch.arange(L)  # (L,)
    return candidates + [
        ("assumed trailing padding", trailing("every position from the first pad id on is"),
         (positions < first_pad[:, None]).unsqueeze(1)),
        ("assumed trailing padding", trailing("the first n tokens of each row (n = its number of real tokens) are "
                                              "taken as real and the rest is"), (positions < n_real[:, None]).unsqueeze(1)),  # noqa: E501
    ]


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
