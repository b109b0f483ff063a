"""An encoder-only classifier built from the course's blocks (backs notebook 08).

BERT keeps the Transformer's encoder and drops the decoder: a classifier needs one label
per sequence, not a sequence out. The encoder turns the tokens into contextual vectors
``(B, L, D)``; a **pooling** step reduces them to one vector per sequence ``(B, D)``; a
linear layer turns that into one score (logit) per class ``(B, C)``. Two poolings:

* ``"cls"``: the vector at position 0, where every sequence holds the ``[CLS]`` token. It
  has no meaning of its own, so its vector is whatever the encoder puts there: attention
  lets it gather what the classifier needs from the other positions (BERT's choice).
* ``"mean"``: the mean over the **real** positions (:func:`masked_mean_pool`); padding
  must count neither in the sum nor in the number of positions, else a review's
  representation would depend on how long the longest review of its batch was.

Also here: :func:`gelu` (BERT's feed-forward non-linearity, exact form). The training, the
order-blind baselines and the shipped checkpoint are :mod:`course_utils.classifier_training`;
copying BERT's weights is :mod:`course_utils.bert_weights`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._validate import check_nonempty, check_rank, check_tensor
from .attention import padding_mask
from .embeddings import TokenEmbedding
from .encoder import Encoder
from .positional import PositionalEncoding


def gelu(x: Tensor) -> Tensor:
    r"""Gaussian error linear unit, exact form: ``x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2)))``.

    ``Phi`` is the standard normal's cumulative distribution. Same numbers as
    ``F.gelu(x)`` (not the tanh approximation, ``approximate="tanh"``). Any shape and
    floating dtype; the result has ``x``'s.
    """
    check_tensor("x", x)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def masked_mean_pool(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x (B, L, D)`` over the positions where ``mask (B, L)`` is ``True`` -> ``(B, D)``.

    ``mask`` is boolean, ``True`` = a real token (padding: ``False``), anywhere in the row;
    ``padding_mask``'s ``(B, 1, L)`` is accepted too. Every row needs at least one real token.
    """
    check_rank("x", x, 3, "(B, L, D)")
    check_tensor("mask", mask)
    if mask.dim() == 3 and mask.size(1) == 1:
        mask = mask[:, 0]  # (B, L) from padding_mask's (B, 1, L)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must have dtype torch.bool (True = real token), got {mask.dtype}")
    if tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(f"mask must have shape (B, L) = {tuple(x.shape[:2])}, got {tuple(mask.shape)}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError("every row of mask needs at least one True (a real token) to average over")
    weights = mask.unsqueeze(-1).to(x.dtype)  # (B, L, 1): 1 on real tokens, 0 on padding
    return (x * weights).sum(dim=1) / weights.sum(dim=1)  # (B, D)


class TransformerClassifier(nn.Module):
    """Token ids ``(B, L)`` -> one logit per class ``(B, num_classes)``.

    ``embedding`` (:class:`TokenEmbedding`) and ``positional_encoding`` feed an ``encoder``
    (:class:`Encoder`, self-attention masked with ``padding_mask(tokens, pad_id)``); the
    output is pooled (``pooling="cls"``: position 0, which holds ``[CLS]``; ``"mean"``:
    :func:`masked_mean_pool` over the non-pad tokens) and ``classifier`` (``nn.Linear(D,
    num_classes)``) gives the logits: raw scores, no softmax (``F.cross_entropy`` applies
    ``log_softmax`` itself). ``activation`` is the feed-forward's (``"gelu"`` as in BERT,
    or ``"relu"``).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 128,
        dropout: float = 0.0,
        max_len: int = 64,
        norm_first: bool = False,
        activation: str = "gelu",
        pooling: str = "cls",
        pad_id: int = 0,
    ):
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        self.pooling = pooling
        self.pad_id = pad_id
        self.embedding = TokenEmbedding(vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        check_rank("tokens", tokens, 2, "(B, L) of token ids")
        check_nonempty("tokens", tokens, 1, "L")  # no [CLS], nothing to pool
        mask = padding_mask(tokens, self.pad_id)  # (B, 1, L): every query may look at every real token
        h = self.encoder(self.positional_encoding(self.embedding(tokens)), mask)  # (B, L, D)
        pooled = h[:, 0] if self.pooling == "cls" else masked_mean_pool(h, mask[:, 0])  # (B, D)
        return self.classifier(pooled)  # (B, num_classes)


__all__ = ["gelu", "masked_mean_pool", "TransformerClassifier"]
