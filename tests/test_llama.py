"""The modern decoder of notebook 10 (course_utils/llama.py, llama_weights.py).

Each piece equals torch's where torch has it (nn.RMSNorm, F.silu, F.scaled_dot_product_attention
with enable_gqa); RoPE's relative-position property; causality; cached and uncached generation
agree; and parity with Hugging Face's LlamaForCausalLM on a random small config with fewer
key/value heads than query heads (weights copied with our mapping, nothing downloaded; skips
without `transformers`).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from course_utils.gpt import context_length
from course_utils.llama import (
    GroupedQueryAttention,
    Llama,
    RMSNorm,
    SwiGLU,
    apply_rotary,
    generate,
    kv_cache_bytes_per_token,
    llama_cache,
    llama_decode_step,
    repeat_kv_heads,
    rotary_tables,
    swiglu_hidden_width,
)
from course_utils.llama_weights import convert_llama_state_dict, llama_from_hf


def _small(seed: int = 0, **kw) -> Llama:
    torch.manual_seed(seed)
    args = dict(d_model=32, num_heads=4, num_layers=2, n_kv_heads=2, max_len=24, multiple_of=16)
    return Llama(41, **{**args, **kw}).eval()


def test_rms_norm_equals_torch():
    torch.manual_seed(0)
    ours, theirs = RMSNorm(12, eps=1e-5), torch.nn.RMSNorm(12, eps=1e-5)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 2)
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 12) * 3 + 1  # a non-zero mean: LayerNorm would differ
    torch.testing.assert_close(ours(x), theirs(x))
    assert sum(p.numel() for p in ours.parameters()) == 12  # no bias


def test_swiglu_equals_its_formula_with_silu_and_rounds_as_llama():
    torch.manual_seed(0)
    ff = SwiGLU(16, 40)
    x = torch.randn(2, 3, 16)
    expected = F.silu(x @ ff.w1.weight.T) * (x @ ff.w3.weight.T) @ ff.w2.weight.T
    torch.testing.assert_close(ff(x), expected)
    assert all(m.bias is None for m in (ff.w1, ff.w2, ff.w3))
    assert swiglu_hidden_width(4096) == 11008  # Llama 7B
    assert swiglu_hidden_width(128, multiple_of=32) == 352  # int(8/3 * 128) = 341, rounded up
    assert abs(3 * 128 * 352 - 2 * 128 * 512) / (2 * 128 * 512) < 0.04  # about the GELU MLP's parameters


def test_rotary_tables_and_hand_example():
    cos, sin = rotary_tables(4, 3, base=100.0)
    theta = torch.tensor([1.0, 0.1])  # 100 ** (-0/4), 100 ** (-2/4)
    angles = torch.arange(3.0)[:, None] * torch.cat([theta, theta])
    torch.testing.assert_close(cos, angles.cos())
    torch.testing.assert_close(sin, angles.sin())
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 3)  # (L=3, d_k=4): feature 0 pairs with feature 2
    out = apply_rotary(x, cos, sin)
    torch.testing.assert_close(out[:, 0], torch.arange(3.0).cos())
    torch.testing.assert_close(out[:, 2], torch.arange(3.0).sin())


def test_rotation_keeps_norms_and_scores_depend_on_the_offset_only():
    torch.manual_seed(0)
    cos, sin = rotary_tables(16, 64)
    q, k = torch.randn(16), torch.randn(16)

    def at(x, m):  # x rotated as position m
        return apply_rotary(x[None], cos, sin, offset=m)[0]

    torch.testing.assert_close(at(q, 9).norm(), q.norm())
    for m, n in [(5, 2), (20, 17), (50, 47)]:  # m - n = 3 each time
        torch.testing.assert_close(at(q, m) @ at(k, n), at(q, 3) @ at(k, 0), atol=1e-5, rtol=1e-5)
    assert abs(float(at(q, 5) @ at(k, 2) - at(q, 5) @ at(k, 4))) > 1e-3  # another offset, another score


def test_apply_rotary_equals_meta_complex_form_after_permuting_features():
    """Meta rotates pairs (2i, 2i+1) as complex numbers; the halves layout is the same rotation
    once features are listed as [even | odd]."""
    torch.manual_seed(0)
    L, d = 6, 8
    cos, sin = rotary_tables(d, L)
    x = torch.randn(2, L, d)
    theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    turn = torch.polar(torch.ones(L, d // 2), torch.arange(L).float()[:, None] * theta)  # (L, d/2)
    meta = torch.view_as_real(torch.view_as_complex(x.reshape(2, L, d // 2, 2)) * turn).flatten(-2)  # pairs
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # pairs layout -> halves layout
    torch.testing.assert_close(apply_rotary(x[..., perm], cos, sin), meta[..., perm], atol=1e-5, rtol=1e-5)


def test_gqa_equals_torch_sdpa_with_enable_gqa_and_repeat_interleave():
    torch.manual_seed(0)
    attn = GroupedQueryAttention(24, 6, 2)
    x = torch.randn(2, 5, 24)
    cos, sin = rotary_tables(4, 8)
    q, k, v = attn.project(x, cos, sin)
    assert k.shape == (2, 2, 5, 4) and q.shape == (2, 6, 5, 4)
    k6 = repeat_kv_heads(k, 3)
    assert torch.equal(k6[:, 0], k[:, 0]) and torch.equal(k6[:, 2], k[:, 0]) and torch.equal(k6[:, 3], k[:, 1])
    try:
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, H, L, d_k)
    except TypeError:  # a torch older than 2.5
        pytest.skip("this torch's scaled_dot_product_attention has no enable_gqa")
    expected = attn.w_o(context.transpose(1, 2).reshape(2, 5, 24))
    torch.testing.assert_close(attn(x, cos, sin), expected, atol=1e-6, rtol=1e-5)
    assert all(m.bias is None for m in (attn.w_q, attn.w_k, attn.w_v, attn.w_o))


def test_model_is_causal_has_no_bias_and_reads_context_length():
    model = _small()
    tokens = torch.randint(0, 41, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 41
    a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-4
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    assert context_length(model) == 24 and "rope_cos" not in model.state_dict()


def test_cached_and_uncached_generation_give_the_same_tokens_and_the_cache_holds_kv_heads():
    model = _small(1)
    prompt = torch.randint(0, 41, (3, 4))
    cached = generate(model, prompt, 15, temperature=0)
    assert torch.equal(cached, generate(model, prompt, 15, temperature=0, use_cache=False))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(generate(model, prompt, 8, generator=g1), generate(model, prompt, 8, generator=g2,
                                                                            use_cache=False))
    cache = llama_cache(model, 3)
    with torch.no_grad():
        for t in range(4):
            logits = llama_decode_step(model, prompt[:, t], t, cache)
        torch.testing.assert_close(logits, model(prompt)[:, -1], atol=1e-5, rtol=1e-5)
    assert cache.keys[0].shape == (3, 2, 4, 8)  # (B, n_kv_heads, T, d_k)
    assert kv_cache_bytes_per_token(model) == 2 * 2 * 2 * 8 * 4  # K and V, 2 layers, 2 heads, d_k 8, float32
    assert kv_cache_bytes_per_token(_small(n_kv_heads=1)) * 4 == kv_cache_bytes_per_token(_small(n_kv_heads=4))


@pytest.mark.parametrize("call, error, words", [
    (lambda: GroupedQueryAttention(24, 6, 4), ValueError, "n_kv_heads = 4 must divide num_heads = 6"),
    (lambda: Llama(10, d_model=24, num_heads=4, num_layers=1, n_kv_heads=3), ValueError, "must divide"),
    (lambda: rotary_tables(5, 10), ValueError, "must be even, got 5"),
    (lambda: Llama(10, d_model=20, num_heads=4, num_layers=1), ValueError, "must be even, got 5"),
    (lambda: apply_rotary(torch.zeros(1, 4, 6), *rotary_tables(6, 8), offset=5), ValueError,
     "positions 5 .. 8 go past the rotary tables, which hold 8"),
    (lambda: apply_rotary(torch.zeros(1, 4, 6), *rotary_tables(4, 8)), ValueError, "d_k = 6"),
    (lambda: llama_decode_step(_small(), torch.zeros(1, dtype=torch.long), 24, llama_cache(_small(), 1)),
     ValueError, "position 24 is past the model's max_len = 24"),
    (lambda: _small()(torch.zeros(1, 25, dtype=torch.long)), ValueError, "max_len = 24"),
    (lambda: RMSNorm(8)(torch.zeros(2, 6)), ValueError, "d_model = 8"),
    (lambda: RMSNorm(8, eps=-1e-6), ValueError, "eps must be a number >= 0"),
    (lambda: apply_rotary(torch.zeros(1, 4, 6), *rotary_tables(6, 8), offset=1.5), ValueError, "offset must be a non-negative int"),  # noqa: E501
])
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        call()


def _hf():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    transformers.logging.set_verbosity_error()
    return transformers


@pytest.mark.parametrize("tied", [False, True])
def test_parity_with_hugging_face_llama(tied):
    transformers = _hf()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=61, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                                      rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=tied)
    hf = transformers.LlamaForCausalLM(config).eval()
    model = llama_from_hf(hf)
    assert model.blocks[0].self_attn.n_kv_heads == 2
    tokens = torch.randint(0, 61, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), hf(tokens).logits, atol=1e-5, rtol=1e-4)
    theirs = hf.generate(tokens[:, :5], max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(model, tokens[:, :5], 12, temperature=0), theirs)


def test_conversion_names_keys_with_no_place():
    sd = {"model.embed_tokens.weight": torch.zeros(4, 2), "model.layers.0.self_attn.q_proj.bias": torch.zeros(2)}
    with pytest.raises(ValueError, match="no place in the course's Llama: model.layers.0.self_attn.q_proj.bias"):
        convert_llama_state_dict(sd)
    tied = convert_llama_state_dict({"model.embed_tokens.weight": torch.ones(4, 2)})
    assert tied["lm_head.weight"] is tied["token_embedding.weight"]


def test_shipped_checkpoint_loads_and_generates_alike_with_and_without_the_cache():
    from course_utils.gpt_training import evaluate_loss, prepare_data
    from course_utils.llama_training import CHECKPOINT, LLAMA_RECIPE, load_pretrained_llama, pretrained_llama_info

    model, tok, history = load_pretrained_llama()
    assert CHECKPOINT.stat().st_size < 2_000_000 and not model.training
    info = pretrained_llama_info()
    assert info["config"] == {"vocab_size": len(tok), **LLAMA_RECIPE["model"]}
    assert history["val_loss"][-1] == pytest.approx(info["final_val_loss"], abs=1e-3)
    assert info["final_val_loss"] < 2.0  # nats per character; ln V = 4.17 before training
    _, _, valid = prepare_data()
    assert evaluate_loss(model, valid, batches=2) < 2.1
    prompt = torch.tensor([tok.encode("ROMEO:\n")])
    assert torch.equal(generate(model, prompt, 40, temperature=0), generate(model, prompt, 40, temperature=0,
                                                                             use_cache=False))


def test_parts_build_the_same_model_and_the_cache_rotates_with_the_models_apply_rotary():
    """Llama(..., block=, norm=, rotary_tables=, apply_rotary=): a notebook's own pieces, under the
    same state-dict names. A norm keeping eps in a buffer (not in the checkpoint) still loads the
    shipped weights; the cache rotates every new token with the model's apply_rotary at its true
    position; a renamed parameter is a ValueError naming it."""
    from torch import nn

    from course_utils.llama import LlamaBlock
    from course_utils.llama_training import load_pretrained_llama

    class BufferNorm(RMSNorm):
        def __init__(self, d_model, eps=1e-6):
            super().__init__(d_model, eps)
            self.register_buffer("eps_buffer", torch.tensor(eps))

    offsets = []

    def rotation(x, cos, sin, offset=0):
        offsets.append((x.size(-2), offset))
        return apply_rotary(x, cos, sin, offset)

    def block(d_model, num_heads, d_ff, n_kv_heads, eps):
        made = LlamaBlock(d_model, num_heads, d_ff, n_kv_heads)
        made.norm1, made.norm2 = BufferNorm(d_model, eps), BufferNorm(d_model, eps)
        return made

    ours, tok, _ = load_pretrained_llama(block=block, norm=BufferNorm, rotary_tables=rotary_tables, apply_rotary=rotation)  # noqa: E501
    reference, _, _ = load_pretrained_llama()
    assert "blocks.0.norm1.eps_buffer" in ours.state_dict() and ours.apply_rotary is rotation
    tokens = torch.randint(0, len(tok), (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), reference(tokens))
    prompt = torch.tensor([tok.encode("ROMEO:\n")])  # (1, 7)
    cached = generate(ours, prompt, 10, temperature=0)
    assert torch.equal(cached, generate(reference, prompt, 10, temperature=0, use_cache=False))
    layers, steps = len(ours.blocks), prompt.size(1) + 10 - 1  # q and k rotated per block and fed position
    assert offsets == [(1, t) for t in range(steps) for _ in range(layers) for _ in "qk"]

    class Renamed(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(d_model))

        def forward(self, x):
            return x * self.scale

    with pytest.raises(ValueError, match=r"lacks \['norm.scale'\] and has no place for \['norm.weight'\]"):
        load_pretrained_llama(norm=Renamed)
