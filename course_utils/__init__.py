"""course_utils: reference implementations, checkers and helpers for the course
"Build a Transformer from scratch in PyTorch".

Conventions: batch first ``(B, L, D)``; per-head tensors ``(B, H, L, d_k)``; masks are
``torch.bool`` with ``True`` = may attend. Modules follow the notebooks:

=====================  ========================================================================================
notebook               module
=====================  ========================================================================================
01 attention           :mod:`course_utils.attention`
02 multi-head          :mod:`course_utils.multihead`
03 positions           :mod:`course_utils.positional`, :mod:`course_utils.embeddings`
04 encoder             :mod:`course_utils.layers`, :mod:`course_utils.encoder`
05 decoder             :mod:`course_utils.decoder`
06 full model          :mod:`course_utils.model`, :mod:`course_utils.decoding`
07 training            :mod:`course_utils.training`, ``translator_training``, ``student_functions``, ``data``
08 classifier          :mod:`course_utils.classifier`, ``classifier_training``, ``bert_weights``, ``reviews``
09 decoder-only LM     :mod:`course_utils.gpt`, :mod:`course_utils.generation`, ``gpt_weights``, ``gpt_training``
10 modern decoder      :mod:`course_utils.llama`, ``llama_weights``, ``llama_training``
11 tokenization        :mod:`course_utils.tokenizer`
plots                  :mod:`course_utils.plotting`, :mod:`course_utils.inspect_attention`
=====================  ========================================================================================
"""

__version__ = "0.1.0"

# The notebooks import these names from here (`from course_utils import causal_mask`); every
# notebook imports torch anyway. The tools (build, grade...) are in course_tools, apart.
from .attention import causal_mask, padding_mask, scaled_dot_product_attention
from .classifier import TransformerClassifier, gelu, masked_mean_pool
from .decoder import Decoder, DecoderLayer
from .decoding import greedy_decode, greedy_decode_cached
from .embeddings import TokenEmbedding
from .encoder import Encoder, EncoderLayer
from .generation import generate, next_token_probs
from .gpt import GPT, GPTBlock
from .gpt_weights import load_gpt2_weights
from .inspect_attention import record_attention, stack_layers
from .layers import FeedForward, LayerNorm
from .llama import GroupedQueryAttention, Llama, LlamaBlock, RMSNorm, SwiGLU, apply_rotary, rotary_tables
from .model import Transformer, count_parameters, make_src_mask, make_tgt_mask
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .positional import PositionalEncoding, sinusoidal_positional_encoding
from .tokenizer import bpe_decode, bpe_encode, count_pairs, merge_pair, train_bpe
from .training import masked_cross_entropy, noam_lr, shift_targets, train_step

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
    "greedy_decode_cached",
    "count_parameters",
    # 07
    "shift_targets",
    "masked_cross_entropy",
    "noam_lr",
    "train_step",
    # 08
    "gelu",
    "masked_mean_pool",
    "TransformerClassifier",
    # inspection
    "record_attention",
    "stack_layers",
    # 09
    "GPTBlock",
    "GPT",
    "next_token_probs",
    "generate",
    "load_gpt2_weights",
    # 10
    "RMSNorm",
    "rotary_tables",
    "apply_rotary",
    "SwiGLU",
    "GroupedQueryAttention",
    "LlamaBlock",
    "Llama",
    # 11
    "count_pairs",
    "merge_pair",
    "train_bpe",
    "bpe_encode",
    "bpe_decode",
]
