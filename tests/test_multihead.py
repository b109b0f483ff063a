"""Tests for course_utils.multihead (notebook 02): split/merge heads and MultiHeadAttention.

``MultiHeadAttention`` is compared with ``nn.MultiheadAttention(batch_first=True)`` given
the same weights. torch keeps the three input projections in one ``in_proj_weight``
(rows ``[W_q; W_k; W_v]``) and its boolean masks have the OPPOSITE polarity to ours
(``True`` = blocked), so every mask is passed to torch as ``~mask``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close
from torch_copy import copy_attention_weights

from course_utils import MultiHeadAttention, merge_heads, split_heads

B, L_Q, L_K, D, H = 3, 5, 7, 12, 3  # d_k = 4: L_q != L_k != d_k


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D, H).eval()
    theirs = nn.MultiheadAttention(D, H, batch_first=True).eval()
    copy_attention_weights(ours, theirs)
    return ours, theirs


def _row_mask(shape, seed):
    """Random boolean mask (True = may attend) with at least one True per row."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) > 0.5
    keep = torch.randint(shape[-1], shape[:-1], generator=g)
    mask.scatter_(-1, keep.unsqueeze(-1), True)
    return mask


# ---------------------------------------------------------------- split / merge heads


def test_split_heads_shape_and_feature_slices():
    x = torch.randn(B, L_Q, D)  # (B, L, D)
    heads = split_heads(x, H)  # (B, H, L, d_k)
    d_k = D // H
    assert heads.shape == (B, H, L_Q, d_k)
    for h in range(H):
        # head h sees features h*d_k:(h+1)*d_k of EVERY position (not a block of positions)
        assert torch.equal(heads[:, h], x[..., h * d_k : (h + 1) * d_k])


def test_merge_heads_inverts_split_heads():
    x = torch.randn(B, L_Q, D)
    assert torch.equal(merge_heads(split_heads(x, H)), x)
    y = torch.randn(B, H, L_Q, D // H)  # (B, H, L, d_k)
    assert torch.equal(split_heads(merge_heads(y), H), y)
    assert merge_heads(y).shape == (B, L_Q, D)


# ---------------------------------------------------------------- parity with torch


def test_submodules_follow_contract():
    mha = MultiHeadAttention(D, H)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        lin = getattr(mha, name)
        assert isinstance(lin, nn.Linear) and lin.weight.shape == (D, D) and lin.bias is not None


@pytest.mark.parametrize("with_grad", [True, False], ids=["grad", "no_grad"])
def test_self_attention_matches_torch(with_grad):
    ours, theirs = _pair()
    x = torch.randn(B, L_Q, D)
    with torch.set_grad_enabled(with_grad):  # no_grad lets torch take its fast path
        out, w = ours(x, x, x)
        ref, ref_w = theirs(x, x, x, average_attn_weights=False)
    assert out.shape == (B, L_Q, D) and w.shape == (B, H, L_Q, L_Q)
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_cross_attention_matches_torch():
    ours, theirs = _pair(1)
    q = torch.randn(B, L_Q, D)
    kv = torch.randn(B, L_K, D)
    out, w = ours(q, kv, kv)
    ref, ref_w = theirs(q, kv, kv, average_attn_weights=False)
    assert w.shape == (B, H, L_Q, L_K)
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_distinct_key_and_value_match_torch():
    ours, theirs = _pair(2)
    q, k, v = torch.randn(B, L_Q, D), torch.randn(B, L_K, D), torch.randn(B, L_K, D)
    out, w = ours(q, k, v)
    ref, ref_w = theirs(q, k, v, average_attn_weights=False)
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_shared_mask_matches_torch():
    """An (L_q, L_k) mask: torch takes the 2-D attn_mask as is (inverted)."""
    ours, theirs = _pair(3)
    q, kv = torch.randn(B, L_Q, D), torch.randn(B, L_K, D)
    mask = _row_mask((L_Q, L_K), seed=0)  # (L_q, L_k)
    out, w = ours(q, kv, kv, mask)
    ref, ref_w = theirs(q, kv, kv, attn_mask=~mask, average_attn_weights=False)
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_per_example_mask_matches_torch():
    """A (B, L_q, L_k) mask: torch wants it per head, (B*H, L_q, L_k), batch-major."""
    ours, theirs = _pair(4)
    q, kv = torch.randn(B, L_Q, D), torch.randn(B, L_K, D)
    mask = _row_mask((B, L_Q, L_K), seed=1)  # (B, L_q, L_k)
    out, w = ours(q, kv, kv, mask)
    torch_mask = (~mask).repeat_interleave(H, dim=0)  # (B*H, L_q, L_k)
    ref, ref_w = theirs(q, kv, kv, attn_mask=torch_mask, average_attn_weights=False)
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_padding_mask_matches_torch_key_padding_mask():
    """A (B, 1, L_k) padding mask is torch's key_padding_mask (B, L_k), inverted."""
    ours, theirs = _pair(5)
    x = torch.randn(B, L_K, D)
    lengths = torch.tensor([L_K, L_K - 2, 1])
    mask = (torch.arange(L_K) < lengths[:, None]).unsqueeze(1)  # (B, 1, L_k)
    out, w = ours(x, x, x, mask)
    ref, ref_w = theirs(x, x, x, key_padding_mask=~mask[:, 0], average_attn_weights=False)
    assert_close(out, ref)
    assert_close(w, ref_w)
    assert (w[2, :, :, 1:] == 0).all()  # example 2 has a single real key


def test_weights_rows_sum_to_one_and_heads_differ():
    ours, _ = _pair(6)
    x = torch.randn(B, L_Q, D)
    _, w = ours(x, x, x)
    assert_close(w.sum(-1), torch.ones(B, H, L_Q))
    assert not torch.allclose(w[:, 0], w[:, 1])  # heads really are separate


# ---------------------------------------------------------------- properties


def test_self_attention_is_permutation_equivariant():
    """No positions inside attention: permuting the sequence permutes the output."""
    ours, _ = _pair(7)
    x = torch.randn(B, L_K, D)
    perm = torch.randperm(L_K, generator=torch.Generator().manual_seed(0))
    out, w = ours(x, x, x)
    out_p, w_p = ours(x[:, perm], x[:, perm], x[:, perm])
    assert_close(out_p, out[:, perm])
    assert_close(w_p, w[:, :, perm][:, :, :, perm])


def test_fully_masked_row_gives_no_nan():
    """A query with no allowed key: uniform weights, finite output and gradients
    (the fill value is torch.finfo.min, not -inf; see attention.py)."""
    ours, _ = _pair(8)
    q, kv = torch.randn(B, L_Q, D), torch.randn(B, L_K, D, requires_grad=True)
    mask = _row_mask((B, L_Q, L_K), seed=2)
    mask[1, 3] = False  # example 1, query 3 may attend to nothing
    out, w = ours(q, kv, kv, mask)
    assert torch.isfinite(out).all()
    assert_close(w[1, :, 3], torch.full((H, L_K), 1 / L_K))
    out.sum().backward()
    assert torch.isfinite(kv.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters())


def test_dropout_only_in_training_and_weights_are_pre_dropout():
    torch.manual_seed(9)
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, L_Q, D)
    mha.eval()
    out_eval, w_eval = mha(x, x, x)
    assert_close(mha(x, x, x)[0], out_eval)  # eval: deterministic
    mha.train()
    out_train, w_train = mha(x, x, x)
    assert not torch.allclose(out_train, out_eval)  # dropout acted
    assert_close(w_train, w_eval)  # returned weights are the probabilities before dropout
