"""Tests for course_utils.layers, .encoder and .decoder (notebooks 04 and 05).

Every layer and stack is compared with torch's own (``nn.LayerNorm``,
``nn.TransformerEncoderLayer``, ``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``,
``nn.TransformerDecoder``; ``batch_first=True``, ``dropout=0.0``, ReLU) after copying our
weights into them, in both ``norm_first`` settings and with masks. torch's boolean masks
mean "blocked", the opposite of ours, so they are passed as ``~mask``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close
from torch_copy import copy_attention_weights

from course_utils import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    causal_mask,
)

B, L_SRC, L_TGT, D, H, D_FF = 3, 7, 5, 12, 3, 20  # d_k = 4
NUM_LAYERS = 2


# ---------------------------------------------------------------- weight copying


def _copy_norm(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


@torch.no_grad()
def copy_layer_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """An EncoderLayer into nn.TransformerEncoderLayer, or a DecoderLayer into
    nn.TransformerDecoderLayer (torch calls our cross_attn ``multihead_attn``)."""
    copy_attention_weights(ours.self_attn, theirs.self_attn)
    if isinstance(ours, DecoderLayer):
        copy_attention_weights(ours.cross_attn, theirs.multihead_attn)
        _copy_norm(ours.norm3, theirs.norm3)
    for name in ("linear1", "linear2"):
        getattr(theirs, name).load_state_dict(getattr(ours.feed_forward, name).state_dict())
    _copy_norm(ours.norm1, theirs.norm1)
    _copy_norm(ours.norm2, theirs.norm2)


@torch.no_grad()
def randomize_norms(module: nn.Module) -> None:
    """LayerNorms start at weight 1, bias 0; random values make the copy (and order) matter."""
    for m in module.modules():
        if isinstance(m, LayerNorm):
            m.weight.normal_(1.0, 0.3)
            m.bias.normal_(0.0, 0.3)


def _padding_mask(lengths: list[int], L: int) -> torch.Tensor:
    return (torch.arange(L) < torch.tensor(lengths)[:, None]).unsqueeze(1)  # (B, 1, L)


def _encoder_pair(norm_first: bool, seed: int = 0):
    torch.manual_seed(seed)
    ours = EncoderLayer(D, H, D_FF, dropout=0.0, norm_first=norm_first).eval()
    randomize_norms(ours)
    theirs = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_layer_weights(ours, theirs)
    return ours, theirs


def _decoder_pair(norm_first: bool, seed: int = 0):
    torch.manual_seed(seed)
    ours = DecoderLayer(D, H, D_FF, dropout=0.0, norm_first=norm_first).eval()
    randomize_norms(ours)
    theirs = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_layer_weights(ours, theirs)
    return ours, theirs


# ---------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("eps", [1e-5, 1e-3, 0.1])
@pytest.mark.parametrize(
    "offset,spread,tol",
    [
        (0.0, 0.1, {}),  # small spread: eps matters; float32 default tolerance
        # a large mean offset: float32 rounding of the mean alone differs by ~3e-5 between
        # two correct implementations, so 1e-4; a one-pass E[x^2] - E[x]^2 variance is
        # off by ~1e-2 here and still fails
        (100.0, 1.0, {"atol": 1e-4, "rtol": 1e-4}),
    ],
    ids=["centred", "offset100"],
)
def test_layer_norm_matches_torch(eps, offset, spread, tol):
    torch.manual_seed(0)
    d = 7  # small D: the biased (/D) and unbiased (/(D-1)) variances differ by 17%
    ours = LayerNorm(d, eps=eps)
    theirs = nn.LayerNorm(d, eps=eps)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)
    x = offset + spread * torch.randn(2, 3, 4, d)  # (2, 3, 4, D): several leading dims
    assert_close(ours(x), theirs(x), **tol)


def test_layer_norm_large_offset_float64():
    """float64, offset 1e4: default float64 tolerance, no rounding excuse."""
    torch.manual_seed(1)
    ours, theirs = LayerNorm(5, eps=1e-3).double(), nn.LayerNorm(5, eps=1e-3).double()
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = 1e4 + torch.randn(4, 2, 5, dtype=torch.float64)  # (4, 2, D)
    assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_layer_norm_solution_lines_equal_the_cpu_fast_path(dtype):
    """fastpaths off, LayerNorm runs the solution cell's lines (x.var, sqrt): the numbers
    of nn.LayerNorm and of the two-mean fast path, in the input's dtype."""
    from course_utils import fastpaths

    torch.manual_seed(2)
    ours, theirs = LayerNorm(D), nn.LayerNorm(D)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
        _copy_norm(ours, theirs)
    x = (3 + 2 * torch.randn(B, L_SRC, D)).to(dtype)  # (B, L, D)
    fast = ours(x)
    with fastpaths.disabled():
        plain = ours(x)
    assert plain.dtype == fast.dtype == dtype
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    assert_close(plain, fast, **tol)
    assert_close(plain, theirs.to(dtype)(x) if dtype != torch.bfloat16 else theirs(x.float()).to(dtype), **tol)


def test_layer_norm_defaults_and_parameters():
    ln = LayerNorm(6)
    assert ln.eps == 1e-5
    assert torch.equal(ln.weight, torch.ones(6)) and torch.equal(ln.bias, torch.zeros(6))
    assert {n for n, _ in ln.named_parameters()} == {"weight", "bias"}
    x = torch.randn(4, 6) * 5 + 3
    y = ln(x)  # default affine: zero mean, unit (biased) variance per row
    assert_close(y.mean(-1), torch.zeros(4))
    assert_close(y.var(-1, unbiased=False), torch.ones(4), atol=1e-3, rtol=0)  # eps shifts it by ~eps/var


def test_feed_forward_shapes_and_relu():
    torch.manual_seed(0)
    ff = FeedForward(D, D_FF).eval()
    assert ff.linear1.weight.shape == (D_FF, D) and ff.linear2.weight.shape == (D, D_FF)
    x = torch.randn(B, L_SRC, D)
    hidden = ff.linear1(x)  # (B, L, d_ff)
    assert_close(ff(x), ff.linear2(hidden.clamp(min=0)))
    assert_close(ff(x)[1, 2], ff(x[1:2, 2:3])[0, 0])  # position-wise: each position alone


# ---------------------------------------------------------------- encoder


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_encoder_layer_matches_torch(norm_first, grad):
    ours, theirs = _encoder_pair(norm_first)
    x = torch.randn(B, L_SRC, D)
    pad = _padding_mask([L_SRC, 4, 2], L_SRC)  # (B, 1, L)
    with torch.set_grad_enabled(grad):  # no_grad lets torch take its fused fast path
        assert_close(ours(x), theirs(x))
        assert_close(ours(x, pad), theirs(x, src_key_padding_mask=~pad[:, 0]))
        # a per-example (B, L, L) mask: torch wants (B*H, L, L)
        mask = pad & causal_mask(L_SRC)  # (B, L, L)
        assert_close(ours(x, mask), theirs(x, src_mask=(~mask).repeat_interleave(H, dim=0)))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_encoder_stack_matches_torch(norm_first, grad):
    torch.manual_seed(1)
    ours = Encoder(NUM_LAYERS, D, H, D_FF, dropout=0.0, norm_first=norm_first).eval()
    randomize_norms(ours)
    # the paper's post-norm stack has no final norm; pre-norm needs one
    assert (ours.norm is not None) == norm_first
    layer = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    final = nn.LayerNorm(D) if norm_first else None
    # enable_nested_tensor=False: no nested-tensor fast path that zeroes padded outputs
    theirs = nn.TransformerEncoder(layer, NUM_LAYERS, norm=final, enable_nested_tensor=False).eval()
    for o, t in zip(ours.layers, theirs.layers, strict=True):
        copy_layer_weights(o, t)
    assert len(ours.layers) == NUM_LAYERS
    if norm_first:
        with torch.no_grad():
            _copy_norm(ours.norm, theirs.norm)
    x = torch.randn(B, L_SRC, D)
    pad = _padding_mask([L_SRC, 4, 2], L_SRC)
    with torch.set_grad_enabled(grad):
        assert_close(ours(x), theirs(x))
        assert_close(ours(x, pad), theirs(x, src_key_padding_mask=~pad[:, 0]))


def test_encoder_layers_are_independent():
    enc = Encoder(3, D, H, D_FF)
    w = [layer.self_attn.w_q.weight for layer in enc.layers]
    assert w[0] is not w[1] and not torch.equal(w[0], w[1])  # not shared, not identical copies


# ---------------------------------------------------------------- decoder


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_decoder_layer_matches_torch(norm_first, grad):
    ours, theirs = _decoder_pair(norm_first)
    x = torch.randn(B, L_TGT, D)  # (B, L_tgt, D)
    memory = torch.randn(B, L_SRC, D)  # (B, L_src, D)
    causal = causal_mask(L_TGT)  # (L_tgt, L_tgt)
    tgt_pad = _padding_mask([L_TGT, 3, 4], L_TGT)  # (B, 1, L_tgt)
    src_pad = _padding_mask([L_SRC, 4, 2], L_SRC)  # (B, 1, L_src)
    with torch.set_grad_enabled(grad):
        assert_close(ours(x, memory), theirs(x, memory))
        assert_close(
            ours(x, memory, causal, src_pad),
            theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~src_pad[:, 0]),
        )
        # causal & target padding as one (B, L_tgt, L_tgt) mask, vs torch's two masks
        assert_close(
            ours(x, memory, tgt_pad & causal, src_pad),
            theirs(
                x,
                memory,
                tgt_mask=~causal,
                tgt_key_padding_mask=~tgt_pad[:, 0],
                memory_key_padding_mask=~src_pad[:, 0],
            ),
        )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_stack_matches_torch(norm_first):
    torch.manual_seed(2)
    ours = Decoder(NUM_LAYERS, D, H, D_FF, dropout=0.0, norm_first=norm_first).eval()
    randomize_norms(ours)
    assert (ours.norm is not None) == norm_first
    layer = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    theirs = nn.TransformerDecoder(layer, NUM_LAYERS, norm=nn.LayerNorm(D) if norm_first else None).eval()
    for o, t in zip(ours.layers, theirs.layers, strict=True):
        copy_layer_weights(o, t)
    if norm_first:
        with torch.no_grad():
            _copy_norm(ours.norm, theirs.norm)
    x, memory = torch.randn(B, L_TGT, D), torch.randn(B, L_SRC, D)
    causal = causal_mask(L_TGT)
    src_pad = _padding_mask([L_SRC, 4, 2], L_SRC)
    assert_close(
        ours(x, memory, causal, src_pad),
        theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~src_pad[:, 0]),
    )


def test_cross_attention_queries_from_decoder_keys_from_memory():
    """With L_tgt != L_src the cross-attention weights must be (B, H, L_tgt, L_src)."""
    torch.manual_seed(3)
    layer = DecoderLayer(D, H, D_FF).eval()
    seen = {}
    layer.cross_attn.register_forward_hook(lambda m, i, o: seen.update(w=o[1]))
    out = layer(torch.randn(B, L_TGT, D), torch.randn(B, L_SRC, D))
    assert out.shape == (B, L_TGT, D)
    assert seen["w"].shape == (B, H, L_TGT, L_SRC)


# ---------------------------------------------------------------- properties


def test_encoder_is_permutation_equivariant():
    """Without positional encoding nothing in the encoder knows the order of the tokens."""
    torch.manual_seed(4)
    perm = torch.randperm(L_SRC, generator=torch.Generator().manual_seed(0))
    x = torch.randn(B, L_SRC, D)
    for module in (
        EncoderLayer(D, H, D_FF).eval(),
        EncoderLayer(D, H, D_FF, norm_first=True).eval(),
        Encoder(NUM_LAYERS, D, H, D_FF).eval(),
    ):
        randomize_norms(module)
        assert_close(module(x[:, perm]), module(x)[:, perm])


def test_fully_masked_rows_give_no_nan_in_layers():
    """A padding query that may attend to nothing (finite fill, see attention.py) stays
    finite through encoder and decoder layers, forward and backward."""
    torch.manual_seed(5)
    enc = Encoder(NUM_LAYERS, D, H, D_FF).eval()
    dec = Decoder(NUM_LAYERS, D, H, D_FF).eval()
    x = torch.randn(B, L_SRC, D, requires_grad=True)
    y = torch.randn(B, L_TGT, D, requires_grad=True)
    src_pad = _padding_mask([L_SRC, 3, 0], L_SRC)  # example 2: nothing but padding
    memory = enc(x, src_pad)
    out = dec(y, memory, causal_mask(L_TGT), src_pad)
    assert torch.isfinite(memory).all() and torch.isfinite(out).all()
    out.sum().backward()
    for t in (x.grad, y.grad, *(p.grad for p in (*enc.parameters(), *dec.parameters()))):
        assert torch.isfinite(t).all()


# ---------------------------------------------------------------- activation option (08, 09)
@pytest.mark.parametrize("norm_first", [False, True])
def test_gelu_encoder_layer_matches_torch(norm_first):
    torch.manual_seed(3)
    ours = EncoderLayer(D, H, D_FF, dropout=0.0, norm_first=norm_first, activation="gelu").eval()
    randomize_norms(ours)
    theirs = nn.TransformerEncoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, activation="gelu"
    ).eval()
    copy_layer_weights(ours, theirs)
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("relu", torch.relu),
        ("gelu", torch.nn.functional.gelu),
        ("gelu_tanh", lambda h: torch.nn.functional.gelu(h, approximate="tanh")),
    ],
)
def test_feed_forward_activation(name, fn):
    torch.manual_seed(0)
    ff = FeedForward(D, D_FF, activation=name)
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(ff(x), ff.linear2(fn(ff.linear1(x))))


def test_feed_forward_unknown_activation_is_named():
    with pytest.raises(ValueError, match="activation must be one of .* got 'swish'"):
        FeedForward(D, D_FF, activation="swish")
