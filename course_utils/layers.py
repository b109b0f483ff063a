"""Layer normalisation and the position-wise feed-forward network (backs notebook 04).

Both act on the last axis only, independently at every position of every sequence.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import fastpaths
from ._validate import check_floating, check_min_rank, check_module_dtype, check_positive_int, check_width

# Input dtypes that LayerNorm normalises in float32 (and converts back).
_LOW_PRECISION = (torch.float16, torch.bfloat16)


class LayerNorm(nn.Module):
    r"""Normalise each position's ``d_model`` features, then scale and shift.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the mean and the *biased*
    variance (divide by ``D``, not ``D - 1``) over the last axis, ``eps`` inside the
    square root: the same numbers as ``nn.LayerNorm(d_model, eps)``. ``weight`` starts
    at ones and ``bias`` at zeros, both learnable, shape ``(D,)``.

    The output has the input's dtype; float16 and bfloat16 input is normalised in float32
    (as ``nn.LayerNorm`` does inside), then converted back. On the CPU, float32 and float64
    input runs :func:`course_utils.fastpaths.layer_norm`: the same numbers, faster (a
    speed path; ``with fastpaths.disabled():`` runs the lines below).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.d_model))
        self.bias = nn.Parameter(torch.zeros(self.d_model))

    @fastpaths.speed_path(fastpaths.layer_norm, when=fastpaths.layer_norm_applies)
    def forward(self, x: Tensor) -> Tensor:
        check_min_rank("x", x, 1, "(..., D)")
        check_floating("x", x)
        check_width("x", x, self.d_model)
        if x.dtype in _LOW_PRECISION:  # statistics in float16 lose too much (and overflow above 65504)
            return self.forward(x.float()).to(x.dtype)
        # from here on, the solution cell of notebook 04
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1): divide by D, not D - 1
        x_hat = (x - mean) / torch.sqrt(var + self.eps)  # (..., D)
        return x_hat * self.weight + self.bias  # (..., D)


# The feed-forward's non-linearity by name: ReLU (the paper), exact GELU (BERT, and
# nn.TransformerEncoderLayer(activation="gelu")), tanh-approximated GELU (GPT-2).
# Modules, not functions (the solution cell calls torch.relu): `self.activation` is a
# callable submodule that tests and students' subclasses replace (nn.GELU(), ...).
ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
}


class FeedForward(nn.Module):
    """``linear2(dropout(activation(linear1(x))))``: ``D -> d_ff -> D`` at every position.

    ``activation`` is ``"relu"`` (the paper, default), ``"gelu"`` (BERT) or
    ``"gelu_tanh"`` (GPT-2's tanh approximation of GELU).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.d_ff = check_positive_int("d_ff", d_ff)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(self.d_model, self.d_ff)
        self.linear2 = nn.Linear(self.d_ff, self.d_model)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        check_min_rank("x", x, 1, "(..., D)")
        check_width("x", x, self.d_model)
        check_module_dtype("x", x, self.linear1.weight, "FeedForward")
        # from here on, the solution cell of notebook 04 (torch.relu there)
        hidden = self.activation(self.linear1(x))  # (..., d_ff)
        return self.linear2(self.dropout(hidden))  # (..., D)
