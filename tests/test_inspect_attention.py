"""Tests for course_utils.inspect_attention: record_attention and stack_layers."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from course_utils import (
    Encoder,
    MultiHeadAttention,
    Transformer,
    make_src_mask,
    make_tgt_mask,
    record_attention,
    stack_layers,
)

B, L_SRC, L_TGT, H, N = 2, 6, 4, 2, 2
PAD = 0


@pytest.fixture
def model_and_batch():
    torch.manual_seed(0)
    model = Transformer(11, 9, d_model=16, num_heads=H, num_layers=N, d_ff=32, dropout=0.0).eval()
    src = torch.randint(1, 11, (B, L_SRC))
    src[1, 4:] = PAD
    tgt = torch.randint(1, 9, (B, L_TGT))
    return model, src, tgt


def _attention_modules(model):
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def test_keys_and_shapes_for_a_transformer(model_and_batch):
    model, src, tgt = model_and_batch
    with record_attention(model) as maps:
        model(src, tgt, make_src_mask(src, PAD), make_tgt_mask(tgt, PAD))
    expected = {f"encoder.layers.{i}.self_attn" for i in range(N)}
    expected |= {f"decoder.layers.{i}.{kind}" for i in range(N) for kind in ("self_attn", "cross_attn")}
    assert set(maps) == expected
    for i in range(N):
        assert maps[f"encoder.layers.{i}.self_attn"].shape == (B, H, L_SRC, L_SRC)
        assert maps[f"decoder.layers.{i}.self_attn"].shape == (B, H, L_TGT, L_TGT)
        assert maps[f"decoder.layers.{i}.cross_attn"].shape == (B, H, L_TGT, L_SRC)
    for w in maps.values():
        assert not w.requires_grad and w.device.type == "cpu"
        assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    # the recorded maps are the real ones: masked entries are exactly zero
    dec_self = maps["decoder.layers.0.self_attn"]
    assert (dec_self.triu(diagonal=1) == 0).all()  # causal
    assert (maps["encoder.layers.1.self_attn"][1, :, :, 4:] == 0).all()  # padding of example 1
    assert (maps["decoder.layers.1.cross_attn"][1, :, :, 4:] == 0).all()


def test_recorded_weights_equal_the_modules_output(model_and_batch):
    model, src, tgt = model_and_batch
    layer0 = model.encoder.layers[0].self_attn
    x = torch.randn(B, L_SRC, 16)
    with record_attention(model) as maps:
        _, weights = layer0(x, x, x)
    assert set(maps) == {"encoder.layers.0.self_attn"}
    assert torch.equal(maps["encoder.layers.0.self_attn"], weights)


def test_hooks_are_removed_after_the_block(model_and_batch):
    model, src, tgt = model_and_batch
    modules = _attention_modules(model)
    assert all(len(m._forward_hooks) == 0 for m in modules)
    with record_attention(model) as maps:
        assert all(len(m._forward_hooks) == 1 for m in modules)
        model(src, tgt)
    assert all(len(m._forward_hooks) == 0 for m in modules)
    before = {k: v.clone() for k, v in maps.items()}
    model(src.flip(1), tgt.flip(1))  # outside the block: nothing recorded any more
    assert all(torch.equal(maps[k], before[k]) for k in before) and set(maps) == set(before)


def test_hooks_are_removed_after_an_exception(model_and_batch):
    model, src, tgt = model_and_batch
    with pytest.raises(RuntimeError, match="inside the block"):
        with record_attention(model):
            model(src, tgt)
            raise RuntimeError("inside the block")
    assert all(len(m._forward_hooks) == 0 for m in _attention_modules(model))
    bad_tgt_mask = torch.ones(L_TGT + 1, L_TGT + 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask"):
        with record_attention(model) as maps:
            model(src, tgt, None, bad_tgt_mask)  # raises inside the decoder, after the encoder ran
    assert "encoder.layers.0.self_attn" in maps  # the hooks had fired

    assert all(len(m._forward_hooks) == 0 for m in _attention_modules(model))


def test_bare_attention_module_is_recorded_as_self():
    torch.manual_seed(1)
    mha = MultiHeadAttention(12, 3).eval()
    q, kv = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    with record_attention(mha) as maps:
        _, weights = mha(q, kv, kv)
    assert list(maps) == ["self"]
    assert maps["self"].shape == (2, 3, 5, 7)
    assert torch.equal(maps["self"], weights)


def test_stack_layers_shapes_and_order(model_and_batch):
    model, src, tgt = model_and_batch
    with record_attention(model) as maps:
        model(src, tgt)
    enc = stack_layers(maps, "encoder", "self_attn")
    assert enc.shape == (N, B, H, L_SRC, L_SRC)
    cross = stack_layers(maps, "decoder", "cross_attn")
    assert cross.shape == (N, B, H, L_TGT, L_SRC)
    assert stack_layers(maps, "decoder", "self_attn").shape == (N, B, H, L_TGT, L_TGT)
    for i in range(N):
        assert torch.equal(enc[i], maps[f"encoder.layers.{i}.self_attn"])
        assert torch.equal(cross[i], maps[f"decoder.layers.{i}.cross_attn"])


def test_stack_layers_sorts_numerically():
    """Layer 10 comes after layer 9, not after layer 1 (no string sort)."""
    torch.manual_seed(2)
    enc = Encoder(11, 4, 1, 4).eval()
    with record_attention(enc) as maps:
        enc(torch.randn(1, 3, 4))
    stacked = stack_layers(maps, "", "self_attn")  # a bare Encoder: names are layers.<i>.self_attn
    assert stacked.shape == (11, 1, 1, 3, 3)
    for i in range(11):
        assert torch.equal(stacked[i], maps[f"layers.{i}.self_attn"])


def test_stack_layers_error_when_nothing_matches(model_and_batch):
    model, src, tgt = model_and_batch
    with record_attention(model) as maps:
        model(src, tgt)
    with pytest.raises(ValueError) as info:
        stack_layers(maps, "encoder", "cross_attn")  # the encoder has no cross-attention
    message = str(info.value)
    assert "encoder.layers." in message and "cross_attn" in message
    assert "decoder.layers.0.cross_attn" in message  # lists what was recorded
    with pytest.raises(ValueError):
        stack_layers({}, "decoder", "self_attn")
