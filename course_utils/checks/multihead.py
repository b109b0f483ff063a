"""Checkers for notebook 02 (multi-head attention): ``split_heads``, ``merge_heads``,
``MultiHeadAttention``.

Each checker runs the student's code on fresh random inputs whose sizes all differ
(``B``, ``H``, ``d_k``, ``L_q``, ``L_k`` and ``D = H * d_k``), so a mixed-up axis shows as
a wrong shape or wrong values. When the result is wrong it is compared with the
reference computed *with each catalogued mistake*; the first match names the mistake
(``CheckResult.mistake`` is the short catalogue name, the feedback says it in plain words).

Catalogue (``CheckResult.mistake``):

* ``split_heads``: ``"view(B, H, L, d_k) without transpose"``, ``"returns (B, L, H, d_k)"``,
  ``"transposed wrong axes"``, ``"heads take strided features"``, ``"input modified in place"``,
  ``"no divisibility check"``, ``"wrong error type"``.
* ``merge_heads``: ``"reshape without transpose"``, ``"heads not flattened"``,
  ``"features in wrong order"``, ``"view on a non-contiguous tensor"``, ``"wrong shape"``.
* ``MultiHeadAttention``: ``"missing submodule"``, ``"wrong submodule"``,
  ``"missing output projection"``, ``"split without transpose"``, ``"mask ignored"``,
  ``"inverted mask"``, ``"mask broadcast wrongly"``, ``"no scaling"``,
  ``"scaled by sqrt(d_model)"``, ``"scaled by d_k"``, ``"weights averaged over heads"``,
  ``"projections swapped"``, ``"inputs swapped"``, ``"fails for cross-attention"``,
  ``"wrong return"``, ``"input modified in place"``, ``"no divisibility check"``,
  ``"wrong error type"``, and for dropout (train mode, ``dropout=p``; see
  :func:`_check_dropout`): ``"dropout missing"``, ``"hard-coded dropout p"``,
  ``"dropout on the output"``, ``"dropout in the wrong place"``, ``"weights returned after
  dropout"``, ``"dropout ignores eval mode"``, and scaled_dot_product_attention's
  robustness names in its words (``"filled with -inf"``, ``"fully blocked row not
  uniform"``, ``"fill not negative enough"``).
* all three: ``"gradient blocked"``, ``"gradient differs"``, ``"backward fails"`` (the
  shared probe, :func:`._core.gradient_probe`).

"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..multihead import MultiHeadAttention, merge_heads, split_heads
from .attention import _VERY_NEGATIVE, _very_negative, require_tuple, robustness_diagnosis
from ._core import (
    Mistake,
    StudentError,
    allclose,
    call_student,
    check_dtype_follows,
    check_unchanged,
    checker,
    describe_shape,
    dropout_pattern,
    expect_close,
    fail,
    fail_eval_dropout,
    fail_fixed_p,
    gradient_probe,
    is_view_error,
    matches,
    randint,
    random_mask,
    register_hints,
    require_distinct_roles,
    require_module_class,
    student_line,
)

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head_attention"]



# ---------------------------------------------------------------- shared helpers
def _head_dims(batch_equals_heads: bool = False) -> tuple[int, int, int, int, int]:
    """``B, H, d_k, L_q, L_k`` all different from each other and from ``D = H * d_k``
    (``B == H`` on request, to catch a mask lined up with the head axis)."""
    while True:
        B, H, d_k = randint(2, 4), randint(2, 4), randint(3, 7)
        L_q, L_k = randint(4, 9), randint(4, 9)
        if batch_equals_heads:
            B = H
        sizes = [H, d_k, L_q, L_k, H * d_k] + ([] if batch_equals_heads else [B])
        if len(set(sizes)) == len(sizes):
            return B, H, d_k, L_q, L_k


def _view_error(err: StudentError) -> None:
    """Name the classic ``.view`` after ``.transpose`` error instead of just reporting it."""
    if is_view_error(err.exc):
        line = student_line(err.exc)
        fail(
            "your code raised RuntimeError: .view cannot reshape a tensor after .transpose, "
            "because transposing makes its memory non-contiguous. Use .reshape(...) (or "
            ".contiguous().view(...))." + (f"\n    at {line}" if line else ""),
            mistake="view on a non-contiguous tensor",
        )


def _expect_value_error(make: Callable[[int, int], Any], call: str, width: str) -> None:
    """``make(D, H)`` with ``D % H != 0`` must raise a ValueError (the exercise asks for one)."""
    H = randint(3, 5)
    D = H * randint(2, 4) + randint(1, H - 1)  # not a multiple of H
    call = call.format(D=D, H=H)
    try:
        make(D, H)
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - the student's exception, reported as a diagnosis
        line = student_line(exc)
        fail(
            f"{call} raised {type(exc).__name__}"
            + (f" (at {line})" if line else "")
            + f"; the exercise asks for a ValueError: check {width} % num_heads first and raise "
            f"ValueError(...) with a message that names {width} and num_heads.",
            mistake="wrong error type",
        )
    fail(
        f"{call} did not raise: {D} features cannot be split into {H} equal heads. Check "
        f"{width} % num_heads != 0 first and raise a ValueError that names {width} and num_heads.",
        mistake="no divisibility check",
    )


# ---------------------------------------------------------------- split_heads
_AXES = ("B", "L", "H", "d_k")


@checker("split_heads")
def check_split_heads(fn: Callable[..., Any]) -> str:
    for _ in range(3):
        B, H, d_k, L, _L_k = _head_dims()
        D = H * d_k
        x = torch.randn(B, L, D)
        x0 = x.clone()
        case = f"x of shape ({B}, {L}, {D}), num_heads={H}"
        try:
            got = call_student(fn, x, H, context=f"calling split_heads({case})")
        except StudentError as err:
            _view_error(err)
            raise
        check_unchanged(["x"], [x], [x0], case)
        expected = split_heads(x0, H)  # (B, H, L, d_k)
        blocks = x0.view(B, L, H, d_k)  # (B, L, H, d_k)
        mistakes: list[Mistake] = [
            (
                "view(B, H, L, d_k) without transpose",
                "the shape is right but the heads got blocks of positions instead of slices of "
                "features: .view(B, H, L, d_k) straight from (B, L, D) does not move any feature. "
                "View as (B, L, H, d_k) first, then swap the L and H axes.",
                x0.reshape(B, H, L, d_k),
            ),
            (
                "returns (B, L, H, d_k)",
                f"you returned shape (B, L, H, d_k) = {describe_shape(blocks)}: the features are "
                "split correctly but the head axis must come before the positions, "
                "(B, H, L, d_k). Swap axes 1 and 2.",
                blocks,
            ),
            (
                "heads take strided features",
                "head h got every H-th feature (h, h + H, h + 2H, ...) instead of the contiguous "
                "slice h*d_k .. (h+1)*d_k - 1: split the last axis as (num_heads, d_k), not "
                "(d_k, num_heads).",
                lambda: x0.view(B, L, d_k, H).permute(0, 3, 1, 2),
            ),
        ]
        for perm in itertools.permutations(range(4)):
            if perm in ((0, 1, 2, 3), (0, 2, 1, 3)):
                continue
            order = "(" + ", ".join(_AXES[i] for i in perm) + ")"
            mistakes.append(
                (
                    "transposed wrong axes",
                    f"the features are split correctly but the axes end up in the order {order}: "
                    "after .view(B, L, H, d_k) swap only axes 1 and 2 (L and H) to get (B, H, L, d_k).",
                    lambda perm=perm: blocks.permute(perm),
                )
            )
        expect_close("split_heads(x, num_heads)", got, expected, mistakes, case=case)
    gradient_probe(fn, split_heads, dict(x=x0, num_heads=H), what="split_heads", case=case)
    _expect_value_error(lambda D, H: fn(torch.randn(2, 3, D), H), "split_heads(x of shape (2, 3, {D}), {H})", "D")
    return "3 random shapes, compared value by value"  # the [OK] line stored in notebook 02


# ---------------------------------------------------------------- merge_heads
@checker("merge_heads")
def check_merge_heads(fn: Callable[..., Any]) -> str:
    for i in range(3):
        B, H, d_k, L, _L_k = _head_dims()
        if i == 2:
            L = B  # batch and positions of one size: code that mixes up axes 0 and 2 keeps the right shape
        D = H * d_k
        if i == 0:
            x = torch.randn(B, H, L, d_k)
            kind = "a contiguous tensor"
        else:  # what merge_heads receives in MultiHeadAttention: a transposed, non-contiguous view
            x = split_heads(torch.randn(B, L, D), H)  # (B, H, L, d_k)
            kind = "the output of split_heads"
        x0 = x.clone()
        case = f"x of shape ({B}, {H}, {L}, {d_k}), {kind}"
        try:
            got = call_student(fn, x, context=f"calling merge_heads({case})")
        except StudentError as err:
            _view_error(err)
            raise
        check_unchanged(["x"], [x], [x0], case)
        expected = merge_heads(x0)  # (B, L, D)
        mistakes: list[Mistake] = [
            (
                "reshape without transpose",
                "the shape is right but positions and heads got mixed: a .view/.reshape(B, L, D) "
                "straight from (B, H, L, d_k) does not move the head axis. Swap axes 1 and 2 "
                "to get (B, L, H, d_k) first, then flatten the last two axes.",
                x0.reshape(B, L, D),
            ),
            (
                "heads not flattened",
                f"you returned shape (B, L, H, d_k) = ({B}, {L}, {H}, {d_k}): the transpose is "
                "right, now flatten the last two axes into H * d_k.",
                x0.transpose(1, 2),
            ),
            (
                "features in wrong order",
                "the features come out ordered feature-major (feature j of every head, then j+1, "
                "...) instead of head-major: head h's features belong at columns h*d_k .. "
                "(h+1)*d_k - 1. Transpose to (B, L, H, d_k), not (B, L, d_k, H), before flattening.",
                lambda: x0.permute(0, 2, 3, 1).reshape(B, L, D),
            ),
            (
                "batch and positions swapped",
                f"with B == L = {L} the batch and position axes get mixed up: axis 0 (the batch) was swapped "
                "with axis 2 (the positions), x.transpose(0, 2). Swap axes 1 and 2 (heads and positions), "
                "whatever the sizes.",
                lambda: x0.transpose(0, 2).reshape(B, L, D) if B == L else None,
            ),
        ]
        expect_close("merge_heads(x)", got, expected, mistakes, case=case)
    gradient_probe(fn, merge_heads, dict(x=x0), what="merge_heads", case=case)

    return "3 random shapes, contiguous and transposed inputs"


# ---------------------------------------------------------------- MultiHeadAttention
_PROJ = ("w_q", "w_k", "w_v")
_INPUTS = ("query", "key", "value")


def _mha_variant(
    lin: dict[str, tuple[Tensor, Tensor]],
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    H: int,
    *,
    proj: tuple[str, str, str] = _PROJ,
    inputs: tuple[int, int, int] = (0, 1, 2),
    split_transpose: bool = True,
    merge_transpose: bool = True,
    scale: str = "sqrt(d_k)",
    mask_mode: str = "ok",
    use_w_o: bool = True,
) -> tuple[Tensor, Tensor] | None:
    """Multi-head attention with (at most) one deliberate mistake; ``None`` if that
    mistake cannot even run on these shapes. Defaults reproduce the reference."""
    try:
        src = (query, key, value)
        B, D = query.size(0), query.size(-1)
        d_k = D // H
        projected = [F.linear(src[i], *lin[p]) for i, p in zip(inputs, proj)]  # each (B, L, D)

        def split(t: Tensor) -> Tensor:
            L = t.size(1)
            if split_transpose:
                return t.view(B, L, H, d_k).transpose(1, 2)  # (B, H, L, d_k)
            return t.reshape(B, H, L, d_k)  # (B, H, L, d_k), heads = blocks of positions

        q, k, v = (split(t) for t in projected)
        factor = {"sqrt(d_k)": math.sqrt(d_k), "none": 1.0, "sqrt(d_model)": math.sqrt(D), "d_k": float(d_k)}[scale]
        scores = q @ k.transpose(-2, -1) / factor  # (B, H, L_q, L_k)
        if mask is not None and mask_mode != "ignored":
            m = ~mask if mask_mode == "inverted" else mask
            if m.dim() == 3 and mask_mode != "no head axis":
                m = m.unsqueeze(1)  # (B, 1, L_q or 1, L_k)
            scores = scores.masked_fill(~m, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)  # (B, H, L_q, L_k)
        context = weights @ v  # (B, H, L_q, d_k)
        L_out = context.size(2)
        if merge_transpose:
            merged = context.transpose(1, 2).reshape(B, L_out, D)  # (B, L_q, D)
        else:
            merged = context.reshape(B, L_out, D)  # (B, L_q, D), the inverse of the bad split
        output = F.linear(merged, *lin["w_o"]) if use_w_o else merged
        return output, weights
    except RuntimeError:
        return None


def _describe_swap(chosen: tuple[str, ...], correct: tuple[str, ...], role: tuple[str, ...], kind: str) -> str:
    return "; ".join(
        f"the {r} {kind} {c} instead of {ok}" for r, c, ok in zip(role, chosen, correct) if c != ok
    )


def _mha_mistakes(mask: Tensor | None, distinct_inputs: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, diagnosis, keyword arguments of ``_mha_variant``) for every catalogued mistake."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    split_msg = (
        "the heads were split with .view(B, H, L, d_k) and no transpose, so each head got a "
        "block of positions instead of a slice of features. View as (B, L, H, d_k), then "
        "transpose(1, 2) (your split_heads from above does this)."
    )
    out.append(("split without transpose", split_msg, dict(split_transpose=False, merge_transpose=False)))
    out.append(("split without transpose", split_msg, dict(split_transpose=False)))
    out.append(
        (
            "missing output projection",
            "the output skips the final projection: after merging the heads back to "
            "(B, L_q, D), pass the result through self.w_o.",
            dict(use_w_o=False),
        )
    )
    out.append(
        (
            "no scaling",
            "the scores are not scaled: divide Q K^T by sqrt(d_k), the width of one head "
            "(scaled_dot_product_attention does it for you).",
            dict(scale="none"),
        )
    )
    out.append(
        (
            "scaled by sqrt(d_model)",
            "the scores are divided by sqrt(d_model); each head's dot products have only "
            "d_k = d_model // num_heads terms, so divide by sqrt(d_k).",
            dict(scale="sqrt(d_model)"),
        )
    )
    out.append(
        ("scaled by d_k", "the scores are divided by d_k; divide by its square root, sqrt(d_k).", dict(scale="d_k"))
    )
    if mask is not None:
        out.append(
            (
                "mask ignored",
                "the mask has no effect: blocked keys still get attention weight. Pass the mask "
                "on to the attention (masked_fill where the mask is False).",
                dict(mask_mode="ignored"),
            )
        )
        out.append(
            (
                "inverted mask",
                "the mask is inverted: True means 'may attend', so fill the scores where the "
                "mask is False (~mask or mask == 0), not where it is True.",
                dict(mask_mode="inverted"),
            )
        )
        if mask.dim() == 3:
            out.append(
                (
                    "mask broadcast wrongly",
                    f"the check tried batch size B = num_heads with a {describe_shape(mask)} mask, so "
                    "a mask without the head axis broadcasts without an error, and your result is "
                    "exactly what that gives: the mask lined up with the heads instead of the batch "
                    "items. Before masking, add the head axis: mask.unsqueeze(1) turns a 3-D mask into "
                    f"{_with_head_axis(mask)}, which broadcasts over the heads.",
                    dict(mask_mode="no head axis"),
                )
            )
    for proj in itertools.product(_PROJ, repeat=3):
        if proj != _PROJ:
            text = _describe_swap(proj, _PROJ, ("query", "key", "value"), "goes through")
            out.append(("projections swapped", f"{text}.", dict(proj=proj)))
    if distinct_inputs:
        for inputs in itertools.product(range(3), repeat=3):
            if inputs != (0, 1, 2):
                chosen = tuple(f"`{_INPUTS[i]}`" for i in inputs)
                correct = tuple(f"`{n}`" for n in _INPUTS)
                text = _describe_swap(chosen, correct, ("queries", "keys", "values"), "are computed from")
                out.append(
                    (
                        "inputs swapped",
                        f"{text} (queries come from `query`, keys from `key`, values from `value`).",
                        dict(inputs=inputs),
                    )
                )
    return out


_SHAPE_WORDS = ("size", "shape", "broadcast", "dimension", "expand")


def _with_head_axis(mask: Tensor) -> str:
    """``(B, 1, L_q or 1, L_k)`` in numbers: what ``mask.unsqueeze(1)`` gives."""
    return describe_shape(mask.unsqueeze(1))


def _mha_case(
    model: nn.Module,
    ref: nn.Module,
    lin: dict[str, tuple[Tensor, Tensor]],
    H: int,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    case: str,
    after_self_attention: bool,
) -> None:
    args: tuple[Tensor, ...] = (query, key, value) + ((mask,) if mask is not None else ())
    names = list(_INPUTS) + ["mask"]
    originals = [t.clone() for t in args]
    with torch.no_grad():
        ref_out, ref_w = ref(*originals)  # (B, L_q, D), (B, H, L_q, L_k)
        try:
            result = call_student(model, *args, context=f"running forward ({case})")
        except StudentError as err:
            exc = err.exc
            # RuntimeError from torch, ValueError from the course's sdpa ("mask ... cannot be broadcast")
            shape_words = any(w in str(exc).lower() for w in _SHAPE_WORDS)
            shape_error = isinstance(exc, (RuntimeError, ValueError)) and shape_words
            if shape_error and not isinstance(exc, NotImplementedError):
                line = student_line(exc)
                first = (str(exc).strip().splitlines() or [""])[0]
                at = f"\n    at {line}" if line else ""
                if mask is not None and mask.dim() == 3:
                    fail(
                        f"your forward works without a mask but raised {type(exc).__name__} with a "
                        f"{describe_shape(mask)} mask ({case}): {first}{at}\n    The scores are (B, H, "
                        "L_q, L_k), and a 3-D mask lines up with their last three axes (H, L_q, L_k), "
                        "not with the batch. Before masking, add the head axis: mask.unsqueeze(1) makes it "
                        f"{_with_head_axis(mask)}, which broadcasts over the heads.",
                        mistake="mask broadcast wrongly",
                    )
                if mask is not None:
                    fail(
                        f"your forward works without a mask but raised {type(exc).__name__} with a "
                        f"{describe_shape(mask)} mask ({case}): {first}{at}\n    A 2-D mask already "
                        "broadcasts to the (B, H, L_q, L_k) scores as it is, (L_q, L_k); only a 3-D mask "
                        "needs the head axis (mask.unsqueeze(1) when mask.dim() == 3).",
                        mistake="mask broadcast wrongly",
                    )
                if after_self_attention:
                    fail(
                        f"your forward works for self-attention but raised {type(exc).__name__} for "
                        f"cross-attention ({case}): {first}{at}\n    Queries come from `query` (length "
                        "L_q), keys and values from `key` and `value` (length L_k): reshape each with "
                        "its own length, not the query's.",
                        mistake="fails for cross-attention",
                    )
            raise
    check_unchanged(names, args, originals, case)
    out, w = _pair(result, case)
    mistakes = _mha_mistakes(mask, distinct_inputs=key is not query and value is not key)
    cache: dict[int, tuple[Tensor, Tensor] | None] = {}

    def candidate(i: int, part: int) -> Callable[[], Tensor | None]:
        def compute() -> Tensor | None:
            if i not in cache:
                cache[i] = _mha_variant(lin, originals[0], originals[1], originals[2], mask, H, **mistakes[i][2])
            pair = cache[i]
            return None if pair is None else pair[part]

        return compute

    expect_close(
        "output",
        out,
        ref_out,
        [(name, diag, candidate(i, 0)) for i, (name, diag, _) in enumerate(mistakes)],
        case=case,
    )
    weight_mistakes: list[Mistake] = [
        (
            "weights averaged over heads",
            "the weights were averaged over the heads, giving (B, L_q, L_k); return one map per "
            "head, (B, H, L_q, L_k).",
            ref_w.mean(dim=1),
        )
    ]
    weight_mistakes += [(name, diag, candidate(i, 1)) for i, (name, diag, _) in enumerate(mistakes)]
    expect_close("weights", w, ref_w, weight_mistakes, case=case)


def _check_projections(model: nn.Module, D: int) -> dict[str, nn.Linear]:
    names = ("w_q", "w_k", "w_v", "w_o")
    found = {n: getattr(model, n, None) for n in names}
    missing = [n for n, m in found.items() if not isinstance(m, nn.Module)]
    if missing == ["w_o"]:
        fail(
            "there is no output projection `w_o`: after merging the heads, mix them with "
            "self.w_o = nn.Linear(d_model, d_model).",
            mistake="missing output projection",
        )
    if missing:
        fail(
            "MultiHeadAttention needs four submodules w_q, w_k, w_v, w_o, each "
            f"nn.Linear(d_model, d_model); missing: {', '.join(missing)}.",
            mistake="missing submodule",
        )
    for n, m in found.items():
        if not isinstance(m, nn.Linear):
            fail(f"`{n}` should be nn.Linear(d_model, d_model), got {type(m).__name__}.", mistake="wrong submodule")
        if (m.in_features, m.out_features) != (D, D):
            fail(
                f"`{n}` should be nn.Linear(d_model, d_model) = nn.Linear({D}, {D}), got "
                f"nn.Linear({m.in_features}, {m.out_features}): every projection maps D to D "
                "(all heads at once).",
                mistake="wrong submodule",
            )
        if m.bias is None:
            fail(f"`{n}` has no bias: use nn.Linear(d_model, d_model) (bias=True is the default).", mistake="wrong submodule")
    return found  # type: ignore[return-value]


def _orthogonal(D: int) -> Tensor:
    return torch.linalg.qr(torch.randn(D, D, dtype=torch.float64))[0].float()  # (D, D)


def _check_dropout(cls: Any) -> None:
    """Train mode with ``dropout=p``: dropout acts exactly on the attention weights, with p.

    Deterministic, whatever random mask is drawn: ``w_o`` is orthogonal, so the merged
    context is recovered exactly from the output, and ``L_k < d_k``, so each head's context
    row ``sum_k a_k v_k`` determines the coefficients ``a`` (the values of a head are
    independent vectors). Dropout on the weights makes each ``a_k`` 0 or ``w_k / (1 - p)``;
    the scale ``1 / (1 - p)`` gives away the p used. Two values of p catch a hard-coded one.
    """
    H, d_k, B = randint(2, 3), randint(8, 10), 2
    D, L_q, L_k = H * d_k, randint(3, 6), randint(3, 5)
    query, key, value = torch.randn(B, L_q, D), torch.randn(B, L_k, D), torch.randn(B, L_k, D)
    for p in (0.3, 0.6):
        case = f"training mode, dropout={p}, L_q={L_q}, L_k={L_k}, D={D}, num_heads={H}"
        try:
            model = cls(D, H, p)
        except Exception as exc:  # noqa: BLE001 - the student's exception, reported as a diagnosis
            if isinstance(exc, TypeError) and "argument" in str(exc):
                fail(
                    f"MultiHeadAttention({D}, {H}, {p}) raised TypeError: {exc}. The signature is "
                    "MultiHeadAttention(d_model, num_heads, dropout=0.0).",
                    mistake="dropout missing",
                )
            raise StudentError(exc, f"constructing MultiHeadAttention({D}, {H}, dropout={p})") from exc
        ref = MultiHeadAttention(D, H, p).eval()
        with torch.no_grad():
            for n, lin_s in _check_projections(model, D).items():
                lin_s.weight.copy_(_orthogonal(D) if n in ("w_v", "w_o") else torch.randn(D, D) / math.sqrt(D))
                lin_s.bias.copy_(torch.randn(D) * 0.5)
                getattr(ref, n).load_state_dict(lin_s.state_dict())
            ref_out, ref_w = ref(query, key, value)  # (B, L_q, D), (B, H, L_q, L_k)
            model.train()
            out, w = _pair(call_student(model, query, key, value, context=f"running forward ({case})"), case)
            model.eval()
            out_eval, _ = _pair(call_student(model, query, key, value, context=f"running forward ({case})"), case)
        if not matches(out_eval, ref_out):
            fail_eval_dropout("your output", f"eval mode, dropout={p}")
        if not matches(w, ref_w):
            after = dropout_pattern(w, ref_w, p)
            fail(
                f"in {case}: the weights you return "
                + ("are the weights after dropout: return them before dropout (they are what the "
                   "notebook plots, and each row sums to 1); dropout only changes what multiplies the values."
                   if after else
                   "differ from eval mode: dropout must not change the softmax. Apply it to the weights "
                   "after the softmax (self.dropout(weights) @ v), not to the scores or the inputs."),
                mistake="weights returned after dropout" if after else "dropout in the wrong place",
            )
        if matches(out, ref_out):
            fail(
                f"in {case}: your output equals the one without dropout: dropout is never applied. Keep "
                "nn.Dropout(dropout) from __init__ and apply it to the attention weights before "
                "multiplying by the values: self.dropout(weights) @ v.",
                mistake="dropout missing",
            )
        w_o = ref.w_o
        W_o, b_o = w_o.weight.detach().double(), w_o.bias.detach().double()
        merged = (out.detach().double() - b_o) @ W_o  # (B, L_q, D): W_o is orthogonal
        ref_merged = (ref_out.double() - b_o) @ W_o  # (B, L_q, D)
        if dropout_pattern(out, ref_out, p) or dropout_pattern(merged, ref_merged, p, atol=1e-4):
            where = "the output (after w_o)" if dropout_pattern(out, ref_out, p) else "the merged heads (before w_o)"
            fail(
                f"in {case}: dropout acts on {where} instead of on the attention weights. In the paper and "
                "in PyTorch, attention dropout drops whole attention links: self.dropout(weights) @ v.",
                mistake="dropout on the output",
            )
        context = split_heads(merged, H)  # (B, H, L_q, d_k)
        w_v = ref.w_v
        v = split_heads(F.linear(value.double(), w_v.weight.double(), w_v.bias.double()), H).detach()  # (B, H, L_k, d_k)
        coeff = context @ torch.linalg.pinv(v)  # (B, H, L_q, L_k): context = coeff @ v
        ratio = coeff / ref_w.double().detach()  # (B, H, L_q, L_k): 0 (dropped) or 1 / (1 - p) (kept)
        exact = allclose(coeff @ v, context, atol=1e-4)
        kept = ratio > 0.5
        scale = float(ratio[kept].median()) if bool(kept.any()) else 0.0
        on_weights = exact and bool(((ratio.abs() < 1e-2) | ((ratio - scale).abs() < 1e-2 * scale)).all())
        if on_weights and abs(scale * (1 - p) - 1) < 1e-2:
            continue
        if on_weights and scale > 1 + 1e-2:
            fail_fixed_p(scale, p, "the attention weights", case)
        fail(
            f"in {case}: the output is not what dropout on the attention weights gives (each weight either "
            "0 or weight / (1 - p)). Apply dropout exactly once, to the weights after the softmax: "
            "self.dropout(weights) @ v.",
            mistake="dropout in the wrong place",
        )


def _pair(result: Any, case: str) -> tuple[Tensor, Tensor]:
    """forward's result must be the tuple (output, weights), as scaled_dot_product_attention's."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(t, Tensor) for t in result)):
        if isinstance(result, Tensor):
            got = f"a single tensor of shape {describe_shape(result)}"
        elif isinstance(result, (tuple, list)):
            got = f"a {type(result).__name__} of {len(result)} items"
        else:
            got = type(result).__name__
        fail(f"forward must return (output, weights): the output (B, L_q, D) and the attention weights "
             f"(B, H, L_q, L_k) ({case}). Yours returned {got}.", mistake="wrong return")
    require_tuple(result, "forward")
    return result[0], result[1]


def _robustness_cases(model: nn.Module, ref: nn.Module, B: int, L_q: int, L_k: int, D: int, H: int) -> None:
    """The robustness cases of scaled_dot_product_attention, in the same words: queries whose
    keys are all blocked (left padding under a causal mask: uniform weights, not NaN), then
    every score about -150 (a fill such as -30 then outweighs the allowed keys), made with
    identity ``w_q``, ``w_k`` (copied into the reference): each head's score is the
    queries' and keys' own product."""
    mask = random_mask(B, L_q, L_k)  # (B, L_q, L_k)
    mask[:, 0] = False  # query 0 sees no key
    blocked = (*(torch.randn(B, n, D) for n in (L_q, L_k, L_k)), mask, "its first query row blocks every key")
    very_negative = (*_very_negative(B, L_q, L_k, D // H, D, width=D), random_mask(B, L_q, L_k), _VERY_NEGATIVE)
    for query, key, value, mask, note in (blocked, very_negative):
        if note == _VERY_NEGATIVE:
            with torch.no_grad():
                for module in (model, ref):
                    for n in ("w_q", "w_k"):
                        getattr(module, n).weight.copy_(torch.eye(D))
                        getattr(module, n).bias.zero_()
        case = f"cross-attention, L_q={L_q}, L_k={L_k}, D={D}, num_heads={H}, mask {describe_shape(mask)}, {note}"
        with torch.no_grad():
            ref_out, ref_w = ref(query, key, value, mask)  # (B, L_q, D), (B, H, L_q, L_k)
            out, w = _pair(call_student(model, query, key, value, mask, context=f"running forward ({case})"), case)
        atol = 1e-4 if note == _VERY_NEGATIVE else 1e-5
        # the weights line up with the mask given a head axis, the output with the mask as it is
        for what, got, expected, m in (("weights", w, ref_w, mask.unsqueeze(1)), ("output", out, ref_out, mask)):
            if not matches(got, expected, atol=atol):
                shape = tuple(expected.shape[:-1]) + (L_k,) if what == "weights" else tuple(mask.shape)
                robustness_diagnosis(note, f"{what} ({case})", what, got, expected, m, shape)
                expect_close(what, got, expected, case=case, atol=atol)


@checker("MultiHeadAttention")
def check_multi_head_attention(cls: Any) -> str:
    require_module_class(cls, "MultiHeadAttention")
    B, H, d_k, L_q, L_k = _head_dims()
    D = H * d_k
    model = call_student(cls, D, H, context=f"constructing MultiHeadAttention(d_model={D}, num_heads={H})")
    if not isinstance(model, nn.Module):
        fail("MultiHeadAttention should subclass nn.Module.", mistake="not a class")
    projections = _check_projections(model, D)
    require_distinct_roles(model, MultiHeadAttention(D, H), "MultiHeadAttention")  # self.w_k = self.w_q
    model.eval()

    # random parameters (not the default init), copied into the reference by name
    ref = MultiHeadAttention(D, H).eval()
    with torch.no_grad():
        for n, lin_s in projections.items():
            lin_s.weight.copy_(torch.randn(D, D) / math.sqrt(D))
            lin_s.bias.copy_(torch.randn(D) * 0.5)
            getattr(ref, n).weight.copy_(lin_s.weight)
            getattr(ref, n).bias.copy_(lin_s.bias)
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
    params = [(f"{n}.{a}", getattr(projections[n], a), getattr(getattr(ref, n), a)) for n in projections for a in ("weight", "bias")]
    gradient_probe(model, ref, dict(query=query, key=key, value=value, mask=mask), params,
                   what="MultiHeadAttention", case=cross + f", mask {describe_shape(mask)}")
    mask = random_mask(B, 1, L_k)  # float64: a .float() cast shows; float16 fills are judged elsewhere
    check_dtype_follows(lambda: call_student(cls, D, H, context="constructing MultiHeadAttention"),
                        lambda m, dt: call_student(m, query.to(dt), key.to(dt), value.to(dt), mask,
                                                   context=f"running forward in {dt}"),
                        "MultiHeadAttention", cross + ", mask (B, 1, L_k)", dtypes=(torch.float64,))
    _robustness_cases(model, ref, B, L_q, L_k, D, H)  # last: it sets w_q and w_k to the identity

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
        "Cut the last axis into (num_heads, d_k): x.view(B, L, num_heads, d_k) has shape (B, L, H, d_k).",
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
        "In __init__: raise a ValueError unless d_model % num_heads == 0, store "
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
