"""Every bad input gives a ValueError / TypeError that names the argument, what was
received (shape, value or dtype) and what was expected, never a cryptic error from deep
inside torch (such as nn.Embedding's "index out of range in self")."""

from __future__ import annotations

import pytest
import torch

from course_utils import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    PositionalEncoding,
    TokenEmbedding,
    Transformer,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)


def _raises(exc_type, fn, *args, must_contain=(), **kwargs) -> str:
    """Call fn, require exc_type, and require each string in must_contain in the message."""
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    for part in must_contain:
        assert part in message, f"{part!r} missing from the message: {message!r}"
    return message


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(10, 8, d_model=12, num_heads=3, num_layers=1, d_ff=16, max_len=6).eval()


# ---------------------------------------------------------------- heads


def test_d_model_not_divisible_by_num_heads():
    _raises(ValueError, MultiHeadAttention, 10, 3, must_contain=("d_model", "10", "num_heads", "3"))
    _raises(ValueError, MultiHeadAttention, 8, 0, must_contain=("num_heads", "0"))
    _raises(ValueError, split_heads, torch.randn(2, 5, 10), 3, must_contain=("D = 10", "num_heads = 3"))


# ---------------------------------------------------------------- masks


def test_non_bool_mask_is_a_type_error():
    q = torch.randn(2, 3, 4)
    float_mask = torch.ones(3, 3)
    _raises(
        TypeError,
        scaled_dot_product_attention,
        q,
        q,
        q,
        float_mask,
        must_contain=("mask", "torch.bool", "torch.float32"),
    )
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    _raises(TypeError, mha, x, x, x, torch.ones(3, 3, dtype=torch.long), must_contain=("torch.bool", "torch.int64"))
    _raises(TypeError, EncoderLayer(8, 2, 16), x, torch.ones(2, 1, 3), must_contain=("torch.bool",))


def test_mask_that_cannot_broadcast_names_both_shapes():
    q = torch.randn(2, 3, 5, 4)  # (B, H, L_q, d_k)
    k = torch.randn(2, 3, 7, 4)  # (B, H, L_k, d_k)
    bad = torch.ones(5, 6, dtype=torch.bool)  # L_k is 7, not 6
    _raises(ValueError, scaled_dot_product_attention, q, k, k, bad, must_contain=("mask", "(5, 6)", "(2, 3, 5, 7)"))
    mha = MultiHeadAttention(8, 2)
    query, kv = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    bad3 = torch.ones(3, 1, 7, dtype=torch.bool)  # batch 3, not 2
    _raises(ValueError, mha, query, kv, kv, bad3, must_contain=("(3, 1, 7)", "(2, 5, 7)"))
    # a 4-d mask with a head axis is not what MultiHeadAttention takes (it adds the axis itself)
    bad4 = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    _raises(ValueError, mha, query, kv, kv, bad4, must_contain=("(2, 1, 5, 7)", "(2, 5, 7)"))


# ---------------------------------------------------------------- positions and tokens


def test_sequence_longer_than_max_len():
    pe = PositionalEncoding(8, max_len=5)
    _raises(ValueError, pe, torch.randn(1, 6, 8), must_contain=("L = 6", "max_len = 5"))


def test_sequence_longer_than_max_len_through_the_model(model):
    src = torch.ones(1, 7, dtype=torch.long)  # the model was built with max_len=6
    _raises(ValueError, model.encode, src, must_contain=("L = 7", "max_len = 6"))


@pytest.mark.parametrize("bad_id", [10, 37, -1])
def test_token_id_outside_vocabulary(bad_id):
    emb = TokenEmbedding(10, 4)
    tokens = torch.tensor([[1, bad_id, 2]])
    message = _raises(ValueError, emb, tokens, must_contain=(str(bad_id), "[0, 9]", "vocab"))
    assert "index out of range in self" not in message


def test_token_id_outside_vocabulary_through_the_model(model):
    src = torch.tensor([[1, 2, 10]])  # src vocabulary is 10
    tgt = torch.tensor([[1, 8]])  # tgt vocabulary is 8
    m1 = _raises(ValueError, model, src, torch.tensor([[1, 2]]), must_contain=("10", "[0, 9]"))
    m2 = _raises(ValueError, model, torch.tensor([[1, 2]]), tgt, must_contain=("8", "[0, 7]"))
    m3 = _raises(ValueError, model.encode, torch.tensor([[-3, 1]]), must_contain=("-3", "[0, 9]"))
    assert all("index out of range" not in m for m in (m1, m2, m3))


def test_float_token_ids_are_a_type_error(model):
    tokens = torch.tensor([[1.0, 2.0]])
    _raises(TypeError, TokenEmbedding(10, 4), tokens, must_contain=("tokens", "torch.float32"))
    _raises(TypeError, model.encode, tokens, must_contain=("torch.float32",))
    _raises(TypeError, model, torch.tensor([[1, 2]]), tokens, must_contain=("torch.float32",))
    _raises(TypeError, padding_mask, tokens, 0, must_contain=("tokens", "torch.float32"))


# ---------------------------------------------------------------- wrong rank


def test_wrong_rank_scaled_dot_product_attention():
    ok = torch.randn(3, 4)
    _raises(ValueError, scaled_dot_product_attention, torch.randn(4), ok, ok, must_contain=("query", "(4)"))
    _raises(ValueError, scaled_dot_product_attention, ok, torch.randn(4), ok, must_contain=("key", "(4)"))
    _raises(ValueError, scaled_dot_product_attention, ok, ok, torch.randn(4), must_contain=("value", "(4)"))
    # mismatched d_k and L_k are named too
    _raises(
        ValueError, scaled_dot_product_attention, ok, torch.randn(3, 5), ok, must_contain=("d_k", "(3, 4)", "(3, 5)")
    )
    _raises(
        ValueError, scaled_dot_product_attention, ok, ok, torch.randn(2, 4), must_contain=("L_k", "(3, 4)", "(2, 4)")
    )


def test_wrong_rank_multi_head_attention():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    _raises(ValueError, mha, torch.randn(3, 8), x, x, must_contain=("query", "3 dimensions", "(3, 8)"))
    _raises(ValueError, mha, x, torch.randn(1, 2, 3, 8), x, must_contain=("key", "(1, 2, 3, 8)"))
    _raises(ValueError, mha, x, x, torch.randn(3, 8), must_contain=("value", "(3, 8)"))
    _raises(ValueError, mha, torch.randn(2, 3, 6), x, x, must_contain=("query", "d_model = 8", "(2, 3, 6)"))


def test_wrong_rank_split_and_merge_heads():
    _raises(ValueError, split_heads, torch.randn(3, 8), 2, must_contain=("x", "3 dimensions", "(3, 8)"))
    _raises(ValueError, merge_heads, torch.randn(2, 3, 8), must_contain=("x", "4 dimensions", "(2, 3, 8)"))


def test_wrong_rank_positional_and_embedding():
    _raises(ValueError, PositionalEncoding(8, 10), torch.randn(5, 8), must_contain=("x", "(B, L, D)", "(5, 8)"))
    _raises(ValueError, PositionalEncoding(8, 10), torch.randn(1, 5, 6), must_contain=("d_model = 8", "(1, 5, 6)"))
    _raises(ValueError, TokenEmbedding(10, 4), torch.tensor([1, 2, 3]), must_contain=("tokens", "(B, L)", "(3)"))


def test_wrong_rank_layers():
    _raises(ValueError, EncoderLayer(8, 2, 16), torch.randn(3, 8), must_contain=("x", "(B, L, D)", "(3, 8)"))
    layer = DecoderLayer(8, 2, 16)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    _raises(ValueError, layer, torch.randn(3, 8), memory, must_contain=("x", "(3, 8)"))
    _raises(ValueError, layer, x, torch.randn(5, 8), must_contain=("memory", "(B, L_src, D)", "(5, 8)"))


def test_wrong_rank_transformer(model):
    _raises(ValueError, model.encode, torch.tensor([1, 2, 3]), must_contain=("src", "(B, L_src)", "(3)"))
    _raises(ValueError, model.encode, torch.ones(1, 2, 3, dtype=torch.long), must_contain=("src", "(1, 2, 3)"))
    memory = model.encode(torch.tensor([[1, 2, 3]]))
    _raises(ValueError, model.decode, torch.tensor([1, 2]), memory, must_contain=("tgt", "(B, L_tgt)", "(2)"))
    _raises(
        ValueError, model.decode, torch.tensor([[1, 2], [3, 4]]), memory, must_contain=("batch", "(2, 2)", "(1, 3, 12)")
    )


def test_check_mask_accepts_exactly_the_shapes_that_broadcast_to_the_scores():
    """check_mask's shape rule (plain Python) agrees with torch.broadcast_shapes: a mask is
    accepted when broadcasting it leaves the scores' shape unchanged."""
    from course_utils._validate import check_mask

    target = (2, 3, 5, 7)
    shapes = [(), (7,), (1,), (5, 7), (5, 1), (1, 7), (2, 1, 1, 7), (2, 3, 5, 7), (3, 1, 7), (1, 1, 1, 1, 7),
              (6,), (5, 6), (4, 5, 7), (2, 1, 5, 6), (1, 2, 3, 5, 7), (2, 3, 5, 7, 1), (3, 2, 5, 7)]  # fmt: skip
    for shape in shapes:
        try:
            fits = torch.broadcast_shapes(shape, target) == target
        except RuntimeError:
            fits = False
        mask = torch.ones(shape, dtype=torch.bool)
        if fits:
            check_mask(mask, torch.Size(target))
        else:
            with pytest.raises(ValueError, match=r"cannot be broadcast"):
                check_mask(mask, torch.Size(target))


# ---------------------------------------------------------------- empty sequences


def test_empty_sequences_in_attention_behave_like_torch():
    """L_q = 0 gives empty results and L_k = 0 an all-zero output, as in
    F.scaled_dot_product_attention (not amax's "Expected reduction dim -1 to have non-zero size")."""
    import torch.nn.functional as F

    for L_q, L_k in ((3, 0), (0, 3), (0, 0), (20, 0)):  # 20: a row long enough for torch's softmax
        q, k, v = torch.randn(2, L_q, 4), torch.randn(2, L_k, 4), torch.randn(2, L_k, 5)
        out, weights = scaled_dot_product_attention(q, k, v, torch.ones(L_q, L_k, dtype=torch.bool))
        assert out.shape == (2, L_q, 5) and weights.shape == (2, L_q, L_k)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
        mha = MultiHeadAttention(8, 2)
        query, kv = torch.randn(2, L_q, 8), torch.randn(2, L_k, 8)
        out, weights = mha(query, kv, kv)
        assert out.shape == (2, L_q, 8) and weights.shape == (2, 2, L_q, L_k)
        assert not out.isnan().any()


def test_empty_source_or_target_in_the_model_names_the_argument(model):
    from course_utils import make_src_mask, make_tgt_mask

    empty = torch.ones(2, 0, dtype=torch.long)
    ok = torch.ones(2, 3, dtype=torch.long)
    _raises(ValueError, model, empty, ok, must_contain=("src", "L_src >= 1", "(2, 0)"))
    _raises(ValueError, model, ok, empty, must_contain=("tgt", "L_tgt >= 1", "(2, 0)"))
    _raises(ValueError, model.greedy_decode, empty, 5, 1, 2, must_contain=("src", "(2, 0)"))
    message = _raises(ValueError, make_tgt_mask, empty, 0, must_contain=("tgt", "L_tgt >= 1", "(2, 0)"))
    assert "size" not in message  # the caller passed no `size`
    _raises(ValueError, make_src_mask, empty, 0, must_contain=("src", "(2, 0)"))


# ---------------------------------------------------------------- dtypes

F32, F64 = torch.float32, torch.float64


@pytest.mark.parametrize(
    "dtypes, must_contain",
    [
        ((F32, F64, F32), ("query torch.float32", "key torch.float64", "same dtype")),
        ((F32, F32, F64), ("value torch.float64", "same dtype")),
        ((F64, F32, F32), ("query torch.float64", "key torch.float32")),
        ((torch.long, torch.long, torch.long), ("query", "floating-point", "torch.int64")),
        ((F32, torch.long, F32), ("key", "floating-point", "torch.int64")),
        ((F32, F32, torch.int32), ("value", "floating-point", "torch.int32")),
    ],
)
def test_mixed_or_integer_dtypes_in_attention_are_a_type_error(dtypes, must_contain):
    q, k, v = (torch.randint(0, 3, (2, 3, 4)).to(dtype) for dtype in dtypes)
    message = _raises(TypeError, scaled_dot_product_attention, q, k, v, must_contain=must_contain)
    assert "expected scalar type" not in message


@pytest.mark.parametrize("which", range(3))
def test_input_dtype_must_match_a_modules_weights(which):
    mha = MultiHeadAttention(8, 2)
    args = [torch.randn(2, 3, 8) for _ in range(3)]
    args[which] = args[which].double()
    name = ("query", "key", "value")[which]
    _raises(TypeError, mha, *args, must_contain=(name, "torch.float64", "torch.float32"))
    args[which] = torch.ones(2, 3, 8, dtype=torch.long)
    _raises(TypeError, mha, *args, must_contain=(name, "floating-point", "torch.int64"))


def test_float64_into_float32_feed_forward_and_encoder_layer():
    from course_utils import FeedForward

    x = torch.randn(2, 3, 8, dtype=torch.float64)
    _raises(TypeError, FeedForward(8, 16), x, must_contain=("x", "torch.float64", "FeedForward", "torch.float32"))
    _raises(TypeError, EncoderLayer(8, 2, 16), x, must_contain=("torch.float64", "torch.float32"))
    # a float64 module takes float64 input
    assert FeedForward(8, 16).double()(x).dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_positional_encoding_and_layer_norm_keep_the_input_dtype(dtype):
    from course_utils import LayerNorm

    torch.manual_seed(0)
    x = torch.randn(2, 5, 8).to(dtype)
    pe = PositionalEncoding(8, max_len=10)
    out = pe(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), (x.double() + pe.pe[:5].double()), atol=1e-2, rtol=1e-2)
    norm = LayerNorm(8)
    out = norm(x)
    assert out.dtype == dtype
    expected = torch.nn.functional.layer_norm(x.double(), (8,))
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)


# ---------------------------------------------------------------- sizes


def _encoder(num_layers):
    from course_utils import Encoder

    return Encoder(num_layers, 8, 2, 16)


def _decoder(num_layers):
    from course_utils import Decoder

    return Decoder(num_layers, 8, 2, 16)


def _layer_norm(d_model):
    from course_utils import LayerNorm

    return LayerNorm(d_model)


def _feed_forward(d_model, d_ff):
    from course_utils import FeedForward

    return FeedForward(d_model, d_ff)


@pytest.mark.parametrize(
    "build, args, name, shown",
    [
        (MultiHeadAttention, (8, 2.0), "num_heads", "2.0"),
        (MultiHeadAttention, (8.0, 2), "d_model", "8.0"),
        (MultiHeadAttention, (0, 1), "d_model", "0"),
        (MultiHeadAttention, (8, -2), "num_heads", "-2"),
        (MultiHeadAttention, (8, True), "num_heads", "True"),
        (TokenEmbedding, (-3, 8), "vocab_size", "-3"),
        (TokenEmbedding, (0, 8), "vocab_size", "0"),
        (TokenEmbedding, (10, 0), "d_model", "0"),
        (PositionalEncoding, (8, 0), "max_len", "0"),
        (PositionalEncoding, (8.0,), "d_model", "8.0"),
        (_layer_norm, (0,), "d_model", "0"),
        (_feed_forward, (8, 0), "d_ff", "0"),
        (_feed_forward, (8, 16.0), "d_ff", "16.0"),
        (_encoder, (-1,), "num_layers", "-1"),
        (_encoder, (0,), "num_layers", "0"),
        (_decoder, (-1,), "num_layers", "-1"),
        (lambda n: Transformer(10, 8, d_model=8, num_heads=2, num_layers=n, d_ff=16), (0,), "num_layers", "0"),
        (lambda v: Transformer(v, 8, d_model=8, num_heads=2, num_layers=1, d_ff=16), (0,), "vocab_size", "0"),
        (split_heads, (torch.randn(2, 3, 8), 2.0), "num_heads", "2.0"),
    ],
)
def test_sizes_must_be_positive_ints(build, args, name, shown):
    _raises(ValueError, build, *args, must_contain=(name, "positive int", shown))


def test_sizes_accept_numpy_and_tensor_ints():
    import numpy as np

    mha = MultiHeadAttention(np.int64(8), torch.tensor(2))
    assert (mha.d_model, mha.num_heads, mha.d_k) == (8, 2, 4) and type(mha.d_k) is int
    assert mha(*[torch.randn(1, 3, 8)] * 3)[0].shape == (1, 3, 8)


def test_feed_forward_checks_the_width():
    from course_utils import FeedForward

    _raises(ValueError, FeedForward(8, 16), torch.randn(2, 3, 6), must_contain=("x", "d_model = 8", "(2, 3, 6)"))
    _raises(ValueError, FeedForward(8, 16, activation="gelu"), torch.randn(4, 6), must_contain=("d_model = 8", "(4, 6)"))  # noqa: E501


@pytest.mark.parametrize("shape", [(3, 1, 4), (1, 3, 1, 4), (3, 4, 1, 4), (4, 1, 4)],
                         ids=["3-D, no head axis", "unsqueeze(0)", "unsqueeze(2)", "2-D unsqueezed"])
def test_a_mask_against_4d_scores_lists_the_4d_shapes(shape):
    """Against (B, H, L_q, L_k) scores every refused mask gets the same rule, in 4-D shapes
    (trial t0203: 3-D shapes listed for a 4-D mask, advice that contradicted the checker's)."""
    q = torch.randn(3, 2, 4, 5)  # (B, H, L, d_k), B != H
    with pytest.raises(ValueError) as info:
        scaled_dot_product_attention(q, q, q, torch.ones(shape, dtype=torch.bool))
    message = str(info.value)
    assert "(B, 1, 1, L_k), (B, 1, L_q, L_k) or (B, H, L_q, L_k)" in message
    assert "3-D mask (B, 1, L_k) or (B, L_q, L_k) gets the head axis with mask.unsqueeze(1)" in message
    assert "a 2-D mask (L_q, L_k) needs none" in message and "refused here" not in message
