"""CPU speed paths: the only places where the package computes something otherwise than
the solution cells of the notebooks write it.

The reference classes (``attention``, ``layers``, ``decoding``, ``gpt``) follow the
solution cells; where the plain formula is several times slower on a CPU (the course runs
on 2-core CPUs and in Colab), a call runs one of the functions below instead, through the
seam described at the end (one switch turns them all off). Each gives
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
   ``nn.Transformer``'s time). The twin of :func:`course_utils.attention.softmax_over_keys`
   (the softmax of :func:`~course_utils.attention.attention_weights`), for rows shorter
   than :data:`SHORT_ROW` (:func:`short_rows`).
2. :func:`layer_norm` - the solution's ``(x - mean) / sqrt(var + eps) * weight + bias``
   with the variance as a second plain mean of the centred values, and ``rsqrt``:
   ``torch.var``/``var_mean`` over the last axis take a non-vectorised path on the CPU,
   several times slower than two means. The twin of ``course_utils.LayerNorm.forward``
   for float32 and float64 input on the CPU (:func:`layer_norm_applies`; elsewhere the
   class runs the solution's lines as written).
3. :func:`single_query_context` - ``weights @ v`` for one query position, as a weighted
   sum of the value rows: ``B * H`` products of one row are slow as a batched matmul on
   the CPU (about twice the time of the sum, measured with ``B = 500, H = 4, L_k = 15``).
   The twin, on the CPU, of the product in :func:`course_utils.decoding.attend_cached`,
   which the cached decoders (:func:`course_utils.decoding.decode_step` and
   :func:`course_utils.generation.generate`) call for one new position per step.
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
   1 thread). :func:`gpt_block` (the block's forward with this attention) is the twin of
   ``course_utils.GPTBlock.forward`` where :func:`gpt_block_applies` holds.


The seam
--------
Each path is the twin of one plain function or method of the reference modules, declared
where the plain one is written, by :func:`speed_path`::

    @fastpaths.speed_path(fastpaths.layer_norm, when=fastpaths.layer_norm_applies)
    def forward(self, x):
        ...  # the solution cell's lines

The body a student reads is the solution's; a call runs the twin instead only while the
paths are on and ``when`` holds for its arguments (the CPU, the dtypes and shapes the twin
was measured and tested on), else the body. :data:`SPEED_PATHS` lists the twins by the
plain function's name. The one switch is :func:`disabled`::

    with fastpaths.disabled():  # every call inside runs the solution cells' lines
        ...

a context manager over a :class:`contextvars.ContextVar` (as ``torch.no_grad`` is over its
thread-local flag): there is nothing to assign, and it ends with its ``with`` block, also
when the block raises. :func:`enabled` says whether the paths are on here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# ------------------------------------------------------------------ the seam

# True inside `with disabled():` only. A ContextVar, not a module flag: set and reset by the
# context manager alone, and local to the thread (or asyncio task) that entered it.
_OFF: ContextVar[bool] = ContextVar("course_utils_fastpaths_off", default=False)

# plain function's qualified name -> its twin, filled by speed_path as the modules load (the
# documentation of what has a twin; the plain functions themselves are not kept here)
SPEED_PATHS: dict[str, Callable] = {}


@contextmanager
def disabled() -> Iterator[None]:
    """Inside the ``with`` block, every reference runs the solution cells' lines (the tests
    compare the two; a student may too)."""
    token = _OFF.set(True)
    try:
        yield
    finally:
        _OFF.reset(token)


def enabled() -> bool:
    """Whether the speed paths are on here (outside every ``with disabled():``)."""
    return not _OFF.get()


def speed_path(fast: Callable, when: Callable[..., bool]) -> Callable[[Callable], Callable]:
    """Decorator: the decorated (plain) function, whose calls run ``fast`` with the same
    arguments instead while the paths are on and ``when(*args, **kwargs)`` holds."""

    def decorate(plain: Callable) -> Callable:
        @functools.wraps(plain)
        def dispatch(*args, **kwargs):
            if not _OFF.get() and when(*args, **kwargs):
                return fast(*args, **kwargs)
            return plain(*args, **kwargs)

        SPEED_PATHS[f"{plain.__module__}.{plain.__qualname__}"] = fast
        return dispatch

    return decorate


def on_cpu(x: Tensor, *_args, **_kwargs) -> bool:
    """``when`` of the paths that hold for every input on the CPU."""
    return x.is_cpu


# ------------------------------------------------------------------ 1. softmax of short rows

_LOG2_E = 1 / math.log(2)
# Rows shorter than this go through softmax_last_axis's written-out path on the CPU:
# one SIMD register of float32.
SHORT_ROW = {"AVX512": 16, "AVX2": 8}.get(torch.backends.cpu.get_cpu_capability(), 4)


def short_rows(scores: Tensor) -> bool:
    """``when`` of path 1: CPU rows shorter than one SIMD register (an empty row, ``L_k = 0``,
    has no max: torch's softmax returns it empty, as SDPA does)."""
    return scores.is_cpu and 0 < scores.size(-1) < SHORT_ROW


def softmax_last_axis(scores: Tensor) -> Tensor:
    """``scores.softmax(dim=-1)`` written out, faster for short rows on the CPU (path 1 above)."""
    # Subtracting the row's max keeps exp from overflowing; it cancels in the ratio, so
    # no gradient needs to flow through it (detach). exp(x) is taken as 2^(x log2 e):
    # torch's CPU exp takes a slow path below about -87 (every blocked key's score is
    # there), exp2 does not; both give exactly 0 for a blocked key.
    shifted = scores - scores.amax(dim=-1, keepdim=True).detach()  # (..., L_k), <= 0
    exp = torch.exp2(shifted * _LOG2_E)  # (..., L_k)
    return exp / exp.sum(dim=-1, keepdim=True)


# ------------------------------------------------------------------ 2. LayerNorm's statistics


def layer_norm_applies(norm: nn.Module, x: Tensor) -> bool:
    """``when`` of path 2: float32 or float64 input on the CPU, of the norm's width (any other
    input runs the plain forward, which converts float16 or raises the course's message)."""
    return (isinstance(x, Tensor) and x.is_cpu and x.dtype in (torch.float32, torch.float64)
            and x.dim() >= 1 and x.size(-1) == norm.d_model)


def layer_norm(norm: nn.Module, x: Tensor) -> Tensor:
    """``LayerNorm.forward``: ``(x - mean) / sqrt(var + eps) * weight + bias`` over the last
    axis, biased variance (divide by ``D``), with two plain means instead of ``torch.var``
    (path 2 above). ``x (..., D)``; returns ``(..., D)``."""
    centred = x - x.mean(dim=-1, keepdim=True)  # (..., D)
    var = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), biased: divide by D
    return centred * torch.rsqrt(var + norm.eps) * norm.weight + norm.bias  # (..., D)


# ------------------------------------------------------------------ 3. one query's context


def single_query_context(weights: Tensor, v: Tensor) -> Tensor:
    """``weights @ v`` for one query: ``weights (..., 1, L_k)``, ``v (..., L_k, d_k)`` ->
    ``(..., 1, d_k)``, as a sum of the value rows weighted (path 3 above)."""
    return (weights.transpose(-2, -1) * v).sum(dim=-2, keepdim=True)  # (..., 1, d_k)


# ------------------------------------------------------------------ 4. GPTBlock's causal attention


def gpt_block_applies(attention: type) -> Callable[..., bool]:
    """``when`` of path 4, ``when(block, x, mask=None)``: no ``mask``, ``x (B, L, D)`` float32 or
    float64 on the CPU, the block's attention of the class ``attention`` itself (the course's
    ``MultiHeadAttention``, which :mod:`course_utils.gpt` passes: this module cannot import it,
    and a subclass may compute otherwise), with no forward hooks and no dropout acting on the
    weights."""

    def when(block: nn.Module, x: Tensor, mask: Tensor | None = None) -> bool:
        attn = block.self_attn
        if mask is not None or type(attn) is not attention:
            return False
        hooked = attn._forward_hooks or attn._forward_pre_hooks
        hooked = hooked or getattr(nn.modules.module, "_global_forward_hooks", None)
        hooked = hooked or getattr(nn.modules.module, "_global_forward_pre_hooks", None)
        dropping = attn.training and attn.dropout.p > 0
        return (isinstance(x, Tensor) and x.dim() == 3 and x.is_cpu
                and x.dtype in (torch.float32, torch.float64) and not hooked and not dropping)

    return when


def causal_self_attention(attn: nn.Module, h: Tensor) -> Tensor:
    """``attn(h, h, h, causal_mask(L))[0]`` for ``h (B, L, D)`` with the fused kernel (path 4
    above): the same projections, heads and output layer, the scores never materialised."""
    B, L, D = h.shape
    q, k, v = (w(h).view(B, L, attn.num_heads, attn.d_k).transpose(1, 2)  # (B, H, L, d_k) each
               for w in (attn.w_q, attn.w_k, attn.w_v))
    context = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, L, d_k)
    return attn.w_o(context.transpose(1, 2).reshape(B, L, D))  # (B, L, D)


def gpt_block(block: nn.Module, x: Tensor, mask: Tensor | None = None) -> Tensor:
    """``GPTBlock.forward(x)`` with its self-attention through :func:`causal_self_attention`
    (path 4 above); ``mask`` is ``None`` here (:func:`gpt_block_applies`)."""
    h = block.norm1(x)  # (B, L, D)
    x = x + block.dropout1(causal_self_attention(block.self_attn, h))
    return x + block.dropout2(block.feed_forward(block.norm2(x)))  # (B, L, D)


__all__ = [
    "SPEED_PATHS",
    "disabled",
    "enabled",
    "speed_path",
    "on_cpu",
    "SHORT_ROW",
    "short_rows",
    "softmax_last_axis",
    "layer_norm_applies",
    "layer_norm",
    "single_query_context",
    "gpt_block_applies",
    "causal_self_attention",
    "gpt_block",
]
