"""course_utils: reference implementations, checkers and helpers for the course
"Build a Transformer from scratch in PyTorch".

Conventions: batch first ``(B, L, D)``; per-head tensors ``(B, H, L, d_k)``; masks are
``torch.bool`` with ``True`` = may attend. Modules follow the notebooks:

=====================  ==========================================================
notebook               module
=====================  ==========================================================
01 attention           :mod:`course_utils.attention`
02 multi-head          :mod:`course_utils.multihead`
03 positions           :mod:`course_utils.positional`, :mod:`course_utils.embeddings`
04 encoder             :mod:`course_utils.layers`, :mod:`course_utils.encoder`
05 decoder             :mod:`course_utils.decoder`
06 full model          :mod:`course_utils.model`, :mod:`course_utils.decoding`
plots                  :mod:`course_utils.plotting`, :mod:`course_utils.inspect_attention`
=====================  ==========================================================
"""

from .attention import causal_mask, padding_mask, scaled_dot_product_attention
from .decoder import Decoder, DecoderLayer
from .decoding import greedy_decode
from .embeddings import TokenEmbedding
from .encoder import Encoder, EncoderLayer
from .inspect_attention import record_attention, stack_layers
from .layers import FeedForward, LayerNorm
from .model import Transformer, count_parameters, make_src_mask, make_tgt_mask
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .positional import PositionalEncoding, sinusoidal_positional_encoding

__version__ = "0.1.0"

__all__ = [
    # 01
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    # 02
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
    # 03
    "sinusoidal_positional_encoding",
    "PositionalEncoding",
    "TokenEmbedding",
    # 04
    "LayerNorm",
    "FeedForward",
    "EncoderLayer",
    "Encoder",
    # 05
    "DecoderLayer",
    "Decoder",
    # 06
    "Transformer",
    "make_src_mask",
    "make_tgt_mask",
    "greedy_decode",
    "count_parameters",
    # inspection
    "record_attention",
    "stack_layers",
]
