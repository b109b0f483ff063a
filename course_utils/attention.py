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
The softmax is :func:`softmax_over_keys`, the solution's ``scores.softmax(dim=-1)``. On the
CPU, rows shorter than one SIMD register run its speed path,
:func:`course_utils.fastpaths.softmax_last_axis`: the same numbers, written out, where
torch's CPU softmax is about ten times slower per element (see :mod:`course_utils.fastpaths`;
``with fastpaths.disabled():`` turns it off).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import fastpaths
from ._validate import check_mask, check_min_rank, check_positive_int, check_same_dtype, check_token_ids


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
    return softmax_over_keys(scores)  # (..., L_q, L_k)


@fastpaths.speed_path(fastpaths.softmax_last_axis, when=fastpaths.short_rows)
def softmax_over_keys(scores: Tensor) -> Tensor:
    """``scores (..., L_q, L_k) -> weights (..., L_q, L_k)``: each query's row sums to 1."""
    return scores.softmax(dim=-1)  # (..., L_q, L_k)


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
    check_token_ids("tokens", tokens)
    return (tokens != pad_id).unsqueeze(1)  # (B, 1, L)


__all__ = ["scaled_dot_product_attention", "causal_mask", "padding_mask"]
