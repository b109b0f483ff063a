"""Tests for course_utils.attention (notebook 01): scaled dot-product attention and masks.

The reference is checked against ``torch.nn.functional.scaled_dot_product_attention``,
which takes a boolean ``attn_mask`` with our polarity (``True`` = may attend). Shapes are
deliberately awkward: ``L_q != L_k != d_k != d_v`` and two leading batch dims.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from course_utils import causal_mask, fastpaths, padding_mask, scaled_dot_product_attention
from course_utils.attention import softmax_over_keys

LEAD = (2, 3)  # two leading batch dims, e.g. (B, H)
L_Q, L_K, D_K, D_V = 5, 7, 4, 6


def _qkv(seed: int = 0, lead: tuple[int, ...] = LEAD):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, L_Q, D_K, generator=g)  # (*lead, L_q, d_k)
    k = torch.randn(*lead, L_K, D_K, generator=g)  # (*lead, L_k, d_k)
    v = torch.randn(*lead, L_K, D_V, generator=g)  # (*lead, L_k, d_v)
    return q, k, v


def _torch_weights(q, k, mask=None):
    """torch's attention weights, read off by attending over an identity "value":
    ``weights @ I = weights``. Independent of our code."""
    eye = torch.eye(k.size(-2)).expand(*k.shape[:-1], k.size(-2))  # (..., L_k, L_k)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)  # (..., L_q, L_k)


def _random_row_mask(shape, seed):
    """Random boolean mask with at least one True per row (no fully blocked row)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) > 0.5  # (..., L_q, L_k)
    keep = torch.randint(shape[-1], shape[:-1], generator=g)  # (..., L_q)
    mask.scatter_(-1, keep.unsqueeze(-1), True)
    return mask


def _padding(B: int) -> torch.Tensor:
    pad = torch.ones(B, 1, L_K, dtype=torch.bool)  # (B, 1, L_k): one row per example
    pad[0, :, -2:] = False
    pad[1, :, -3:] = False
    return pad


# (test id, leading dims of q/k/v, mask)
CASES = [
    ("no_mask", LEAD, None),
    ("Lq_Lk", LEAD, _random_row_mask((L_Q, L_K), seed=1)),
    # (B, 1, L_k) with inputs (B, L, d): the padding mask, broadcast over the queries
    ("B_1_Lk", (2,), _padding(2)),
    # the same padding mask with a head axis: (B, 1, 1, L_k) against (B, H, L_q, L_k)
    ("B_1_1_Lk", LEAD, _padding(2).unsqueeze(1)),
    ("per_row_random", LEAD, _random_row_mask((*LEAD, L_Q, L_K), seed=2)),
]


@pytest.mark.parametrize("name,lead,mask", CASES, ids=[c[0] for c in CASES])
def test_matches_torch_sdpa(name, lead, mask):
    q, k, v = _qkv(lead=lead)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (*lead, L_Q, D_V)
    assert weights.shape == (*lead, L_Q, L_K)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert_close(weights, _torch_weights(q, k, mask))
    assert_close(weights.sum(-1), torch.ones(*lead, L_Q))
    if mask is not None:
        # blocked keys get exactly zero weight (exp(finfo.min - max) underflows to 0)
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_causal_matches_torch_is_causal():
    q, k, v = _qkv()
    k, v = k[..., :L_Q, :], v[..., :L_Q, :]  # square: causal needs L_q == L_k
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(L_Q))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    # strictly upper triangle (the future) has zero weight, first query sees only itself
    assert (weights.triu(diagonal=1) == 0).all()
    assert_close(weights[..., 0, 0], torch.ones(LEAD))


def test_single_leading_dim_and_no_leading_dim():
    q, k, v = _qkv()
    for qq, kk, vv in ((q[0, 0], k[0, 0], v[0, 0]), (q[0], k[0], v[0])):  # (L, d) and (H, L, d)
        out, weights = scaled_dot_product_attention(qq, kk, vv)
        assert_close(out, F.scaled_dot_product_attention(qq, kk, vv))
        assert weights.shape == (*qq.shape[:-1], L_K)


def test_scaling_by_sqrt_d_k_hand_example():
    # one query, two keys: scores are q.k / sqrt(d_k) = [4/2, 0/2] = [2, 0] with d_k = 4
    q = torch.tensor([[2.0, 0.0, 0.0, 0.0]])  # (1, 4)
    k = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])  # (2, 4)
    v = torch.tensor([[1.0], [0.0]])  # (2, 1)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected = torch.tensor([[math.exp(2) / (math.exp(2) + 1), 1 / (math.exp(2) + 1)]])
    assert_close(weights, expected)
    assert_close(out, expected[:, :1])


def test_fully_masked_row_is_uniform_not_nan():
    """A row whose keys are all blocked gives uniform weights and the mean of the values.

    Why: blocked scores are filled with ``torch.finfo(dtype).min`` (finite), so a fully
    blocked row is ``softmax([m, m, ..., m])`` = uniform; ``-inf`` would give
    ``exp(-inf - (-inf)) = exp(nan)`` = NaN (see the attention.py docstring), and that NaN
    would spread through every later layer and the gradients.
    """
    q, k, v = _qkv()
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    mask = _random_row_mask((*LEAD, L_Q, L_K), seed=3)
    mask[0, 1, 2] = False  # one query that may attend to nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert_close(weights[0, 1, 2], torch.full((L_K,), 1 / L_K))
    assert_close(out[0, 1, 2], v[0, 1].mean(0))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    # the other rows are unaffected by the blocked one
    assert_close(weights[1], _torch_weights(q[1].detach(), k[1].detach(), mask[1]))


def test_minus_inf_fill_would_give_nan():
    """Documents why the fill is finite: the same fully blocked row with -inf is NaN."""
    scores = torch.randn(3, 4)  # (L_q, L_k)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    assert torch.isnan(scores.masked_fill(~mask, float("-inf")).softmax(-1)[1]).all()
    assert torch.isfinite(scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)).all()


def test_float64_inputs_keep_dtype():
    q, k, v = (t.double() for t in _qkv())
    mask = _random_row_mask((L_Q, L_K), seed=4)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == weights.dtype == torch.float64
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_causal_mask_values():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m, expected)
    assert causal_mask(1).tolist() == [[True]]


def test_padding_mask_values_and_shape():
    tokens = torch.tensor([[5, 3, 0, 0], [7, 0, 2, 0]])  # pad_id 0 anywhere, not only at the end
    m = padding_mask(tokens, pad_id=0)
    assert m.dtype == torch.bool and m.shape == (2, 1, 4)
    assert m[:, 0].tolist() == [[True, True, False, False], [True, False, True, False]]
    # combines with a causal mask into (B, L, L)
    both = m & causal_mask(4)
    assert both.shape == (2, 4, 4)
    assert both[1].tolist()[3] == [True, False, True, False]


# ------------------------------------------------------------------ softmax of short rows


@pytest.mark.parametrize("softmax", [softmax_over_keys, fastpaths.softmax_last_axis],
                         ids=["softmax_over_keys", "written-out-path"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_last_axis_equals_torch_on_both_paths(softmax, dtype):
    """The reference's softmax (the speed path on short rows, torch's kernel on long ones) and
    the written-out exp2 form on every length give torch's softmax and its gradient, for
    lengths on either side of a SIMD register, with blocked (finfo.min) keys getting
    exactly 0, and a fully blocked row uniform."""
    g = torch.Generator().manual_seed(3)
    for L in (1, 2, 7, 8, 15, 16, 17, 33):
        scores = torch.randn(2, 3, 4, L, generator=g, dtype=dtype) * 5  # (B, H, L_q, L_k)
        blocked = torch.rand(2, 3, 4, L, generator=g) < 0.3
        blocked[..., 0] = False  # every row keeps one key ...
        blocked[1, 2, 3] = True  # ... but this one: fully blocked
        scores = scores.masked_fill(blocked, torch.finfo(dtype).min)
        x_ours = scores.clone().requires_grad_(True)
        x_torch = scores.clone().requires_grad_(True)
        ours, expected = softmax(x_ours), x_torch.softmax(dim=-1)
        assert_close(ours, expected)
        partly = blocked.clone()
        partly[1, 2, 3] = False  # rows with at least one open key
        assert (ours[partly] == 0).all(), L  # blocked keys: exactly zero weight
        assert_close(ours[1, 2, 3], torch.full((L,), 1 / L, dtype=dtype))  # fully blocked: uniform
        upstream = torch.randn(ours.shape, generator=g, dtype=dtype)
        ours.backward(upstream)
        expected.backward(upstream)
        assert torch.isfinite(x_ours.grad).all()
        assert_close(x_ours.grad, x_torch.grad)



def test_gpt_block_fused_attention_equals_the_solution_path():
    """fastpaths.causal_self_attention (GPTBlock without a mask, nothing reading the weights) gives
    the explicit path's output and gradients (float32 and float64); a recorded, masked or
    dropping attention still runs MultiHeadAttention itself."""
    from course_utils import GPTBlock, record_attention

    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        torch.manual_seed(0)
        block = GPTBlock(24, 3, 40).to(dtype).train()
        x = torch.randn(3, 11, 24, dtype=dtype)
        results = []
        for seam in (contextlib.nullcontext, fastpaths.disabled):
            with seam():
                block.zero_grad()
                x_ = x.clone().requires_grad_(True)
                y = block(x_)
                y.backward(torch.ones_like(y))
                results.append((y, x_.grad, *(p.grad for p in block.parameters())))
        for fast, plain in zip(*results):
            assert_close(fast, plain, atol=tol, rtol=tol)
    calls = []
    block.self_attn.dropout.register_forward_hook(lambda *args: calls.append(1))
    block(x)
    assert calls == []  # the fused kernel: MultiHeadAttention not called
    with record_attention(block) as maps:
        block(x)
    assert maps["self_attn"].shape == (3, 3, 11, 11) and len(calls) == 1
    block(x, torch.ones(3, 1, 11, dtype=torch.bool))
    block.self_attn.dropout.p = 0.1
    block(x)
    assert len(calls) == 3
