"""Tests for the notebook 06 checkers (course_utils/checks/model.py).

Every catalogued mistake is written as a small, real student implementation; the checker
must fail it, say why in plain words and name the mistake. Correct implementations
written in other ways must pass. Each verdict is repeated on fresh random inputs.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_asserts import SEEDS as SEEDS_FIXED
from checker_asserts import STABLE, assert_mistake, assert_passes, hand_dropout, structured_dropout
from torch import nn

import course_utils
from course_utils import (
    Decoder,
    Encoder,
    LayerNorm,
    PositionalEncoding,
    TokenEmbedding,
    causal_mask,
    padding_mask,
)
from course_utils.checks import (
    check_greedy_decode,
    check_make_src_mask,
    check_make_tgt_mask,
    check_transformer,
    hint,
)
from course_utils.checks._core import HINTS
from course_utils.checks.model import _check_transformer_stage


# ---------------------------------------------------------------- make_src_mask
def src_mask_indexing(src, pad_id):
    return (src != pad_id)[:, None, :]


def src_mask_ne(src, pad_id):
    return torch.ne(src, pad_id).unsqueeze(-2)


def src_mask_item_loop(src, pad_id):
    """.item() values written into a mask made by src.new_zeros: on src's device, right anywhere."""
    mask = src.new_zeros(src.shape, dtype=torch.bool)
    for index, token in enumerate(src.flatten()):
        mask.view(-1)[index] = token.item() != pad_id
    return mask.unsqueeze(1)


@pytest.mark.parametrize("fn", [course_utils.make_src_mask, src_mask_indexing, src_mask_ne, padding_mask,
                                src_mask_item_loop])
def test_make_src_mask_correct_variants_pass(fn):
    assert_passes(check_make_src_mask, fn)


@pytest.mark.parametrize(
    "fn, mistake, words",
    [
        (lambda src, pad: (src == pad).unsqueeze(1), "inverted mask", ["inverted"]),
        (lambda src, pad: src != pad, "missing query axis", ["query axis in the middle", "unsqueeze(1)", "(B, L)"]),
        (lambda src, pad: (src == pad), "missing query axis", ["query axis in the middle"]),
        (lambda src, pad: (src != pad).unsqueeze(-1), "wrong axis", ["goes in the middle (unsqueeze(1))"]),
        (lambda src, pad: (src != 0).unsqueeze(1), "hard-coded pad id", ["instead of pad_id"]),
        (lambda src, pad: (src != pad).unsqueeze(1).float(), "not a bool mask", ["torch.float32", "torch.bool"]),
        # helper n2: the Annotated Transformer's (B, 1, 1, L), full (B, L, L) masks, `> pad_id`, an additive float mask
        (lambda src, pad: (src != pad)[:, None, None, :], "extra head axis",
         ["(B, 1, 1, L_src)", "adds the head axis itself"]),
        (lambda src, pad: (src != pad).unsqueeze(1) & tril(src.size(1)), "causal mask in the encoder",
         ["whole source", "(B, 1, L_src)"]),
        (lambda src, pad: (src != pad).unsqueeze(1) & (src != pad).unsqueeze(2), "padding on both axes", ["keys only"]),
        (lambda src, pad: (src != pad).unsqueeze(1).expand(-1, src.size(1), -1), "wrong shape",
         ["(B, L_src, L_src)", "cross-attention"]),
        (lambda src, pad: (src > pad).unsqueeze(1), "ids below pad_id as padding", ["smaller than pad_id", "!="]),
        (lambda src, pad: torch.zeros(src.shape).masked_fill(src == pad, -1e9).unsqueeze(1), "additive float mask",
         ["True = may attend"]),
        (lambda src, pad: torch.ones_like(src, dtype=torch.bool).unsqueeze(1), "values differ",
         ["should be False", "(token ", "Entry [b, 0, j] is True when token j"]),
    ],
)
def test_make_src_mask_mistakes_are_named(fn, mistake, words):
    assert_mistake(check_make_src_mask, fn, mistake, *words, repeat=SEEDS)


def test_make_src_mask_stub_errors_and_weird_returns():
    def make_src_mask(src, pad_id):
        raise NotImplementedError()

    r = check_make_src_mask(make_src_mask)
    assert not r.passed and r.status == "not implemented" and "not implemented yet" in r.feedback
    assert "`raise NotImplementedError(...)`" in r.feedback

    def in_place(src, pad_id):
        src[src == pad_id] = -1
        return (src != -1).unsqueeze(1)

    r = check_make_src_mask(in_place)
    assert not r.passed and r.mistake == "input modified in place"

    def crashes(src, pad_id):
        B, L, D = src.shape
        return src

    r = check_make_src_mask(crashes)
    assert not r.passed and r.status == "error" and "B, L, D = src.shape" in r.feedback

    for weird in (lambda s, p: None, lambda s, p: [s != p], lambda s, p: (s != p, None), lambda s, p: 1.0,
                  lambda s, p: (s != p).unsqueeze(1).numpy()):
        r = check_make_src_mask(weird)
        assert r.passed is False and r.feedback.startswith("[X]") and "raised" not in r.feedback, r.feedback


# ---------------------------------------------------------------- make_tgt_mask
def tgt_mask_loop(tgt, pad_id, device="input's"):
    """Values read one by one (bool(), .item()) into a mask made on tgt's device: right on any device."""
    B, L = tgt.shape
    mask = torch.zeros(B, L, L, dtype=torch.bool, device=tgt.device if device == "input's" else None)
    for b in range(B):
        for i in range(L):
            for j in range(i + 1):
                mask[b, i, j] = bool(tgt[b, j] != pad_id)
    return mask



def tgt_mask_triu(tgt, pad_id):
    L = tgt.size(1)
    future = torch.triu(torch.ones(L, L, device=tgt.device), diagonal=1).bool()
    return (tgt != pad_id).unsqueeze(1) & ~future


def tgt_mask_on_cpu(tgt, pad_id):  # trial D w_cpu_causal: right on the CPU, fails on a GPU
    return padding_mask(tgt, pad_id) & causal_mask(tgt.size(1))


def tgt_mask_compose(tgt, pad_id):
    return course_utils.make_src_mask(tgt, pad_id) & causal_mask(tgt.size(1), device=tgt.device)


@pytest.mark.parametrize("fn", [course_utils.make_tgt_mask, tgt_mask_loop, tgt_mask_triu, tgt_mask_compose])
def test_make_tgt_mask_correct_variants_pass(fn):
    assert_passes(check_make_tgt_mask, fn)


def tril(L, diagonal=0):
    return torch.ones(L, L, dtype=torch.bool).tril(diagonal)


@pytest.mark.parametrize(
    "fn, mistake, words",
    [
        (lambda t, p: causal_mask(t.size(1)), "causal only", ["padding keys are not blocked"]),
        (lambda t, p: causal_mask(t.size(1)).expand(t.size(0), -1, -1), "causal only", ["padding"]),
        (lambda t, p: padding_mask(t, p), "padding only", ["future"]),
        (lambda t, p: padding_mask(t, p) & tril(t.size(1)).T, "upper triangle", ["lower triangle"]),
        (lambda t, p: padding_mask(t, p).transpose(1, 2) & tril(t.size(1)), "padding on the query axis", ["key axis"]),
        (lambda t, p: padding_mask(t, p) & tril(t.size(1), -1), "diagonal excluded", ["itself"]),
        (lambda t, p: padding_mask(t, p) | tril(t.size(1)), "| instead of &", ["use &"]),
        (lambda t, p: ~(padding_mask(t, p) & tril(t.size(1))), "inverted mask", ["inverted"]),
        (lambda t, p: padding_mask(t, 0) & tril(t.size(1)), "hard-coded pad id", ["instead of pad_id"]),
        (lambda t, p: (padding_mask(t, p) & tril(t.size(1))).unsqueeze(1), "extra head axis", ["(B, 1, L, L)"]),
        (lambda t, p: (padding_mask(t, p) & tril(t.size(1))).long(), "not a bool mask", ["torch.int64"]),
        # trial 06.2-w04, w14, w10
        (lambda t, p: padding_mask(t, p) & ~causal_mask(t.size(1)), "inverted mask",
         ["the causal part is wrong", "True marks the future keys"]),
        (lambda t, p: padding_mask(t, p) & tril(t.size(1), 1), "diagonal shifted", ["tril(1)", "next token"]),
        (lambda t, p: padding_mask(t, p) & padding_mask(t, p).transpose(1, 2) & tril(t.size(1)),
         "padding on both axes", ["both axes", "keys only"]),
        # helper n2: a wrong padding part, masks of another shape named by their pattern, the first wrong entries
        (lambda t, p: (t == p).unsqueeze(1) & tril(t.size(1)), "inverted mask", ["padding part", "!="]),
        (lambda t, p: (t > p).unsqueeze(1) & tril(t.size(1)), "ids below pad_id as padding", ["padding part", "!="]),
        (lambda t, p: ~tril(t.size(1)), "inverted mask", ["causal part is wrong", "no batch axis"]),
        (lambda t, p: tril(t.size(1))[None, None], "causal only", ["padding keys are not blocked"]),
        (lambda t, p: torch.ones(t.size(1), t.size(1), dtype=torch.bool), "wrong shape", ["own padding"]),
        (lambda t, p: ~padding_mask(t, p), "inverted mask", ["only blocks padding"]),
        (lambda t, p: padding_mask(t, p).transpose(1, 2), "padding on the query axis", ["nothing blocks the future"]),
        # issue 24 item 6: Hugging Face's padding mask (B, 1, 1, L) returned as the target mask, no causal part
        (lambda t, p: (t != p)[:, None, None, :], "padding only", ["(B, 1, 1, L)", "head axis", "future"]),
        (lambda t, p: torch.ones(t.size(0), t.size(1), t.size(1), dtype=torch.bool), "values differ",
         ["should be False", "after the query", "Entry [b, i, j] is True when query i"]),
    ],
)
def test_make_tgt_mask_mistakes_are_named(fn, mistake, words):
    assert_mistake(check_make_tgt_mask, fn, mistake, *words, repeat=STABLE)  # a mask check takes milliseconds


def test_make_tgt_mask_device_is_probed_on_meta():
    # the meta device exists without a GPU (tgt_mask_loop, among the correct variants, reads values:
    # it cannot run on meta and is not blamed)
    assert_mistake(check_make_tgt_mask, tgt_mask_on_cpu, "wrong device", "meta", "device=tgt.device")


@pytest.mark.parametrize("check, fn, words", [
    # a loop reading values cannot run on meta: its result is watched on the CPU instead
    (check_make_tgt_mask, functools.partial(tgt_mask_loop, device=None), ["without device=", "lands on the CPU"]),
    (check_make_src_mask, lambda s, p: torch.tensor((s != p).tolist()).unsqueeze(1), [".tolist()", "lands on the CPU"]),
])
def test_a_value_loop_into_a_cpu_tensor_is_wrong_device(check, fn, words):
    assert_mistake(check, fn, "wrong device", *words)


def test_make_tgt_mask_stub_and_weird_returns():
    def make_tgt_mask(tgt, pad_id):
        raise NotImplementedError()

    r = check_make_tgt_mask(make_tgt_mask)
    assert not r.passed and r.status == "not implemented" and "`raise NotImplementedError(...)`" in r.feedback
    for weird in (lambda t, p: None, lambda t, p: [], lambda t, p: torch.ones(3), lambda t, p: "mask"):
        r = check_make_tgt_mask(weird)
        assert r.passed is False and r.feedback.startswith("[X]"), r.feedback
    r = check_make_tgt_mask(course_utils.Transformer)
    assert not r.passed and r.mistake == "not a function"


# ---------------------------------------------------------------- Transformer
SEEDS = 20  # a diagnosis must not depend on the random draw


def xavier_matrices(module):
    for p in module.parameters():
        if p.dim() > 1 and p.requires_grad:
            nn.init.xavier_uniform_(p)


class ScratchTransformer(nn.Module):
    """The contract's names, written without subclassing: an nn.Embedding (inside a plain
    container, as `embedding`) scaled by hand, functional dropout after the positions, an
    explicit Xavier loop over the modules."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False):
        super().__init__()
        self.scale, self.p = math.sqrt(d_model), dropout
        self.src_embedding, self.tgt_embedding = nn.Module(), nn.Module()
        self.src_embedding.embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding.embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, max_len)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.output_projection = nn.Linear(d_model, tgt_vocab_size)
        for m in self.modules():
            for p in m.parameters(recurse=False):
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

    def embed(self, embedding, ids):
        return F.dropout(self.positional_encoding(embedding(ids) * self.scale), self.p, self.training)

    def encode(self, src, src_mask=None):
        return self.encoder(self.embed(self.src_embedding.embedding, src), src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return self.decoder(self.embed(self.tgt_embedding.embedding, tgt), memory, tgt_mask, memory_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.output_projection(self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask))


class RenamedTransformer(nn.Module):
    """The notebook's names for the parts its later cells use (output_projection, src_embedding,
    encoder, ...), free names for the rest (a second PositionalEncoding `pos_tgt`, `drop`), parts
    registered in another order (the checker pairs the parameters by structure); ``bug`` switches
    on one mistake."""

    bug = None

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False):
        super().__init__()
        bug = self.bug
        p_pe = {"no dropout": 0.0, "no pe dropout": 0.0, "fixed p": 0.1, "dropout before pe": 0.0}.get(bug, dropout)
        p_layers = {"no dropout": 0.0, "no layer dropout": 0.0}.get(bug, dropout)
        self.output_projection = nn.Linear(d_model, src_vocab_size if bug == "vocabularies swapped" else tgt_vocab_size)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, p_layers, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, p_layers, norm_first)
        self.src_embedding = TokenEmbedding(tgt_vocab_size if bug == "src vocabulary from tgt" else src_vocab_size,
                                            d_model)
        self.tgt_embedding = TokenEmbedding(src_vocab_size if bug == "tgt vocabulary from src" else tgt_vocab_size,
                                            d_model)  # the trial's 06 answer: src_vocab_size
        self.positional_encoding = PositionalEncoding(d_model, max_len, p_pe)
        self.pos_tgt = PositionalEncoding(d_model, max_len, p_pe)
        self.drop = nn.Dropout(dropout)
        if bug == "learned positions":
            self.pos_table = nn.Parameter(torch.zeros(max_len, d_model))
        if bug == "extra linear":
            self.extra = nn.Linear(d_model, d_model)
        for pos in (self.positional_encoding, self.pos_tgt):
            if bug in ("pe parameter", "pe attribute"):
                pe = pos.pe
                del pos.pe
                pos.pe = nn.Parameter(pe, requires_grad=False) if bug == "pe parameter" else pe
        if not norm_first and bug in ("final norms", "final norm in the encoder"):
            self.encoder.norm = LayerNorm(d_model)
            if bug == "final norms":
                self.decoder.norm = LayerNorm(d_model)
        if norm_first and bug == "no final norm in the decoder":
            self.decoder.norm = None
        if bug != "no xavier":
            xavier_matrices(self)
        for p in self.parameters():
            if p.dim() == 1 and bug in ("zero vectors", "vectors of ones"):
                nn.init.zeros_(p) if bug == "zero vectors" else nn.init.ones_(p)

    def position(self, x, pos, skip):
        if self.bug == skip:
            return x
        if self.bug == "learned positions":
            return self.drop(x + self.pos_table[: x.size(1)])
        return pos(self.drop(x)) if self.bug == "dropout before pe" else pos(x)

    def encode(self, src, src_mask=None):
        x = self.src_embedding(src) * (math.sqrt(self.output_projection.in_features) if self.bug == "scaled twice" else 1.0)  # noqa: E501
        return self.encoder(self.position(x, self.positional_encoding, "no source positions"), None if self.bug == "no src mask" else src_mask)  # noqa: E501

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        y = self.tgt_embedding(tgt) * (math.sqrt(self.output_projection.in_features) if self.bug == "scaled twice" else 1.0)  # noqa: E501
        y = self.position(y, self.pos_tgt, "no target positions")
        if self.bug == "no tgt mask":
            tgt_mask = None
        return self.decoder(y, memory, tgt_mask, None if self.bug == "no src mask" else memory_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        out = self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)
        if self.bug == "no projection":
            return out
        if self.bug == "inconsistent":
            return self.output_projection(torch.relu(out))
        return self.output_projection(out).log_softmax(-1) if self.bug == "log_softmax" else self.output_projection(out)


def renamed(bug):
    return type(f"Renamed_{bug}", (RenamedTransformer,), {"bug": bug})


class HandDropoutTransformer(ScratchTransformer):
    """Hand-written dropout (mask * x / (1 - p)) after the positional table."""

    def embed(self, embedding, ids):
        return hand_dropout(self.positional_encoding(embedding(ids) * self.scale), self.p, self.training)


@pytest.mark.parametrize("cls", [course_utils.Transformer, ScratchTransformer, RenamedTransformer, HandDropoutTransformer])  # noqa: E501
def test_transformer_correct_variants_pass(cls):
    assert_passes(check_transformer, cls, repeat=3)


class NoTgtMask(course_utils.Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return super().forward(src, tgt, src_mask, None)


class NoCrossMask(course_utils.Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.output_projection(self.decode(tgt, self.encode(src, src_mask), tgt_mask))


class NoEncoderMask(course_utils.Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.output_projection(self.decode(tgt, self.encode(src), tgt_mask, src_mask))


class Unscaled(course_utils.Transformer):
    def encode(self, src, src_mask=None):
        return self.encoder(self.positional_encoding(self.src_embedding.embedding(src)), src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        y = self.positional_encoding(self.tgt_embedding.embedding(tgt))
        return self.decoder(y, memory, tgt_mask, memory_mask)


class NoTargetPositions(course_utils.Transformer):
    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return self.decoder(self.tgt_embedding(tgt), memory, tgt_mask, memory_mask)


class PositionsTwice(course_utils.Transformer):  # the positional module called twice on the source
    def encode(self, src, src_mask=None):
        return self.encoder(self.positional_encoding(self.positional_encoding(self.src_embedding(src))), src_mask)


class SecondPositionalModule(course_utils.Transformer):
    """A second PositionalEncoding (its own dropout 0) after the first on the target: in training mode
    with dropout near 1 this is what dropout before adding gives; eval mode names it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.target_positions = PositionalEncoding(self.d_model, self.positional_encoding.pe.size(0), 0.0)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        y = self.target_positions(self.positional_encoding(self.tgt_embedding(tgt)))
        return self.decoder(y, memory, tgt_mask, memory_mask)


class NoProjection(course_utils.Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)


class Probabilities(course_utils.Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return super().forward(src, tgt, src_mask, tgt_mask).softmax(dim=-1)


class GeneratorName(course_utils.Transformer):  # trial 06.3-w22: the Annotated Transformer's name
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generator = self.output_projection
        del self.output_projection

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask))


class DoubleDropout(course_utils.Transformer):  # trial 06.3-w12: nn.Dropout again after the positions
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.drop = nn.Dropout(dropout)

    def encode(self, src, src_mask=None):
        return self.encoder(self.drop(self.positional_encoding(self.src_embedding(src))), src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        y = self.drop(self.positional_encoding(self.tgt_embedding(tgt)))
        return self.decoder(y, memory, tgt_mask, memory_mask)


class MemoryDropout(DoubleDropout):  # trial 06.3-w33: dropout between encode and decode
    def encode(self, src, src_mask=None):
        return course_utils.Transformer.encode(self, src, src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return course_utils.Transformer.decode(self, tgt, self.drop(memory), tgt_mask, memory_mask)


class DropoutAroundTable(DoubleDropout):  # trial k t31: drop(pe(drop(emb))), dropout twice but not as one scale
    def encode(self, src, src_mask=None):
        return self.encoder(self.positional_encoding(self.drop(self.src_embedding(src))), src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        y = self.positional_encoding(self.drop(self.tgt_embedding(tgt)))
        return self.decoder(y, memory, tgt_mask, memory_mask)


class NotRescaledDropout(course_utils.Transformer):  # a hand-written dropout without the 1 / (1 - p)
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.positional_encoding.dropout = NotRescaled(dropout)


class NotRescaled(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return x * (torch.rand_like(x) >= self.p) if self.training else x


def structured(kind):
    """PositionalEncoding's dropout with the right p and scale but wrong draws (trial M)."""

    class Structured(course_utils.Transformer):
        def __init__(self, *args, dropout=0.1, **kwargs):
            super().__init__(*args, dropout=dropout, **kwargs)
            self.positional_encoding.dropout = structured_dropout(kind, dropout)

    return type(f"Structured_{kind}", (Structured,), {})


class AlphaDropoutTransformer(NotRescaledDropout):  # the wrong class of dropout: dropped entries are not 0
    def __init__(self, *args, dropout=0.1, **kwargs):
        super().__init__(*args, dropout=dropout, **kwargs)
        self.positional_encoding.dropout = nn.AlphaDropout(dropout)


class EvalInEncode(course_utils.Transformer):  # trial k t51: dropout never acts in training
    def encode(self, src, src_mask=None):
        self.eval()
        return super().encode(src, src_mask)


class TrainInForward(course_utils.Transformer):  # evaluation becomes random
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        self.train()
        return super().forward(src, tgt, src_mask, tgt_mask)


class MasksSwappedInForward(course_utils.Transformer):  # trial k t24
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.output_projection(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))


class MasksSwappedInDecode(course_utils.Transformer):  # trial k t49
    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return self.decoder(self.positional_encoding(self.tgt_embedding(tgt)), memory, memory_mask, tgt_mask)


class EncoderGetsTgtMask(course_utils.Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.output_projection(self.decode(tgt, self.encode(src, tgt_mask), tgt_mask, src_mask))


class PositionsAfterEncoder(course_utils.Transformer):  # trial k t36
    def encode(self, src, src_mask=None):
        return self.positional_encoding(self.encoder(self.src_embedding(src), src_mask))


class PositionsOnMemory(course_utils.Transformer):  # trial k t50
    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return super().decode(tgt, self.positional_encoding(memory), tgt_mask, memory_mask)


class SharedTargetEmbedding(course_utils.Transformer):  # trial 06.3-w23
    def __init__(self, src_vocab_size, tgt_vocab_size, *args, **kwargs):
        super().__init__(src_vocab_size, tgt_vocab_size, *args, **kwargs)
        if src_vocab_size == tgt_vocab_size:
            self.tgt_embedding = self.src_embedding


def tied(own, role):
    """A Transformer whose ``role`` parameter is ``own``'s (tied when the shapes allow)."""

    class Tied(course_utils.Transformer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            a, b = self.get_parameter(own), self.get_submodule(role.rsplit(".", 1)[0])
            if a.shape == getattr(b, "weight").shape:
                b.weight = a

    return Tied


class DecodeWithSourceEmbedding(course_utils.Transformer):  # trial D w_src_emb_for_tgt
    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return self.decoder(self.positional_encoding(self.src_embedding(tgt)), memory, tgt_mask, memory_mask)


class EncodeWithTargetEmbedding(course_utils.Transformer):
    def encode(self, src, src_mask=None):
        return self.encoder(self.positional_encoding(self.tgt_embedding.embedding(src) * self.d_model**0.5), src_mask)


class ShortTable(course_utils.Transformer):  # trial 06.3-w29: PositionalEncoding(d_model, 20, dropout)
    def __init__(self, *args, d_model=512, dropout=0.1, **kwargs):
        super().__init__(*args, d_model=d_model, dropout=dropout, **kwargs)
        self.positional_encoding = PositionalEncoding(d_model, 20, dropout)


class MemoryDetached(course_utils.Transformer):  # trial B: the encoder would never learn
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encode(src, src_mask).detach()
        return self.output_projection(self.decode(tgt, memory, tgt_mask, src_mask))


class TargetEmbeddingNoGrad(course_utils.Transformer):
    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        with torch.no_grad():
            y = self.tgt_embedding(tgt)
        return self.decoder(self.positional_encoding(y), memory, tgt_mask, memory_mask)


class OwnCausalMaskWhenNone(course_utils.Transformer):  # issue 24 item 6 (T59): tgt_mask=None made causal
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        if tgt_mask is None:
            tgt_mask = causal_mask(tgt.size(1), device=tgt.device)
        return super().forward(src, tgt, src_mask, tgt_mask)


class NoMethods(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, **kwargs):
        super().__init__()
        self.model = course_utils.Transformer(src_vocab_size, tgt_vocab_size, **kwargs)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.model(src, tgt, src_mask, tgt_mask)


TRANSFORMER_MISTAKES = [  # (class, mistake, words, the check's step that names it)
    (NoTgtMask, "future leaking", ["future"], "values"),
    (NoCrossMask, "src_mask not used for cross-attention", ["cross-attention ignores src_mask"], "values"),
    (NoEncoderMask, "src_mask not used by the encoder", ["encoder ignores src_mask"], "values"),
    (Unscaled, "embeddings not scaled", ["source and target", "sqrt(d_model)"], "values"),
    (NoTargetPositions, "positional encoding missing", ["target embeddings"], "values"),
    (NoProjection, "missing output projection", ["(B, L_tgt, d_model)"], "values"),
    (PositionsTwice, "positional encoding added twice", ["added twice to the source embeddings"], "values"),
    (SecondPositionalModule, "positional encoding added twice", ["added twice to the target embeddings"], "values"),
    (Probabilities, "returns probabilities", ["softmax", "raw logits"], "values"),
    (NoMethods, "missing method", ["encode(src, src_mask)"], "build"),
    (OwnCausalMaskWhenNone, "causal mask when tgt_mask is None", ["tgt_mask=None", "None means no mask"],
     "masks left out"),
    # the same with names the contract does not fix: still compared number by number
    (renamed("no target positions"), "positional encoding missing", ["target embeddings"], "values"),
    (renamed("no source positions"), "positional encoding missing", ["source embeddings"], "values"),
    (renamed("no tgt mask"), "future leaking", ["future"], "values"),
    (renamed("no src mask"), "src_mask not used", ["not used at all"], "values"),
    (renamed("no projection"), "missing output projection", ["(B, L_tgt, d_model)"], "values"),
    (renamed("inconsistent"), "forward disagrees with encode/decode", ["encode, then decode"], "values"),
    # the notebook's names, extra dropout (0 < p < 1), sharing, max_len
    (GeneratorName, "missing submodule", ["`output_projection`", "greedy_decode"], "build"),
    (DoubleDropout, "dropout applied twice", ["dropped twice", "remove the second one"], "extra dropout"),
    (MemoryDropout, "dropout on the memory", ["memory"], "extra dropout"),
    (DropoutAroundTable, "dropout applied twice", ["once before adding the positional table and once after",
                                                   "remove the second one"], "extra dropout"),
    (NotRescaledDropout, "wrong dropout", ["the kept entries are not rescaled", "1 / (1 - p) = 2"], "extra dropout"),
    (AlphaDropoutTransformer, "wrong dropout", ["changed in another way than one dropout"], "extra dropout"),
    (structured("batch"), "wrong dropout", ["one mask for the batch"], "extra dropout"),
    (structured("token"), "wrong dropout", ["whole token vectors are dropped"], "extra dropout"),
    (structured("kept"), "wrong dropout", ["the same entries are dropped at every call"], "extra dropout"),
    # trial k: modes, masks, the table in the wrong place
    (EvalInEncode, "mode not restored", ["call of encode", "in eval mode", "self.eval()"], "modes"),
    (TrainInForward, "mode not restored", ["after model.eval(), one call of forward", "in train mode"], "modes"),
    (MasksSwappedInForward, "masks swapped", ["self-attention (tgt_mask) gets src_mask",
                                              "cross-attention (memory_mask) gets tgt_mask"], "values"),
    (MasksSwappedInDecode, "masks swapped", ["cross-attention (memory_mask) gets tgt_mask"], "values"),
    (EncoderGetsTgtMask, "masks swapped", ["the encoder gets tgt_mask"], "values"),
    (PositionsAfterEncoder, "positional encoding after the encoder", ["encoder's output", "source embeddings"],
     "values"),
    (PositionsOnMemory, "positional encoding on the memory", ["to the memory", "as it is"], "values"),
    (SharedTargetEmbedding, "modules shared", ["src_vocab_size == tgt_vocab_size"], "shared"),
    (ShortTable, "max_len ignored", ["20 rows", "max_len=64"], "table"),
    # trial D w_tied_output: every pair of the three (V, D) matrices, named (equal vocabularies for the others)
    (tied("tgt_embedding.embedding.weight", "output_projection.weight"), "modules shared",
     ["`tgt_embedding.embedding.weight` and `output_projection.weight` are one and the same Parameter", "three matrices"],  # noqa: E501
     "build"),
    (tied("src_embedding.embedding.weight", "output_projection.weight"), "modules shared",
     ["`src_embedding.embedding.weight` and `output_projection.weight`", "src_vocab_size == tgt_vocab_size"], "shared"),
    (tied("src_embedding.embedding.weight", "tgt_embedding.embedding.weight"), "modules shared",
     ["`src_embedding.embedding.weight` and `tgt_embedding.embedding.weight`", "three matrices"], "shared"),
    (DecodeWithSourceEmbedding, "embeddings swapped", ["decode looks the target tokens up in self.src_embedding"],
     "values"),
    (EncodeWithTargetEmbedding, "embeddings swapped", ["encode looks the source tokens up in self.tgt_embedding"],
     "values"),
    # right logits, cut graph
    (MemoryDetached, "gradient blocked", ["no gradient reaches `src_embedding.embedding.weight`", ".detach()"],
     "gradient"),
    (TargetEmbeddingNoGrad, "gradient blocked", ["no gradient reaches `tgt_embedding.embedding.weight`"], "gradient"),
]




TRANSFORMER_FAMILIES = [  # (class, mistake, words, the check's step that names it)
    (renamed("log_softmax"), "returns log-probabilities", ["log_softmax", "raw logits"], "values"),
    (renamed("scaled twice"), "embeddings scaled twice", ["source and target", "not sqrt(d_model)"], "values"),
    # structure, state and initialisation
    (renamed("learned positions"), "learned positions", ["`pos_table`", "sinusoidal", "buffer"], "build"),
    (renamed("pe parameter"), "pe is a Parameter", ["`positional_encoding.pe`", "register_buffer"], "build"),
    (renamed("pe attribute"), "pe not a buffer", ["plain tensor", "register_buffer"], "build"),
    (renamed("final norms"), "final norm in post-norm", ["the encoder and the decoder have", "only `if norm_first`"],
     "build"),
    (renamed("final norm in the encoder"), "final norm in post-norm", ["the encoder has a final norm"], "build"),
    (renamed("no final norm in the decoder"), "missing final norm", ["the decoder lacks the final norm"], "build"),
    (renamed("extra linear"), "parameters differ from the reference",
     ["more parameter tensors than", "by position and shape"], "build"),
    (renamed("vocabularies swapped"), "output_projection has src_vocab_size outputs",
     ["the src_vocab_size", "nn.Linear(d_model, tgt_vocab_size)"], "build"),
    (renamed("tgt vocabulary from src"), "tgt_embedding has src_vocab_size rows",
     ["the src_vocab_size", "TokenEmbedding(tgt_vocab_size, d_model)"], "build"),
    (renamed("src vocabulary from tgt"), "src_embedding has tgt_vocab_size rows",
     ["the tgt_vocab_size", "TokenEmbedding(src_vocab_size, d_model)"], "build"),
    (renamed("no xavier"), "no Xavier initialisation", ["xavier_uniform_", "p.dim() > 1"], "build"),
    (renamed("zero vectors"), "norm scales not ones", ["not all ones", "every logit starts the same"], "build"),
    (renamed("vectors of ones"), "norm shifts not zeros", ["not all zeros", "p.dim() > 1"], "build"),
    # training-mode dropout, probed with dropout=1.0
    (renamed("no dropout"), "dropout missing", ["source embedding gets no dropout", "Encoder(..., dropout"], "dropout"),
    (renamed("no pe dropout"), "positional dropout missing", ["source embedding gets no dropout after"], "dropout"),
    (renamed("no layer dropout"), "layer dropout missing", ["the layers of the encoder apply no dropout"], "dropout"),
    (renamed("dropout before pe"), "dropout before adding", ["dropout(x) + pe", "dropout(x + pe)"], "dropout"),
    (renamed("fixed p"), "hard-coded dropout p", ["`positional_encoding.dropout` (p=0.1)"], "dropout"),
]


@pytest.mark.parametrize("cls, mistake, words, stage", TRANSFORMER_MISTAKES + TRANSFORMER_FAMILIES)
def test_transformer_mistakes_are_named(cls, mistake, words, stage):
    assert_mistake(check_transformer, cls, mistake, *words, repeat=3)


@pytest.mark.parametrize("cls, mistake, words, stage", TRANSFORMER_MISTAKES + TRANSFORMER_FAMILIES)
def test_transformer_mistakes_are_named_on_every_draw(cls, mistake, words, stage):
    # the whole check above (no earlier step takes the mistake); here only the step that names it, on every
    # draw: a full check builds the student's model five times, that step once or twice
    assert_mistake(functools.partial(_check_transformer_stage, stage=stage), cls, mistake, *words, repeat=STABLE)


def test_transformer_stubs_and_weird_returns():
    class Transformer(course_utils.Transformer):
        def forward(self, src, tgt, src_mask=None, tgt_mask=None):
            raise NotImplementedError()

    r = check_transformer(Transformer)
    assert not r.passed and r.status == "not implemented" and "not implemented yet" in r.feedback
    assert "`raise NotImplementedError(...)`" in r.feedback

    for value in (None, (1, 2), 3.0, np.zeros((2, 3, 4), dtype=np.float32)):
        for base in (course_utils.Transformer, RenamedTransformer):

            class Weird(base):
                def forward(self, src, tgt, src_mask=None, tgt_mask=None, value=value):
                    return value

            r = check_transformer(Weird)
            assert r.passed is False and r.feedback.startswith("[X]"), r.feedback
            assert "raised" not in r.feedback, r.feedback

    r = check_transformer(course_utils.Transformer(11, 12, d_model=8, num_heads=2, num_layers=1, d_ff=16))
    assert not r.passed and r.mistake == "not a class"


# ---------------------------------------------------------------- greedy_decode
def make_greedy(bug=None):
    """A student's vectorised greedy decoder; ``bug`` switches on one catalogued mistake."""

    def greedy(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
        was_training = model.training
        if bug == "decoder eval only":  # trial D w_eval_decoder_only: the encoder keeps its dropout
            model.decoder.eval()
        elif bug != "train mode":
            model.eval()
        if bug == "no finally":  # trial D w_exception_leaves_eval: right unless the model raises
            out = decode(model, src, max_len, bos_id, eos_id, src_mask, pad_id)
            model.train(was_training)
            return out
        try:
            return decode(model, src, max_len, bos_id, eos_id, src_mask, pad_id)
        finally:
            if bug == "train at the end":
                model.train()
            elif bug != "mode not restored":
                model.train(was_training)

    def decode(model, src, max_len, bos_id, eos_id, src_mask, pad_id):
        fill = eos_id if (pad_id is None or bug == "pad ignored") else pad_id
        if bug == "pad or eos":  # trial 06.4-w07: wrong when pad_id == 0
            fill = pad_id or eos_id
        if bug == "fill 0":  # pad_id=None read as 0
            fill = 0 if pad_id is None else pad_id
        mask = None if bug in ("no src mask", "no src mask in decode") else src_mask
        memory = model.encode(src, None if bug in ("no src mask", "no src mask in encode") else src_mask)
        B = src.size(0)
        device = None if bug == "cpu tensors" else src.device  # trial: torch.zeros(...) without device=
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        steps = {"max_len + 1": max_len + 1, "max_len - 1": max_len - 1}.get(bug, max_len)
        for _ in range(steps):
            T = ys.size(1)
            tgt_mask = None if bug == "no causal" else torch.ones(T, T, device=device).tril().bool()
            if bug in ("upper mask", "inverted mask", "inverted causal"):  # trial 06.4-w15: ~causal
                tgt_mask = tgt_mask.T if bug == "upper mask" else ~tgt_mask
            if bug == "encode every step":  # trial D w_encode_every_step
                memory = model.encode(src, src_mask)
            if bug == "last only":  # issue 22: the newest token alone, as if there were a cache
                out = model.decode(ys[:, -1:], memory, None, mask)
            else:
                out = model.decode(ys, memory, tgt_mask, mask)
            if bug == "full forward":  # trial D w_full_forward: encoder and decoder at every step
                nxt = model(src, ys, src_mask, tgt_mask)[:, -1].argmax(dim=-1)
            elif bug == "argmax positions":
                nxt = model.output_projection(out).argmax(dim=1)[:, -1]
            elif bug == "argmax batch":
                nxt = model.output_projection(out[:, -1]).argmax(dim=0)
            elif bug == "first position":
                nxt = model.output_projection(out[:, 0]).argmax(dim=-1)
            elif bug == "no projection":  # issue 22: the argmax over the D features
                nxt = out[:, -1].argmax(dim=-1)
            else:
                nxt = model.output_projection(out[:, -1]).argmax(dim=-1)
            if bug == "eos overwritten":  # trial D w_eos_replaced_by_pad: finished marked before the fill
                done = done | (nxt == eos_id)
            if bug not in ("no fill", "ignores eos"):
                nxt = torch.where(done, torch.full_like(nxt, fill), nxt)
            ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
            done = (nxt == eos_id) if bug == "not cumulative" else done | (nxt == eos_id)
            if bug == "first eos" and done.any():
                break
            if bug == "row 0 stop" and done[0]:  # issue 22: "4 columns, expected 9"
                break
            if bug not in ("ignores eos", "to max_len") and done.all():
                break
        if bug == "no bos":
            return ys[:, 1:]
        if bug == "float":
            return ys.float()
        return ys

    return greedy if bug == "grad on" else torch.no_grad()(greedy)  # trial D w_grad_enabled: no decorator


def greedy_per_example(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
    """A Python loop over the examples, each decoded alone, then padded to a common length."""
    was_training = model.training
    model.eval()
    fill = eos_id if pad_id is None else pad_id
    rows = []
    try:
        with torch.no_grad():
            for b in range(src.size(0)):
                m = None if src_mask is None else src_mask[b : b + 1]
                memory = model.encode(src[b : b + 1], m)  # each source row encoded once
                seq = [bos_id]
                for _ in range(max_len):
                    ys = torch.tensor([seq], device=src.device)
                    out = model.decode(ys, memory, causal_mask(len(seq), device=src.device), m)
                    token = int(model.output_projection(out)[0, -1].argmax())
                    seq.append(token)
                    if token == eos_id:
                        break
                rows.append(seq)
    finally:
        model.train(was_training)
    T = max(len(r) for r in rows)
    return torch.tensor([r + [fill] * (T - len(r)) for r in rows], device=src.device)


def greedy_preallocated(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
    """Trial D c_prealloc: inference_mode, a (B, max_len + 1) buffer filled as it goes, trimmed at the end."""
    was_training = model.training
    model.train(False)
    try:
        with torch.inference_mode():
            fill = eos_id if pad_id is None else pad_id
            memory = model.encode(src, src_mask)
            buf = torch.full((src.size(0), max_len + 1), fill, dtype=torch.long, device=src.device)
            buf[:, 0] = bos_id
            alive = torch.ones(src.size(0), dtype=torch.bool, device=src.device)
            t = 0
            while t < max_len and alive.any():
                h = model.decode(buf[:, : t + 1], memory, causal_mask(t + 1, device=src.device), src_mask)[:, -1]
                tok = model.output_projection(h).topk(1, dim=-1).indices.squeeze(-1)
                buf[:, t + 1] = torch.where(alive, tok, torch.full_like(tok, fill))
                alive = alive & (tok != eos_id)
                t += 1
            return buf[:, : t + 1].clone()
    finally:
        model.train(was_training)


@pytest.mark.parametrize("fn", [course_utils.greedy_decode, make_greedy(), greedy_per_example, greedy_preallocated])
def test_greedy_decode_correct_variants_pass(fn):
    assert_passes(check_greedy_decode, fn)


def modifies_src(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
    out = course_utils.greedy_decode(model, src, max_len, bos_id, eos_id, src_mask, pad_id)
    src.zero_()
    return out


@pytest.mark.parametrize(
    "fn, mistake, words",
    [
        (make_greedy("no fill"), "keeps generating after eos", ["after its <eos>"]),
        (make_greedy("ignores eos"), "keeps generating after eos", ["real tokens"]),
        (make_greedy("to max_len"), "runs to max_len after all finished", ["already produced <eos>"]),
        (make_greedy("first eos"), "stops at the first eos", ["finished.all()"]),
        (make_greedy("pad ignored"), "pad_id ignored", ["fill with pad_id"]),
        (make_greedy("no bos"), "no bos in column 0", ["column 0 must be bos_id"]),
        (make_greedy("no causal"), "no causal mask", ["causal_mask(T)"]),
        (make_greedy("argmax positions"), "argmax over wrong axis", ["positions axis", "dim=-1"]),
        (make_greedy("argmax batch"), "argmax over wrong axis", ["batch axis", "RuntimeError"]),
        (make_greedy("first position"), "reads the first position", ["out[:, -1]"]),
        (make_greedy("max_len + 1"), "max_len off by one", ["at most max_len"]),
        (make_greedy("max_len - 1"), "max_len off by one", ["only"]),
        (make_greedy("train mode"), "model left in train mode", ["model.eval()"]),
        (make_greedy("float"), "wrong dtype", ["torch.long", "right tokens"]),
        (modifies_src, "input modified in place", ["in place"]),
        (make_greedy("inverted causal"), "inverted mask", ["~causal_mask(T)", "True marks the future keys"]),
        (make_greedy("last only"), "only the last token fed", ["ys[:, -1:]", "whole prefix"]),
        (make_greedy("no projection"), "missing output projection", ["model.output_projection never did",
                                                                     "argmax over the decoder's D features"]),
        (make_greedy("row 0 stop"), "stops at the first eos", ["row 0", "finished.all()"]),
    ],
)
def test_greedy_decode_mistakes_are_named(fn, mistake, words):
    # every draw: checks with the same seed share the drawn model and cases, so a draw costs the student's calls
    assert_mistake(check_greedy_decode, fn, mistake, *words, repeat=STABLE, shared_sweep=True)


def test_greedy_decode_no_projection_named_when_its_tokens_equal_a_mistakes():
    # seed 1184183166: the argmax over D features gave eos_id at once in every row, exactly the tokens of
    # decoding without src_mask (CI's random draw found it); the watch that saw no projection decides
    assert_mistake(check_greedy_decode, make_greedy("no projection"), "missing output projection",
                   "model.output_projection never did", repeat=(1184183166,))


@pytest.mark.parametrize("bug", ["row 0 stop", "first eos"])
def test_greedy_decode_early_stop_not_taken_for_max_len_minus_one(bug):
    # seed 3280387012 put a row ending at step max_len - 1 in the batch where one never ends: stopping there
    # gave max_len columns, as decoding max_len - 1 steps does; no such row is chosen now
    assert_mistake(check_greedy_decode, make_greedy(bug), "stops at the first eos", "finished.all()",
                   repeat=(3280387012, 3668876855))


@pytest.mark.parametrize(
    "fn, mistake, words",
    [
        (make_greedy("no src mask"), "src_mask not used", ["src_mask is not used", "model.encode"]),
        (make_greedy("no src mask in encode"), "src_mask not passed to encode", ["model.encode(src, src_mask)"]),
        (make_greedy("no src mask in decode"), "src_mask not passed to decode", ["as memory_mask"]),
        (make_greedy("mode not restored"), "mode not restored", ["in eval mode although it came in train mode"]),
        (make_greedy("train at the end"), "mode not restored", ["in train mode although it came in eval mode"]),
        (make_greedy("pad or eos"), "pad_id ignored", ["fill with pad_id"]),  # pad_id is 0 on every draw
        # trial D: right tokens, wrong cost or state, seen by hooks on the encoder and the decoder
        (make_greedy("encode every step"), "source encoded at every step", ["the encoder ran", "encoded once"]),
        (make_greedy("full forward"), "source encoded at every step", ["model(src, ys, ...)"]),
        (make_greedy("grad on"), "gradients tracked", ["gradient tracking on", "torch.no_grad()"]),
        (make_greedy("decoder eval only"), "model left in train mode", ["model.encoder", "whole model"]),
        (make_greedy("no finally"), "mode not restored", ["raises an error", "finally"]),
        # trial D: wrong tokens, named by decoding again with the mistake once the tokens differ
        (make_greedy("eos overwritten"), "eos overwritten", ["<eos> itself is replaced"]),
        (make_greedy("not cumulative"), "finished not cumulative", ["finished = finished | (next_token == eos_id)"]),
        (make_greedy("upper mask"), "upper triangle", ["causal_mask(T).T"]),
        (make_greedy("cpu tensors"), "wrong device", ["lands on the CPU", "device=src.device"]),
        (make_greedy("fill 0"), "filled with 0 when pad_id is None", ["eos_id when pad_id is None"]),
    ],
)
def test_greedy_decode_new_diagnoses_are_the_same_on_every_draw(fn, mistake, words):
    assert_mistake(check_greedy_decode, fn, mistake, *words, repeat=STABLE, shared_sweep=True)


def test_greedy_decode_stub_errors_and_weird_returns():
    def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
        # YOUR CODE HERE
        raise NotImplementedError()

    r = check_greedy_decode(greedy_decode, seed=SEEDS_FIXED[0])  # a shared draw: the catalogue's first seed
    assert not r.passed and r.status == "not implemented" and "not implemented yet" in r.feedback
    assert "`raise NotImplementedError(...)`" in r.feedback

    def crashes(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
        memory = model.encoder(src)
        return memory

    r = check_greedy_decode(crashes, seed=SEEDS_FIXED[0])
    assert not r.passed and r.status == "error" and "memory = model.encoder(src)" in r.feedback

    weird = [
        lambda *a, **k: None,
        lambda *a, **k: [[1, 2, 3]],
        lambda *a, **k: (course_utils.greedy_decode(*a, **k), None),
        lambda *a, **k: torch.zeros(2, 3),
        lambda *a, **k: 7,
        lambda *a, **k: course_utils.greedy_decode(*a, **k).numpy(),
    ]
    for fn in weird:
        r = check_greedy_decode(fn, seed=SEEDS_FIXED[0])
        assert r.passed is False and r.feedback.startswith("[X]") and "raised" not in r.feedback, r.feedback


def test_hints_registered(capsys):
    for name in ("Transformer", "make_src_mask", "make_tgt_mask", "greedy_decode"):
        assert 2 <= len(HINTS[name]) <= 4
        hint(name, 1)
        assert f"Hint 1/{len(HINTS[name])} for {name}" in capsys.readouterr().out


class NormFirstHardCoded(course_utils.Transformer):
    """Trial H: norm_first accepted but never passed on (post-norm stacks, no final norms)."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, norm_first=False):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, False)


def test_transformer_norm_first_not_passed_on_is_named():
    assert_mistake(check_transformer, NormFirstHardCoded, "norm_first not passed on", "norm_first=norm_first")


def _src_mask_from_lengths(src, pad_id):
    """Trial I: padding read from the lengths, right only when it is at the end."""
    n_real = (src != pad_id).sum(1, keepdim=True)  # (B, 1)
    return (torch.arange(src.size(1), device=src.device) < n_real).unsqueeze(1)  # (B, 1, L)


def _tgt_mask_from_lengths(tgt, pad_id):
    L = tgt.size(1)
    return _src_mask_from_lengths(tgt, pad_id) & course_utils.causal_mask(L, device=tgt.device)


@pytest.mark.parametrize("check, fn", [(check_make_src_mask, _src_mask_from_lengths),
                                       (check_make_tgt_mask, _tgt_mask_from_lengths)])
def test_masks_from_lengths_are_named(check, fn):
    assert_mistake(check, fn, "assumed trailing padding", "padding at the start", "tokens != pad_id")


def tgt_mask_folded(how):
    """Issue 22: one (L, L) mask, the batch's padding folded with .all(0) or .any(0)."""

    def make_tgt_mask(tgt, pad_id):
        real = getattr(tgt != pad_id, how)(0)  # (L,)
        return course_utils.causal_mask(tgt.size(1)) & real[None, :]  # (L, L)

    return make_tgt_mask


@pytest.mark.parametrize("how", ["all", "any"])
def test_tgt_mask_folded_over_the_batch_is_named_on_20_seeds(how):
    assert_mistake(check_make_tgt_mask, tgt_mask_folded(how), "padding folded over the batch", "has shape (",
                   f".{how}(0)", "expected (B, L, L)", repeat=STABLE)
