"""Sinusoidal positional encoding (backs notebook 03).

.. math::
    PE_{(pos, 2i)} = \\sin(pos / 10000^{2i / d_{model}}), \\quad
    PE_{(pos, 2i+1)} = \\cos(pos / 10000^{2i / d_{model}})

Even columns hold the sines and odd columns the cosines of the same angle, interleaved
as in the paper. Positions count from 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._validate import check_floating, check_positive_int, check_rank, check_width


def sinusoidal_positional_encoding(max_len: int, d_model: int) -> Tensor:
    """``(max_len, d_model)`` float32 table; row ``pos`` is the encoding of position ``pos``.

    Column pair ``(2i, 2i+1)`` is ``(sin, cos)`` of ``pos / 10000^(2i / d_model)``: a
    wavelength that grows geometrically from ``2*pi`` to ``10000 * 2*pi``.
    """
    max_len = check_positive_int("max_len", max_len)
    d_model = check_positive_int("d_model", d_model)
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {d_model}")
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model/2,)
    # 1 / 10000^(2i/d) computed as exp(-(2i/d) ln 10000): same value, no huge powers
    inv_freq = torch.exp(-two_i / d_model * math.log(10000.0))  # (d_model/2,)
    angle = position * inv_freq  # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


class PositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to embeddings, then applies dropout.

    ``forward(x (B, L, D)) -> dropout(x + pe[:L])``, in ``x``'s dtype: float16 and
    bfloat16 input stays so (the table is converted, the input is not promoted). The table
    is a buffer (saved with the model and moved by ``.to(device)``), not a parameter: it
    is never trained.
    """

    pe: Tensor

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.max_len = check_positive_int("max_len", max_len)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x: Tensor) -> Tensor:
        check_rank("x", x, 3, "(B, L, D)")
        check_floating("x", x)
        check_width("x", x, self.d_model)
        L = x.size(1)
        if L > self.max_len:
            raise ValueError(
                f"sequence length L = {L} is longer than the positional encoding's "
                f"max_len = {self.max_len}; build it with a larger max_len"
            )
        pe = self.pe[:L].to(x.dtype)  # (L, D); a no-op for float32 input
        return self.dropout(x + pe)  # (B, L, D); pe broadcasts over the batch
