"""The full encoder-decoder Transformer (backs notebook 06).

``src ids -> TokenEmbedding -> PositionalEncoding -> Encoder -> memory``;
``tgt ids -> TokenEmbedding -> PositionalEncoding -> Decoder(memory) -> Linear -> logits``.

Parameter count
---------------
With vocabulary sizes ``V_src, V_tgt``, width ``D``, ``N`` layers per stack and
feed-forward width ``F`` (post-norm, so no final norms):

* each attention block: ``4 (D^2 + D)``; feed-forward: ``2 D F + F + D``; each norm: ``2 D``
* encoder layer: ``4 (D^2 + D) + 2 D F + F + D + 4 D``;
  decoder layer: ``8 (D^2 + D) + 2 D F + F + D + 6 D``
* embeddings ``(V_src + V_tgt) D`` and output projection ``D V_tgt + V_tgt``.

``Transformer(37000, 37000)`` (the paper's base model) has 101,007,496 parameters:
44,138,496 in the two stacks and 56,869,000 in the three ``37000 x 512`` matrices.
The paper reports 65M because it shares one matrix between the source embedding, the
target embedding and the output projection (a shared BPE vocabulary): 44.1M + 18.9M
= 63.1M, which the paper rounds up (it does not say exactly what it counted).
``tests/test_model.py`` checks the formula.
"""

from __future__ import annotations

from torch import Tensor, nn

from ._validate import check_nonempty, check_rank
from .attention import causal_mask, padding_mask
from .decoder import Decoder
from .embeddings import TokenEmbedding
from .encoder import Encoder
from .positional import PositionalEncoding


class Transformer(nn.Module):
    """Encoder-decoder Transformer, batch first; masks are boolean, ``True`` = may attend.

    * ``encode(src (B, L_src), src_mask) -> memory (B, L_src, D)``
    * ``decode(tgt (B, L_tgt), memory, tgt_mask, memory_mask) -> (B, L_tgt, D)``
    * ``forward(src, tgt, src_mask=None, tgt_mask=None) -> logits (B, L_tgt, V_tgt)``;
      ``src_mask`` (usually ``padding_mask(src, pad)``, ``(B, 1, L_src)``) is used by
      the encoder and by the decoder's cross-attention. ``tgt_mask=None`` means *no*
      mask, as in ``nn.Transformer``: for training pass ``make_tgt_mask(tgt, pad)``.
    * ``greedy_decode(...)``: see :func:`course_utils.decoding.greedy_decode`.

    Weight matrices are initialised with Xavier-uniform (as ``nn.Transformer`` does).
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        num_heads: int = 8,
        num_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        max_len: int = 5000,
        norm_first: bool = False,
    ):
        super().__init__()
        self.d_model = d_model
        self.src_embedding = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embedding = TokenEmbedding(tgt_vocab_size, d_model)
        # one module for both sides: the table is fixed and dropout has no state
        self.positional_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)
        self.output_projection = nn.Linear(d_model, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        check_rank("src", src, 2, "(B, L_src) of token ids")
        check_nonempty("src", src, 1, "L_src")  # memory with no position: nothing to translate
        x = self.positional_encoding(self.src_embedding(src))  # (B, L_src, D)
        return self.encoder(x, src_mask)  # (B, L_src, D)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        check_rank("tgt", tgt, 2, "(B, L_tgt) of token ids")
        check_nonempty("tgt", tgt, 1, "L_tgt")  # decoding always starts with <bos>
        check_rank("memory", memory, 3, "(B, L_src, D)")
        check_nonempty("memory", memory, 1, "L_src")
        if memory.size(0) != tgt.size(0):
            raise ValueError(
                f"tgt and memory must have the same batch size, got tgt {tuple(tgt.shape)} "
                f"and memory {tuple(memory.shape)}"
            )
        y = self.positional_encoding(self.tgt_embedding(tgt))  # (B, L_tgt, D)
        return self.decoder(y, memory, tgt_mask, memory_mask)  # (B, L_tgt, D)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
    ) -> Tensor:
        memory = self.encode(src, src_mask)  # (B, L_src, D)
        out = self.decode(tgt, memory, tgt_mask, src_mask)  # (B, L_tgt, D)
        return self.output_projection(out)  # (B, L_tgt, V_tgt)

    def greedy_decode(
        self,
        src: Tensor,
        max_len: int,
        bos_id: int,
        eos_id: int,
        src_mask: Tensor | None = None,
        pad_id: int | None = None,
    ) -> Tensor:
        """Greedy decoding; see :func:`course_utils.decoding.greedy_decode`."""
        from .decoding import greedy_decode

        return greedy_decode(self, src, max_len, bos_id, eos_id, src_mask=src_mask, pad_id=pad_id)


def make_src_mask(src: Tensor, pad_id: int) -> Tensor:
    """``(B, 1, L_src)``: every query may look at every real (non-pad) source token."""
    check_rank("src", src, 2, "(B, L_src) of token ids")
    check_nonempty("src", src, 1, "L_src")
    return padding_mask(src, pad_id)


def make_tgt_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """``(B, L_tgt, L_tgt)``: causal and not padding (``True`` = may attend)."""
    check_rank("tgt", tgt, 2, "(B, L_tgt) of token ids")
    check_nonempty("tgt", tgt, 1, "L_tgt")  # (causal_mask would blame its own `size`)
    return padding_mask(tgt, pad_id) & causal_mask(tgt.size(1), device=tgt.device)  # (B, L_tgt, L_tgt)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters (buffers such as the positional table excluded)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = ["Transformer", "make_src_mask", "make_tgt_mask", "count_parameters"]
