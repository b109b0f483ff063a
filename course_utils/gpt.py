"""A decoder-only language model from the course's blocks, GPT-2 style (backs notebook 09).

``tokens (B, L) -> token embedding + learned position embedding -> N x GPTBlock -> LayerNorm
-> lm_head (tied to the token embedding) -> logits (B, L, V)``.

* :class:`GPTBlock`: a decoder layer without cross-attention, pre-norm, with a GELU
  feed-forward; its self-attention is always causal (the block builds the mask itself).
  It is :class:`~course_utils.EncoderLayer` with ``norm_first=True``, GPT-2's GELU and a
  causal mask.
* :class:`GPT`: the model. Its output layer has no bias and **shares** its weight matrix
  with the token embedding (``lm_head.weight is token_embedding.weight``), which saves
  ``V * D`` parameters. No ``sqrt(d_model)`` scaling of the embeddings (GPT-2 has none).

The rest of notebook 09 has its own modules: sampling and generation with the key/value
cache in :mod:`course_utils.generation`, GPT-2's weights in :mod:`course_utils.gpt_weights`,
the training run and the shipped model in :mod:`course_utils.gpt_training`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import fastpaths
from ._validate import check_mask, check_nonempty, check_rank, check_vocab_ids
from .attention import causal_mask
from .layers import FeedForward, LayerNorm
from .multihead import MultiHeadAttention


class GPTBlock(nn.Module):
    """One decoder-only block: causal self-attention then feed-forward, both pre-norm.

    ``x = x + dropout(self_attn(norm1(x)))`` then ``x = x + dropout(feed_forward(norm2(x)))``,
    where the self-attention always uses ``causal_mask(L)`` (``&`` the optional ``mask``,
    e.g. a padding mask ``(B, 1, L)``) and the feed-forward uses GPT-2's tanh-GELU.

    ``forward(x (B, L, D), mask=None) -> (B, L, D)``. Submodules: ``norm1``, ``self_attn``,
    ``norm2``, ``feed_forward`` (and ``dropout1``, ``dropout2``). Without a ``mask``, on the
    CPU, :func:`course_utils.fastpaths.gpt_block` computes the same attention with the fused
    kernel (a speed path; ``with fastpaths.disabled():`` runs the lines below).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation="gelu_tanh")
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    @fastpaths.speed_path(fastpaths.gpt_block, when=fastpaths.gpt_block_applies(MultiHeadAttention))
    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_rank("x", x, 3, "(B, L, D)")
        allowed = causal_mask(x.size(1), device=x.device)  # (L, L): True on and below the diagonal
        if mask is not None:
            check_mask(mask, torch.Size((x.size(0), x.size(1), x.size(1))), "(B, L, L)")
            allowed = allowed & mask  # (B, L, L)
        h = self.norm1(x)  # (B, L, D)
        x = x + self.dropout1(self.self_attn(h, h, h, allowed)[0])
        return x + self.dropout2(self.feed_forward(self.norm2(x)))  # (B, L, D)


def init_gpt2_weights(model: nn.Module) -> None:
    """GPT-2's initialisation, in place: every weight matrix (and embedding table) from
    N(0, 0.02), every bias 0; norms keep their ones. Call it before tying two weights (it
    would see the tied Parameter twice)."""
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


class GPT(nn.Module):
    """A GPT-2-style language model: ``forward(tokens (B, L), mask=None) -> logits (B, L, V)``.

    Submodules: ``token_embedding`` (``nn.Embedding(V, D)``), ``position_embedding``
    (``nn.Embedding(max_len, D)``, learned), ``dropout``, ``blocks`` (``nn.ModuleList`` of
    ``num_layers`` :class:`GPTBlock`), ``norm`` (the final ``LayerNorm``) and ``lm_head``
    (``nn.Linear(D, V, bias=False)`` whose ``weight`` *is* ``token_embedding.weight``).
    Defaults are GPT-2 small's (124M parameters with ``V = 50257``). ``mask`` (optional,
    e.g. padding ``(B, 1, L)``) is combined with the causal mask in every block.
    Weights start as GPT-2's do: normal with standard deviation 0.02, biases zero.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 768,
        num_heads: int = 12,
        num_layers: int = 12,
        d_ff: int = 3072,
        dropout: float = 0.1,
        max_len: int = 1024,
    ):
        super().__init__()
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        init_gpt2_weights(self)
        # tie: one Parameter, two uses (set after the init, which would otherwise see it twice)
        self.lm_head.weight = self.token_embedding.weight

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        check_vocab_ids(tokens, self.vocab_size)
        _check_context(tokens, self.max_len)
        check_nonempty("tokens", tokens, 1, "L")  # nothing to predict from; LayerNorm would fail deep inside
        positions = torch.arange(tokens.size(1), device=tokens.device)  # (L,): 0, 1, ..., L - 1
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))  # (B, L, D)
        for block in self.blocks:
            x = block(x, mask)  # (B, L, D)
        return self.lm_head(self.norm(x))  # (B, L, V)


# ---------------------------------------------------------------- sizes read from the contract's parts
#
# The helpers below take any model with the contract's submodules (a student's GPT too), so
# they read the sizes from those parts, not from attributes only the reference class has.


def context_length(model: nn.Module) -> int:
    """``max_len`` of a GPT: the number of rows of its ``position_embedding``; a model without
    a position table (notebook 10's :class:`~course_utils.llama.Llama`, rotary positions) gives
    its ``max_len``."""
    table = getattr(model, "position_embedding", None)
    return table.weight.size(0) if table is not None else int(model.max_len)


def vocabulary_size(model: nn.Module) -> int:
    """``vocab_size`` of a GPT: the number of rows of its ``token_embedding``."""
    return model.token_embedding.weight.size(0)


def _check_context(tokens: Tensor, max_len: int) -> None:
    if tokens.size(1) > max_len:
        raise ValueError(
            f"tokens has length {tokens.size(1)}, more than the model's max_len = {max_len} "
            "(it has no position embedding beyond that): crop the context to the last max_len tokens"
        )


__all__ = ["GPTBlock", "GPT", "init_gpt2_weights", "context_length", "vocabulary_size"]
