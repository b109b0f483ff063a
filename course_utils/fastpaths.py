"""CPU speed paths: the only places where the package computes something otherwise than
the solution cells of the notebooks write it.

The reference classes (``attention``, ``layers``, ``decoding``, ``gpt``) follow the
solution cells; where the plain formula is several times slower on a CPU (the course runs
on 2-core CPUs and in Colab), they call one of the functions below instead. Each gives
the solution's numbers to float32 rounding (``tests/test_attention.py``,
``tests/test_layers.py`` and ``tests/test_decoding_cache.py`` compare them with torch's
own functions and with the plain formula), and each says what it was measured against.
Speeds are from ``benchmarks/train_step_speed.py``, ``benchmarks/gpt_step_speed.py`` and
``benchmarks/decode_speed.py`` on the 2-core AVX2 CPU of the course machine (``benchmarks/README.md``).

1. :func:`softmax_last_axis` - ``scores.softmax(dim=-1)`` for attention rows shorter than
   one SIMD register. ``Tensor.softmax`` on the CPU vectorises along a row; a row shorter
   than one register (16 float32 with AVX-512, 8 with AVX2) takes a scalar path, about ten
   times slower per element (a ``(64, 4, 15, 15)`` softmax took 1.0 ms, a
   ``(64, 4, 16, 16)`` one 0.15 ms). Notebook 07's sources are 1 to 16 characters, so most
   encoder and cross-attention rows are that short. Written out,
   ``exp(s - max) / sum(exp(s - max))`` is two to four times faster, forward and
   backward, on notebook 07's shapes (one training step went from 1.14 to 1.05 times
   ``nn.Transformer``'s time). Used by :func:`course_utils.attention.attention_weights`.
2. :func:`layer_norm` - the solution's ``(x - mean) / sqrt(var + eps) * weight + bias``
   with the variance as a second plain mean of the centred values, and ``rsqrt``:
   ``torch.var``/``var_mean`` over the last axis take a non-vectorised path on the CPU,
   several times slower than two means. Used by :class:`course_utils.LayerNorm` on the
   CPU (elsewhere the class runs the solution's lines as written).
3. :func:`single_query_context` - ``weights @ v`` for one query position, as a weighted
   sum of the value rows: ``B * H`` products of one row are slow as a batched matmul on
   the CPU (about twice the time of the sum, measured with ``B = 500, H = 4, L_k = 15``).
   Used by the cached decoders (:func:`course_utils.decoding.decode_step` and
   :func:`course_utils.generation.generate`), one new position per step.
4. :func:`causal_self_attention` - ``self_attn(h, h, h, causal_mask(L))[0]`` of a
   :class:`course_utils.GPTBlock` through ``F.scaled_dot_product_attention(q, k, v,
   is_causal=True)``, for the only call whose weights nobody reads: the block keeps the
   output and drops the weights. Taken only when nothing could tell the difference: the
   CPU, float32 or float64, no ``mask`` argument (so no fully blocked row, where the finite
   fill gives a uniform row and SDPA another), the attention module the course's own
   ``MultiHeadAttention`` with no forward hooks (``record_attention`` sees every map) and no
   dropout acting on the weights (eval mode or ``p = 0``: SDPA would draw other random
   numbers). The explicit path materialises the ``(B, H, L, L)`` scores, fills the mask,
   takes the softmax and keeps them for the backward; the fused kernel does not. One
   training step of notebook 09's GPT went from 1.15-1.24 to 1.03-1.04 times the CPU time
   of the same model on ``nn.TransformerEncoderLayer`` (``benchmarks/gpt_step_speed.py``,
   1 thread).
   Used by :meth:`course_utils.gpt.GPTBlock.forward`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# False: every path runs the solution cells' lines instead (tests compare the two).
ENABLED = True


def applies(x: Tensor) -> bool:
    """Whether the package takes a speed path for ``x``: on a CPU, unless turned off."""
    return ENABLED and x.device.type == "cpu"


_LOG2_E = 1 / math.log(2)
# Rows shorter than this go through softmax_last_axis's written-out path on the CPU:
# one SIMD register of float32.
SHORT_ROW = {"AVX512": 16, "AVX2": 8}.get(torch.backends.cpu.get_cpu_capability(), 4)


def softmax_last_axis(scores: Tensor) -> Tensor:
    """``scores.softmax(dim=-1)``, faster for short rows on the CPU (path 1 above)."""
    # an empty row (L_k = 0) has no max: torch's softmax returns it empty, as SDPA does
    if not applies(scores) or scores.size(-1) >= SHORT_ROW or scores.size(-1) == 0:
        return scores.softmax(dim=-1)
    # Subtracting the row's max keeps exp from overflowing; it cancels in the ratio, so
    # no gradient needs to flow through it (detach). exp(x) is taken as 2^(x log2 e):
    # torch's CPU exp takes a slow path below about -87 (every blocked key's score is
    # there), exp2 does not; both give exactly 0 for a blocked key.
    shifted = scores - scores.amax(dim=-1, keepdim=True).detach()  # (..., L_k), <= 0
    exp = torch.exp2(shifted * _LOG2_E)  # (..., L_k)
    return exp / exp.sum(dim=-1, keepdim=True)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis, biased variance
    (divide by ``D``), with two plain means instead of ``torch.var`` (path 2 above).

    ``x (..., D)``, ``weight, bias (D,)``; returns ``(..., D)``.
    """
    centred = x - x.mean(dim=-1, keepdim=True)  # (..., D)
    var = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), biased: divide by D
    return centred * torch.rsqrt(var + eps) * weight + bias  # (..., D)


def fused_attention_applies(attn: nn.Module, h: Tensor) -> bool:
    """Whether :func:`causal_self_attention` may stand in for ``attn(h, h, h, causal)[0]``
    (path 4 above; the caller checks that ``attn`` is the course's ``MultiHeadAttention``
    and that there is no ``mask``)."""
    hooked = attn._forward_hooks or attn._forward_pre_hooks
    hooked = hooked or getattr(nn.modules.module, "_global_forward_hooks", None)
    hooked = hooked or getattr(nn.modules.module, "_global_forward_pre_hooks", None)
    dropping = attn.training and attn.dropout.p > 0
    return applies(h) and h.dtype in (torch.float32, torch.float64) and not hooked and not dropping


def causal_self_attention(attn: nn.Module, h: Tensor) -> Tensor:
    """``attn(h, h, h, causal_mask(L))[0]`` for ``h (B, L, D)`` with the fused kernel (path 4
    above): the same projections, heads and output layer, the scores never materialised."""
    B, L, D = h.shape
    q, k, v = (w(h).view(B, L, attn.num_heads, attn.d_k).transpose(1, 2)  # (B, H, L, d_k) each
               for w in (attn.w_q, attn.w_k, attn.w_v))
    context = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, L, d_k)
    return attn.w_o(context.transpose(1, 2).reshape(B, L, D))  # (B, L, D)


def single_query_context(weights: Tensor, v: Tensor) -> Tensor:
    """``weights @ v`` for one query: ``weights (..., 1, L_k)``, ``v (..., L_k, d_k)`` ->
    ``(..., 1, d_k)``, as a sum of the value rows weighted (path 3 above)."""
    return (weights.transpose(-2, -1) * v).sum(dim=-2, keepdim=True)  # (..., 1, d_k)


__all__ = [
    "ENABLED",
    "applies",
    "SHORT_ROW",
    "softmax_last_axis",
    "layer_norm",
    "fused_attention_applies",
    "causal_self_attention",
    "single_query_context",
]
