"""The encoder: a stack of self-attention + feed-forward layers (backs notebook 04).

Each sub-layer is wrapped in a residual connection and layer normalisation:

* post-norm (``norm_first=False``, the paper): ``x = norm(x + dropout(sublayer(x)))``
* pre-norm (``norm_first=True``, most code today): ``x = x + dropout(sublayer(norm(x)))``,
  and the stack ends with one more ``norm`` because the residual stream itself is
  never normalised.
"""

from __future__ import annotations

from torch import Tensor, nn

from ._validate import check_positive_int, check_rank
from .layers import FeedForward, LayerNorm
from .multihead import MultiHeadAttention


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with residual, dropout and layer norm.

    ``forward(x (B, L, D), mask=None) -> (B, L, D)``; ``mask`` is boolean (``True`` =
    may attend) and broadcastable to ``(B, L, L)``, typically ``padding_mask(src)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_rank("x", x, 3, "(B, L, D)")
        # from here on, the solution cell of notebook 04
        if self.norm_first:
            h = self.norm1(x)  # (B, L, D): only the sub-layer's input is normalised
            x = x + self.dropout1(self.self_attn(h, h, h, mask)[0])  # (B, L, D)
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))  # (B, L, D)
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)[0]))  # (B, L, D)
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))  # (B, L, D)
        return x


class Encoder(nn.Module):
    """``num_layers`` independent copies of :class:`EncoderLayer`.

    ``forward(x (B, L, D), mask=None) -> (B, L, D)`` takes embeddings (token embedding
    plus positional encoding), not token ids. A final ``norm`` exists only when
    ``norm_first=True``.
    """

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ):
        super().__init__()
        num_layers = check_positive_int("num_layers", num_layers)
        # a fresh layer each time: independent weights, independently initialised
        # (one module used num_layers times would tie them; deep copies start identical)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)  # (B, L, D)
        if self.norm is not None:
            x = self.norm(x)  # (B, L, D)
        return x
