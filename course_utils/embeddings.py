"""Token embeddings (backs notebook 03)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from ._validate import check_positive_int, check_vocab_ids


class TokenEmbedding(nn.Module):
    """Looks up a ``d_model``-vector per token id and scales it by ``sqrt(d_model)``.

    ``forward(tokens LongTensor (B, L)) -> (B, L, D)``. The paper multiplies by
    ``sqrt(d_model)`` without giving a reason. The usual reading: the table is shared with
    the output layer and initialised small (entries of size about ``1/sqrt(d_model)``),
    and the factor brings the entries back to size about 1, comparable with the
    positional encoding's ``[-1, 1]`` (notebook 03 measures this).
    """

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.d_model = check_positive_int("d_model", d_model)
        self.embedding = nn.Embedding(self.vocab_size, self.d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        check_vocab_ids(tokens, self.vocab_size)
        return self.embedding(tokens) * math.sqrt(self.d_model)  # (B, L, D)
