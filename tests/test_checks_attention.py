"""Tests of the notebook-01 checkers (course_utils/checks/attention.py).

Every catalogued mistake is written as a real small student function and must be named;
correct implementations written in other ways must pass, every time (the checkers draw
fresh random inputs on each call, so each is run several times).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_asserts import STABLE, assert_mistake, assert_passes, verdicts

from course_utils.checks import (
    check_causal_mask,
    check_padding_mask,
    check_scaled_dot_product_attention,
    hint,
)
from course_utils.checks._core import HINTS
from course_utils.checks.attention import MISTAKES

# sdpa_key_T below uses key.T on 3-D tensors on purpose; torch warns about it
pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")


def _id(fn):
    return getattr(fn, "__name__", f"a {type(fn).__name__}")


# =============================================================== scaled_dot_product_attention
# ---- correct variants
def sdpa_reference_like(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


def sdpa_einsum_where(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-1e9))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


def sdpa_scale_query_first(query, key, value, mask=None):
    query = query / math.sqrt(query.size(-1))  # a new tensor: the input stays as it was
    scores = torch.matmul(query, key.mT)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, torch.finfo(query.dtype).min)
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, value), weights


def sdpa_loop_over_batch(query, key, value, mask=None):
    lead = query.shape[:-2]
    L_q, d_k = query.shape[-2:]
    L_k, d_v = value.shape[-2:]
    q = query.reshape(-1, L_q, d_k)
    k = key.reshape(-1, L_k, d_k)
    v = value.reshape(-1, L_k, d_v)
    m = None if mask is None else mask.expand(*lead, L_q, L_k).reshape(-1, L_q, L_k)
    outs, ws = [], []
    for i in range(q.shape[0]):
        s = q[i] @ k[i].T / math.sqrt(d_k)
        if m is not None:
            s = s.masked_fill(m[i].logical_not(), torch.finfo(s.dtype).min)
        w = s.softmax(-1)
        outs.append(w @ v[i])
        ws.append(w)
    return torch.stack(outs).reshape(*lead, L_q, d_v), torch.stack(ws).reshape(*lead, L_q, L_k)


def sdpa_mask_after_softmax_renormalised(query, key, value, mask=None):
    weights = (query @ key.transpose(-1, -2) / math.sqrt(key.size(-1))).softmax(-1)
    if mask is not None:
        weights = weights * mask
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ value, weights


def sdpa_additive_mask_stable_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) * (1.0 / math.sqrt(query.size(-1)))
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, torch.finfo(scores.dtype).min)
    e = (scores - scores.amax(-1, keepdim=True)).exp()  # the row max keeps exp finite
    weights = e / e.sum(-1, keepdim=True)
    return weights @ value, weights


def sdpa_fill_minus_1e4(query, key, value, mask=None):
    # a finite fill that fits float16 and is far below any score: blocked weights are exactly 0
    return _sdpa_fill(query, key, value, mask, -1e4)


def sdpa_in_place_fill(query, key, value, mask=None):
    # in place on the scores (a fresh tensor autograd does not need): the gradients stay right
    scores = query @ key.transpose(-2, -1)
    scores /= math.sqrt(query.size(-1))
    if mask is not None:
        scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


def sdpa_fill_minus_1e9(query, key, value, mask=None):
    return _sdpa_fill(query, key, value, mask, -1e9)


def sdpa_torch_sqrt_of_tensor(query, key, value, mask=None):
    # torch.sqrt of a tensor made from d_k: right, the near miss of sdpa_torch_sqrt_of_int
    scores = query @ key.transpose(-2, -1) / torch.sqrt(torch.tensor(query.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


@pytest.mark.parametrize(
    "fn",
    [
        sdpa_reference_like,
        sdpa_einsum_where,
        sdpa_scale_query_first,
        sdpa_loop_over_batch,
        sdpa_additive_mask_stable_softmax,
        sdpa_fill_minus_1e4,
        sdpa_in_place_fill,
        sdpa_torch_sqrt_of_tensor,
    ],
)
def test_sdpa_correct_variants_pass(fn):
    assert_passes(check_scaled_dot_product_attention, fn)


def test_sdpa_reference_itself_passes():
    from course_utils import scaled_dot_product_attention

    assert_passes(check_scaled_dot_product_attention, scaled_dot_product_attention)


# ---- catalogued mistakes
def _sdpa(query, key, value, mask=None, scale=None, dim=-1, mode="fill"):
    scale = math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) / scale
    if mask is not None and mode == "fill":
        scores = scores.masked_fill(~mask, float("-inf"))
    if mask is not None and mode == "inverted":
        scores = scores.masked_fill(mask, float("-inf"))
    if mask is not None and mode == "zero":
        scores = scores.masked_fill(~mask, 0)
    weights = scores.softmax(dim=dim)
    if mask is not None and mode == "after":
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def sdpa_no_scaling(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, scale=1.0)


# ---- robustness: right on mild inputs, wrong where a row sees no key or scores are large
def sdpa_minus_inf(query, key, value, mask=None):
    return _sdpa(query, key, value, mask)  # fills with float("-inf")


def sdpa_minus_inf_scale_query_first(query, key, value, mask=None):
    scores = (query / math.sqrt(query.size(-1))) @ key.mT
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = F.softmax(scores, dim=-1)
    return weights @ value, weights


def sdpa_nan_to_num(query, key, value, mask=None):
    out, weights = _sdpa(query, key, value, mask)
    weights = torch.nan_to_num(weights)  # a NaN row becomes 0
    return weights @ value, weights


def sdpa_torch_output(query, key, value, mask=None):
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)  # 0 where no key is allowed
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return output, scores.softmax(dim=-1)


def sdpa_exp_over_sum(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)  # overflows for scores > 88.7
    return weights @ value, weights


def sdpa_fill_minus_30(query, key, value, mask=None):
    return _sdpa_fill(query, key, value, mask, -30.0)


def sdpa_fill_float32_min(query, key, value, mask=None):
    return _sdpa_fill(query, key, value, mask, torch.finfo(torch.float32).min)


def sdpa_casts_to_float32(query, key, value, mask=None):
    return _sdpa_fill(query.float(), key.float(), value.float(), mask, None)


def _sdpa_fill(query, key, value, mask, fill):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min if fill is None else fill)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


# ---- gradients: right values, but the graph is cut (trial B: [OK] before, then notebook 01's training cell crashed)
def sdpa_no_grad_scores(query, key, value, mask=None):
    with torch.no_grad():
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)
    return weights @ value, weights


def sdpa_detached_outputs(query, key, value, mask=None):
    output, weights = sdpa_reference_like(query, key, value, mask)
    return output.detach(), weights.detach()


def sdpa_key_data(query, key, value, mask=None):
    return sdpa_reference_like(query, key.data, value, mask)


def sdpa_numpy_scores(query, key, value, mask=None):
    scores = torch.from_numpy(query.numpy() @ key.numpy().swapaxes(-1, -2)) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


def sdpa_detached_denominator(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    weights = e / e.sum(-1, keepdim=True).detach()
    return weights @ value, weights


def sdpa_nan_guard_in_place(query, key, value, mask=None):
    output, weights = sdpa_reference_like(query, key, value, mask)
    weights.masked_fill_(weights.isnan(), 0.0)  # changes the softmax's output, which its backward needs
    return weights @ value, weights


GRADIENT_MISTAKES = [
    (sdpa_no_grad_scores, "gradient blocked", ["no gradient reaches `query` and `key`", "torch.no_grad()"]),
    (sdpa_detached_outputs, "gradient blocked", ["does not require grad", "element 0 of tensors"]),
    (sdpa_key_data, "gradient blocked", ["no gradient reaches `key`", ".data"]),
    (sdpa_numpy_scores, "gradient blocked", ["inputs that require grad", "numpy"]),
    (sdpa_detached_denominator, "gradient differs", ["gradient of `query`", "differs from the reference's"]),
    (sdpa_nan_guard_in_place, "backward fails", ["backpropagating through it raises", "in-place operation"]),
]


@pytest.mark.parametrize("fn, name, words", GRADIENT_MISTAKES, ids=[_id(f) for f, _, _ in GRADIENT_MISTAKES])
def test_sdpa_cut_graph_is_named(fn, name, words):
    assert name in MISTAKES["scaled_dot_product_attention"]
    assert_mistake(check_scaled_dot_product_attention, fn, name, *words)


ROBUSTNESS_MISTAKES = [
    # trial A: wrong code that passed before
    (sdpa_fill_minus_30, "fill not negative enough", ["every score about -150", "blocked keys get weight", "finfo"]),
    (sdpa_fill_minus_1e9, "fill overflows half precision", ["torch.float16 input", "-1e9", "finfo(scores.dtype).min"]),
    (sdpa_fill_float32_min, "fill overflows half precision", ["without overflow", "finfo(scores.dtype).min"]),
    (sdpa_casts_to_float32, "dtype not preserved", ["has dtype torch.float32", "Keep the input's dtype"]),
    (sdpa_minus_inf, "filled with -inf", ["every key blocked", "NaN", "torch.finfo(scores.dtype).min", "uniform"]),
    (sdpa_minus_inf_scale_query_first, "filled with -inf", ["NaN", "0 / 0", "torch.finfo(scores.dtype).min"]),
    (sdpa_nan_to_num, "fully blocked row not uniform", ["all 0", "uniform", "torch.finfo(scores.dtype).min"]),
    (sdpa_torch_output, "fully blocked row not uniform", ["output (on", "all 0", "mean of the values"]),
    (sdpa_exp_over_sum, "softmax overflows", ["large scores", "overflows", "torch.softmax"]),
]


@pytest.mark.parametrize("fn, name, words", ROBUSTNESS_MISTAKES, ids=[_id(f) for f, _, _ in ROBUSTNESS_MISTAKES])
def test_sdpa_robustness_mistake_is_named_on_every_draw(fn, name, words):
    assert name in MISTAKES["scaled_dot_product_attention"]
    assert_mistake(check_scaled_dot_product_attention, fn, name, *words, repeat=STABLE)


def test_sdpa_same_seed_same_inputs_same_verdict():
    first = check_scaled_dot_product_attention(sdpa_minus_inf, seed=4242)
    again = check_scaled_dot_product_attention(sdpa_minus_inf, seed=4242)
    other = check_scaled_dot_product_attention(sdpa_minus_inf, seed=4243)
    assert first.seed == 4242 and "seed 4242" in first.feedback
    assert first.feedback == again.feedback and first.mistake == again.mistake == "filled with -inf"
    assert other.feedback != first.feedback  # another seed, other shapes in the message


def sdpa_scaled_by_d_k(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, scale=query.size(-1))


def sdpa_multiplied(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, scale=1 / math.sqrt(query.size(-1)))


def sdpa_scaled_by_d_v(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, scale=math.sqrt(value.size(-1)))


def sdpa_scaled_by_L_k(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, scale=math.sqrt(key.shape[-2]))


def sdpa_scaled_by_size_1(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, scale=math.sqrt(query.size(1)))  # L_q in 3-D


def sdpa_softmax_dim_minus_2(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, dim=-2)


def sdpa_softmax_dim_0(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, dim=0)


def sdpa_softmax_dim_1(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, dim=1)  # right for 2-D input only


def sdpa_inverted_mask(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, mode="inverted")


def sdpa_mask_ignored(query, key, value, mask=None):
    return _sdpa(query, key, value, None)


def sdpa_mask_after_softmax(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, mode="after")


def sdpa_mask_filled_with_0(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, mode="zero")


def sdpa_scores_times_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores * mask
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_key_T(query, key, value, mask=None):
    scores = query @ key.T / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_key_transpose_0_1(query, key, value, mask=None):
    scores = query @ key.transpose(0, 1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_bmm(query, key, value, mask=None):
    scores = torch.bmm(query, key.permute(0, 2, 1)) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return torch.bmm(weights, value), weights


def sdpa_softmax_dim_2(query, key, value, mask=None):
    return _sdpa(query, key, value, mask, dim=2)  # raises on 2-D, wrong axis on 4-D


def sdpa_wrong_order(query, key, value, mask=None):
    output, weights = _sdpa(query, key, value, mask)
    return weights, output


def sdpa_only_output(query, key, value, mask=None):
    return _sdpa(query, key, value, mask)[0]


def sdpa_value_first(query, key, value, mask=None):
    weights = _sdpa(query, key, value, mask)[1]
    return value @ weights, weights


def sdpa_output_transposed(query, key, value, mask=None):
    weights = _sdpa(query, key, value, mask)[1]
    return value.transpose(-2, -1) @ weights.transpose(-2, -1), weights


def sdpa_scores_as_weights(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return scores.softmax(-1) @ value, scores


def sdpa_query_divided_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_key_transposed_in_place(query, key, value, mask=None):
    scores = query @ key.transpose_(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_mask_inverted_in_place(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not_(), -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_if_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_mask_none_not_handled(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_boolean_index(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores[~mask] = float("-inf")
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_four_dims_unpacked(query, key, value, mask=None):
    B, H, L_q, d_k = query.shape  # written for per-head tensors only
    return _sdpa(query, key, value, mask)


def sdpa_one_minus_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(1 - mask, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_cpu_default_mask(query, key, value, mask=None):
    """Trial C's W45: a default mask built without device=, always on the CPU."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is None:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ value, weights


def sdpa_mask_unsqueezed(query, key, value, mask=None):  # trial C's W27
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_bool_times_min(query, key, value, mask=None):  # trial C's W31: float32 mixed into half precision
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + (~mask) * torch.finfo(scores.dtype).min
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_global_max(query, key, value, mask=None):  # trial C's W34: one max for the whole tensor
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    e = torch.exp(scores - scores.max())
    weights = e / e.sum(-1, keepdim=True)
    return weights @ value, weights


def sdpa_torch_sqrt_of_int(query, key, value, mask=None):  # blind trial: torch.sqrt of d_k, a Python int
    scores = query @ key.transpose(-2, -1) / torch.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_attn_mask(query, key, value, attn_mask=None):
    return sdpa_reference_like(query, key, value, attn_mask)


SDPA_MISTAKES = [
    (sdpa_no_scaling, "no scaling", ["not scaled", "sqrt(d_k)"]),
    (sdpa_scaled_by_d_k, "scaled by d_k", ["instead of sqrt(d_k)", "square root"]),
    (sdpa_multiplied, "multiplied by sqrt(d_k)", ["multiplied", "divide"]),
    (sdpa_scaled_by_d_v, "scaled by the wrong dimension", ["d_v", "query.size(-1)"]),
    (sdpa_scaled_by_L_k, "scaled by the wrong dimension", ["L_k", "query.size(-1)"]),
    (sdpa_scaled_by_size_1, "scaled by the wrong dimension", ["L_q", "query.size(-1)"]),
    (sdpa_softmax_dim_minus_2, "softmax over the wrong axis", ["softmax", "queries", "dim=-1"]),
    (sdpa_softmax_dim_0, "softmax over the wrong axis", ["softmax", "batch dim (dim=0)", "dim=-1"]),
    (sdpa_softmax_dim_1, "softmax over the wrong axis", ["softmax", "dim=-1"]),
    (sdpa_inverted_mask, "inverted mask", ["inverted", "True = may attend"]),
    (sdpa_mask_ignored, "mask ignored", ["mask is ignored"]),
    (sdpa_mask_after_softmax, "mask applied after the softmax", ["after the softmax", "sums to 1"]),
    (sdpa_mask_filled_with_0, "mask filled with 0", ["set to 0", "very negative"]),
    (sdpa_scores_times_mask, "mask filled with 0", ["set to 0", "very negative"]),
    (sdpa_key_T, "transpose only works for 2-D", ["key.transpose(-2, -1)", "2-D", "your code raised"]),
    (sdpa_key_transpose_0_1, "transpose only works for 2-D", ["key.transpose(-2, -1)", "at line"]),
    (sdpa_bmm, "only works for 3-D", ["3-D inputs only", "raises on 2-D input", "4-D input", "at line"]),
    (sdpa_softmax_dim_2, "only works for 3-D", ["raises on 2-D input", "dim=-1", "IndexError"]),
    (sdpa_wrong_order, "wrong return order", ["swapped", "return output, weights"]),
    (sdpa_only_output, "only the output returned", ["only the output", "return output, weights"]),
    (sdpa_value_first, "value on the wrong side", ["wrong side", "weights @ value", "value @ weights"]),
    (sdpa_output_transposed, "value on the wrong side", ["transposed", "weights @ value"]),
    (sdpa_scores_as_weights, "scores returned as weights", ["before the softmax"]),
    (sdpa_query_divided_in_place, "input modified in place", ["`query`", "in place"]),
    (sdpa_key_transposed_in_place, "input modified in place", ["`key`", "in place"]),
    (sdpa_mask_inverted_in_place, "input modified in place", ["`mask`", "in place"]),
    (sdpa_if_mask, "if mask", ["if mask is not None", "RuntimeError"]),
    (sdpa_mask_none_not_handled, "mask=None not handled", ["mask=None", "if mask is not None", "TypeError"]),
    (sdpa_boolean_index, "mask not broadcast", ["broadcast", "masked_fill", "IndexError"]),
    (sdpa_four_dims_unpacked, "fails for some numbers of dims", ["runs on 4-D input", "raises on 2-D", "ValueError"]),
    (sdpa_one_minus_mask, "fails with a mask", ["when a mask is given", "RuntimeError", "1 - mask"]),
    (torch.zeros(3), "not a function", ["pass the function itself"]),
    (sdpa_cpu_default_mask, "wrong device", ["mixes devices", "'meta'", "device=", "ones_like"]),
    (sdpa_attn_mask, "parameter renamed", ["no parameter named `mask`", "attn_mask"]),
    (sdpa_mask_unsqueezed, "mask not broadcast", ["an axis added to the mask", "pass the mask as it is"]),
    (sdpa_bool_times_min, "dtype not preserved", ["float32 tensor got mixed into", "(~mask) * number"]),
    (sdpa_global_max, "softmax overflows", ["one max subtracted for the whole tensor", "each row's own max"]),
    (sdpa_torch_sqrt_of_int, "sqrt of an int", ["TypeError", "not a Python int", "math.sqrt(d_k)", "d_k ** 0.5"]),
]


@pytest.mark.parametrize("fn, name, words", SDPA_MISTAKES, ids=[_id(f) for f, _, _ in SDPA_MISTAKES])
def test_sdpa_mistake_is_named(fn, name, words):
    assert name in MISTAKES["scaled_dot_product_attention"]
    assert_mistake(check_scaled_dot_product_attention, fn, name, *words)


def test_sdpa_wrong_transpose_names_the_students_line():
    result = check_scaled_dot_product_attention(sdpa_key_T)
    assert "scores = query @ key.T / math.sqrt(query.size(-1))" in result.feedback


# ---- stub, exceptions, weird returns
def sdpa_stub(query, key, value, mask=None):
    # YOUR CODE HERE
    raise NotImplementedError()


def sdpa_key_not_transposed(query, key, value, mask=None):
    scores = query @ key / math.sqrt(query.size(-1))
    return scores.softmax(-1) @ value, scores.softmax(-1)


def test_sdpa_stub_is_not_implemented():
    result = check_scaled_dot_product_attention(sdpa_stub)
    assert result.passed is False
    assert result.status == "not implemented"
    assert result.feedback.startswith("[ ]")
    assert "not implemented yet" in result.feedback


def test_sdpa_exception_shows_type_message_and_line():
    result = check_scaled_dot_product_attention(sdpa_key_not_transposed)
    assert result.passed is False
    assert result.status == "error"
    assert "your code raised RuntimeError: " in result.feedback
    assert "\n    at line " in result.feedback
    assert "scores = query @ key / math.sqrt(query.size(-1))" in result.feedback
    assert "Traceback" not in result.feedback


@pytest.mark.parametrize(
    "returned",
    [
        None,
        "output",
        np.zeros((2, 3)),
        [torch.zeros(2), torch.zeros(2)],
        (torch.zeros(2), torch.zeros(2), torch.zeros(2)),
        (np.zeros((2, 3)), np.zeros((2, 3))),
        (torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.int64)),
        torch.zeros(3, dtype=torch.bool),
    ],
    ids=["None", "str", "ndarray", "list", "tuple3", "tuple-ndarray", "tuple-bool-int", "bool-tensor"],
)
def test_sdpa_weird_returns_do_not_raise(returned):
    result = check_scaled_dot_product_attention(lambda q, k, v, mask=None: returned)
    assert result.passed is False
    assert result.status == "failed"
    assert result.feedback.startswith("[X]")


def test_sdpa_wrong_dtype_tensors_are_reported():
    def as_bool(query, key, value, mask=None):
        output, weights = sdpa_reference_like(query, key, value, mask)
        return output, weights > 0.5

    result = check_scaled_dot_product_attention(as_bool)
    assert result.passed is False
    assert result.mistake == "wrong dtype"


# =============================================================== causal_mask
def causal_reference_like(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def causal_tril_ones_bool(size, device=None):
    return torch.tril(torch.ones(size, size, device=device)).bool()


def causal_not_triu(size, device=None):
    return ~torch.triu(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=1)


def causal_arange(size, device=None):
    pos = torch.arange(size, device=device)
    return pos[:, None] >= pos[None, :]


def causal_loop(size, device=None):
    mask = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        mask[i, : i + 1] = True
    return mask.to(device) if device is not None else mask


@pytest.mark.parametrize("fn", [causal_reference_like, causal_tril_ones_bool, causal_not_triu, causal_arange, causal_loop])  # noqa: E501
def test_causal_correct_variants_pass(fn):
    assert_passes(check_causal_mask, fn)


def causal_upper(size, device=None):
    return torch.triu(torch.ones(size, size, dtype=torch.bool, device=device))


def causal_inverted(size, device=None):
    return torch.triu(torch.ones(size, size, device=device), diagonal=1).bool()


def causal_strictly_lower(size, device=None):
    return torch.tril(torch.ones(size, size, device=device), diagonal=-1).bool()


def causal_float(size, device=None):
    return torch.tril(torch.ones(size, size, device=device))


def causal_int(size, device=None):
    return torch.tril(torch.ones(size, size, dtype=torch.long, device=device))


def causal_additive(size, device=None):
    return torch.triu(torch.full((size, size), float("-inf"), device=device), diagonal=1)


def causal_batched(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().unsqueeze(0)


def causal_flat(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().flatten()


def causal_device_ignored(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()


def causal_on_meta(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device="meta")


def causal_no_device(size):
    return torch.ones(size, size, dtype=torch.bool).tril()


def causal_shifted_g(size, device=None):
    """Trial G: tril(diagonal=1) was only told "7 of 64 entries are wrong"."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=1)


def causal_last_row_g(size, device=None):
    """Trial G: the last row built wrongly (it sees only itself); no catalogued mistake."""
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    m[: size - 1, : size - 1] = torch.ones(size - 1, size - 1, dtype=torch.bool, device=device).tril()
    m[-1, -1] = True
    return m


def test_causal_other_wrong_pattern_shows_where():
    for r in verdicts(check_causal_mask, causal_last_row_g):
        assert not r.passed and r.mistake == "values differ", r.feedback
        size = int(re.search(r"causal_mask\((\d+)\)", r.feedback).group(1))
        for words in (f"{size - 1} of {size * size} entries are wrong", f"the first: [{size - 1}, 0] should be True",
                      f"[{size - 1}, 1] should be True", "query i may attend to key j: j <= i"):
            assert words in r.feedback, r.feedback


CAUSAL_MISTAKES = [
    (causal_upper, "upper triangle", ["above the diagonal", "torch.tril"]),
    (causal_inverted, "inverted mask", ["inverted", "True = may attend"]),
    (causal_strictly_lower, "diagonal excluded", ["diagonal", "cannot see itself"]),
    (causal_shifted_g, "diagonal shifted", ["just above the diagonal", "query i sees key i + 1", "diagonal=0"]),
    (causal_float, "not a bool mask", ["torch.float32", "torch.bool", "pattern is right"]),
    (causal_int, "not a bool mask", ["torch.int64", "torch.bool"]),
    (causal_additive, "additive float mask", ["additive", "bool mask"]),
    (causal_batched, "wrong shape", ["(1, ", "exactly (size, size)"]),
    (causal_flat, "wrong shape", ["has shape", "expected"]),
    (causal_device_ignored, "device ignored", ["device", "ignored"]),
    (causal_no_device, "no device parameter", ["causal_mask(size, device=None)", "TypeError"]),
    (causal_on_meta, "wrong device", ["device meta", "expected cpu"]),
    (torch.ones(4, 4).tril().bool(), "not a function", ["pass the function itself"]),
]


@pytest.mark.parametrize("fn, name, words", CAUSAL_MISTAKES, ids=[_id(f) for f, _, _ in CAUSAL_MISTAKES])
def test_causal_mistake_is_named(fn, name, words):
    assert name in MISTAKES["causal_mask"]
    assert_mistake(check_causal_mask, fn, name, *words)


def test_causal_stub_and_exception():
    def stub(size, device=None):
        raise NotImplementedError()

    def broken(size, device=None):
        return torch.ones(size, size).tril(k=0).bool()

    result = check_causal_mask(stub)
    assert result.status == "not implemented" and "not implemented yet" in result.feedback
    result = check_causal_mask(broken)
    assert result.passed is False and result.status == "error"
    assert "your code raised TypeError: " in result.feedback
    assert "return torch.ones(size, size).tril(k=0).bool()" in result.feedback


@pytest.mark.parametrize("returned", [None, [[True]], np.ones((3, 3), dtype=bool), (torch.ones(1, 1),), torch.tensor(1.5)])  # noqa: E501
def test_causal_weird_returns_do_not_raise(returned):
    result = check_causal_mask(lambda size, device=None: returned)
    assert result.passed is False and result.status == "failed"


# =============================================================== padding_mask
def padding_reference_like(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)


def padding_none_index(tokens, pad_id):
    return (tokens != pad_id)[:, None, :]


def padding_ne_unsqueeze_minus_2(tokens, pad_id):
    return tokens.ne(pad_id).unsqueeze(-2)


def padding_where_view(tokens, pad_id):
    B, L = tokens.shape
    return torch.where(tokens == pad_id, False, True).view(B, 1, L)


def padding_item_loop(tokens, pad_id):
    """Values read with .item() into a mask made on the tokens' device: cannot run on meta, right anywhere."""
    mask = torch.zeros(tokens.size(0), 1, tokens.size(1), dtype=torch.bool, device=tokens.device)
    for b in range(tokens.size(0)):
        for j in range(tokens.size(1)):
            mask[b, 0, j] = tokens[b, j].item() != pad_id
    return mask


@pytest.mark.parametrize("fn", [padding_reference_like, padding_none_index, padding_ne_unsqueeze_minus_2,
                                padding_where_view, padding_item_loop])
def test_padding_correct_variants_pass(fn):
    assert_passes(check_padding_mask, fn)


def padding_inverted(tokens, pad_id):
    return (tokens == pad_id).unsqueeze(1)


def padding_no_query_axis(tokens, pad_id):
    return tokens != pad_id


def padding_last_axis(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(-1)


def padding_first_axis(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(0)


def padding_float(tokens, pad_id):
    return (tokens != pad_id).float().unsqueeze(1)


def padding_int(tokens, pad_id):
    return (tokens != pad_id).long().unsqueeze(1)


def padding_hard_coded_zero(tokens, pad_id):
    return (tokens != 0).unsqueeze(1)


def padding_tokens_bool(tokens, pad_id):
    return tokens.bool().unsqueeze(1)


def padding_in_place(tokens, pad_id):
    return tokens.ne_(pad_id).bool().unsqueeze(1)


def padding_additive(tokens, pad_id):
    return torch.zeros(tokens.shape, dtype=torch.float32).masked_fill(tokens == pad_id, float("-inf")).unsqueeze(1)


def padding_four_dims(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]


def padding_on_meta(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1).to("meta")


def padding_via_list(tokens, pad_id):
    """Trial C's W12: the mask rebuilt from Python lists, always on the CPU."""
    return torch.tensor([[t != pad_id for t in row] for row in tokens.tolist()]).unsqueeze(1)


def padding_pad_keyword(tokens, pad):
    return (tokens != pad).unsqueeze(1)


def padding_greater_g(tokens, pad_id):
    """Trial G: `tokens > pad_id` was only told "2 of 12 entries are wrong"."""
    return (tokens > pad_id).unsqueeze(1)


def padding_largest_id_dropped(tokens, pad_id):
    return ((tokens != pad_id) & (tokens != tokens.max())).unsqueeze(1)


def test_padding_other_wrong_pattern_shows_the_tokens():
    for r in verdicts(check_padding_mask, padding_largest_id_dropped):
        assert not r.passed and r.mistake == "values differ", r.feedback
        first = r"entries are wrong; the first: \[\d+, 0, \d+\] \(token \d+\) should be True"
        assert re.search(first, r.feedback), r.feedback
        assert "True when token j of row b is a real token (not pad_id = " in r.feedback, r.feedback


PADDING_MISTAKES = [
    (padding_inverted, "inverted mask", ["inverted", "True at the padding"]),
    (padding_no_query_axis, "missing query axis", ["(B, L)", "unsqueeze(1)"]),
    (padding_last_axis, "wrong axis", ["in the middle", "unsqueeze(1)"]),
    (padding_first_axis, "wrong axis", ["in the middle", "unsqueeze(1)"]),
    (padding_float, "not a bool mask", ["torch.float32", "torch.bool"]),
    (padding_int, "not a bool mask", ["torch.int64", "torch.bool"]),
    (padding_hard_coded_zero, "hard-coded pad id", ["pad_id", "hard-coded 0"]),
    (padding_tokens_bool, "hard-coded pad id", ["pad_id", "tokens.bool()"]),
    (padding_greater_g, "ids below pad_id as padding", ["ids smaller than pad_id (", "tokens != pad_id"]),
    (padding_in_place, "input modified in place", ["in place", "`tokens`"]),
    (padding_additive, "additive float mask", ["additive", "bool mask"]),
    (padding_four_dims, "wrong shape", ["has shape", "expected"]),
    (padding_on_meta, "wrong device", ["device meta", "expected cpu"]),
    ("padding_mask", "not a function", ["pass the function itself"]),
    (padding_via_list, "wrong device", [".tolist()", "lands on the CPU"]),
    (padding_pad_keyword, "parameter renamed", ["no parameter named `pad_id`"]),
]


@pytest.mark.parametrize("fn, name, words", PADDING_MISTAKES, ids=[_id(f) for f, _, _ in PADDING_MISTAKES])
def test_padding_mistake_is_named(fn, name, words):
    assert name in MISTAKES["padding_mask"]
    assert_mistake(check_padding_mask, fn, name, *words)


def test_padding_stub_and_exception():
    def stub(tokens, pad_id):
        raise NotImplementedError()

    def broken(tokens, pad_id):
        return (tokens != pad_id).unsqueeze(3)

    result = check_padding_mask(stub)
    assert result.status == "not implemented" and "not implemented yet" in result.feedback
    result = check_padding_mask(broken)
    assert result.passed is False and result.status == "error"
    assert "your code raised IndexError: Dimension out of range" in result.feedback
    assert "return (tokens != pad_id).unsqueeze(3)" in result.feedback


@pytest.mark.parametrize("returned", [None, "mask", np.ones((2, 1, 5), dtype=bool), (torch.ones(2, 1, 5, dtype=torch.bool),), torch.ones(2, 1, 5, 5)])  # noqa: E501
def test_padding_weird_returns_do_not_raise(returned):
    result = check_padding_mask(lambda tokens, pad_id: returned)
    assert result.passed is False and result.status == "failed"


# =============================================================== hints
@pytest.mark.parametrize("name", ["scaled_dot_product_attention", "causal_mask", "padding_mask"])
def test_hints_exist_and_reveal_no_code(name, capsys):
    assert 2 <= len(HINTS[name]) <= 4
    for level in range(1, len(HINTS[name]) + 1):
        hint(name, level)
        printed = capsys.readouterr().out
        assert printed.startswith(f"Hint {level}/{len(HINTS[name])} for {name}: ")
        assert HINTS[name][level - 1] in printed
        assert "def " not in printed and "return " not in printed
    result = {"scaled_dot_product_attention": check_scaled_dot_product_attention,
              "causal_mask": check_causal_mask, "padding_mask": check_padding_mask}[name](lambda *a, **k: None)
    assert f'hint("{name}")' in result.feedback


def test_every_catalogued_mistake_is_tested():
    tested = {
        "scaled_dot_product_attention": {n for _, n, _ in SDPA_MISTAKES + ROBUSTNESS_MISTAKES + GRADIENT_MISTAKES} | {"not a tuple"},  # noqa: E501
        # "values differ": the tests of other wrong patterns; "assumed trailing padding": on 20 seeds below
        "causal_mask": {n for _, n, _ in CAUSAL_MISTAKES} | {"not a tensor", "values differ"},
        "padding_mask": {n for _, n, _ in PADDING_MISTAKES} | {"not a tensor", "values differ", "assumed trailing padding"},  # noqa: E501
    }
    for name, catalogue in MISTAKES.items():
        assert set(catalogue) == tested[name], name


@pytest.mark.parametrize(
    "check, returned, name",
    [
        (check_scaled_dot_product_attention, None, "not a tuple"),
        (check_scaled_dot_product_attention, [torch.zeros(2), torch.zeros(2)], "not a tuple"),
        (check_causal_mask, None, "not a tensor"),
        (check_padding_mask, [[True]], "not a tensor"),
    ],
)
def test_structure_mistakes_are_named(check, returned, name):
    result = check(lambda *args, **kwargs: returned)
    assert result.mistake == name, result.feedback


def test_a_list_is_not_a_tuple_in_the_same_words_as_multi_head_attention():
    result = check_scaled_dot_product_attention(lambda *args, **kwargs: [torch.zeros(2), torch.zeros(2)])
    assert result.mistake == "not a tuple"
    assert "your function returns a list; return a tuple (output, weights): `return output, weights`" in result.feedback


def _query_scaled_first(query, key, value, mask=None):
    """Trial I: the query scaled before the product (equal in exact arithmetic), which once missed
    the bfloat16 case's tolerance (seed 1400343121: 0.0146 from the bfloat16 reference)."""
    scores = (query / math.sqrt(query.size(-1))) @ key.transpose(-2, -1)  # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    return weights @ value, weights


def test_query_scaled_first_passes_the_half_precision_cases():
    r = check_scaled_dot_product_attention(_query_scaled_first, seed=1400343121)
    assert r.passed, r.feedback
    assert_passes(check_scaled_dot_product_attention, _query_scaled_first, repeat=STABLE)


def padding_from_lengths(tokens, pad_id):
    """d2l's habit: a length per row (the first pad id), every position after it padding."""
    L = tokens.size(1)
    is_pad = tokens == pad_id
    valid = torch.where(is_pad.any(1), is_pad.int().argmax(1), torch.full((tokens.size(0),), L))
    return (torch.arange(L)[None, :] < valid[:, None]).unsqueeze(1)


def padding_from_counts(tokens, pad_id):
    n = (tokens != pad_id).sum(1)  # (B,): the real tokens taken as the first n
    return (torch.arange(tokens.size(1))[None, :] < n[:, None]).unsqueeze(1)


@pytest.mark.parametrize("fn", [padding_from_lengths, padding_from_counts], ids=["first pad", "count"])
def test_padding_mask_from_lengths_is_named_on_20_seeds(fn):
    assert_mistake(check_padding_mask, fn, "assumed trailing padding", "Padding is wherever the pad id is",
                   "tokens != pad_id", repeat=STABLE)
