"""Tests for course_utils.positional and course_utils.embeddings (notebook 03)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from course_utils import PositionalEncoding, TokenEmbedding, sinusoidal_positional_encoding


def _paper_formula(max_len: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same), in float64, by loop."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize("max_len,d_model", [(50, 16), (7, 6), (1, 2)])
def test_matches_paper_formula(max_len, d_model):
    pe = sinusoidal_positional_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    # float32 table vs float64 loop: default float32 tolerance (atol 1e-5, rtol 1.3e-6)
    assert_close(pe, _paper_formula(max_len, d_model).float())


def test_hand_checkable_entries():
    pe = sinusoidal_positional_encoding(3, 4)
    # position 0: sin(0) = 0, cos(0) = 1, interleaved
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    # d_model = 4: frequencies 1 and 1/10000^(2/4) = 1/100
    expected = torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    assert_close(pe[1], expected)
    assert_close(pe[2, 0], torch.tensor(math.sin(2.0)))
    assert_close(pe[2, 3], torch.tensor(math.cos(0.02)))


def _shift_matrix(k: int, d_model: int) -> torch.Tensor:
    """M_k with PE(pos + k) = M_k PE(pos): a 2x2 rotation per (sin, cos) frequency pair.

    [sin(a + b), cos(a + b)] = [[cos b, sin b], [-sin b, cos b]] @ [sin a, cos a], b = k w_i.
    M_k depends on k only, not on pos: relative positions are linear maps.
    """
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        b = k / 10000 ** (2 * i / d_model)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]], dtype=torch.float64
        )
    return M


@pytest.mark.parametrize("k", [1, 3, 10])
def test_relative_shift_is_a_fixed_rotation(k):
    max_len, d_model = 40, 8
    pe = sinusoidal_positional_encoding(max_len, d_model).double()  # (max_len, D)
    M = _shift_matrix(k, d_model)  # (D, D)
    shifted = pe[:-k] @ M.T  # (max_len - k, D): row pos is M_k PE(pos)
    assert_close(shifted, pe[k:], atol=1e-5, rtol=0)  # float32 table: 1e-5 absolute


def test_positional_encoding_adds_table():
    d_model, max_len = 6, 9
    module = PositionalEncoding(d_model, max_len=max_len).eval()
    x = torch.randn(2, 5, d_model)  # (B, L, D) with L < max_len
    assert_close(module(x), x + sinusoidal_positional_encoding(max_len, d_model)[:5])
    full = torch.randn(2, max_len, d_model)  # L == max_len is allowed
    assert module(full).shape == full.shape


def test_pe_is_a_buffer_not_a_parameter():
    module = PositionalEncoding(8, max_len=10)
    assert list(module.parameters()) == []
    assert "pe" in dict(module.named_buffers())
    assert "pe" in module.state_dict()
    assert not module.pe.requires_grad
    assert_close(module.pe, sinusoidal_positional_encoding(10, 8))


def test_pe_moves_with_to():
    module = PositionalEncoding(8, max_len=10)
    module.to(torch.float64)
    assert module.pe.dtype == torch.float64
    module.to("meta")  # a device move without a GPU: buffers follow the module
    assert module.pe.device.type == "meta"


def test_positional_dropout_only_in_training():
    torch.manual_seed(0)
    module = PositionalEncoding(8, max_len=10, dropout=0.5)
    x = torch.randn(2, 4, 8)
    expected = x + module.pe[:4]
    assert_close(module.eval()(x), expected)
    assert not torch.allclose(module.train()(x), expected)


def test_token_embedding_scales_by_sqrt_d_model():
    torch.manual_seed(0)
    vocab, d_model = 11, 9  # sqrt(9) = 3
    emb = TokenEmbedding(vocab, d_model)
    assert isinstance(emb.embedding, nn.Embedding) and emb.embedding.weight.shape == (vocab, d_model)
    tokens = torch.tensor([[0, 10, 3], [5, 5, 1]])  # (B, L)
    out = emb(tokens)  # (B, L, D)
    assert out.shape == (2, 3, d_model)
    assert_close(out, emb.embedding.weight[tokens] * 3.0)
    assert torch.equal(emb(tokens.int()), out)  # int32 ids are fine too
