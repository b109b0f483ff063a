"""The decoder: masked self-attention, cross-attention, feed-forward (backs notebook 05).

Cross-attention takes its queries from the decoder (``x``) and its keys and values
from the encoder's output (``memory``): every target position looks at the source.
Residuals and layer norms follow :mod:`course_utils.encoder` (post- or pre-norm).
"""

from __future__ import annotations

from torch import Tensor, nn

from ._validate import check_positive_int, check_rank
from .layers import FeedForward, LayerNorm
from .multihead import MultiHeadAttention


class DecoderLayer(nn.Module):
    """``forward(x (B, L_tgt, D), memory (B, L_src, D), tgt_mask=None, memory_mask=None)``.

    ``tgt_mask`` (boolean, ``True`` = may attend) broadcastable to ``(B, L_tgt, L_tgt)``,
    usually ``causal_mask(L_tgt)`` combined with the target padding; ``memory_mask``
    broadcastable to ``(B, L_tgt, L_src)``, usually ``padding_mask(src)``.
    Returns ``(B, L_tgt, D)``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        # on each sub-layer's output, before the residual addition. Three modules where the
        # solution has one (the same numbers: dropout has no state): tests build on them
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        check_rank("x", x, 3, "(B, L_tgt, D)")
        check_rank("memory", memory, 3, "(B, L_src, D)")
        # from here on, the solution cell of notebook 05
        if self.norm_first:
            h = self.norm1(x)  # (B, L_tgt, D)
            x = x + self.dropout1(self.self_attn(h, h, h, tgt_mask)[0])
            h = self.norm2(x)  # normalise the queries only; the memory goes in as it is
            x = x + self.dropout2(self.cross_attn(h, memory, memory, memory_mask)[0])  # (B, L_tgt, D)
            x = x + self.dropout3(self.feed_forward(self.norm3(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)[0]))  # (B, L_tgt, D)
            x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, memory, memory_mask)[0]))
            x = self.norm3(x + self.dropout3(self.feed_forward(x)))
        return x


class Decoder(nn.Module):
    """``num_layers`` independent copies of :class:`DecoderLayer`; final ``norm`` only in pre-norm.

    ``forward(x (B, L_tgt, D), memory (B, L_src, D), tgt_mask=None, memory_mask=None)``
    takes target embeddings and returns ``(B, L_tgt, D)``.
    """

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
    ):
        super().__init__()
        num_layers = check_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers)
        )
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)  # (B, L_tgt, D)
        if self.norm is not None:
            x = self.norm(x)
        return x
