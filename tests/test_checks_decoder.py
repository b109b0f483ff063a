"""Tests for the notebook 05 checkers (course_utils/checks/decoder.py).

Every catalogued mistake is written as a small, real student implementation (most
subclass the reference and override ``forward``); the checker must fail it, say why in
plain words and name the mistake. Correct implementations written in other ways must
pass. Each verdict is repeated on fresh random inputs.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from checker_asserts import assert_family, assert_mistake, assert_passes, hand_dropout
from torch import nn

import course_utils
from course_utils import FeedForward, MultiHeadAttention
from course_utils.checks import check_decoder, check_decoder_layer, hint
from course_utils.checks import decoder as decoder_checks
from course_utils.checks._blocks import catalogue, run_block
from course_utils.checks._core import HINTS


# ---------------------------------------------------------------- DecoderLayer: correct variants
class Residual(nn.Module):
    """Helper sub-layer wrapper: holds a reference to the layer's own norm."""

    def __init__(self, norm, dropout, norm_first):
        super().__init__()
        self.norm = norm
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class HelperLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.sublayers = nn.ModuleList(Residual(n, dropout, norm_first) for n in (self.norm1, self.norm2, self.norm3))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        return self.sublayers[2](x, self.feed_forward)


class LoopLayer(nn.Module):
    """Functional dropout with the training flag, sub-layers in a loop, keyword calls."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.p, self.norm_first = dropout, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = course_utils.LayerNorm(d_model)
        self.norm2 = course_utils.LayerNorm(d_model)
        self.norm3 = course_utils.LayerNorm(d_model)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda y: self.self_attn(query=y, key=y, value=y, mask=tgt_mask)[0]),
            (self.norm2, lambda y: self.cross_attn(query=y, key=memory, value=memory, mask=memory_mask)[0]),
            (self.norm3, self.feed_forward),
        ]
        for norm, f in steps:
            if self.norm_first:
                x = x + F.dropout(f(norm(x)), self.p, self.training)
            else:
                x = norm(x + F.dropout(f(x), self.p, self.training))
        return x


class HandDropoutLayer(LoopLayer):
    """LoopLayer with a hand-written dropout, mask * x / (1 - p)."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0]),
            (self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0]),
            (self.norm3, self.feed_forward),
        ]
        for norm, f in steps:
            if self.norm_first:
                x = x + hand_dropout(f(norm(x)), self.p, self.training)
            else:
                x = norm(x + hand_dropout(f(x), self.p, self.training))
        return x


@pytest.mark.parametrize("cls", [course_utils.DecoderLayer, HelperLayer, LoopLayer, HandDropoutLayer])
def test_decoder_layer_correct_variants_pass(cls):
    assert_passes(check_decoder_layer, cls)


# ---------------------------------------------------------------- DecoderLayer: mistakes
class Layer(course_utils.DecoderLayer):
    """The reference with a readable three-step forward that mistakes override."""

    def step(self, x, norm, f):
        if self.norm_first:
            return x + f(norm(x))
        return norm(x + f(x))


def cross_attn_from(pick):
    """A layer whose cross-attention reads ``pick(y, memory)`` as (query, key, value), ``y`` the stream."""

    class CrossFrom(Layer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
            x = self.step(x, self.norm2, lambda y: self.cross_attn(*pick(y, memory), memory_mask)[0])
            return self.step(x, self.norm3, self.feed_forward)

    return CrossFrom


QueriesFromMemory = cross_attn_from(lambda y, m: (m, y, y))
IgnoresMemory = cross_attn_from(lambda y, m: (y, y, y))
ValueFromXG = cross_attn_from(lambda y, m: (y, m, y))  # trial G: raised with L_src != L_tgt, was not named
KeyFromX = cross_attn_from(lambda y, m: (y, y, m))


class NormScaledInPlace(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        with torch.no_grad():
            self.norm3.weight.mul_(2.0)
        return super().forward(x, memory, tgt_mask, memory_mask)


class MasksSwapped(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, memory_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, tgt_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class NoTgtMask(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class NoMemoryMask(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory)[0])
        return self.step(x, self.norm3, self.feed_forward)


class NoResidual(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            x = self.self_attn(*[self.norm1(x)] * 3, tgt_mask)[0]
            x = self.cross_attn(self.norm2(x), memory, memory, memory_mask)[0]
            return self.feed_forward(self.norm3(x))
        x = self.norm1(self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.norm3(self.feed_forward(x))


class NoResidualAroundFF(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        return self.feed_forward(self.norm3(x)) if self.norm_first else self.norm3(self.feed_forward(x))


class AlwaysPostNorm(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.norm3(x + self.feed_forward(x))


class CrossFirst(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class FFOnLayerInput(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x0 = x
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        if self.norm_first:
            return x + self.feed_forward(self.norm3(x0))
        return self.norm3(x + self.feed_forward(x0))


class FFNotNormalised(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        if self.norm_first:
            return x + self.feed_forward(x)
        return self.norm3(x + self.feed_forward(x))


class NormsMixedUp(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm2, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm1, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class MemoryNormalised(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        x = x + self.self_attn(*[self.norm1(x)] * 3, tgt_mask)[0]
        m = self.norm2(memory)
        x = x + self.cross_attn(self.norm2(x), m, m, memory_mask)[0]
        return x + self.feed_forward(self.norm3(x))


class MemoryDetached(Layer):
    """Right values, but the encoder would never learn from the decoder's loss."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        m = memory.detach()
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, m, m, memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class CrossAttentionNoGrad(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        with torch.no_grad():
            h = self.norm2(x) if self.norm_first else x
            c = self.cross_attn(h, memory, memory, memory_mask)[0]
        x = x + c if self.norm_first else self.norm2(x + c)
        return self.step(x, self.norm3, self.feed_forward)


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (MemoryDetached, "gradient blocked", ["no gradient reaches `memory`"]),
        (CrossAttentionNoGrad, "gradient blocked", ["`cross_attn.w_q.weight`", "torch.no_grad()"]),
        (QueriesFromMemory, "cross-attention queries from memory", ["queries from `memory`", "L_src == L_tgt"]),
        (IgnoresMemory, "cross-attention ignores memory", ["never looks at `memory`"]),
        (ValueFromXG, "cross-attention value from x", ["values from `x`", "L_src == L_tgt",
                                                       "cross_attn(x, memory, memory, memory_mask)"]),
        (KeyFromX, "cross-attention key from x", ["keys from `x`", "L_src == L_tgt"]),
        (NormScaledInPlace, "parameters modified in place", ["changed `norm3.weight` in place"]),
        (MasksSwapped, "masks swapped", ["swapped", "L_src == L_tgt"]),
        (NoTgtMask, "tgt_mask not passed", ["sees the future"]),
        (NoMemoryMask, "memory_mask not passed", ["ignores memory_mask"]),
        (NoResidual, "missing residual", ["no residual connections"]),
        (NoResidualAroundFF, "missing residual", ["around the feed-forward"]),
        (AlwaysPostNorm, "norm_first ignored", ["norm_first=True", "post-norm"]),
        (CrossFirst, "sub-layers in wrong order", ["before the masked self-attention"]),
        (FFOnLayerInput, "feed-forward on the layer input", ["original input"]),
        (FFNotNormalised, "norm missing", ["not normalised", "norm_first=True"]),
        (NormsMixedUp, "norms swapped", ["norm2 for the masked self-attention"]),
        (MemoryNormalised, "memory normalised", ["normalise only the decoder's stream"]),
    ],
)
def test_decoder_layer_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_decoder_layer, cls, mistake, *words)


# ---------------------------------------------------------------- DecoderLayer: structure, returns, errors
class TorchAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = FeedForward(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return x


class RenamedFF(course_utils.DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.ffn = self.feed_forward
        del self.feed_forward

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return x


class ExtraScale(course_utils.DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.scale = nn.Parameter(torch.ones(1))


class SizesMixedUp(course_utils.DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.feed_forward = FeedForward(d_model, d_ff + 1)  # never the d_ff it was given


class ReturnsTuple(course_utils.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, tgt_mask, memory_mask), None


class DropoutAlways(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: F.dropout(self.self_attn(y, y, y, tgt_mask)[0], 0.1))
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class InPlace(course_utils.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        out = super().forward(x, memory, tgt_mask, memory_mask)
        x.add_(1.0)
        return out


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (TorchAttention, "PyTorch MultiheadAttention", ["`self_attn`", "from course_utils import MultiHeadAttention"]),
        (RenamedFF, "missing submodule", ["there is no submodule `feed_forward`", "ffn.linear1.weight"]),
        (ExtraScale, "unexpected parameters", ["`scale`"]),
        (SizesMixedUp, "wrong parameter shape", ["feed_forward.linear1.weight"]),
        (ReturnsTuple, "wrong return", ["one tensor", "tuple"]),
        (DropoutAlways, "dropout ignores eval mode", ["eval mode"]),
        (InPlace, "input modified in place", ["in place"]),
    ],
)
def test_decoder_layer_structure_mistakes(cls, mistake, words):
    assert_mistake(check_decoder_layer, cls, mistake, *words)


def test_decoder_layer_stubs_errors_and_weird_returns():
    # a notebook's stubs carry the exercise's own name
    class DecoderLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            raise NotImplementedError()

    stub_init = DecoderLayer

    class DecoderLayer(course_utils.DecoderLayer):  # noqa: F811 - the second stub, as in a notebook
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            # YOUR CODE HERE
            raise NotImplementedError()

    for stub in (stub_init, DecoderLayer):
        r = check_decoder_layer(stub)
        assert not r.passed and r.status == "not implemented" and "not implemented yet" in r.feedback
        assert "`raise NotImplementedError(...)`" in r.feedback
        assert r.mistake == "not implemented"

    class Crashes(course_utils.DecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            B, L = x.shape
            return x

    r = check_decoder_layer(Crashes)
    assert not r.passed and r.status == "error"
    assert "ValueError" in r.feedback and "B, L = x.shape" in r.feedback and "line" in r.feedback

    for value in (None, [1.0], 1.5, "x"):

        class Weird(course_utils.DecoderLayer):
            def forward(self, x, memory, tgt_mask=None, memory_mask=None, value=value):
                return value

        r = check_decoder_layer(Weird)
        assert r.passed is False and r.feedback.startswith("[X]"), r.feedback

    class WrongShape(course_utils.DecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            return memory

    r = check_decoder_layer(WrongShape)
    assert r.passed is False and r.mistake in ("wrong shape", "cross-attention queries from memory"), r.feedback

    r = check_decoder_layer(course_utils.DecoderLayer(12, 2, 20))
    assert not r.passed and r.mistake == "not a class" and "not an instance" in r.feedback
    r = check_decoder_layer(lambda *a, **k: None)
    assert not r.passed and r.mistake == "not a class"


# ---------------------------------------------------------------- Decoder
class CopiedLayersDecoder(nn.Module):
    """Deep copies (independent after copying), keyword calls, nn.LayerNorm as the final norm."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        layer = course_utils.DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else None
        self.norm_first = norm_first

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for i in range(len(self.layers)):
            x = self.layers[i](x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask)
        return self.norm(x) if self.norm_first else x


class StudentLayerDecoder(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(HelperLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers))  # noqa: E501


@pytest.mark.parametrize("cls", [course_utils.Decoder, CopiedLayersDecoder, StudentLayerDecoder])
def test_decoder_correct_variants_pass(cls):
    assert_passes(check_decoder, cls)


class SharedLayers(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList([course_utils.DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first)] * num_layers)  # noqa: E501


class NoFinalNorm(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.norm = None


class NormAlways(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.norm = course_utils.LayerNorm(d_model)


class MasksDropped(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory)
        return self.norm(x) if self.norm is not None else x


class DecoderMasksSwapped(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory, memory_mask, tgt_mask)
        return self.norm(x) if self.norm is not None else x


class MemoryOnlyFirst(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, memory if i == 0 else x, tgt_mask, memory_mask)
        return self.norm(x) if self.norm is not None else x


class FirstLayerOnly(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for _ in self.layers:
            x = self.layers[0](x, memory, tgt_mask, memory_mask)
        return self.norm(x) if self.norm is not None else x


class Unchained(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            out = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(out) if self.norm is not None else out


class DecoderMemoryDetached(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory.detach(), tgt_mask, memory_mask)
        return self.norm(x) if self.norm is not None else x


class OneLayerShort(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers - 1, d_model, num_heads, d_ff, dropout, norm_first)


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (SharedLayers, "layers shared", ["share one set of weights"]),
        (NoFinalNorm, "missing final norm", ["final layer norm is missing"]),
        (NormAlways, "final norm in post-norm", ["norm_first=False"]),
        (MasksDropped, "masks not passed on", ["not passed on"]),
        (DecoderMasksSwapped, "masks swapped", ["swapped", "L_src == L_tgt"]),
        (MemoryOnlyFirst, "memory not passed to every layer", ["only the first layer sees"]),
        (FirstLayerOnly, "one layer applied repeatedly", ["num_layers times"]),
        (Unchained, "layer outputs not chained", ["only the last layer"]),
        (OneLayerShort, "wrong number of layers", ["layers"]),
        (DecoderMemoryDetached, "gradient blocked", ["no gradient reaches `memory`", ".detach()"]),
    ],
)
def test_decoder_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_decoder, cls, mistake, *words)


def test_decoder_stubs_and_weird_returns():
    class Decoder(course_utils.Decoder):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            raise NotImplementedError()

    r = check_decoder(Decoder)
    assert not r.passed and r.status == "not implemented" and "not implemented yet" in r.feedback
    assert "`raise NotImplementedError(...)`" in r.feedback

    class PlainList(nn.Module):
        def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.layers = [course_utils.DecoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers)]

    r = check_decoder(PlainList)
    assert not r.passed and r.mistake == "layers not registered" and "nn.ModuleList" in r.feedback

    for value in (None, (1, 2), 0.5):

        class Weird(course_utils.Decoder):
            def forward(self, x, memory, tgt_mask=None, memory_mask=None, value=value):
                return value

        r = check_decoder(Weird)
        assert r.passed is False and r.feedback.startswith("[X]"), r.feedback


def test_hints_registered(capsys):
    for name in ("DecoderLayer", "Decoder"):
        assert 2 <= len(HINTS[name]) <= 4
        hint(name, 1)
        assert f"Hint 1/{len(HINTS[name])} for {name}" in capsys.readouterr().out


# ---------------------------------------------------------------- issue 10: dropout, generated structure, siblings
SEEDS = 20  # every named diagnosis below must be the same on 20 fresh random draws


class FillAttention(nn.Module):
    """A student's own, correct multi-head attention: -1e9 fill, dropout on the weights."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.h, self.d_k, self.dropout = num_heads, d_model // num_heads, nn.Dropout(dropout)
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        pairs = ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        q, k, v = (w(t).view(B, -1, self.h, self.d_k).transpose(1, 2) for w, t in pairs)  # (B, H, L, d_k)
        scores = q @ k.transpose(-2, -1) / self.d_k**0.5  # (B, H, L_q, L_k)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), -1e9)
        weights = self.dropout(scores.softmax(-1))
        return self.w_o((weights @ v).transpose(1, 2).reshape(B, -1, self.h * self.d_k)), weights


class VarNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps, self.weight, self.bias = eps, nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var = torch.var(x, dim=-1, keepdim=True, unbiased=False)
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + self.eps) * self.weight + self.bias


class MethodsLayer(course_utils.DecoderLayer):
    """Sub-layer helper methods, one nn.Dropout for all three, own attention and norms."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.self_attn = FillAttention(d_model, num_heads, dropout)
        self.cross_attn = FillAttention(d_model, num_heads, dropout)
        self.norm1, self.norm2, self.norm3 = VarNorm(d_model), VarNorm(d_model), VarNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def _sa(self, y, mask):
        return self.drop(self.self_attn(y, y, y, mask)[0])

    def _ca(self, y, memory, mask):
        return self.drop(self.cross_attn(y, memory, memory, mask)[0])

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        subs = ((self.norm1, lambda y: self._sa(y, tgt_mask)), (self.norm2, lambda y: self._ca(y, memory, memory_mask)),
                (self.norm3, lambda y: self.drop(self.feed_forward(y))))
        for norm, f in subs:
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x


def test_more_correct_variants_pass():
    assert_passes(check_decoder_layer, MethodsLayer)


class DropLayer(course_utils.DecoderLayer):
    """The reference's three steps with a student's choice of sub-layer dropout ``d(i, out, x)``."""

    def d(self, i, out, x):
        return x + (self.dropout1, self.dropout2, self.dropout3)[i](out)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        fs = (lambda y: self.self_attn(y, y, y, tgt_mask)[0], lambda y: self.cross_attn(y, memory, memory, memory_mask)[0],  # noqa: E501
              self.feed_forward)
        for i, (norm, f) in enumerate(zip((self.norm1, self.norm2, self.norm3), fs)):
            x = self.d(i, f(norm(x)), x) if self.norm_first else norm(self.d(i, f(x), x))
        return x


class NoSublayerDropout(DropLayer):
    def d(self, i, out, x):
        return x + out


class DropoutOnSum(DropLayer):
    def d(self, i, out, x):
        return (self.dropout1, self.dropout2, self.dropout3)[i](x + out)


class HardCodedDropout(DropLayer):
    def d(self, i, out, x):
        return x + F.dropout(out, 0.1, self.training)


class CrossReadsLayerInput(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x0 = x
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x0, memory, memory, memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class SelfAttnReused(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.self_attn(y, memory, memory, memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class TgtMaskAsMemoryMask(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, tgt_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class NormOnBranch(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.norm1(self.self_attn(x, x, x, tgt_mask)[0])
        x = x + self.norm2(self.cross_attn(x, memory, memory, memory_mask)[0])
        return x + self.norm3(self.feed_forward(x))


class StackTgtMaskTwice(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_mask)
        return self.norm(x) if self.norm is not None else x


class OutputAsNextMemory(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = memory = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x) if self.norm is not None else x


class FinalNormUnused(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.norm_first, self.norm = norm_first, course_utils.LayerNorm(d_model)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x) if self.norm_first else x


class SequentialDecoder(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.Sequential(*self.layers)


class LayersWithoutDropout(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, 0.0, norm_first)


class LayersHardCodedDropout(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, 0.1, norm_first)


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_decoder_layer, NoSublayerDropout, "dropout missing", ["sub-layers' outputs"]),
        (check_decoder_layer, DropoutOnSum, "dropout on the residual stream", ["norm(dropout(x + sublayer(x)))"]),
        (check_decoder_layer, HardCodedDropout, "hard-coded dropout p", ["fixed p"]),
        (check_decoder_layer, CrossReadsLayerInput, "sub-layer reads the layer input", ["cross-attention reads the layer's input"]),  # noqa: E501
        (check_decoder_layer, SelfAttnReused, "module reused", ["self.self_attn", "own weights"]),
        (check_decoder_layer, TgtMaskAsMemoryMask, "masks swapped", ["the cross-attention gets tgt_mask"]),
        (check_decoder_layer, NormOnBranch, "norm on the branch", ["x + norm(sublayer(x))"]),
        (check_decoder, StackTgtMaskTwice, "masks swapped", ["tgt_mask as memory_mask"]),
        (check_decoder, OutputAsNextMemory, "memory not passed to every layer", ["previous layer's output as memory"]),
        (check_decoder, FinalNormUnused, "unused final norm", ["never used", "if norm_first else None"]),
        (check_decoder, SequentialDecoder, "wrong container", ["`layers: nn.ModuleList`"]),
        (check_decoder, LayersWithoutDropout, "dropout missing", ["pass dropout on to every DecoderLayer"]),
        (check_decoder, LayersHardCodedDropout, "hard-coded dropout p", ["fixed p"]),
    ],
)
def test_issue_mistakes_named_on_every_draw(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words, repeat=SEEDS)


# every member of the generated families, as a student layer that makes just that mistake
def generated(spec, present):
    members = enumerate(catalogue(spec, present))
    return [pytest.param(nf, name, mut, id=f"{nf}-{name}-{i}") for i, (nf, name, _, mut) in members]


def mutant(norm_first, mutation):
    """A DecoderLayer that makes ``mutation`` when built with ``norm_first`` (right otherwise)."""

    class Mutant(course_utils.DecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            m = mutation if self.norm_first == norm_first else {}
            masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask}
            return run_block(self, decoder_checks._BLOCK, x, memory, masks, self.norm_first, m, self.dropout1)

    return Mutant


@pytest.mark.parametrize("norm_first, mistake, mutation", generated(decoder_checks._BLOCK, {"tgt_mask", "memory_mask"}))
def test_every_generated_layer_mistake_is_named(norm_first, mistake, mutation):
    assert_mistake(check_decoder_layer, mutant(norm_first, mutation), mistake, f"norm_first={norm_first}", repeat=1)


@pytest.mark.parametrize("stage", ["values", "dropout"])
def test_every_generated_layer_mistake_is_named_on_every_draw(stage):
    # 19 fixed draws of the step that names each member (the members share each seed's draw); the
    # 20th, a random one, is the whole check's in the test above
    members = [
        (f"{i} {nf}-{name}", functools.partial(decoder_checks._check_layer_stage, stage=stage, norm_first=nf),
         mutant(nf, mut), name, (f"norm_first={nf}",))
        for i, (nf, name, _, mut) in enumerate(catalogue(decoder_checks._BLOCK, {"tgt_mask", "memory_mask"}))
        if ("drop" in mut) == (stage == "dropout")
    ]
    assert_family(members, sweep=False)


def test_two_dropouts_in_a_row_are_not_a_wrong_rate_on_a_rare_draw():
    # the residual stream dropped after the feed-forward's own dropout zeroes about 44% at p = 1/4;
    # this draw's 46% was named "wrong dropout rate" (a mask of the wrong polarity zeroes 75%) until the
    # rate's margin became the midpoint between p and 1 - p
    assert_mistake(check_decoder_layer, mutant(True, {"drop": {"ff": "sum"}}), "dropout on the residual stream",
                   repeat=(1070437963,))


def test_generator_without_mutation_is_the_reference():
    ref = course_utils.DecoderLayer(12, 3, 20).eval()
    x, memory = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    tgt_mask, memory_mask = torch.rand(5, 5) < 0.8, torch.rand(2, 1, 7) < 0.8
    masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask}
    for nf in (False, True):
        ref.norm_first = nf
        got = run_block(ref, decoder_checks._BLOCK, x, memory, masks, nf)
        assert torch.allclose(got, ref(x, memory, tgt_mask, memory_mask), atol=1e-6)


# ---------------------------------------------------------------- one module under two roles (trial A)
def _aliased(pairs):
    class Aliased(course_utils.DecoderLayer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for dst, src in pairs:
                setattr(self, dst, getattr(self, src))

    return Aliased


@pytest.mark.parametrize(
    "pairs, words",
    [
        ([("cross_attn", "self_attn")], ("`self_attn` and `cross_attn`", "MultiHeadAttention object")),
        ([("norm3", "norm2")], ("`norm2` and `norm3`",)),
        ([("norm2", "norm1")], ("`norm1` and `norm2`",)),
        ([("norm3", "norm1")], ("`norm1` and `norm3`",)),
    ],
)
def test_decoder_layer_roles_sharing_a_module_fail(pairs, words):
    assert_mistake(check_decoder_layer, _aliased(pairs), "modules shared", *words)


# ---------------------------------------------------------------- dropout with 0 < p < 1 (trial A)
class DLTwice(course_utils.DecoderLayer):
    """Post-norm with the cross-attention's dropout applied twice."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)[0]))
        x = self.norm2(x + self.dropout2(self.dropout2(self.cross_attn(x, memory, memory, memory_mask)[0])))
        return self.norm3(x + self.dropout3(self.feed_forward(x)))


def test_decoder_layer_dropout_applied_twice_fails():
    assert_mistake(check_decoder_layer, DLTwice, "dropout applied twice", "2 times to the cross-attention's output")


# ---------------------------------------------------------------- extra dropout inside a branch (trial C, B)
def extra_dropout(where, norm_first):
    """A DecoderLayer with the right output dropouts plus one more at ``where`` when built
    with ``norm_first``: trial C's W20 (memory as key and value), W24 (memory as key only)."""

    class ExtraDropout(course_utils.DecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            d = self.dropout1 if self.norm_first == norm_first else (lambda t: t)
            hit = {"memory": ("key", "value"), "memory key": ("key",), "query": ("query",)}[where]
            at = lambda arg, t: d(t) if arg in hit else t  # noqa: E731
            h = self.norm1(x) if self.norm_first else x
            x = x + self.dropout1(self.self_attn(h, h, h, tgt_mask)[0])
            x = x if self.norm_first else self.norm1(x)
            h = self.norm2(x) if self.norm_first else x
            c = self.cross_attn(at("query", h), at("key", memory), at("value", memory), memory_mask)[0]
            x = x + self.dropout2(c)
            x = x if self.norm_first else self.norm2(x)
            h = self.norm3(x) if self.norm_first else x
            x = x + self.dropout3(self.feed_forward(h))
            return x if self.norm_first else self.norm3(x)

    return ExtraDropout


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("where, mistake, words", [
    ("memory", "dropout on the memory", ["dropout to `memory`"]),
    ("memory key", "dropout on the memory", ["dropout to `memory`", "its key differs"]),
    ("query", "dropout on the sub-layer input", ["the query of the cross-attention"]),
])
def test_extra_dropout_inside_a_branch_is_named(where, mistake, words, norm_first):
    assert_mistake(check_decoder_layer, extra_dropout(where, norm_first), mistake, *words, repeat=1)


def test_extra_dropout_on_memory_stable_over_draws():
    assert_mistake(check_decoder_layer, extra_dropout("memory", False), "dropout on the memory", repeat=SEEDS)


# ---------------------------------------------------------------- final norm shared with a layer's norm (trial C, C)
class FinalNormShared(course_utils.Decoder):
    """Trial C's Decoder W15: self.norm = self.layers[-1].norm3 in pre-norm."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        if norm_first:
            self.norm = self.layers[-1].norm3


def test_final_norm_shared_with_a_layer_is_named():
    assert_mistake(check_decoder, FinalNormShared, "modules shared", "final norm shares", "self.layers[-1].norm3")


class RenamedMasks(course_utils.DecoderLayer):
    """Trial C's DecoderLayer W23: notebook 05 calls it with tgt_mask= and memory_mask=."""

    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return super().forward(x, memory, self_mask, cross_mask)


def test_renamed_mask_parameters_are_named():
    assert_mistake(check_decoder_layer, RenamedMasks, "parameter renamed", "no parameter named `tgt_mask`",
                   "(x, memory, self_mask, cross_mask)", "forward(self, x, memory, tgt_mask=None, memory_mask=None)")


# ---------------------------------------------------------------- vague messages named (trial C, H)
class OwnCausalWhenNone(course_utils.DecoderLayer):  # W16
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if tgt_mask is None:
            tgt_mask = course_utils.causal_mask(x.size(1))
        return super().forward(x, memory, tgt_mask, memory_mask)


class StackOwnCausal(course_utils.Decoder):  # W13
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, course_utils.causal_mask(x.size(1)), memory_mask)


class StackNormalisesMemory(course_utils.Decoder):  # W18
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        memory = self.norm(memory) if self.norm is not None else memory
        return super().forward(x, memory, tgt_mask, memory_mask)


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_decoder_layer, OwnCausalWhenNone, "own causal mask", ["with tgt_mask=None", "builds its own causal"]),
        (check_decoder, StackOwnCausal, "own causal mask", ["with tgt_mask=None your Decoder still masks the future"]),
        (check_decoder, StackNormalisesMemory, "memory normalised", ["through the decoder's final norm"]),
    ],
)
def test_vague_trial_messages_are_named(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words)  # deterministic structure: the file's fixed seeds and one fresh


# ---------------------------------------------------------------- blind trial t0405 (notebook 05)
class StackOwnCausalForGiven(course_utils.Decoder):  # a given tgt_mask replaced; None passed on
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        given = None if tgt_mask is None else course_utils.causal_mask(x.size(1))
        return super().forward(x, memory, given, memory_mask)


class BothMasksInverted(Layer):  # PyTorch's polarity (True = blocked) for both masks
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        inv = [None if m is None else ~m for m in (tgt_mask, memory_mask)]
        return super().forward(x, memory, *inv)


class CausalOnCross(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        L_tgt, L_src = x.size(1), memory.size(1)
        if memory_mask is not None:
            memory_mask = memory_mask & course_utils.causal_mask(max(L_tgt, L_src))[:L_tgt, :L_src]
        return super().forward(x, memory, tgt_mask, memory_mask)


class PreNormExtraNorm3(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        out = super().forward(x, memory, tgt_mask, memory_mask)
        return self.norm3(out) if self.norm_first else out


class OnlySelfAttention(Layer):  # a partly written layer
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])


class PostNormOnTheStream(Layer):  # post-norm branch as h = norm(x); x = h + sublayer(h)
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        h = self.norm1(x)
        x = h + self.self_attn(h, h, h, tgt_mask)[0]
        h = self.norm2(x)
        x = h + self.cross_attn(h, memory, memory, memory_mask)[0]
        h = self.norm3(x)
        return h + self.feed_forward(h)


class CrossAttentionWeights(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, memory_mask)[1])
        return self.step(x, self.norm3, self.feed_forward)


class KeyPaddingMaskKeyword(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        x = self.step(x, self.norm2, lambda y: self.cross_attn(y, memory, memory, key_padding_mask=memory_mask)[0])
        return self.step(x, self.norm3, self.feed_forward)


class StackReversed(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in reversed(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x) if self.norm is not None else x


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_decoder_layer, BothMasksInverted, "inverted mask", ["every mask is inverted", "True = may attend"]),
        (check_decoder_layer, CausalOnCross, "causal mask on the cross-attention", ["memory_mask alone"]),
        (check_decoder_layer, PreNormExtraNorm3, "extra norm at the layer end", ["norm_first=True", "norm3(x)"]),
        (check_decoder_layer, OnlySelfAttention, "sub-layer skipped",
         ["cross-attention and feed-forward results are never used"]),
        (check_decoder_layer, PostNormOnTheStream, "residual stream normalised",
         ["norm_first=False", "x = norm(x + sublayer(x))"]),
        (check_decoder_layer, CrossAttentionWeights, "attention weights used", ["`...[1]`"]),
        (check_decoder_layer, KeyPaddingMaskKeyword, "PyTorch attention keyword",
         ["`key_padding_mask=`", "forward(query, key, value, mask=None)"]),
        (check_decoder, StackReversed, "layers in reverse order", ["reversed(self.layers)"]),
        (check_decoder, StackOwnCausalForGiven, "own causal mask", ["replaces the tgt_mask it is given"]),
    ],
)
def test_trial_t0405_mistakes_named_on_20_seeds(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words, repeat=SEEDS)


class LoopOverPairs(course_utils.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        subs = [(self.norm1, lambda t: self.self_attn(t, t, t, tgt_mask)[0]),
                (self.norm2, lambda t: self.cross_attn(t, memory, memory, memory_mask)[0]), (self.norm3, self.feed_forward)]  # noqa: E501
        for norm, f in subs:
            x = x + self.dropout1(f(norm(x))) if self.norm_first else norm(x + self.dropout1(f(x)))
        return x


class KeywordCalls(course_utils.DecoderLayer):  # PyTorch style: keyword arguments
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            q = self.norm1(x)
            x = x + self.dropout1(self.self_attn(query=q, key=q, value=q, mask=tgt_mask)[0])
            q = self.norm2(x)
            x = x + self.dropout2(self.cross_attn(query=q, key=memory, value=memory, mask=memory_mask)[0])
            return x + self.dropout3(self.feed_forward(self.norm3(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(query=x, key=x, value=x, mask=tgt_mask)[0]))
        x = self.norm2(x + self.dropout2(self.cross_attn(query=x, key=memory, value=memory, mask=memory_mask)[0]))
        return self.norm3(x + self.dropout3(self.feed_forward(x)))


class StackIdentityNorm(course_utils.Decoder):  # nn.Identity in post-norm instead of None
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = functools.reduce(lambda t, layer: layer(t, memory, tgt_mask=tgt_mask, memory_mask=memory_mask), self.layers, x)  # noqa: E501
        return self.norm(x)


@pytest.mark.parametrize("check, cls", [(check_decoder_layer, LoopOverPairs), (check_decoder_layer, KeywordCalls),
                                        (check_decoder, StackIdentityNorm)])
def test_trial_t0405_correct_variants_pass(check, cls):
    assert_passes(check, cls)


# ---------------------------------------------------------------- trial r0305 (second blind trial of 03 and 05)
class CrossReadsLayerInput(Layer):  # the student's own layer: cross-attention reads x, not the stream
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = self.step(x, self.norm1, lambda y: self.self_attn(y, y, y, tgt_mask)[0])
        h = self.norm2(h + self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.step(h, self.norm3, self.feed_forward)


class OwnWrongLayerDecoder(course_utils.Decoder):  # a right stack around the student's wrong layer
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(CrossReadsLayerInput(d_model, num_heads, d_ff, dropout, norm_first)
                                    for _ in range(num_layers))


class TupleNotUnpacked(Layer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, memory, memory_mask)))
        return self.norm3(x + self.dropout3(self.feed_forward(x)))


class TorchMultiheadBoth(nn.Module):  # PyTorch habit: nn.MultiheadAttention for both attentions
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, num_heads, dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, num_heads, dropout, batch_first=True)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (course_utils.LayerNorm(d_model) for _ in range(3))
        self.dropout, self.norm_first = nn.Dropout(dropout), norm_first

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, attn_mask=None if tgt_mask is None else ~tgt_mask)[0]))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory)[0]))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class GeluFeedForward(course_utils.DecoderLayer):  # GPT habit
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation="gelu")


class TorchMultiheadDecoder(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(TorchMultiheadBoth(d_model, num_heads, d_ff, dropout, norm_first)
                                    for _ in range(num_layers))


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_decoder, OwnWrongLayerDecoder, "wrong submodule",
         ["your CrossReadsLayerInput may be the cause", "check_decoder_layer(CrossReadsLayerInput)", "`layers[0]`"]),
        (check_decoder_layer, TupleNotUnpacked, "attention output not unpacked",
         ["must be Tensor, not tuple", "(output, weights)", "[0]"]),
        (check_decoder_layer, TorchMultiheadBoth, "PyTorch MultiheadAttention",
         ["nn.MultiheadAttention", "from course_utils import MultiHeadAttention"]),
        (check_decoder, TorchMultiheadDecoder, "PyTorch MultiheadAttention",
         ["`layers.0.self_attn`", "from course_utils import MultiHeadAttention"]),
        (check_decoder_layer, GeluFeedForward, "wrong activation", ["GELU", "ReLU", "activation='gelu'"]),
    ],
)
def test_trial_r0305_mistakes_named_on_20_seeds(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words, repeat=SEEDS)


# ---------------------------------------------------------------- trial q0305 (third blind trial of 05)
class DropoutAfterLastNorm(course_utils.DecoderLayer):
    """Post-norm with the feed-forward's dropout moved after norm3: dropout(norm3(h2 + ff(h2)))."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        h1 = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)[0]))  # (B, L, D)
        h2 = self.norm2(h1 + self.dropout2(self.cross_attn(h1, memory, memory, memory_mask)[0]))  # (B, L, D)
        return self.dropout3(self.norm3(h2 + self.feed_forward(h2)))


class TgtMaskFirstLayerOnly(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask if i == 0 else None, memory_mask)
        return self.norm(x) if self.norm is not None else x


class OneLayerShort(course_utils.Decoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        del self.layers[-1]


@pytest.mark.parametrize("check, cls, mistake, words", [
    (check_decoder_layer, DropoutAfterLastNorm, "dropout after the norm", ["dropout(norm(x + sublayer(x)))",
                                                                             "norm(x + dropout(sublayer(x)))"]),
    (check_decoder, TgtMaskFirstLayerOnly, "masks not passed on", ["only the first layer gets tgt_mask"]),
], ids=["dropout(norm3(...))", "tgt_mask to layer 0 only"])
def test_trial_q0305_mistakes_named_on_20_seeds(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words, repeat=20)


def test_trial_q0305_layer_count_in_good_grammar():
    assert_mistake(check_decoder, OneLayerShort, "wrong number of layers", "in `layers`, expected", repeat=20)
    feedbacks = [check_decoder(OneLayerShort, seed=seed).feedback for seed in range(20)]
    assert not any(" 1 layers " in f for f in feedbacks), feedbacks
    assert any(" has 1 layer in " in f for f in feedbacks), feedbacks  # the singular was drawn


# ---------------------------------------------------------------- blind trial s3_05 (this session's 05 trial)
class PostNormNormalisesMemory(Layer):  # cross_attn(x, norm2(memory), norm2(memory)) in post-norm
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        m = self.norm2(memory)
        x = self.norm2(x + self.cross_attn(x, m, m, memory_mask)[0])
        return self.norm3(x + self.feed_forward(x))


class MaskParametersReordered(course_utils.DecoderLayer):  # the body right, the signature's masks swapped
    def forward(self, x, memory, memory_mask=None, tgt_mask=None):
        return super().forward(x, memory, tgt_mask, memory_mask)


class FeedForwardResidualFromH1(Layer):  # norm3(h1 + ff(h2))
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        h1 = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])  # (B, L, D)
        h2 = self.norm2(h1 + self.cross_attn(h1, memory, memory, memory_mask)[0])  # (B, L, D)
        return self.norm3(h1 + self.feed_forward(h2))


class ParallelSublayers(Layer):  # GPT-J's parallel block, pre-norm
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        h1, h2, h3 = self.norm1(x), self.norm2(x), self.norm3(x)
        return (x + self.self_attn(h1, h1, h1, tgt_mask)[0] + self.cross_attn(h2, memory, memory, memory_mask)[0]
                + self.feed_forward(h3))


class MaskHeadAxisAdded(course_utils.DecoderLayer):  # the Annotated Transformer's mask.unsqueeze(1)
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, None if tgt_mask is None else tgt_mask.unsqueeze(1),
                               None if memory_mask is None else memory_mask.unsqueeze(1))


class DecoderReturnsPair(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, tgt_mask, memory_mask), None


class FinalNormBeforeLoop(course_utils.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm is not None:
            x = self.norm(x)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x


class LayerArgumentsSwapped(course_utils.Decoder):  # DecoderLayer(d_model, d_ff, num_heads, ...)
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(1, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(course_utils.DecoderLayer(d_model, d_ff, num_heads, dropout, norm_first)
                                    for _ in range(num_layers))


@pytest.mark.parametrize("check, cls, mistake, words", [
    (check_decoder_layer, PostNormNormalisesMemory, "memory normalised",
     ["in post-norm", "x = norm2(x + cross_attn(x, memory, memory, memory_mask))"]),
    (check_decoder_layer, MaskParametersReordered, "parameters in wrong order",
     ["(x, memory, memory_mask, tgt_mask)", "forward(self, x, memory, tgt_mask=None, memory_mask=None)"]),
    (check_decoder_layer, FeedForwardResidualFromH1, "residual from an earlier sub-layer",
     ["the feed-forward adds its result to the stream after the masked self-attention"]),
    (check_decoder_layer, ParallelSublayers, "sub-layers in parallel", ["GPT-J", "one after the other"]),
    (check_decoder_layer, MaskHeadAxisAdded, "mask head axis added", ["adds the head axis itself", ".unsqueeze(1)"]),
    (check_decoder, DecoderReturnsPair, "wrong return", ["return the last layer's output alone", "no pair to keep"]),
    (check_decoder, FinalNormBeforeLoop, "final norm before the layers", ["before the loop", "after the last layer"]),
    (check_decoder, LayerArgumentsSwapped, "layer arguments swapped",
     ["passes d_ff where num_heads goes", "DecoderLayer(d_model=d_model, num_heads=num_heads"]),
], ids=["post-norm memory normed", "forward(x, memory, memory_mask, tgt_mask)", "norm3(h1 + ff(h2))",
        "parallel sub-layers", "mask.unsqueeze(1)", "Decoder returns (x, None)", "final norm before the loop",
        "DecoderLayer(d_model, d_ff, num_heads)"])
def test_trial_s3_05_mistakes_named_on_20_seeds(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words, repeat=SEEDS)


def test_trial_s3_05_pre_norm_memory_advice_stays_pre_norm():
    assert_mistake(check_decoder_layer, StackNormalisesMemoryLayer, "memory normalised",
                   "cross_attn(norm2(x), memory, memory, memory_mask)", repeat=SEEDS)


class StackNormalisesMemoryLayer(Layer):  # pre-norm: cross_attn(norm2(x), norm2(memory), norm2(memory))
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, tgt_mask)[0]
        h, m = self.norm2(x), self.norm2(memory)
        x = x + self.cross_attn(h, m, m, memory_mask)[0]
        return x + self.feed_forward(self.norm3(x))


class TrialLoopLayer(nn.Module):  # the tester's correct variant: (sub-layer, norm) pairs in a loop of lambdas
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (course_utils.LayerNorm(d_model) for _ in range(3))
        self.drop, self.norm_first = nn.Dropout(dropout), norm_first

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        subs = [(lambda h: self.self_attn(h, h, h, tgt_mask)[0], self.norm1),
                (lambda h: self.cross_attn(h, memory, memory, memory_mask)[0], self.norm2),
                (self.feed_forward, self.norm3)]
        for f, norm in subs:
            x = x + self.drop(f(norm(x))) if self.norm_first else norm(x + self.drop(f(x)))
        return x


class TrialTorchNormsLayer(course_utils.DecoderLayer):  # nn.LayerNorm in place of the course's
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))


class TrialTruthyNormDecoder(course_utils.Decoder):  # `if self.norm:` and the final norm copied into x
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        if self.norm:
            x.copy_(self.norm(x))
        return x


@pytest.mark.parametrize("check, cls", [(check_decoder_layer, TrialLoopLayer), (check_decoder_layer, TrialTorchNormsLayer),  # noqa: E501
                                        (check_decoder, TrialTruthyNormDecoder)])
def test_trial_s3_05_correct_variants_pass(check, cls):
    assert_passes(check, cls)
