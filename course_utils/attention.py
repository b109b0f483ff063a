"""Scaled dot-product attention and masks (backs notebook 01).

Conventions: batch first; a mask is a ``torch.bool`` tensor where ``True`` means
"this query may attend to this key" (the polarity of
``torch.nn.functional.scaled_dot_product_attention``'s boolean ``attn_mask``).

Fill value for blocked keys
---------------------------
Blocked scores are replaced by ``torch.finfo(dtype).min`` (the most negative finite
number), not ``-inf``. Whenever a query may attend to at least one key the two give
the same weights (``exp(min - max)`` underflows to exactly 0). When a whole row is
blocked (a padding query whose keys are all padding, say), ``-inf`` would give
``softmax([-inf, ..., -inf]) = 0/0 = NaN``, and that NaN spreads through every later
layer and into the gradients. With the finite fill the row becomes a uniform average
instead: meaningless, but finite, and the loss ignores padded positions anyway.

Short rows on the CPU
---------------------
``Tensor.softmax`` on the CPU vectorises along a row. A row shorter than one SIMD
register (16 float32 with AVX-512, 8 with AVX2) takes a scalar path, about ten times
slower per element (measured: a ``(64, 4, 15, 15)`` softmax takes 1.0 ms, a
``(64, 4, 16, 16)`` one 0.15 ms). Notebook 07's sources are 1 to 16 characters, so most
encoder and cross-attention rows are that short. For them :func:`attention_weights`
writes the softmax out, ``exp(s - max) / sum(exp(s - max))``: the same numbers to
float32 rounding, and two to four times faster, forward and backward, on notebook 07's
shapes (one training step went from 1.14 to 1.05 times ``nn.Transformer``'s time; see
``benchmarks/README.md``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._validate import check_mask, check_min_rank, check_positive_int, check_rank, check_same_dtype

_LOG2_E = 1 / math.log(2)
# Rows shorter than this go through softmax_last_axis's written-out path on the CPU
# (module docstring): one SIMD register of float32.
_SHORT_ROW = {"AVX512": 16, "AVX2": 8}.get(torch.backends.cpu.get_cpu_capability(), 4)


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    r"""Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    Args:
        query: ``(..., L_q, d_k)``
        key:   ``(..., L_k, d_k)``
        value: ``(..., L_k, d_v)``
        mask:  optional ``torch.bool`` tensor broadcastable to ``(..., L_q, L_k)``;
            ``True`` = may attend, ``False`` = blocked.

    Returns:
        ``(output, weights)``: ``output (..., L_q, d_v)``, ``weights (..., L_q, L_k)``;
        each row of ``weights`` sums to 1. Any number of leading dimensions.
        Empty sequences behave as in ``F.scaled_dot_product_attention``: ``L_q = 0``
        gives empty results, ``L_k = 0`` an all-zero output (nothing to average).

    Raises a ``TypeError`` for integer inputs or inputs of different dtypes.
    """
    check_min_rank("value", value, 2, "(..., L_k, d_v)")
    weights = attention_weights(query, key, mask)  # (..., L_q, L_k)
    if value.dtype != query.dtype:
        check_same_dtype((("query", query), ("key", key), ("value", value)))
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"key and value must have the same length L_k (second to last dimension), got key "
            f"{tuple(key.shape)} and value {tuple(value.shape)}"
        )
    return weights @ value, weights  # (..., L_q, d_v), (..., L_q, L_k)


def attention_weights(query: Tensor, key: Tensor, mask: Tensor | None = None) -> Tensor:
    """``softmax(Q K^T / sqrt(d_k))`` with blocked keys removed: ``(..., L_q, L_k)``.

    The first half of :func:`scaled_dot_product_attention`, on its own so that
    :class:`~course_utils.MultiHeadAttention` can apply dropout to the weights before
    they multiply the values, without computing the product twice.
    """
    check_min_rank("query", query, 2, "(..., L_q, d_k)")
    check_min_rank("key", key, 2, "(..., L_k, d_k)")
    if query.dtype != key.dtype or not query.is_floating_point():
        check_same_dtype((("query", query), ("key", key)))
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query and key must have the same last dimension d_k, got query {tuple(query.shape)} "
            f"and key {tuple(key.shape)}"
        )
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., L_q, L_k)
    if mask is not None:
        check_mask(mask, scores.shape)
        # finite fill, not -inf: a fully blocked row stays NaN-free (module docstring)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return softmax_last_axis(scores)  # (..., L_q, L_k)


def softmax_last_axis(scores: Tensor) -> Tensor:
    """``scores.softmax(dim=-1)``, faster for short rows on the CPU (module docstring)."""
    # an empty row (L_k = 0) has no max: torch's softmax returns it empty, as SDPA does
    if scores.device.type != "cpu" or scores.size(-1) >= _SHORT_ROW or scores.size(-1) == 0:
        return scores.softmax(dim=-1)
    # Subtracting the row's max keeps exp from overflowing; it cancels in the ratio, so
    # no gradient needs to flow through it (detach). exp(x) is taken as 2^(x log2 e):
    # torch's CPU exp takes a slow path below about -87 (every blocked key's score is
    # there), exp2 does not; both give exactly 0 for a blocked key.
    shifted = scores - scores.amax(dim=-1, keepdim=True).detach()  # (..., L_k), <= 0
    exp = torch.exp2(shifted * _LOG2_E)  # (..., L_k)
    return exp / exp.sum(dim=-1, keepdim=True)


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """``(size, size)`` boolean mask, ``True`` on and below the diagonal.

    Row ``i`` is query position ``i``: it may attend to keys ``0..i`` (itself and the
    past), never to the future.
    """
    size = check_positive_int("size", size)
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """``(B, 1, L)`` boolean mask, ``True`` where ``tokens != pad_id`` (a real token).

    The middle axis of size 1 broadcasts over the queries: every query may look at
    every real key and at no padding key.
    """
    check_rank("tokens", tokens, 2, "(B, L)")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    return (tokens != pad_id).unsqueeze(1)  # (B, 1, L)


__all__ = ["scaled_dot_product_attention", "causal_mask", "padding_mask"]
