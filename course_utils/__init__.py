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
07 training            :mod:`course_utils.training`, :mod:`course_utils.trainer`, ``data``, ``pretrained``
08 classifier          :mod:`course_utils.reviews`, :mod:`course_utils.classifier`
09 decoder-only LM     :mod:`course_utils.gpt`, :mod:`course_utils.gpt_training`
plots                  :mod:`course_utils.plotting`, :mod:`course_utils.inspect_attention`
=====================  ==========================================================
"""

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
]

# Names are imported on first use (PEP 562), so that `import course_utils` is instant and
# `python -m course_utils.check_env` can report a missing torch instead of crashing on it.
_MODULE_OF = {
    "scaled_dot_product_attention": "attention",
    "causal_mask": "attention",
    "padding_mask": "attention",
    "split_heads": "multihead",
    "merge_heads": "multihead",
    "MultiHeadAttention": "multihead",
    "sinusoidal_positional_encoding": "positional",
    "PositionalEncoding": "positional",
    "TokenEmbedding": "embeddings",
    "LayerNorm": "layers",
    "FeedForward": "layers",
    "EncoderLayer": "encoder",
    "Encoder": "encoder",
    "DecoderLayer": "decoder",
    "Decoder": "decoder",
    "Transformer": "model",
    "make_src_mask": "model",
    "make_tgt_mask": "model",
    "count_parameters": "model",
    "greedy_decode": "decoding",
    "greedy_decode_cached": "decoding",
    "shift_targets": "training",
    "masked_cross_entropy": "training",
    "noam_lr": "training",
    "train_step": "training",
    "gelu": "classifier",
    "masked_mean_pool": "classifier",
    "TransformerClassifier": "classifier",
    "record_attention": "inspect_attention",
    "stack_layers": "inspect_attention",
    "GPTBlock": "gpt",
    "GPT": "gpt",
    "next_token_probs": "gpt",
    "generate": "gpt",
}


def __getattr__(name: str):
    if name in _MODULE_OF:
        import importlib

        value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
