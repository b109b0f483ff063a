"""Tests for the key/value cache of course_utils.decoding (notebook 07's worked section):
greedy_decode_cached gives exactly greedy_decode's tokens, really caches, and fails clearly."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from course_utils import Transformer, causal_mask, decoding, greedy_decode, make_src_mask, split_heads
from course_utils.decoding import KVCache, decode_step, greedy_decode_cached, memory_keys_values

V_SRC, V_TGT = 17, 37
PAD, BOS, EOS = 0, 1, 2


def _model(seed: int, norm_first: bool, max_len: int = 64) -> Transformer:
    """d_model 32, 4 heads, 2+2 layers, dropout 0.1 (decoding must switch it off itself)."""
    torch.manual_seed(seed)
    return Transformer(
        V_SRC, V_TGT, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.1,
        max_len=max_len, norm_first=norm_first,
    )  # fmt: skip


def _padded_source(seed: int, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random real tokens, then ``PAD`` after each row's length; and its ``(B, 1, L)`` mask."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V_SRC, (len(lengths), max(lengths)), generator=g)  # (B, L_src)
    for b, n in enumerate(lengths):
        src[b, n:] = PAD
    return src, make_src_mask(src, PAD)


def _end_steps(out: torch.Tensor) -> list[int]:
    """Per row, the step (1-based) at which ``<eos>`` was produced, or 0 if never."""
    ends = []
    for row in out.tolist():
        ends.append(row.index(EOS) if EOS in row[1:] else 0)
    return ends


def _rig_eos(model, src, src_mask, max_len, wanted, what):
    """Make ``<eos>`` likely enough that the naive decoder's stops satisfy ``wanted(ends)``.

    The ``<eos>`` row of the output layer is scaled up (so its logit varies a lot from
    row to row), then its bias is raised step by step until ``wanted`` holds. Returns
    the naive output for that bias; fails the test if no bias works.
    """
    with torch.no_grad():
        model.output_projection.weight[EOS] *= 4
    ends = []
    for bias in torch.arange(-6.0, 12.01, 0.25).tolist():
        with torch.no_grad():
            model.output_projection.bias[EOS] = bias
        naive = greedy_decode(model, src, max_len, BOS, EOS, src_mask=src_mask, pad_id=PAD)
        ends = _end_steps(naive)
        if wanted(ends):
            return naive
    pytest.fail(f"no <eos> bias gave {what}; last stops {ends}")


# ------------------------------------------------------------ identical tokens


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_equals_naive_with_early_stops(seed, norm_first):
    model = _model(seed, norm_first).train()
    src, src_mask = _padded_source(seed, [9, 4, 9, 1, 7, 9, 2, 6, 8, 3, 9, 5])
    max_len = 12
    # the test covers the early stop and the padding after <eos> only if rows stop at
    # several different steps, and max_len only if some row never stops
    naive = _rig_eos(
        model, src, src_mask, max_len,
        lambda ends: len({e for e in ends if e}) >= 3 and 0 in ends,
        "stops at 3 different steps and a row reaching max_len",
    )  # fmt: skip
    assert naive.shape == (src.size(0), max_len + 1)
    cached = greedy_decode_cached(model, src, max_len, BOS, EOS, src_mask=src_mask, pad_id=PAD)
    assert cached.dtype == torch.long
    assert torch.equal(cached, naive)
    assert model.training  # mode restored


def test_cached_equals_naive_without_the_cpu_fast_paths():
    """fastpaths off (weights @ v for the one query, torch's softmax, x.var in LayerNorm):
    the cached decoder still gives the naive decoder's tokens."""
    from course_utils import fastpaths

    model = _model(1, False).eval()
    src, src_mask = _padded_source(1, [9, 4, 9, 1, 7, 2])
    with fastpaths.disabled():
        naive = greedy_decode(model, src, 8, BOS, EOS, src_mask=src_mask, pad_id=PAD)
        assert torch.equal(greedy_decode_cached(model, src, 8, BOS, EOS, src_mask=src_mask, pad_id=PAD), naive)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_equals_naive_when_every_row_stops_early(norm_first):
    model = _model(0, norm_first).eval()
    src, src_mask = _padded_source(0, [5, 3, 5, 2, 4, 5])
    max_len = 30
    naive = _rig_eos(
        model, src, src_mask, max_len,
        lambda ends: all(ends) and len(set(ends)) >= 2,
        "every row stopping, at different steps",
    )  # fmt: skip
    assert naive.size(1) < max_len + 1  # stopped early, the same T is expected
    assert torch.equal(greedy_decode_cached(model, src, max_len, BOS, EOS, src_mask=src_mask, pad_id=PAD), naive)
    # pad_id defaults to eos_id in both
    default = greedy_decode_cached(model, src, max_len, BOS, EOS, src_mask=src_mask)
    assert torch.equal(default, greedy_decode(model, src, max_len, BOS, EOS, src_mask=src_mask))
    assert not model.training


@pytest.mark.parametrize("max_len", [0, 1, 5])
def test_cached_equals_naive_without_mask_and_short_max_len(max_len):
    model = _model(4, norm_first=False)
    src = torch.randint(3, V_SRC, (3, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        model.output_projection.bias[EOS] = -1e4  # never stops: exactly max_len steps
    naive = greedy_decode(model, src, max_len, BOS, EOS)
    cached = greedy_decode_cached(model, src, max_len, BOS, EOS)
    assert cached.shape == (3, max_len + 1)
    assert torch.equal(cached, naive)


# ------------------------------------------------------------ it really caches


@pytest.mark.parametrize("norm_first", [False, True])
def test_cache_holds_the_full_prefix_keys_and_values(norm_first):
    """After n steps the cache's k, v are those the full-prefix decoder computes."""
    model = _model(5, norm_first).eval()
    src, src_mask = _padded_source(5, [6, 3, 6])
    ys = greedy_decode(model, src, 7, BOS, EOS, src_mask=src_mask, pad_id=PAD)  # (B, T)
    n = ys.size(1)
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (B, L_src, D)
        memory_kv = memory_keys_values(model, memory)
        cache = KVCache.empty(model, src.size(0))
        for t in range(n):
            logits = decode_step(model, ys[:, t], t, cache, memory_kv, src_mask)  # (B, V)
        assert cache.length == n

        # the full-prefix decoder, with hooks on every layer's projections
        seen: dict[str, torch.Tensor] = {}
        hooks = []
        for i, layer in enumerate(model.decoder.layers):
            for part in ("self_attn", "cross_attn"):
                for proj in ("w_k", "w_v"):
                    module = getattr(getattr(layer, part), proj)
                    key = f"{i}.{part}.{proj}"
                    hooks.append(module.register_forward_hook(lambda m, a, out, key=key: seen.__setitem__(key, out)))
        try:
            out = model.decode(ys, memory, causal_mask(n), src_mask)  # (B, n, D)
        finally:
            for h in hooks:
                h.remove()
        full_logits = model.output_projection(out[:, -1])  # (B, V)

    H = model.decoder.layers[0].self_attn.num_heads
    for i in range(len(model.decoder.layers)):
        assert cache.keys[i].shape == (src.size(0), H, n, 32 // H)
        assert_close(cache.keys[i], split_heads(seen[f"{i}.self_attn.w_k"], H), atol=1e-5, rtol=1e-5)
        assert_close(cache.values[i], split_heads(seen[f"{i}.self_attn.w_v"], H), atol=1e-5, rtol=1e-5)
        mem_k, mem_v = memory_kv[i]
        assert_close(mem_k, split_heads(seen[f"{i}.cross_attn.w_k"], H), atol=1e-5, rtol=1e-5)
        assert_close(mem_v, split_heads(seen[f"{i}.cross_attn.w_v"], H), atol=1e-5, rtol=1e-5)
    assert_close(logits, full_logits, atol=1e-4, rtol=1e-4)


def test_each_step_feeds_one_position_and_source_projections_run_once():
    model = _model(6, norm_first=True)
    src, src_mask = _padded_source(6, [5, 2])
    layer = model.decoder.layers[1]
    self_query_lengths, cross_key_calls = [], []
    hooks = [
        layer.self_attn.w_q.register_forward_hook(lambda m, a, out: self_query_lengths.append(a[0].size(1))),
        layer.cross_attn.w_k.register_forward_hook(lambda m, a, out: cross_key_calls.append(a[0].shape)),
    ]
    with torch.no_grad():
        model.output_projection.bias[EOS] = -1e4
    try:
        out = greedy_decode_cached(model, src, 6, BOS, EOS, src_mask=src_mask)
    finally:
        for h in hooks:
            h.remove()
    assert out.shape == (2, 7)
    assert self_query_lengths == [1] * 6  # one new position per step, never the prefix
    assert cross_key_calls == [torch.Size((2, 5, 32))]  # the source's keys: once, before the loop


# ------------------------------------------------------------ modes and errors


@pytest.mark.parametrize("start_training", [True, False])
def test_mode_restored_even_after_an_error(start_training, monkeypatch):
    model = _model(7, norm_first=False).train(start_training)
    src = torch.randint(3, V_SRC, (2, 4), generator=torch.Generator().manual_seed(7))
    modes = []
    real_step = decoding.decode_step

    def spy(model_, *args, **kwargs):
        modes.append(model_.training)
        return real_step(model_, *args, **kwargs)

    monkeypatch.setattr(decoding, "decode_step", spy)
    greedy_decode_cached(model, src, 3, BOS, EOS)
    assert modes and not any(modes)  # decoded in eval mode (no dropout)
    assert all(m.training == start_training for m in model.modules())

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(decoding, "decode_step", broken)
    with pytest.raises(RuntimeError, match="boom"):
        greedy_decode_cached(model, src, 3, BOS, EOS)
    assert all(m.training == start_training for m in model.modules())


def test_bad_arguments_raise_clear_errors():
    model = _model(8, norm_first=False, max_len=6)
    src = torch.randint(3, V_SRC, (2, 4), generator=torch.Generator().manual_seed(8))
    with pytest.raises(ValueError, match=r"src must have 2 dimensions"):
        greedy_decode_cached(model, src[0], 3, BOS, EOS)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="max_len must be a non-negative int"):
            greedy_decode_cached(model, src, bad, BOS, EOS)
    with pytest.raises(TypeError, match="dtype torch.bool"):
        greedy_decode_cached(model, src, 3, BOS, EOS, src_mask=torch.ones(2, 1, 4))
    with pytest.raises(ValueError, match=r"\(B, 1, L_src\)"):  # one mask row per query: not allowed
        greedy_decode_cached(model, src, 3, BOS, EOS, src_mask=torch.ones(2, 4, 4, dtype=torch.bool))
    # a model without the reference's submodule names
    with pytest.raises(TypeError, match="greedy_decode for other models"):
        greedy_decode_cached(nn.Linear(2, 2), src, 3, BOS, EOS)
    # more steps than the positional table has rows: both versions say so
    with torch.no_grad():
        model.output_projection.bias[EOS] = -1e4
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, src, 10, BOS, EOS)
    with pytest.raises(ValueError, match="positional encoding's max_len = 6"):
        greedy_decode_cached(model, src, 10, BOS, EOS)


def test_decode_step_checks_its_arguments():
    model = _model(9, norm_first=False).eval()
    src = torch.randint(3, V_SRC, (2, 4), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        memory_kv = memory_keys_values(model, model.encode(src))
        cache = KVCache.empty(model, 2)
        token = torch.full((2,), BOS)
        with pytest.raises(ValueError, match="feed positions 0, 1, 2"):
            decode_step(model, token, 1, cache, memory_kv)  # skipped position 0
        with pytest.raises(ValueError, match=r"token must have 1 dimensions"):
            decode_step(model, token.unsqueeze(1), 0, cache, memory_kv)
        with pytest.raises(ValueError, match="batch size 3"):
            decode_step(model, torch.full((3,), BOS), 0, cache, memory_kv)
        with pytest.raises(ValueError, match="one entry per decoder layer"):
            decode_step(model, token, 0, cache, memory_kv[:1])
        assert cache.length == 0  # failed calls cached nothing
        logits = decode_step(model, token, 0, cache, memory_kv)
        assert logits.shape == (2, V_TGT) and cache.length == 1


def test_kv_cache_writes_in_place_and_grows_like_cat():
    """Positions written into the preallocated buffers equal a torch.cat of them, also past
    the initial capacity (the buffers double), and a wrong shape is refused."""
    model = _model(11, norm_first=False)
    B, H, d_k = 3, 4, 8
    cache = KVCache.empty(model, B, capacity=2)
    assert (cache.length, cache.num_layers, cache.batch_size) == (0, 2, B)
    assert cache.keys[0].shape == (B, H, 0, d_k)
    g = torch.Generator().manual_seed(11)
    written_k, written_v = [], []
    for t in range(5):  # capacity 2 -> 4 -> 8
        k, v = torch.randn(2, B, H, 1, d_k, generator=g)
        written_k.append(k)
        written_v.append(v)
        for layer in range(2):
            keys, values = cache.append(layer, k + layer, v - layer)
            assert keys.shape == values.shape == (B, H, t + 1, d_k)
        assert cache.length == t + 1
    for layer in range(2):
        assert torch.equal(cache.keys[layer], torch.cat(written_k, dim=2) + layer)
        assert torch.equal(cache.values[layer], torch.cat(written_v, dim=2) - layer)
    with pytest.raises(ValueError, match=r"one position \(B, H, 1, d_k\) = \(3, 4, 1, 8\), got \(3, 4, 2, 8\)"):
        cache.append(0, torch.zeros(B, H, 2, d_k), torch.zeros(B, H, 2, d_k))
    with pytest.raises(ValueError, match="capacity must be a positive int, got 0"):
        KVCache.empty(model, B, capacity=0)


def test_eval_mode_restores_the_mode_also_after_an_error():
    """course_utils.modes.eval_mode (decoding, evaluation and generation use it; still importable
    from course_utils.decoding): eval inside the block, the model's mode back after it."""
    from course_utils import decoding, modes

    assert decoding.eval_mode is modes.eval_mode
    model = nn.Sequential(nn.Dropout(0.5)).train()
    with modes.eval_mode(model):
        assert not model.training and not model[0].training
    assert model.training and model[0].training
    with pytest.raises(RuntimeError), modes.eval_mode(model):
        raise RuntimeError
    assert model.training
    with modes.eval_mode(model.eval()):
        pass
    assert not model.training
