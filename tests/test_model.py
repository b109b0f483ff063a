"""Tests for course_utils.model and course_utils.decoding (notebook 06): the full
Transformer, its masks, its parameter count and greedy decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from course_utils import (
    Transformer,
    causal_mask,
    count_parameters,
    greedy_decode,
    make_src_mask,
    make_tgt_mask,
)

V_SRC, V_TGT = 17, 13
PAD, BOS, EOS = 0, 1, 2
B, L_SRC, L_TGT = 3, 6, 7


def _model(seed: int = 0, **kwargs) -> Transformer:
    """Small model: d_model 32, 2 heads, 2 layers; dropout on, then switched off by eval()."""
    torch.manual_seed(seed)
    config = dict(d_model=32, num_heads=2, num_layers=2, d_ff=64, dropout=0.1, max_len=64)
    config.update(kwargs)
    return Transformer(V_SRC, V_TGT, **config).eval()


def _tokens(B_: int, L: int, vocab: int, seed: int) -> torch.Tensor:
    """Real (non-special) token ids in [3, vocab)."""
    return torch.randint(3, vocab, (B_, L), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- masks


def test_make_masks():
    src = torch.tensor([[4, 5, PAD], [6, PAD, PAD]])
    tgt = torch.tensor([[BOS, 7, 8, PAD], [BOS, 9, PAD, PAD]])
    src_mask = make_src_mask(src, PAD)
    assert src_mask.dtype == torch.bool and src_mask.shape == (2, 1, 3)
    assert src_mask[:, 0].tolist() == [[True, True, False], [True, False, False]]
    tgt_mask = make_tgt_mask(tgt, PAD)
    assert tgt_mask.dtype == torch.bool and tgt_mask.shape == (2, 4, 4)
    expected = causal_mask(4) & (tgt != PAD)[:, None, :]  # (B, L_tgt, L_tgt)
    assert torch.equal(tgt_mask, expected)
    assert tgt_mask[1].tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, False, False],
        [True, True, False, False],
    ]


def test_forward_shapes_and_submodules():
    model = _model()
    src, tgt = _tokens(B, L_SRC, V_SRC, 0), _tokens(B, L_TGT, V_TGT, 1)
    memory = model.encode(src, make_src_mask(src, PAD))
    assert memory.shape == (B, L_SRC, 32)
    assert model.decode(tgt, memory, make_tgt_mask(tgt, PAD), make_src_mask(src, PAD)).shape == (B, L_TGT, 32)
    logits = model(src, tgt, make_src_mask(src, PAD), make_tgt_mask(tgt, PAD))
    assert logits.shape == (B, L_TGT, V_TGT)
    assert model.output_projection.out_features == V_TGT


def test_forward_is_encode_decode_project():
    model = _model(1)
    src, tgt = _tokens(B, L_SRC, V_SRC, 2), _tokens(B, L_TGT, V_TGT, 3)
    src_mask, tgt_mask = make_src_mask(src, PAD), make_tgt_mask(tgt, PAD)
    memory = model.encode(src, src_mask)
    expected = model.output_projection(model.decode(tgt, memory, tgt_mask, src_mask))
    assert_close(model(src, tgt, src_mask, tgt_mask), expected)


def test_eval_is_deterministic_and_train_uses_dropout():
    model = _model(2)
    src, tgt = _tokens(B, L_SRC, V_SRC, 4), _tokens(B, L_TGT, V_TGT, 5)
    tgt_mask = make_tgt_mask(tgt, PAD)
    out = model(src, tgt, None, tgt_mask)
    assert_close(model(src, tgt, None, tgt_mask), out)
    model.train()
    assert not torch.allclose(model(src, tgt, None, tgt_mask), out)


# ---------------------------------------------------------------- parameter count


def _closed_form_count(V_src: int, V_tgt: int, D: int, F_: int, N: int) -> int:
    """Post-norm Transformer, no final norms, unshared embeddings (see model.py)."""
    attention = 4 * (D * D + D)  # w_q, w_k, w_v, w_o with biases
    feed_forward = 2 * D * F_ + F_ + D  # linear1 + linear2 with biases
    norm = 2 * D  # weight and bias
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    embeddings = (V_src + V_tgt) * D
    output = D * V_tgt + V_tgt
    return N * (encoder_layer + decoder_layer) + embeddings + output


@pytest.fixture(scope="module")
def base_model_on_meta() -> Transformer:
    # on the meta device: shapes only, no 400 MB of float32 memory
    with torch.device("meta"):
        return Transformer(37000, 37000)


def test_base_model_parameter_count(base_model_on_meta):
    V, D, F_, N = 37000, 512, 2048, 6
    predicted = _closed_form_count(V, V, D, F_, N)
    assert predicted == 101_007_496
    assert count_parameters(base_model_on_meta) == predicted
    # the positional table is a buffer, not counted
    assert count_parameters(base_model_on_meta.positional_encoding) == 0


def test_base_model_with_shared_embeddings_is_about_the_papers_65M(base_model_on_meta):
    """The paper ties src embedding, tgt embedding and output projection weight (one V x D
    matrix): two of the three copies disappear. 63.1M vs the reported 65M: within 5%."""
    V, D = 37000, 512
    shared = count_parameters(base_model_on_meta) - 2 * V * D
    assert shared == 63_119_496
    assert abs(shared - 65e6) / 65e6 < 0.05


def test_small_model_parameter_count_matches_formula():
    # pre-norm adds the two final norms
    for norm_first, extra in ((False, 0), (True, 2 * 2 * 32)):
        model = _model(norm_first=norm_first)
        assert count_parameters(model) == _closed_form_count(V_SRC, V_TGT, 32, 64, 2) + extra


def test_matrices_are_xavier_initialised():
    model = _model(3, d_model=64, d_ff=64)
    w = model.encoder.layers[0].self_attn.w_q.weight  # (64, 64): bound sqrt(6 / 128)
    bound = (6 / (64 + 64)) ** 0.5
    assert w.abs().max() <= bound
    assert w.abs().max() > 0.9 * bound  # uniform over the full range, not nn.Linear's default


# ---------------------------------------------------------------- causality


def _change_from(tgt: torch.Tensor, t: int, seed: int) -> torch.Tensor:
    """A copy of tgt whose positions >= t all hold a different real token."""
    shift = torch.randint(1, V_TGT - 3, tgt[:, t:].shape, generator=torch.Generator().manual_seed(seed))
    changed = tgt.clone()
    changed[:, t:] = 3 + (tgt[:, t:] - 3 + shift) % (V_TGT - 3)  # stays in [3, V), never equal
    assert (changed[:, t:] != tgt[:, t:]).all()
    return changed


def test_future_tokens_never_change_the_past():
    model = _model(4)
    src, tgt = _tokens(B, L_SRC, V_SRC, 6), _tokens(B, L_TGT, V_TGT, 7)
    src_mask = make_src_mask(src, PAD)
    memory = model.encode(src, src_mask)
    logits = model(src, tgt, src_mask, make_tgt_mask(tgt, PAD))
    hidden = model.decode(tgt, memory, make_tgt_mask(tgt, PAD), src_mask)  # (B, L_tgt, D)
    for t in range(1, L_TGT):
        changed = _change_from(tgt, t, seed=t)
        logits2 = model(src, changed, src_mask, make_tgt_mask(changed, PAD))
        hidden2 = model.decode(changed, memory, make_tgt_mask(changed, PAD), src_mask)
        assert_close(logits2[:, :t], logits[:, :t])
        assert_close(hidden2[:, :t], hidden[:, :t])
        # the change is real: position t itself (which sees token t) does move
        assert not torch.allclose(logits2[:, t], logits[:, t])


def test_without_the_mask_the_future_leaks():
    """The causality test above can fail: drop the mask and every earlier position moves."""
    model = _model(4)
    src, tgt = _tokens(B, L_SRC, V_SRC, 6), _tokens(B, L_TGT, V_TGT, 7)
    logits = model(src, tgt)  # tgt_mask=None: no mask at all
    for t in range(1, L_TGT):
        changed = _change_from(tgt, t, seed=t)
        leak = (model(src, changed)[:, :t] - logits[:, :t]).abs().amax()
        assert leak > 1e-3


# ---------------------------------------------------------------- padding


@pytest.mark.parametrize("pad_src,pad_tgt", [(3, 0), (0, 2), (3, 2)], ids=["src", "tgt", "both"])
def test_appended_padding_changes_nothing(pad_src, pad_tgt):
    model = _model(5)
    src, tgt = _tokens(B, L_SRC, V_SRC, 8), _tokens(B, L_TGT, V_TGT, 9)
    logits = model(src, tgt, make_src_mask(src, PAD), make_tgt_mask(tgt, PAD))
    src_p = F.pad(src, (0, pad_src), value=PAD)  # (B, L_src + pad_src)
    tgt_p = F.pad(tgt, (0, pad_tgt), value=PAD)  # (B, L_tgt + pad_tgt)
    logits_p = model(src_p, tgt_p, make_src_mask(src_p, PAD), make_tgt_mask(tgt_p, PAD))
    assert logits_p.shape == (B, L_TGT + pad_tgt, V_TGT)
    assert_close(logits_p[:, :L_TGT], logits)


def test_ragged_batch_equals_examples_alone():
    """Each example in a padded batch gives what it gives alone, unpadded."""
    model = _model(6)
    src_lens, tgt_lens = [L_SRC, 2, 4], [3, L_TGT, 5]
    src, tgt = _tokens(B, L_SRC, V_SRC, 10), _tokens(B, L_TGT, V_TGT, 11)
    for b in range(B):
        src[b, src_lens[b] :] = PAD
        tgt[b, tgt_lens[b] :] = PAD
    logits = model(src, tgt, make_src_mask(src, PAD), make_tgt_mask(tgt, PAD))
    for b in range(B):
        s, t = src[b : b + 1, : src_lens[b]], tgt[b : b + 1, : tgt_lens[b]]
        alone = model(s, t, make_src_mask(s, PAD), make_tgt_mask(t, PAD))
        assert_close(logits[b : b + 1, : tgt_lens[b]], alone)


def test_all_padding_source_stays_finite_forward_and_backward():
    """Example 1's source is nothing but padding: its encoder rows and its cross-attention
    rows are fully masked. With the finite fill (torch.finfo.min, see attention.py) they
    become uniform averages, so no NaN reaches the loss or the gradients."""
    model = _model(7).train()  # dropout on, as in training
    src, tgt = _tokens(B, L_SRC, V_SRC, 12), _tokens(B, L_TGT, V_TGT, 13)
    src[1] = PAD
    tgt[2, 4:] = PAD
    logits = model(src, tgt, make_src_mask(src, PAD), make_tgt_mask(tgt, PAD))
    assert torch.isfinite(logits).all()
    loss = F.cross_entropy(logits.reshape(-1, V_TGT), tgt.roll(-1, 1).reshape(-1), ignore_index=PAD)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == len(list(model.parameters()))
    assert all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


# ---------------------------------------------------------------- greedy decoding


class ScriptedModel(nn.Module):
    """A fake encoder-decoder whose t-th generated token is ``src[b, t]`` (the "script").

    ``encode`` passes the script through as memory; ``decode`` returns one-hot logits of
    the script (``output_projection`` is the identity). It records every mask it gets.
    """

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.output_projection = nn.Identity()
        self.dummy = nn.Linear(1, 1)  # a submodule, to check training modes
        self.calls: list[tuple[torch.Tensor | None, torch.Tensor | None, bool]] = []

    def encode(self, src, src_mask=None):
        return src  # (B, L_script)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        self.calls.append((tgt_mask, memory_mask, self.training))
        T = tgt.size(1)
        return F.one_hot(memory[:, :T], self.vocab).float()  # (B, T, V): position i predicts script[i]


def test_greedy_stops_at_eos_and_pads_after_it():
    script = torch.tensor(
        [
            [5, EOS, 7, 8, 9, 9],  # eos at step 2
            [6, 6, 6, EOS, 7, 7],  # eos at step 4
            [EOS, 5, 5, 5, 5, 5],  # eos at once
        ]
    )
    model = ScriptedModel(10)
    src_mask = torch.ones(3, 1, 6, dtype=torch.bool)
    out = greedy_decode(model, script, max_len=10, bos_id=BOS, eos_id=EOS, src_mask=src_mask, pad_id=PAD)
    assert out.tolist() == [
        [BOS, 5, EOS, PAD, PAD],
        [BOS, 6, 6, 6, EOS],
        [BOS, EOS, PAD, PAD, PAD],
    ]
    assert len(model.calls) == 4  # stopped as soon as every row had its eos
    for T, (tgt_mask, memory_mask, training) in enumerate(model.calls, start=1):
        # every step is causal over the prefix and uses the source mask
        assert tgt_mask is not None
        assert torch.equal(torch.broadcast_to(tgt_mask, (3, T, T)), causal_mask(T).expand(3, T, T))
        assert memory_mask is src_mask
        assert training is False
    # pad_id defaults to eos_id
    default = greedy_decode(ScriptedModel(10), script, 10, BOS, EOS)
    assert default[0].tolist() == [BOS, 5, EOS, EOS, EOS]


@pytest.mark.parametrize("max_len", [0, 1, 4])
def test_greedy_respects_max_len(max_len):
    script = torch.full((2, 6), 5)  # never produces eos
    out = greedy_decode(ScriptedModel(10), script, max_len=max_len, bos_id=BOS, eos_id=EOS)
    assert out.shape == (2, max_len + 1)
    assert (out[:, 0] == BOS).all() and (out[:, 1:] == 5).all()
    assert out.dtype == torch.long


@pytest.mark.parametrize("start_training", [True, False])
def test_greedy_restores_training_mode(start_training):
    model = ScriptedModel(10).train(start_training)
    greedy_decode(model, torch.full((1, 3), 5), 2, BOS, EOS)
    assert all(m.training == start_training for m in model.modules())
    assert all(training is False for _, _, training in model.calls)  # decoded in eval mode

    def broken_decode(*args, **kwargs):
        raise RuntimeError("boom")

    model.decode = broken_decode
    with pytest.raises(RuntimeError, match="boom"):
        greedy_decode(model, torch.full((1, 3), 5), 2, BOS, EOS)
    assert all(m.training == start_training for m in model.modules())  # even after an error


def _naive_greedy(model: Transformer, src: torch.Tensor, max_len: int) -> list[int]:
    """One unpadded example, the full forward at every step, no batching tricks."""
    ys = [BOS]
    with torch.no_grad():
        for _ in range(max_len):
            tgt = torch.tensor([ys])  # (1, T)
            logits = model(src, tgt, None, causal_mask(len(ys)))  # (1, T, V)
            ys.append(int(logits[0, -1].argmax()))
            if ys[-1] == EOS:
                break
    return ys


def test_greedy_batched_equals_naive_per_example_loop():
    model = _model(3)
    with torch.no_grad():
        model.output_projection.bias[EOS] += 1.0  # so that some rows end early
    model.train()  # greedy_decode must switch dropout off itself
    src = torch.randint(3, V_SRC, (4, 6), generator=torch.Generator().manual_seed(0))
    lengths = [6, 4, 6, 2]
    for b, n in enumerate(lengths):
        src[b, n:] = PAD
    max_len = 8
    out = greedy_decode(model, src, max_len, BOS, EOS, make_src_mask(src, PAD), pad_id=PAD)
    model.eval()
    naive = [_naive_greedy(model, src[b : b + 1, :n], max_len) for b, n in enumerate(lengths)]
    # the test is only meaningful if rows end at different times, some never
    assert len({len(seq) for seq in naive}) >= 3 and any(len(seq) == max_len + 1 for seq in naive)
    assert out.shape == (4, max(len(seq) for seq in naive))
    for b, seq in enumerate(naive):
        assert out[b].tolist() == seq + [PAD] * (out.size(1) - len(seq))


def test_greedy_method_equals_function():
    model = _model(8)
    src = _tokens(2, 5, V_SRC, 14)
    assert torch.equal(model.greedy_decode(src, 6, BOS, EOS), greedy_decode(model, src, 6, BOS, EOS))
