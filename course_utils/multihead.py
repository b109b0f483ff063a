"""Multi-head attention (backs notebook 02).

Project the inputs with ``w_q, w_k, w_v`` (each ``D -> D``), split the result into
``H`` heads of width ``d_k = D // H``, run scaled dot-product attention in every head
at once, merge the heads back and mix them with ``w_o``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._validate import check_mask, check_module_dtype, check_positive_int, check_rank, check_width
from .attention import attention_weights


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, L, D) -> (B, H, L, d_k)`` with ``d_k = D // H``.

    Head ``h`` gets features ``h*d_k .. (h+1)*d_k - 1`` of every position. The transpose
    matters: a plain ``view(B, H, L, d_k)`` would hand each head a block of positions
    instead of a slice of features.
    """
    check_rank("x", x, 3, "(B, L, D)")
    num_heads = check_positive_int("num_heads", num_heads)
    B, L, D = x.shape
    if D % num_heads != 0:
        raise ValueError(
            f"the last dimension of x (D = {D}) must be divisible by num_heads = {num_heads}"
        )
    d_k = D // num_heads
    return x.view(B, L, num_heads, d_k).transpose(1, 2)  # (B, H, L, d_k)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, H, L, d_k) -> (B, L, H*d_k)``; the inverse of :func:`split_heads`."""
    check_rank("x", x, 4, "(B, H, L, d_k)")
    B, H, L, d_k = x.shape
    # transpose makes the memory non-contiguous, so reshape (which copies if needed), not view
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, D)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``H`` heads over a model width ``d_model``.

    ``forward(query (B, L_q, D), key (B, L_k, D), value (B, L_k, D), mask=None)``
    returns ``(output (B, L_q, D), weights (B, H, L_q, L_k))``. ``mask`` is boolean,
    ``True`` = may attend, broadcastable to ``(B, L_q, L_k)``: ``(L_q, L_k)``,
    ``(B, 1, L_k)`` or ``(B, L_q, L_k)``; the head axis is inserted here.

    ``weights`` are the attention probabilities before dropout, so they always sum to 1
    (``nn.MultiheadAttention`` returns them after dropout in training mode; in eval mode
    the two agree). Empty sequences work as in ``F.scaled_dot_product_attention``
    (``L_k = 0`` gives an all-zero context). To collect them from a whole model use
    :func:`course_utils.record_attention`.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        d_model = check_positive_int("d_model", d_model)
        num_heads = check_positive_int("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model = {d_model} must be divisible by num_heads = {num_heads} "
                f"(each head gets d_k = d_model // num_heads features)"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        for name, t, letters in (
            ("query", query, "(B, L_q, D)"),
            ("key", key, "(B, L_k, D)"),
            ("value", value, "(B, L_k, D)"),
        ):
            check_rank(name, t, 3, letters)
            check_width(name, t, self.d_model)
            check_module_dtype(name, t, self.w_q.weight, "MultiHeadAttention")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key and value must share batch and length (B, L_k), got key "
                f"{tuple(key.shape)} and value {tuple(value.shape)}"
            )
        if query.size(0) != key.size(0):
            raise ValueError(
                f"query and key must have the same batch size, got query "
                f"{tuple(query.shape)} and key {tuple(key.shape)}"
            )
        B, L_q, _ = query.shape
        L_k = key.size(1)
        if mask is not None:
            check_mask(mask, torch.Size((B, L_q, L_k)), "(B, L_q, L_k)")
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # (B, 1, L_q or 1, L_k): broadcast over heads

        q = split_heads(self.w_q(query), self.num_heads)  # (B, H, L_q, d_k)
        k = split_heads(self.w_k(key), self.num_heads)  # (B, H, L_k, d_k)
        v = split_heads(self.w_v(value), self.num_heads)  # (B, H, L_k, d_k)
        weights = attention_weights(q, k, mask)  # (B, H, L_q, L_k)
        # dropout acts on the attention probabilities, as in the paper's code and torch
        context = self.dropout(weights) @ v  # (B, H, L_q, d_k)
        output = self.w_o(merge_heads(context))  # (B, L_q, D)
        return output, weights
