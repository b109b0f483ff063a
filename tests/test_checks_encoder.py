"""Tests for the notebook 04 checkers (course_utils/checks/encoder.py).

Every catalogued mistake is written as a small, real student class (often a subclass of
the reference that overrides ``forward`` the way a student would get it wrong); the
checker must fail it, say why in plain words and name the mistake. Correct classes
written in other ways must pass. Each verdict is repeated on fresh random sizes,
inputs and parameters, so randomness cannot flip it.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from checker_asserts import assert_family, assert_mistake, assert_not_implemented, assert_passes, hand_dropout
from torch import nn

from course_utils import (
    Encoder,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    MultiHeadAttention,
)
from course_utils.checks import (
    check_encoder,
    check_encoder_layer,
    check_feed_forward,
    check_layer_norm,
    hint,
)
from course_utils.checks import encoder as encoder_checks
from course_utils.checks._blocks import catalogue, run_block
from course_utils.checks._core import HINTS


# ================================================================ LayerNorm
class LNBase(nn.Module):
    """What every student LayerNorm below shares: the parameters and eps."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))


class LNVarMean(LNBase):
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNTwoPass(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / (var + self.eps).sqrt() + self.bias


class LNRsqrt(LNBase):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        centred = x - mean
        return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


class LNFunctional(LNBase):
    def forward(self, x):
        return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)


class LNTorch(nn.LayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps=eps)


class LNFlatten(LNBase):
    """Correct on any rank: rows flattened to (N, D), normalised, shaped back."""

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])  # (N, D)
        mean = rows.mean(1, keepdim=True)
        var = rows.var(1, keepdim=True, unbiased=False)
        return ((rows - mean) / (var + self.eps).sqrt()).reshape(x.shape) * self.weight + self.bias


class LNInPlaceAffine(LNBase):
    """In place on its own fresh tensors (autograd allows it): correct."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        y = x - mean
        y = y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        y = y * self.weight
        y += self.bias
        return y


class LNBufferEps(LNBase):
    """eps as a non-persistent buffer, a factory given device=: both follow the input's device."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.register_buffer("eps_t", torch.tensor(eps), persistent=False)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True) + torch.zeros(1, device=x.device, dtype=x.dtype)
        return self.weight.to(x.device) * (x - mean) / (var + self.eps_t).sqrt() + self.bias


@pytest.mark.parametrize("cls", [LayerNorm, LNVarMean, LNTwoPass, LNRsqrt, LNFlatten, LNInPlaceAffine, LNBufferEps])
def test_layer_norm_correct_variants_pass(cls):
    assert_passes(check_layer_norm, cls)


class LNUnbiased(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) * self.weight + self.bias


class LNTorchStd(LNBase):  # the Annotated Transformer's version
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class LNEpsOutside(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.var(-1, keepdim=True, unbiased=False).sqrt()
        return (x - mean) / (std + self.eps) * self.weight + self.bias


class LNBatchAxis(LNBase):
    def forward(self, x):
        mean = x.mean(0, keepdim=True)
        var = x.var(0, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNPositionAxis(LNBase):
    def forward(self, x):
        mean = x.mean(-2, keepdim=True)
        var = x.var(-2, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNNoAffine(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)


class LNNoShift(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps) * self.weight


class LNNoParameters(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)


class LNSwapped(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps) * self.bias + self.weight


class LNNotCentred(LNBase):
    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        return x / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNRms(LNBase):
    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


class LNEpsIgnored(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5) * self.weight + self.bias


class LNDefaultEps(LNVarMean):
    def __init__(self, d_model, eps=1e-6):
        super().__init__(d_model, eps)


class LNGammaBeta(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return F.layer_norm(x, (x.size(-1),), self.gamma, self.beta, self.eps)


class LNPlainTensors(LNVarMean):
    def __init__(self, d_model, eps=1e-5):
        nn.Module.__init__(self)
        self.eps = eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)


class LNRandomInit(LNVarMean):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.weight = nn.Parameter(torch.randn(d_model))


class LNWrongShape(LNVarMean):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.weight = nn.Parameter(torch.ones(1, 1, d_model))


class LNTorchLayerNorm(LNBase):
    def forward(self, x):
        return torch.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)


class LNSquareMinusMean(LNBase):
    def forward(self, x):
        m = x.mean(-1, keepdim=True)
        v = (x * x).mean(-1, keepdim=True) - m * m
        return (x - m) / torch.sqrt(v + self.eps) * self.weight + self.bias


class LNAxis2(LNBase):
    def forward(self, x):
        mean = x.mean(2, keepdim=True)
        var = x.var(2, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNAxis2Wrapped(LNBase):
    """Axis 2 counted from the front, but 2-D input promoted to 3-D first: wrong on 4-D only."""

    def forward(self, x):
        y = x.unsqueeze(0) if x.dim() == 2 else x
        mean = y.mean(2, keepdim=True)
        var = y.var(2, keepdim=True, unbiased=False)
        y = (y - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
        return y.squeeze(0) if x.dim() == 2 else y


class LNInPlace(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        x -= mean
        return x / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNDetachedParameters(LNVarMean):
    """Trial B: right values, but weight and bias never learn."""

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight.detach() + self.bias.detach()


class LNDataParameters(LNVarMean):
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight.data + self.bias


class LNFrozenBias(LNVarMean):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.bias.requires_grad_(False)


class LNStatisticsNoGrad(LNVarMean):
    """Mean and variance computed as constants: the input gets only part of its gradient."""

    def forward(self, x):
        with torch.no_grad():
            var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNWeightOnCpu(LNTwoPass):  # trial I: right values on the CPU, a CPU tensor on a GPU
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight.cpu() * (x - mean) / (var + self.eps).sqrt() + self.bias


class LNRunningMean(LNTwoPass):  # trial I: a buffer updated at every call
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.register_buffer("running_mean", torch.zeros(d_model))

    def forward(self, x):
        with torch.no_grad():
            self.running_mean.mul_(0.9).add_(0.1 * x.mean(dim=tuple(range(x.dim() - 1))))
        return super().forward(x)


@pytest.mark.parametrize("cls, mistake, words", [
    (LNWeightOnCpu, "wrong device", [".cpu()", "eps="]),
    (LNRunningMean, "parameters modified in place", ["`running_mean` in place"]),
])
def test_layer_norm_device_and_state_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_layer_norm, cls, mistake, *words)


class FFWeightDecayedInForward(FeedForward):  # every encoder forward is state-checked (FeedForward the cheapest)
    def forward(self, x):
        with torch.no_grad():
            self.linear2.weight.mul_(0.999)
        return super().forward(x)


def test_feed_forward_changing_its_weights_is_named():
    assert_mistake(check_feed_forward, FFWeightDecayedInForward, "parameters modified in place", "`linear2.weight` in place")  # noqa: E501


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (LNDetachedParameters, "gradient blocked", ["no gradient reaches `weight` and `bias`", ".detach()"]),
        (LNDataParameters, "gradient blocked", ["no gradient reaches `weight`", ".data"]),
        (LNStatisticsNoGrad, "gradient differs", ["gradient of `x`", "a norm's statistics"]),
        (LNFrozenBias, "gradient blocked", ["no gradient reaches `bias`", "requires_grad=False"]),
        (LNUnbiased, "unbiased variance", ["unbiased variance", "D - 1"]),
        (LNTorchStd, "unbiased variance", ["torch.std is unbiased", "inside the square root"]),
        (LNEpsOutside, "eps outside the square root", ["sqrt(var + eps)"]),
        (LNBatchAxis, "wrong axis", ["batch axis", "dim=-1"]),
        (LNPositionAxis, "wrong axis", ["position axis", "dim=-1"]),
        (LNNoAffine, "no learnable scale and shift", ["never scaled and shifted", "self.weight"]),
        (LNNoShift, "no learnable scale and shift", ["self.bias is never added"]),
        (LNNoParameters, "no learnable scale and shift", ["no learnable parameters", "nn.Parameter"]),
        (LNSwapped, "weight and bias swapped", ["swapped"]),
        (LNNotCentred, "mean not subtracted", ["mean is never subtracted"]),
        (LNRms, "mean not subtracted", ["RMSNorm"]),
        (LNEpsIgnored, "eps ignored", ["self.eps = eps"]),
        (LNDefaultEps, "wrong default eps", ["1e-06", "eps=1e-5"]),
        (LNGammaBeta, "missing parameter", ["weight and bias", "`gamma`"]),
        (LNPlainTensors, "not a parameter", ["plain tensor", "nn.Parameter"]),
        (LNRandomInit, "wrong initial values", ["ones", "zeros"]),
        (LNWrongShape, "wrong parameter shape", ["(1, 1,"]),
        (LNInPlace, "input modified in place", ["in place"]),
        # trial A: the exercise says "don't call nn.LayerNorm or F.layer_norm"
        (LNFunctional, "forbidden call", ["calls torch's layer_norm", "write it yourself"]),
        (LNTorch, "forbidden call", ["calls torch's layer_norm"]),
        (LNTorchLayerNorm, "forbidden call", ["calls torch's layer_norm"]),
        # trial A: var = E[x^2] - E[x]^2 (right on mild rows), and axis 2 instead of -1 (right on 3-D input)
        (LNSquareMinusMean, "unstable variance", ["mean about 3000", "E[x^2] - E[x]^2", "Subtract the mean first"]),
        (LNAxis2, "fixed axis", ["works on 3-D input but raised IndexError", "dim=-1"]),
        (LNAxis2Wrapped, "fixed axis", ["(2, 2,", "normalised over a fixed axis", "dim=-1"]),
    ],
)
def test_layer_norm_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_layer_norm, cls, mistake, *words)


# ================================================================ FeedForward
class FFSequential(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), nn.Dropout(dropout), self.linear2)

    def forward(self, x):
        return self.net(x)


class FFFunctional(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = F.dropout(F.relu(self.linear1(x)), self.p, training=self.training)
        return self.linear2(h)


class FFClamp(FFFunctional):
    def forward(self, x):
        return self.linear2(F.dropout(self.linear1(x).clamp(min=0), self.p, self.training))


class FFHandDropout(FFFunctional):
    def forward(self, x):
        return self.linear2(hand_dropout(F.relu(self.linear1(x)), self.p, self.training))


class FFInPlaceReLU(FFFunctional):
    def forward(self, x):
        return self.linear2(F.dropout(F.relu(self.linear1(x), inplace=True), self.p, self.training))


@pytest.mark.parametrize("cls", [FeedForward, FFSequential, FFFunctional, FFClamp, FFHandDropout, FFInPlaceReLU])
def test_feed_forward_correct_variants_pass(cls):
    assert_passes(check_feed_forward, cls)


class FFNoActivation(FeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x)))


class FFActivationLast(FeedForward):
    def forward(self, x):
        return torch.relu(self.linear2(self.dropout(self.linear1(x))))


class FFActivationTwice(FeedForward):
    def forward(self, x):
        return torch.relu(self.linear2(self.dropout(torch.relu(self.linear1(x)))))


class FFGelu(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.activation = nn.GELU()


class FFSilu(FeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(F.silu(self.linear1(x))))


class FFNoDropout(FeedForward):
    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class FFDropoutAlwaysOn(FFFunctional):
    def forward(self, x):
        return self.linear2(F.dropout(F.relu(self.linear1(x)), self.p))


class FFDropoutOnOutput(FeedForward):
    def forward(self, x):
        return self.dropout(self.linear2(torch.relu(self.linear1(x))))


class FFOtherNames(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class FFHiddenDetached(FeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x)).detach()))


class FFFirstLayerNoGrad(FeedForward):
    def forward(self, x):
        with torch.no_grad():
            h = torch.relu(self.linear1(x))
        return self.linear2(self.dropout(h))


class FFNotWidened(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.linear1 = nn.Linear(d_model, d_model)
        self.linear2 = nn.Linear(d_model, d_model)


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (FFNoActivation, "activation missing", ["no activation", "ReLU"]),
        (FFActivationLast, "activation after the second linear layer", ["after linear2"]),
        (FFActivationTwice, "activation after the second linear layer", ["again after linear2"]),
        (FFGelu, "wrong activation", ["GELU", "the paper", "ReLU"]),
        (FFSilu, "wrong activation", ["SiLU", "ReLU"]),
        (FFNoDropout, "dropout missing", ["no dropout is applied", "nn.Dropout"]),
        (FFDropoutAlwaysOn, "dropout ignores eval mode", ["eval mode", "training=self.training"]),
        (FFDropoutOnOutput, "dropout in the wrong place", ["hidden activations"]),
        (FFOtherNames, "missing submodule", ["linear1, linear2", "`fc1`"]),
        (FFNotWidened, "wrong submodule", ["nn.Linear(d_model, d_ff)"]),
        (FFHiddenDetached, "gradient blocked", ["no gradient reaches `x`, `linear1.weight` and `linear1.bias`"]),
        (FFFirstLayerNoGrad, "gradient blocked", ["`linear1.weight`", "torch.no_grad()"]),
    ],
)
def test_feed_forward_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_feed_forward, cls, mistake, *words)


# ================================================================ EncoderLayer
def attend(layer, h, mask):
    return layer.self_attn(h, h, h, mask)[0]


class SublayerConnection(nn.Module):
    """The residual-and-norm wrapper, holding the layer's own norm (shared, not copied)."""

    def __init__(self, norm, dropout, norm_first):
        super().__init__()
        self.norm, self.dropout, self.norm_first = norm, nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class LayerWithHelper(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FFSequential(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = LNVarMean(d_model)
        self.sub1 = SublayerConnection(self.norm1, dropout, norm_first)
        self.sub2 = SublayerConnection(self.norm2, dropout, norm_first)

    def forward(self, x, mask=None):
        x = self.sub1(x, lambda h: self.self_attn(h, h, h, mask)[0])
        return self.sub2(x, self.feed_forward)


class LayerFunctionalDropout(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.p, self.norm_first = dropout, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)

    def drop(self, h):
        return F.dropout(h, self.p, training=self.training)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.drop(attend(self, self.norm1(x), mask))
            return x + self.drop(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.drop(attend(self, x, mask)))
        return self.norm2(x + self.drop(self.feed_forward(x)))


class EinsumAttention(nn.Module):
    """A student's own, correct multi-head attention (einsum, -1e9 fill)."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.h, self.d_k, self.dropout = num_heads, d_model // num_heads, nn.Dropout(dropout)
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        q, k, v = (w(t).view(B, -1, self.h, self.d_k) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))  # noqa: E501
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.d_k**0.5
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        weights = self.dropout(scores.softmax(-1))
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, -1, self.h * self.d_k)
        return self.w_o(out), weights


class LayerOwnAttention(LayerFunctionalDropout):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.self_attn = EinsumAttention(d_model, num_heads, dropout)


class LayerHandDropout(LayerFunctionalDropout):
    """Hand-written dropout everywhere (sub-layer outputs, feed-forward), guarded or not."""

    guard = False

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.feed_forward = FFHandDropout(d_model, d_ff, dropout)

    def drop(self, h):
        return hand_dropout(h, self.p, self.training, self.guard)


class LayerHandDropoutGuarded(LayerHandDropout):
    guard = True


@pytest.mark.parametrize(
    "cls", [EncoderLayer, LayerWithHelper, LayerFunctionalDropout, LayerOwnAttention, LayerHandDropout, LayerHandDropoutGuarded]  # noqa: E501
)
def test_encoder_layer_correct_variants_pass(cls):
    assert_passes(check_encoder_layer, cls)


class Layer(EncoderLayer):
    """Base of the mistaken layers: ``post`` and ``pre`` are the two branches."""

    def forward(self, x, mask=None):
        return self.pre(x, mask) if self.norm_first else self.post(x, mask)

    def post(self, x, mask):
        x = self.norm1(x + self.dropout1(attend(self, x, mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))

    def pre(self, x, mask):
        x = x + self.dropout1(attend(self, self.norm1(x), mask))
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


class NoAttentionResidual(Layer):
    def post(self, x, mask):
        x = self.norm1(attend(self, x, mask))
        return self.norm2(x + self.feed_forward(x))

    def pre(self, x, mask):
        x = attend(self, self.norm1(x), mask)
        return x + self.feed_forward(self.norm2(x))


class NoFeedForwardResidual(Layer):
    def post(self, x, mask):
        x = self.norm1(x + attend(self, x, mask))
        return self.norm2(self.feed_forward(x))


class NoResidualsPreNorm(Layer):
    def pre(self, x, mask):
        x = attend(self, self.norm1(x), mask)
        return self.feed_forward(self.norm2(x))


class AlwaysPostNorm(Layer):
    def forward(self, x, mask=None):
        return self.post(x, mask)


class AlwaysPreNorm(Layer):
    def forward(self, x, mask=None):
        return self.pre(x, mask)


class NormalisedStream(Layer):
    def pre(self, x, mask):
        x = self.norm1(x)
        x = x + attend(self, x, mask)
        x = self.norm2(x)
        return x + self.feed_forward(x)


class MaskDropped(Layer):
    def forward(self, x, mask=None):
        return super().forward(x, None)


class FeedForwardOnInput(Layer):
    def post(self, x, mask):
        a = self.norm1(x + attend(self, x, mask))
        return self.norm2(a + self.feed_forward(x))


class AttentionDiscarded(Layer):
    def pre(self, x, mask):
        _ = x + attend(self, self.norm1(x), mask)
        return x + self.feed_forward(self.norm2(x))


class ResidualFromInput(Layer):
    def post(self, x, mask):
        a = self.norm1(x + attend(self, x, mask))
        return self.norm2(x + self.feed_forward(a))


class FeedForwardFirst(Layer):
    def post(self, x, mask):
        x = self.norm1(x + self.feed_forward(x))
        return self.norm2(x + attend(self, x, mask))

    def pre(self, x, mask):
        x = x + self.feed_forward(self.norm1(x))
        return x + attend(self, self.norm2(x), mask)


class NormsSwapped(Layer):
    def post(self, x, mask):
        x = self.norm2(x + attend(self, x, mask))
        return self.norm1(x + self.feed_forward(x))


class NormsSwappedPreNorm(Layer):
    def pre(self, x, mask):
        x = x + attend(self, self.norm2(x), mask)
        return x + self.feed_forward(self.norm1(x))


class OneNormTwice(Layer):
    def post(self, x, mask):
        x = self.norm1(x + attend(self, x, mask))
        return self.norm1(x + self.feed_forward(x))


class NotUnpacked(Layer):
    def post(self, x, mask):
        x = self.norm1(x + self.self_attn(x, x, x, mask))
        return self.norm2(x + self.feed_forward(x))


class AddsInPlace(Layer):
    def pre(self, x, mask):
        x += attend(self, self.norm1(x), mask)
        return x + self.feed_forward(self.norm2(x))


class LayerOwnNames(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = LayerNorm(d_model), LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = self.ln1(x + self.attn(x, x, x, mask)[0])
        return self.ln2(x + self.ff(x))


class TorchAttentionLayer(Layer):
    """nn.MultiheadAttention: other parameter names (and the opposite mask polarity)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.self_attn = nn.MultiheadAttention(d_model, num_heads, dropout, batch_first=True)


class LayerWithUnbiasedNorms(Layer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.norm1, self.norm2 = LNUnbiased(d_model), LNUnbiased(d_model)


class LayerOneHead(LayerFunctionalDropout):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, 1, dropout)


class LayerNoDropout(LayerFunctionalDropout):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, 0.0, norm_first)


class LayerDropoutAlwaysOn(LayerFunctionalDropout):
    def drop(self, h):
        return F.dropout(h, self.p)


class AttentionNoGrad(Layer):
    """Trial B: the attention under torch.no_grad(); w_q, w_k, w_v, w_o never learn."""

    def post(self, x, mask):
        with torch.no_grad():
            a = attend(self, x, mask)
        x = self.norm1(x + self.dropout1(a))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))

    def pre(self, x, mask):
        with torch.no_grad():
            a = attend(self, self.norm1(x), mask)
        x = x + self.dropout1(a)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


class ResidualDetached(Layer):
    """A detached residual: the input still gets a gradient, through the sub-layer only."""

    def post(self, x, mask):
        x = self.norm1(x.detach() + self.dropout1(attend(self, x, mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))

    def pre(self, x, mask):
        x = x.detach() + self.dropout1(attend(self, self.norm1(x), mask))
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (AttentionNoGrad, "gradient blocked", ["no gradient reaches `self_attn.w_q.weight`", "torch.no_grad()"]),
        (ResidualDetached, "gradient differs", ["gradient of `x`", "a residual"]),
        (NoAttentionResidual, "missing residual", ["attention sub-layer has no residual"]),
        (NoFeedForwardResidual, "missing residual", ["feed-forward sub-layer has no residual"]),
        (NoResidualsPreNorm, "missing residual", ["neither sub-layer", "norm_first=True"]),
        (AlwaysPostNorm, "norm_first ignored", ["norm_first=True", "x + sublayer(norm(x))"]),
        (AlwaysPreNorm, "norm_first ignored", ["norm_first=False", "norm(x + sublayer(x))"]),
        (NormalisedStream, "residual stream normalised", ["residual stream", "only the sub-layer's input"]),
        (MaskDropped, "mask not passed on", ["mask has no effect", "padding mask"]),
        (FeedForwardOnInput, "feed-forward on the layer input", ["reads the layer's input"]),
        (AttentionDiscarded, "feed-forward on the layer input", ["attention result is never used"]),
        (ResidualFromInput, "residual from the layer input", ["instead of the attention block's output"]),
        (FeedForwardFirst, "sub-layers in wrong order", ["runs before self-attention"]),
        (NormsSwapped, "norms swapped", ["norm1 and norm2 are swapped", "norm_first=False"]),
        (NormsSwappedPreNorm, "norms swapped", ["norm1 and norm2 are swapped", "norm_first=True"]),
        (OneNormTwice, "same norm twice", ["same norm"]),
        (NotUnpacked, "attention output not unpacked", ["(output, weights)", "[0]"]),
        (AddsInPlace, "input modified in place", ["in place"]),
        (LayerOwnNames, "missing submodule", ["self_attn, feed_forward, norm1, norm2", "`attn`"]),
        (TorchAttentionLayer, "PyTorch MultiheadAttention", ["nn.MultiheadAttention", "from course_utils import MultiHeadAttention"]),  # noqa: E501
        (LayerWithUnbiasedNorms, "wrong submodule", ["`norm1`", "LNUnbiased", "check_layer_norm(LNUnbiased)"]),
        (LayerOneHead, "wrong submodule", ["num_heads=1", "pass num_heads on"]),
        (LayerNoDropout, "dropout missing", ["no dropout is applied"]),
        (LayerDropoutAlwaysOn, "dropout ignores eval mode", ["eval mode"]),
    ],
)
def test_encoder_layer_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_encoder_layer, cls, mistake, *words)


# ================================================================ Encoder
class EncoderDeepCopy(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        layer = EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class EncoderAppend(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(LayerWithHelper(d_model, num_heads, d_ff, dropout, norm_first))
        if norm_first:
            self.norm = LNTwoPass(d_model)

    def forward(self, x, mask=None):
        for i in range(len(self.layers)):
            x = self.layers[i](x, mask)
        return self.norm(x) if self.norm_first else x


@pytest.mark.parametrize("cls", [Encoder, EncoderDeepCopy, EncoderAppend])
def test_encoder_correct_variants_pass(cls):
    assert_passes(check_encoder, cls)


class Stack(Encoder):
    """Base of the mistaken encoders: the reference's __init__, a student's forward."""

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x) if self.norm is not None else x


class SameLayerRepeated(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first)] * num_layers)


class SharedAttention(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        for layer in self.layers:
            layer.self_attn = self.layers[0].self_attn


class PythonList(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.layers = [EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers)]
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x) if self.norm is not None else x


class SequentialLayers(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.Sequential(*self.layers)


class OneLayerShort(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers - 1, d_model, num_heads, d_ff, dropout, norm_first)


class NoFinalNormAtAll(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.norm = None


class FinalNormNotApplied(Stack):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class FinalNormAlways(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.norm = LayerNorm(d_model)


class FinalNormUnused(FinalNormAlways):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x) if self.layers[0].norm_first else x


class NormInsideLoop(Stack):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
            if self.norm is not None:
                x = self.norm(x)
        return x


class StackMaskDropped(Stack):
    def forward(self, x, mask=None):
        return super().forward(x)


class OnlyLast(Stack):
    def forward(self, x, mask=None):
        for layer in self.layers:
            out = layer(x, mask)
        return self.norm(out) if self.norm is not None else out


class OnlyFirst(Stack):
    def forward(self, x, mask=None):
        x = self.layers[0](x, mask)
        return self.norm(x) if self.norm is not None else x


class FirstRepeated(Stack):
    def forward(self, x, mask=None):
        for _ in self.layers:
            x = self.layers[0](x, mask)
        return self.norm(x) if self.norm is not None else x


class LayersUnused(Stack):
    def forward(self, x, mask=None):
        for layer in self.layers:
            layer(x, mask)
        return self.norm(x) if self.norm is not None else x


class NormFirstNotPassed(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))


class DropoutNotPassed(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, 0.0, norm_first)


class BlocksNotLayers(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.blocks = self.layers
        del self.layers


class StackDetachedBetweenLayers(Stack):
    """Trial B's class: each layer reads a detached input, so only the last layer would learn."""

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x.detach(), mask)
        return self.norm(x) if self.norm is not None else x


class StackOfBrokenLayers(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(
            NoAttentionResidual(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers)
        )


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (SameLayerRepeated, "layers shared", ["same EncoderLayer object", "share one set of weights"]),
        (SharedAttention, "layers shared", ["share a parameter", "self_attn"]),
        (PythonList, "layers not registered", ["plain Python list", "nn.ModuleList"]),
        (SequentialLayers, "wrong container", ["nn.ModuleList", "Sequential"]),
        (OneLayerShort, "wrong number of layers", ["in `layers`, expected"]),
        (NoFinalNormAtAll, "missing final norm", ["final LayerNorm", "self.norm"]),
        (FinalNormNotApplied, "missing final norm", ["final norm", "norm_first=True"]),
        (FinalNormAlways, "final norm in post-norm", ["norm_first=False"]),
        (FinalNormUnused, "unused final norm", ["never used", "if norm_first else None"]),
        (NormInsideLoop, "final norm inside the loop", ["after every layer"]),
        (StackMaskDropped, "mask not passed on", ["layer(x, mask)", "padding mask"]),
        (OnlyLast, "layer outputs not chained", ["previous one's output"]),
        (OnlyFirst, "only the first layer applied", ["loop over all"]),
        (FirstRepeated, "one layer applied repeatedly", ["first layer is applied"]),
        (LayersUnused, "layers not applied", ["never applied"]),
        (NormFirstNotPassed, "norm_first not passed on", ["pass norm_first on"]),
        (DropoutNotPassed, "dropout missing", ["pass dropout on to every EncoderLayer"]),
        (BlocksNotLayers, "missing layers", ["self.layers = nn.ModuleList"]),
        (StackOfBrokenLayers, "wrong submodule", ["`layers[0]`", "NoAttentionResidual", "check_encoder_layer"]),
        (StackDetachedBetweenLayers, "gradient blocked", ["no gradient reaches `x`, `layers.0.self_attn.w_q.weight`"]),
    ],
)
def test_encoder_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_encoder, cls, mistake, *words)


# ================================================================ stubs, errors, weird returns
CHECKS = [
    (check_layer_norm, LayerNorm),
    (check_feed_forward, FeedForward),
    (check_encoder_layer, EncoderLayer),
    (check_encoder, Encoder),
]


def raise_not_implemented(self, *args, **kwargs):
    raise NotImplementedError()


def student_class(ref, forward):
    """A class with the reference's structure (LNBase for LayerNorm) and the given forward."""
    base = LNBase if ref is LayerNorm else ref
    return type(ref.__name__, (base,), {"forward": forward})


@pytest.mark.parametrize("check, ref", CHECKS)
def test_stubs_read_not_implemented(check, ref):
    class Stub(nn.Module):  # the notebook's template: raise NotImplementedError() in __init__
        def __init__(self, *args, **kwargs):
            super().__init__()
            raise NotImplementedError()

    assert_not_implemented(check, Stub)
    assert_not_implemented(check, student_class(ref, raise_not_implemented))  # __init__ done, forward not


WEIRD = [
    lambda x: None,
    lambda x: (x, x),
    lambda x: x.numpy(),
    lambda x: x.mean(-1),
    lambda x: x[:, :1],
    lambda x: x.int(),
    lambda x: "done",
]


@pytest.mark.parametrize("check, ref", CHECKS)
@pytest.mark.parametrize("weird", WEIRD)
def test_weird_returns_fail_without_raising(check, ref, weird):
    r = check(student_class(ref, lambda self, x, *args, **kwargs: weird(x)))
    assert r.passed is False and r.status == "failed" and r.feedback.startswith("[X]"), r.feedback


@pytest.mark.parametrize("check, ref", CHECKS)
def test_student_exception_reports_type_message_and_line(check, ref):
    def forward(self, x, *args, **kwargs):
        return x @ x  # (B, L, D) @ (B, L, D) with L != D: a shape error

    r = check(student_class(ref, forward))
    assert r.passed is False and r.status == "error", r.feedback
    assert "RuntimeError" in r.feedback and "return x @ x" in r.feedback


@pytest.mark.parametrize("check, ref", CHECKS)
def test_instances_and_non_classes_are_refused_kindly(check, ref):
    r = check(LayerNorm(4))
    assert r.passed is False and r.mistake == "not a class" and "pass the class itself" in r.feedback
    r = check(lambda x: x)
    assert r.passed is False and r.mistake == "not a class"


@pytest.mark.parametrize("check, ref", CHECKS)
def test_hints_exist_and_failures_point_to_them(check, ref, capsys):
    exercise = ref.__name__
    hints = HINTS[exercise]
    assert 2 <= len(hints) <= 4
    hint(exercise, 1)
    assert f"Hint 1/{len(hints)} for {exercise}" in capsys.readouterr().out
    r = check(student_class(ref, lambda self, x, *args, **kwargs: x))  # returns its input
    assert r.passed is False and f'hint("{exercise}")' in r.feedback


def test_checkers_are_exported():
    from course_utils import checks
    from course_utils.checks import encoder

    assert set(encoder.__all__) == {"check_layer_norm", "check_feed_forward", "check_encoder_layer", "check_encoder"}
    assert set(encoder.__all__) <= set(checks.__all__)


# ================================================================ issue 10: dropout, generated structure, messages
SEEDS = 20  # every named diagnosis below must be the same on 20 fresh random draws


class FFHardCodedDropout(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(0.1)  # ignores the argument


class FFDropoutOnInput(FeedForward):
    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(self.dropout(x))))


class FFLazy(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.linear1 = nn.LazyLinear(d_ff)


class LNTorchVar(LNBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = torch.var(x, dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LayerHelperMethods(EncoderLayer):
    """Sub-layer helper methods, one nn.Dropout reused for both sub-layers, torch.var norms."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.norm1, self.norm2 = LNTorchVar(d_model), LNTorchVar(d_model)
        self.drop = nn.Dropout(dropout)

    def _sa(self, h, mask):
        return self.drop(self.self_attn(h, h, h, mask)[0])

    def _ff(self, h):
        return self.drop(self.feed_forward(h))

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, mask))
        return self.norm2(x + self._ff(x))


@pytest.mark.parametrize("check, cls", [(check_layer_norm, LNTorchVar), (check_encoder_layer, LayerHelperMethods)])
def test_more_correct_variants_pass(check, cls):
    assert_passes(check, cls)


class LayerNoSublayerDropout(Layer):  # the sub-modules drop, the sub-layer outputs do not
    def post(self, x, mask):
        x = self.norm1(x + attend(self, x, mask))
        return self.norm2(x + self.feed_forward(x))

    def pre(self, x, mask):
        x = x + attend(self, self.norm1(x), mask)
        return x + self.feed_forward(self.norm2(x))


class LayerNoFFDropout(Layer):
    def post(self, x, mask):
        x = self.norm1(x + self.dropout1(attend(self, x, mask)))
        return self.norm2(x + self.feed_forward(x))


class LayerDropoutOnSum(Layer):
    def post(self, x, mask):
        x = self.norm1(self.dropout1(x + attend(self, x, mask)))
        return self.norm2(self.dropout2(x + self.feed_forward(x)))


class LayerDropoutOnStream(Layer):
    def forward(self, x, mask=None):
        return super().forward(self.dropout1(x), mask)


class LayerDropoutOnSublayerInput(Layer):
    def pre(self, x, mask):
        x = x + attend(self, self.dropout1(self.norm1(x)), mask)
        return x + self.feed_forward(self.dropout2(self.norm2(x)))


class LayerHardCodedDropout(Layer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.dropout1, self.dropout2 = nn.Dropout(0.1), nn.Dropout(0.1)


class LayerDropoutNotPassedOn(LayerFunctionalDropout):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
        self.feed_forward = FeedForward(d_model, d_ff)


class NormOnBranch(Layer):
    def pre(self, x, mask):
        x = x + self.dropout1(self.norm1(attend(self, x, mask)))
        return x + self.dropout2(self.norm2(self.feed_forward(x)))


class StackDropoutOnInput(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        return super().forward(self.dropout(x), mask)


class StackHardCodedDropout(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, 0.1, norm_first)


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_feed_forward, FFHardCodedDropout, "hard-coded dropout p", ["fixed p", "nn.Dropout(dropout)"]),
        (check_feed_forward, FFDropoutOnInput, "dropout in the wrong place", ["input x", "hidden activations"]),
        (check_feed_forward, FFLazy, "wrong submodule", ["nn.LazyLinear", "in_features=0"]),
        (check_encoder_layer, LayerNoSublayerDropout, "dropout missing", ["sub-layers' outputs"]),
        (check_encoder_layer, LayerNoFFDropout, "dropout missing", ["the feed-forward's output"]),
        (check_encoder_layer, LayerDropoutOnSum, "dropout on the residual stream", ["norm(dropout(x + sublayer(x)))"]),
        (check_encoder_layer, LayerDropoutOnStream, "dropout on the residual stream", ["x = dropout(x)"]),
        (check_encoder_layer, LayerDropoutOnSublayerInput, "dropout on the sub-layer input", ["instead of its output"]),
        (check_encoder_layer, LayerHardCodedDropout, "hard-coded dropout p", ["fixed p"]),
        (check_encoder_layer, LayerDropoutNotPassedOn, "dropout not passed on", ["FeedForward(d_model, d_ff, dropout)"]),  # noqa: E501
        (check_encoder_layer, NormOnBranch, "norm on the branch", ["x + norm(sublayer(x))"]),
        (check_encoder, StackDropoutOnInput, "dropout on the input", ["input"]),
        (check_encoder, StackHardCodedDropout, "hard-coded dropout p", ["fixed p"]),
    ],
)
def test_issue_mistakes_named_on_every_draw(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words, repeat=SEEDS)


def test_sequential_message_gives_no_false_reason():
    r = check_encoder(SequentialLayers)
    assert r.mistake == "wrong container" and "`layers: nn.ModuleList`" in r.feedback
    assert "cannot" not in r.feedback and "Looping over an nn.Sequential would run" in r.feedback


# every member of the generated families, as a student layer that makes just that mistake
def generated(spec, present):
    members = enumerate(catalogue(spec, present))
    return [pytest.param(nf, name, mut, id=f"{nf}-{name}-{i}") for i, (nf, name, _, mut) in members]


def mutant(norm_first, mutation):
    """An EncoderLayer that makes ``mutation`` when built with ``norm_first`` (right otherwise)."""

    class Mutant(EncoderLayer):
        def forward(self, x, mask=None):
            m = mutation if self.norm_first == norm_first else {}
            return run_block(self, encoder_checks._BLOCK, x, None, {"mask": mask}, self.norm_first, m, self.dropout1)

    return Mutant


@pytest.mark.parametrize("norm_first, mistake, mutation", generated(encoder_checks._BLOCK, {"mask"}))
def test_every_generated_layer_mistake_is_named(norm_first, mistake, mutation):
    assert_mistake(check_encoder_layer, mutant(norm_first, mutation), mistake, f"norm_first={norm_first}", repeat=1)


@pytest.mark.parametrize("stage", ["values", "dropout"])
def test_every_generated_layer_mistake_is_named_on_every_draw(stage):
    # 19 fixed draws of the step that names each member (the members share each seed's draw); the
    # 20th, a random one, is the whole check's in the test above
    members = [
        (f"{i} {nf}-{name}", functools.partial(encoder_checks._check_layer_stage, stage=stage, norm_first=nf),
         mutant(nf, mut), name, (f"norm_first={nf}",))
        for i, (nf, name, _, mut) in enumerate(catalogue(encoder_checks._BLOCK, {"mask"}))
        if ("drop" in mut) == (stage == "dropout")
    ]
    assert_family(members, sweep=False)


def test_generator_without_mutation_is_the_reference():
    ref = EncoderLayer(12, 3, 20).eval()
    x, mask = torch.randn(2, 5, 12), torch.rand(2, 1, 5) < 0.8
    for nf in (False, True):
        ref.norm_first = nf
        assert torch.allclose(run_block(ref, encoder_checks._BLOCK, x, None, {"mask": mask}, nf), ref(x, mask), atol=1e-6)  # noqa: E501


# ---------------------------------------------------------------- one module under two roles (trial A)
def _aliased(base, build):
    """``base`` with ``build(self)`` run at the end of __init__ (sharing made after construction)."""

    class Aliased(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            build(self)

    return Aliased


def _share_data(a, b):
    def build(self):
        for pa, pb in zip(getattr(self, a).parameters(), getattr(self, b).parameters()):
            pb.data = pa.data

    return build


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda s: setattr(s, "norm2", s.norm1), ("`norm1` and `norm2`", "same LayerNorm object")),
        (_share_data("norm1", "norm2"), ("`norm1.weight` and `norm2.weight`", "share the same memory")),
        (lambda s: setattr(s.self_attn, "w_k", s.self_attn.w_q), ("`self_attn.w_q` and `self_attn.w_k`",)),
    ],
)
def test_encoder_layer_roles_sharing_a_module_fail(build, words):
    assert_mistake(check_encoder_layer, _aliased(EncoderLayer, build), "modules shared", *words)


def test_encoder_layer_aliases_of_one_role_pass():
    # a helper list holding the same norms, and one Dropout module reused: no role is shared
    def build(self):
        self.norms = nn.ModuleList([self.norm1, self.norm2])
        self.dropout2 = self.dropout1

    assert_passes(check_encoder_layer, _aliased(EncoderLayer, build), repeat=2)


# ---------------------------------------------------------------- dropout with 0 < p < 1 (trial A)
class FFHandDropout(FeedForward):
    """Correct: a hand-written inverted dropout, mask * h / (1 - p)."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, dropout)
        self.p = dropout

    def forward(self, x):
        h = torch.relu(self.linear1(x))
        if self.training and self.p > 0:
            h = h * 0 if self.p == 1 else (torch.rand_like(h) >= self.p) * h / (1 - self.p)
        return self.linear2(h)


class FFKeepsWithP(FFHandDropout):
    """A hand-written mask kept with probability p instead of 1 - p."""

    def forward(self, x):
        h = torch.relu(self.linear1(x))
        if self.training and self.p > 0:
            # (guarded near p = 1, like FFHandDropout: the p ~ 1 probe would see 1 / (1 - p) blow up)
            h = h * 0 if self.p > 1 - 1e-9 else (torch.rand_like(h) < self.p) * h / (1 - self.p)
        return self.linear2(h)


class FFTwice(FeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(self.dropout(torch.relu(self.linear1(x)))))


class ELTwice(EncoderLayer):
    """Dropout twice on one sub-layer's output, in one norm order (``twice_in``) only."""

    twice_in = False

    def forward(self, x, mask=None):
        d1 = (lambda t: self.dropout1(self.dropout1(t))) if self.norm_first == self.twice_in else self.dropout1
        if self.norm_first:
            x = x + d1(self.self_attn(*[self.norm1(x)] * 3, mask)[0])
            return x + self.dropout2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + (self.dropout2(self.dropout2(self.feed_forward(x))) if not self.twice_in else self.dropout2(self.feed_forward(x))))  # noqa: E501


class ELTwicePre(ELTwice):
    twice_in = True


def test_hand_written_dropout_passes():
    assert_passes(check_feed_forward, FFHandDropout, repeat=2)


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_feed_forward, FFTwice, "dropout applied twice", ["2 times to the hidden activations", "1 / (1 - p)^2"]),
        (check_feed_forward, FFKeepsWithP, "wrong dropout rate", ["of the entries, expected about p = 25%", "1 - p"]),
        (check_encoder_layer, ELTwice, "dropout applied twice", ["2 times to the feed-forward's output"]),
        (check_encoder_layer, ELTwicePre, "dropout applied twice", ["2 times to self-attention's output"]),
    ],
)
def test_dropout_applied_twice_or_with_wrong_rate_fails(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words)


# ---------------------------------------------------------------- extra dropout inside a branch (trial C, B)
def extra_dropout(where, norm_first):
    """An EncoderLayer with the right output dropout plus one more inside a branch, at
    ``where``, when built with ``norm_first`` (right otherwise): trial C's W26-W28 and their family."""

    class ExtraDropout(EncoderLayer):
        def forward(self, x, mask=None):
            d = self.dropout1 if self.norm_first == norm_first else (lambda t: t)
            at = lambda spot, t: d(t) if where in (spot, "all") else t  # noqa: E731
            h = at("normed", self.norm1(at("norm input", x))) if self.norm_first else x
            a = self.self_attn(at("query", h), at("key", h), at("value", h), mask)[0]
            x = x + self.dropout1(a) if self.norm_first else self.norm1(x + self.dropout1(a))
            h = self.norm2(x) if self.norm_first else x
            f = self.dropout2(self.feed_forward(at("ff", h)))
            return x + f if self.norm_first else self.norm2(x + f)

    return ExtraDropout


BRANCH_SPOTS = [("query", "the query of self-attention"), ("key", "the key of self-attention"),
                ("value", "the value of self-attention"), ("all", "dropout to the"),
                ("ff", "the input of the feed-forward")]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("where, words", BRANCH_SPOTS + [("normed", "self-attention"), ("norm input", "norm1")])
def test_extra_dropout_inside_a_branch_is_named(where, words, norm_first):
    if where in ("normed", "norm input") and not norm_first:
        pytest.skip("pre-norm only: post-norm has no norm before a sub-layer")
    cls = extra_dropout(where, norm_first)
    assert_mistake(check_encoder_layer, cls, "dropout on the sub-layer input", words, "Remove the extra dropout",
                   repeat=1)


def test_extra_dropout_stable_over_draws():  # the probe draws dropout masks: 20 draws
    assert_mistake(check_encoder_layer, extra_dropout("all", False), "dropout on the sub-layer input", repeat=SEEDS)


# ---------------------------------------------------------------- final norm shared with a layer's norm (trial C, C)
def final_norm_from(layer_norm, by_data=False):
    """An Encoder whose final norm (pre-norm) is the last layer's ``layer_norm``, or shares its memory."""

    class FinalNormShared(Encoder):
        def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
            if norm_first:
                theirs = getattr(self.layers[-1], layer_norm)
                if by_data:
                    self.norm.weight.data, self.norm.bias.data = theirs.weight.data, theirs.bias.data
                else:
                    self.norm = theirs

    return FinalNormShared


@pytest.mark.parametrize("layer_norm", ["norm1", "norm2"])
@pytest.mark.parametrize("by_data", [False, True])
def test_final_norm_shared_with_a_layer_is_named(layer_norm, by_data):  # structural, found before any draw
    assert_mistake(check_encoder, final_norm_from(layer_norm, by_data), "modules shared", "final norm shares",
                   f"self.layers[-1].{layer_norm}", repeat=1)


# ---------------------------------------------------------------- the dtype rule (trial C, D)
class LNFloat(LNBase):
    """Trial C's W16: x.float() first, so float16 in gives float32 out."""

    def forward(self, x):
        x = x.float()
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def test_layer_norm_dtype_cast_is_named():
    assert_mistake(check_layer_norm, LNFloat, "dtype not preserved", "returns torch.float32 instead of torch.float16",
                   ".float()")


# ---------------------------------------------------------------- vague messages named (trial C, H)
class LNNoEps(LNBase):
    """Trial C's W03: no eps at all."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False)) * self.weight + self.bias


class FFResidual(FeedForward):  # W07
    def forward(self, x):
        return x + self.linear2(self.dropout(torch.relu(self.linear1(x))))


class FFNorm(FeedForward):  # W08
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model, elementwise_affine=False)

    def forward(self, x):
        return self.norm(self.linear2(self.dropout(torch.relu(self.linear1(x)))))


class FFNormOfSum(FeedForward):  # W08 as written: an affine nn.LayerNorm of x + ff(x)
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(x + self.linear2(self.dropout(torch.relu(self.linear1(x)))))


class FFDropoutAlsoOnOutput(FeedForward):  # W15
    def forward(self, x):
        return self.dropout(self.linear2(self.dropout(torch.relu(self.linear1(x)))))


class LayerInvertedMask(Layer):  # W10
    def post(self, x, mask):
        return super().post(x, ~mask if mask is not None else None)

    def pre(self, x, mask):
        return super().pre(x, ~mask if mask is not None else None)


class LayerRawKeys(Layer):  # W13: pre-norm self_attn(h, x, x)
    def pre(self, x, mask):
        h = self.norm1(x)
        x = x + self.dropout1(self.self_attn(h, x, x, mask)[0])
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


class LayerRawQuery(Layer):  # issue 22: pre-norm self_attn(x, h, h)
    def pre(self, x, mask):
        h = self.norm1(x)
        x = x + self.dropout1(self.self_attn(x, h, h, mask)[0])
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


def test_pre_norm_query_from_raw_x_is_named_on_20_seeds():
    from checker_asserts import STABLE

    assert_mistake(check_encoder_layer, LayerRawQuery, "query not normalised", "self_attn(x, h, h)",
                   "self_attn(h, h, h, mask)", repeat=STABLE)


class StackMaskFirstOnly(Stack):  # W07
    def forward(self, x, mask=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, mask if i == 0 else None)
        return self.norm(x) if self.norm is not None else x


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_layer_norm, LNNoEps, "eps ignored", ["adds no eps", "sqrt(var + self.eps)"]),
        (check_feed_forward, FFResidual, "residual inside the feed-forward", ["adds its input back"]),
        (check_feed_forward, FFNorm, "norm inside the feed-forward", ["normalises its output"]),
        (check_feed_forward, FFNormOfSum, "norm inside the feed-forward", ["norm(x + ...)"]),
        (check_feed_forward, FFDropoutAlsoOnOutput, "dropout in the wrong place", ["or besides", "only there"]),
        (check_encoder_layer, LayerInvertedMask, "inverted mask", ["inverted mask (~mask)", "True = may attend"]),
        (check_encoder_layer, LayerRawKeys, "keys and values not normalised", ["self_attn(h, h, h, mask)"]),
        (check_encoder, StackMaskFirstOnly, "mask not passed on", ["only the first layer gets mask"]),
    ],
)
def test_vague_trial_messages_are_named(check, cls, mistake, words):
    assert_mistake(check, cls, mistake, *words)  # deterministic structure: the file's fixed seeds and one fresh


# ---------------------------------------------------------------- blind trial t0405 (notebook 04)
class FFDropoutAlwaysOn(FeedForward):  # F.dropout(h, 0.1): training=True by default, on in eval mode too
    def forward(self, x):
        return self.linear2(F.dropout(torch.relu(self.linear1(x)), 0.1))


class LayerPostNormOnTheStream(Layer):  # the post-norm branch written as h = norm(x); x = h + sublayer(h)
    def post(self, x, mask):
        h = self.norm1(x)
        x = h + self.dropout1(attend(self, h, mask))
        h = self.norm2(x)
        return h + self.dropout2(self.feed_forward(h))


class LayerPreNormExtraEndNorm(Layer):
    def pre(self, x, mask):
        return self.norm2(super().pre(x, mask))


class LayerAttentionWeights(Layer):  # [1] for [0]: a raw shape error before
    def post(self, x, mask):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)[1]))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class LayerAttnMaskKeyword(Layer):  # nn.MultiheadAttention's habit: a raw TypeError before
    def post(self, x, mask):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, attn_mask=mask)[0]))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class StackReversed(Stack):
    def forward(self, x, mask=None):
        for layer in reversed(self.layers):
            x = layer(x, mask)
        return self.norm(x) if self.norm is not None else x


@pytest.mark.parametrize(
    "check, cls, mistake, words",
    [
        (check_feed_forward, FFDropoutAlwaysOn, "dropout ignores eval mode", ["training=self.training"]),
        (check_encoder_layer, LayerPostNormOnTheStream, "residual stream normalised",
         ["norm_first=False", "h = norm(x); x = h + sublayer(h)", "x = norm(x + sublayer(x))"]),
        (check_encoder_layer, LayerPreNormExtraEndNorm, "extra norm at the layer end", ["norm_first=True", "norm2(x)"]),
        (check_encoder_layer, LayerAttentionWeights, "attention weights used", ["`...[1]`", "self.self_attn(x, x, x, mask)[0]"]),  # noqa: E501
        (check_encoder_layer, LayerAttnMaskKeyword, "PyTorch attention keyword",
         ["`attn_mask=`", "forward(query, key, value, mask=None)", "True = may attend"]),
        (check_encoder, StackReversed, "layers in reverse order", ["reversed(self.layers)"]),
    ],
)
def test_trial_t0405_mistakes_named_on_20_seeds(check, cls, mistake, words):
    from checker_asserts import STABLE

    assert_mistake(check, cls, mistake, *words, repeat=STABLE)


def test_post_norm_stream_gets_post_norm_advice():
    r = check_encoder_layer(LayerPostNormOnTheStream)
    assert "x = x + sublayer(norm(x))" not in r.feedback, r.feedback  # the pre-norm formula is the other branch's


class LNNoKeepdim(LayerNorm):  # a plain shape error: no forbidden call was made
    def forward(self, x):
        mean, var = x.mean(-1), x.var(-1, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def test_plain_runtime_error_is_not_labelled_forbidden_calls():
    r = check_layer_norm(LNNoKeepdim)
    assert r.status == "error" and "RuntimeError" in r.feedback, r.feedback
    assert "forbidden" not in r.feedback and "while running forward (x of shape" in r.feedback, r.feedback


class LNStub(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):
        raise NotImplementedError


def _layer_with_norm(norm_cls):
    class EncoderLayer(nn.Module):  # filled in, on top of a stubbed norm
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
            self.feed_forward = FeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2, self.dropout = norm_cls(d_model), norm_cls(d_model), nn.Dropout(dropout)

        def forward(self, x, mask=None):
            x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
            return self.norm2(x + self.dropout(self.feed_forward(x)))

    return EncoderLayer


def test_stub_verdicts_name_the_unfinished_exercise():
    r = check_layer_norm(LNStub)  # the class under test itself, under another name
    assert r.status == "not implemented" and "LayerNorm: not implemented yet. Replace" in r.feedback, r.feedback
    assert "import LNStub" not in r.feedback
    named = type("LayerNorm", (LNStub,), {})
    r = check_encoder_layer(_layer_with_norm(named))
    assert r.status == "not implemented", r.feedback
    assert ("[ ] EncoderLayer can't be checked yet: it uses your `LayerNorm`, which is still a stub" in r.feedback
            and "`from course_utils import LayerNorm`" in r.feedback), r.feedback
    r = check_encoder_layer(_layer_with_norm(LNStub))  # the stub under another name: the course's name
    assert "your `LNStub`" in r.feedback and "`from course_utils import LayerNorm` and use LayerNorm in place of `LNStub`" in r.feedback, r.feedback  # noqa: E501


# correct variants of the trial, in other people's styles
class LayerSublayerHelper(EncoderLayer):  # the Annotated Transformer's helper, one shared dropout
    def forward(self, x, mask=None):
        def sublayer(x, f, norm):
            return x + self.dropout1(f(norm(x))) if self.norm_first else norm(x + self.dropout1(f(x)))

        x = sublayer(x, lambda t: self.self_attn(t, t, t, mask)[0], self.norm1)
        return sublayer(x, self.feed_forward, self.norm2)


class LayerKeywords(EncoderLayer):
    def forward(self, x, mask=None):
        if self.norm_first:
            n = self.norm1(x)
            out, _ = self.self_attn(query=n, key=n, value=n, mask=mask)
            x = x + self.dropout1(out)
            return x + self.dropout2(self.feed_forward(self.norm2(x)))
        out, _ = self.self_attn(query=x, key=x, value=x, mask=mask)
        x = self.norm1(x + self.dropout1(out))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class StackReduce(Stack):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        layer = EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))

    def forward(self, x, mask=None):
        x = functools.reduce(lambda t, layer: layer(t, mask), self.layers, x)
        return x if self.norm is None else self.norm(x)


class FFInPlaceReluOnOwnTensor(FeedForward):
    def forward(self, x):
        h = self.linear1(x)
        torch.relu_(h)
        return self.linear2(self.dropout(h))


class LNVarMeanAddcmul(LayerNorm):
    def forward(self, x):
        var, mu = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return torch.addcmul(self.bias, (x - mu) / (var + self.eps).sqrt(), self.weight)


@pytest.mark.parametrize(
    "check, cls",
    [(check_encoder_layer, LayerSublayerHelper), (check_encoder_layer, LayerKeywords), (check_encoder, StackReduce),
     (check_feed_forward, FFInPlaceReluOnOwnTensor), (check_layer_norm, LNVarMeanAddcmul)],
)
def test_trial_t0405_correct_variants_pass(check, cls):
    assert_passes(check, cls)
