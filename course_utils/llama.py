"""A modern decoder-only language model, Llama style (backs notebook 10).

Notebook 09's GPT-2 block with the four changes every recent open model (Llama, Mistral,
Qwen, Gemma) makes:

* :class:`RMSNorm` instead of LayerNorm: ``x / sqrt(mean(x^2) + eps) * weight``, no mean
  subtracted, no bias;
* rotary position embeddings (:func:`rotary_tables`, :func:`apply_rotary`) instead of a
  learned position table: queries and keys are rotated by an angle proportional to their
  position, so their dot product depends on the *difference* of the positions only;
* :class:`SwiGLU` instead of the GELU feed-forward: ``w2(silu(w1 x) * w3 x)``, hidden width
  about ``8/3 d_model`` (:func:`swiglu_hidden_width`, rounded as Llama rounds);
* :class:`GroupedQueryAttention`: ``n_kv_heads`` key/value heads, each shared by
  ``num_heads // n_kv_heads`` consecutive query heads (:func:`repeat_kv_heads`); multi-head
  attention is ``n_kv_heads = num_heads``, multi-query attention ``n_kv_heads = 1``.

:class:`LlamaBlock` is pre-norm (RMSNorm), causal self-attention with RoPE and GQA, then
SwiGLU; :class:`Llama` adds the token embedding, a final RMSNorm and an untied output layer.
No biases anywhere, no dropout. :func:`llama_decode_step` / :func:`generate` decode with the
key/value cache of notebook 07 (which stores only the ``n_kv_heads`` heads: GQA's memory
saving), rotating each new token at its true position. :class:`Llama` also takes its parts
(``block``, ``norm``, ``rotary_tables``, ``apply_rotary``) from outside under the same weight
names: notebook 10 builds it from the student's exercises, and the cached decoding calls those
through the names alone (:func:`project_qkv`, :func:`attend_groups`).

**Rotary layout.** Two conventions exist. Meta's reference code rotates the pairs of
features ``(2i, 2i+1)``; Hugging Face's ``rotate_half`` rotates feature ``i`` with feature
``i + d_k/2`` (the "halves" layout). They are the same model after permuting the rows of
``w_q`` and ``w_k`` within each head; this module (and the contract) uses the halves layout,
so ``LlamaForCausalLM`` weights copy without a permutation (:mod:`course_utils.llama_weights`).
Frequency ``i`` (``i = 0 .. d_k/2 - 1``) is ``base ** (-2i / d_k)``; the tables are
``(max_len, d_k)`` with the ``d_k/2`` angles written twice, ``[angles | angles]``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ._validate import check_int, check_rank, check_vocab_ids, is_number
from .attention import causal_mask
from .decoding import KVCache
from .generation import empty_cache
from .generation import generate as _generate_with
from .gpt import init_gpt2_weights
from .multihead import merge_heads, split_heads


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2 over the last axis) + eps) * weight``: ``(..., D) -> (..., D)``.

    Unlike LayerNorm, no mean is subtracted and there is no bias: one reduction instead of
    two, and ``D`` parameters instead of ``2 D``. ``weight`` starts at ones. The same numbers
    as ``torch.nn.RMSNorm(D, eps=eps)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_int("d_model", d_model, low=1)
        if not is_number(eps) or not eps >= 0:
            raise ValueError(f"eps must be a number >= 0, got {eps!r}")
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        if x.size(-1) != self.weight.numel():
            raise ValueError(f"x has {x.size(-1)} features in its last axis, RMSNorm was built for "
                             f"d_model = {self.weight.numel()}")
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x / rms * self.weight  # (..., D)


# ---------------------------------------------------------------- rotary position embeddings
def _check_head_width(d_k: int) -> None:
    if d_k % 2 != 0:
        raise ValueError(f"rotary embeddings rotate pairs of features: the head width d_k must be even, got {d_k}")


def rotary_tables(d_k: int, max_len: int, base: float = 10000.0,
                  device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """``(cos, sin)``, each ``(max_len, d_k)``: row ``m`` holds ``cos(m theta_i)`` / ``sin(m theta_i)``.

    ``theta_i = base ** (-2i / d_k)`` for ``i = 0 .. d_k/2 - 1``, written twice along the
    row (``[theta | theta]``, the halves layout of Hugging Face's ``rotate_half``). Computed
    in float32.
    """
    check_int("d_k", d_k, low=1)
    _check_head_width(d_k)
    check_int("max_len", max_len, low=1)
    if not is_number(base) or not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    inv_freq = base ** (-torch.arange(0, d_k, 2, dtype=torch.float32, device=device) / d_k)  # (d_k/2,)
    angles = torch.arange(max_len, dtype=torch.float32, device=device)[:, None] * inv_freq  # (max_len, d_k/2)
    angles = torch.cat([angles, angles], dim=-1)  # (max_len, d_k)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    """``[x1 | x2] -> [-x2 | x1]`` over the last axis (its two halves): the 90-degree turn of
    every pair ``(x[i], x[i + d_k/2])``."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d_k/2) each
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, offset: int = 0) -> Tensor:
    """Rotate ``x (..., L, d_k)`` (queries or keys) as positions ``offset .. offset + L - 1``.

    ``cos, sin (max_len, d_k)`` are :func:`rotary_tables`. Each pair ``(x[i], x[i + d_k/2])``
    turns by the angle ``position * theta_i``: ``x * cos + rotate_half(x) * sin``. With a
    key/value cache, the new token at position ``p`` is ``apply_rotary(x, cos, sin, offset=p)``.
    """
    if not isinstance(x, Tensor) or x.dim() < 2:
        raise ValueError(f"x must be a tensor (..., L, d_k), got {getattr(x, 'shape', type(x).__name__)}")
    check_rank("cos", cos, 2, "(max_len, d_k)")
    check_rank("sin", sin, 2, "(max_len, d_k)")
    check_int("offset", offset, low=0)
    L, d_k = x.shape[-2:]
    _check_head_width(d_k)
    if cos.shape != sin.shape or cos.size(1) != d_k:
        raise ValueError(f"cos and sin must be (max_len, d_k = {d_k}), got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if offset + L > cos.size(0):
        raise ValueError(f"positions {offset} .. {offset + L - 1} go past the rotary tables, which hold "
                         f"{cos.size(0)} positions (max_len): build them longer or crop the context")
    c = cos[offset : offset + L].to(x.dtype)  # (L, d_k)
    s = sin[offset : offset + L].to(x.dtype)  # (L, d_k)
    return x * c + rotate_half(x) * s  # (..., L, d_k)


# ---------------------------------------------------------------- SwiGLU feed-forward
def swiglu_hidden_width(d_model: int, multiple_of: int = 256) -> int:
    """Llama's hidden width: ``2/3`` of ``4 d_model`` (so that three matrices hold as many
    parameters as the GELU MLP's two), rounded *up* to a multiple of ``multiple_of``."""
    check_int("d_model", d_model, low=1)
    check_int("multiple_of", multiple_of, low=1)
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)``: ``(..., D) -> (..., D)``, three ``nn.Linear`` without bias.

    ``w1`` is the gate (through SiLU), ``w3`` the value it multiplies, ``w2`` projects back
    (Hugging Face calls them ``gate_proj``, ``up_proj``, ``down_proj``).
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        check_int("d_model", d_model, low=1)
        check_int("d_ff", d_ff, low=1)
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # (..., D)


# ---------------------------------------------------------------- grouped-query attention
def repeat_kv_heads(x: Tensor, n_rep: int) -> Tensor:
    """``(B, H_kv, L, d_k) -> (B, H_kv * n_rep, L, d_k)``: each key/value head ``j`` serves the
    ``n_rep`` consecutive query heads ``j * n_rep .. (j + 1) * n_rep - 1``
    (``repeat_interleave``, not ``repeat``, which would give head ``h`` the group ``h % H_kv``)."""
    check_rank("x", x, 4, "(B, H_kv, L, d_k)")
    check_int("n_rep", n_rep, low=1)
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)  # (B, H, L, d_k)


def _check_heads(d_model: int, num_heads: int, n_kv_heads: int) -> None:
    check_int("num_heads", num_heads, low=1)
    check_int("n_kv_heads", n_kv_heads, low=1)
    if d_model % num_heads != 0:
        raise ValueError(f"d_model = {d_model} must be divisible by num_heads = {num_heads}")
    if num_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads = {n_kv_heads} must divide num_heads = {num_heads}: each key/value head "
                         "serves a whole group of query heads (e.g. n_kv_heads in "
                         f"{[n for n in range(1, num_heads + 1) if num_heads % n == 0]})")


def project_qkv(attn: nn.Module, x: Tensor, cos: Tensor | None, sin: Tensor | None, offset: int = 0,
                rotate: Callable[..., Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``q (B, H, L, d_k)``, ``k, v (B, H_kv, L, d_k)`` of ``x (B, L, D)`` through ``attn``'s ``w_q``, ``w_k``,
    ``w_v`` (any module with the exercise's names: ``num_heads``, ``n_kv_heads``), q and k rotated by
    ``rotate`` (default :func:`apply_rotary`) as positions ``offset ..``; ``cos=None``: not rotated."""
    q = split_heads(attn.w_q(x), attn.num_heads)  # (B, H, L, d_k)
    k = split_heads(attn.w_k(x), attn.n_kv_heads)  # (B, H_kv, L, d_k)
    v = split_heads(attn.w_v(x), attn.n_kv_heads)  # (B, H_kv, L, d_k)
    if cos is not None:
        rotate = apply_rotary if rotate is None else rotate
        q, k = rotate(q, cos, sin, offset=offset), rotate(k, cos, sin, offset=offset)
    return q, k, v


def attend_groups(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Attention of ``q (B, H, L_q, d_k)`` over ``k, v (B, H_kv, L_k, d_k)``, each key/value head shared by
    its group (:func:`repeat_kv_heads`), then ``attn.w_o``: ``(B, L_q, D)``."""
    n_rep = attn.num_heads // attn.n_kv_heads
    k, v = repeat_kv_heads(k, n_rep), repeat_kv_heads(v, n_rep)  # (B, H, L_k, d_k)
    # notebook 01's softmax(q k^T / sqrt(d_k)) v: torch's kernel, the same numbers, faster
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, L_q, d_k)
    return attn.w_o(merge_heads(context))  # (B, L_q, D)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``num_heads`` query heads and ``n_kv_heads`` key/value heads.

    ``forward(x (B, L, D), cos, sin, mask=None, offset=0) -> (B, L, D)``. Submodules
    ``w_q (D -> D)``, ``w_k``, ``w_v (D -> n_kv_heads * d_k)``, ``w_o (D -> D)``, no bias
    (``bias=True`` for notebook 09's GPT-2 in the side-by-side comparison). Queries and keys are
    rotated (:func:`apply_rotary`) as positions ``offset ..``, values never; ``cos=None`` skips
    the rotation (a model with learned positions). Then the key/value heads are repeated for
    their groups (:func:`repeat_kv_heads`) and attention is causal, ``&`` the optional ``mask``
    (broadcastable to ``(B, H, L, L)``).
    """

    def __init__(self, d_model: int, num_heads: int, n_kv_heads: int | None = None, bias: bool = False):
        super().__init__()
        n_kv_heads = num_heads if n_kv_heads is None else n_kv_heads
        check_int("d_model", d_model, low=1)
        _check_heads(d_model, num_heads, n_kv_heads)
        self.num_heads, self.n_kv_heads, self.d_k = num_heads, n_kv_heads, d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def project(
        self, x: Tensor, cos: Tensor | None, sin: Tensor | None, offset: int = 0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``q (B, H, L, d_k)``, ``k, v (B, H_kv, L, d_k)`` of ``x (B, L, D)``, q and k rotated."""
        return project_qkv(self, x, cos, sin, offset)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Attention of ``q (B, H, L_q, d_k)`` over ``k, v (B, H_kv, L_k, d_k)``: ``(B, L_q, D)``."""
        return attend_groups(self, q, k, v, mask)

    def forward(self, x: Tensor, cos: Tensor | None = None, sin: Tensor | None = None,
                mask: Tensor | None = None, offset: int = 0) -> Tensor:
        check_rank("x", x, 3, "(B, L, D)")
        q, k, v = self.project(x, cos, sin, offset)
        allowed = causal_mask(x.size(1), device=x.device)  # (L, L)
        if mask is not None:
            allowed = allowed & mask  # (B, H, L, L) or broadcastable
        return self.attend(q, k, v, allowed)


# ---------------------------------------------------------------- the block and the model
_REFERENCE_TABLES, _REFERENCE_ROTATION = rotary_tables, apply_rotary  # Llama's defaults (its arguments shadow them)


class LlamaBlock(nn.Module):
    """``x = x + self_attn(norm1(x))`` then ``x = x + feed_forward(norm2(x))``.

    ``norm1, norm2``: :class:`RMSNorm`; ``self_attn``: :class:`GroupedQueryAttention` (RoPE,
    causal); ``feed_forward``: :class:`SwiGLU`. ``forward(x (B, L, D), cos, sin, mask=None)``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, n_kv_heads: int | None = None, eps: float = 1e-6):
        super().__init__()
        self.norm1 = RMSNorm(d_model, eps)
        self.self_attn = GroupedQueryAttention(d_model, num_heads, n_kv_heads)
        self.norm2 = RMSNorm(d_model, eps)
        self.feed_forward = SwiGLU(d_model, d_ff)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None = None) -> Tensor:
        x = x + self.self_attn(self.norm1(x), cos, sin, mask)  # (B, L, D)
        return x + self.feed_forward(self.norm2(x))  # (B, L, D)


class Llama(nn.Module):
    """A Llama-style language model: ``forward(tokens (B, L), mask=None) -> logits (B, L, V)``.

    Submodules: ``token_embedding`` (``nn.Embedding(V, D)``, no position table), ``blocks``
    (``num_layers`` :class:`LlamaBlock`), ``norm`` (the final :class:`RMSNorm`), ``lm_head``
    (``nn.Linear(D, V, bias=False)``, its own matrix unless ``tie_weights``). Buffers
    ``rope_cos, rope_sin (max_len, d_k)`` (:func:`rotary_tables`, not saved in the state dict).
    ``d_ff`` defaults to :func:`swiglu_hidden_width` ``(d_model, multiple_of)``;
    ``n_kv_heads`` to ``num_heads``. Weights start normal with standard deviation 0.02, norms
    at ones.

    The parts are notebook 10's exercises, the course's by default; a notebook passes its own
    (the state dict's names stay these): ``block(d_model, num_heads, d_ff, n_kv_heads, eps)`` with
    ``norm1``, ``self_attn`` (``w_q, w_k, w_v, w_o``, ``num_heads``, ``n_kv_heads``, ``d_k``),
    ``norm2``, ``feed_forward`` and ``forward(x, cos, sin, mask=None)``; ``norm(d_model, eps)``,
    the final norm; ``rotary_tables(d_k, max_len, base)``, the tables; ``apply_rotary(x, cos,
    sin, offset=...)``, kept as ``model.apply_rotary``: the rotation :func:`llama_decode_step`
    applies to each cached token (the blocks rotate with their own).
    """

    def __init__(self, vocab_size: int, d_model: int = 512, num_heads: int = 8, num_layers: int = 8,
                 d_ff: int | None = None, n_kv_heads: int | None = None, max_len: int = 2048,
                 rope_base: float = 10000.0, eps: float = 1e-6, multiple_of: int = 256, tie_weights: bool = False,
                 *, block: Callable[..., nn.Module] | None = None, norm: Callable[..., nn.Module] | None = None,
                 rotary_tables: Callable[..., tuple[Tensor, Tensor]] | None = None,
                 apply_rotary: Callable[..., Tensor] | None = None):
        super().__init__()
        block = LlamaBlock if block is None else block
        norm = RMSNorm if norm is None else norm
        tables = _REFERENCE_TABLES if rotary_tables is None else rotary_tables
        self.apply_rotary = _REFERENCE_ROTATION if apply_rotary is None else apply_rotary
        check_int("vocab_size", vocab_size, low=1)
        check_int("d_model", d_model, low=1)
        n_kv_heads = num_heads if n_kv_heads is None else n_kv_heads
        _check_heads(d_model, num_heads, n_kv_heads)
        d_ff = swiglu_hidden_width(d_model, multiple_of) if d_ff is None else d_ff
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, check_int("max_len", max_len, low=1)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(block(d_model, num_heads, d_ff, n_kv_heads, eps) for _ in range(num_layers))
        self.norm = norm(d_model, eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        init_gpt2_weights(self)  # no biases here, and the norms keep their ones
        if tie_weights:
            self.lm_head.weight = self.token_embedding.weight
        cos, sin = tables(d_model // num_heads, max_len, rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)  # (max_len, d_k)
        self.register_buffer("rope_sin", sin, persistent=False)  # (max_len, d_k)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        check_rank("tokens", tokens, 2, "(B, L) of token ids")
        check_vocab_ids(tokens, self.vocab_size)
        if not 1 <= tokens.size(1) <= self.max_len:
            raise ValueError(f"tokens has length {tokens.size(1)}; this model reads 1 .. max_len = {self.max_len} "
                             "positions (its rotary tables end there): crop the context to the last max_len tokens")
        x = self.token_embedding(tokens)  # (B, L, D): no position added, the rotation carries it
        for block in self.blocks:
            x = block(x, self.rope_cos, self.rope_sin, mask)  # (B, L, D)
        return self.lm_head(self.norm(x))  # (B, L, V)


# ---------------------------------------------------------------- generation with a key/value cache
def llama_decode_step(model: Llama, token: Tensor, position: int, cache: KVCache) -> Tensor:
    """Feed ``token (B,)`` at ``position`` (``== cache.length``): next-token logits ``(B, V)``.

    Per block, the new token's query and key are rotated at ``position`` (its true place in
    the sequence, not 0), the key and value (``n_kv_heads`` heads) appended to ``cache``, and
    the query attends to every cached position (no mask: the cache holds no future). It reads
    only the contract's names (``norm1``, ``self_attn.w_q`` ... ``w_o``, ``num_heads``,
    ``n_kv_heads``, ``norm2``, ``feed_forward``) and rotates with ``model.apply_rotary``, so a
    model built from a student's parts decodes with the student's projections, norms,
    feed-forward and rotation; the attention over the cache is :func:`attend_groups`.
    """
    rotate = getattr(model, "apply_rotary", None)
    check_int("position", position, low=0)
    if position >= model.max_len:
        raise ValueError(f"position {position} is past the model's max_len = {model.max_len} (its rotary tables "
                         "end there)")
    if position != cache.length:
        raise ValueError(f"position must be the number of positions cached, {cache.length}; got {position}")
    x = model.token_embedding(token.unsqueeze(1))  # (B, 1, D)
    for i, block in enumerate(model.blocks):
        attn = block.self_attn
        h = block.norm1(x)  # (B, 1, D)
        q, k, v = project_qkv(attn, h, model.rope_cos, model.rope_sin, position, rotate)  # q (B, H, 1, d_k)
        k, v = cache.append(i, k, v)  # (B, H_kv, T + 1, d_k) each
        x = x + attend_groups(attn, q, k, v, None)  # (B, 1, D)
        x = x + block.feed_forward(block.norm2(x))  # (B, 1, D)
    return model.lm_head(model.norm(x))[:, 0]  # (B, V)


def llama_cache(model: Llama, batch_size: int, capacity: int = 16) -> KVCache:
    """An empty cache for ``model``: ``(B, n_kv_heads, capacity, d_k)`` per block (GQA stores
    ``n_kv_heads`` heads, not ``num_heads``)."""
    return empty_cache(model, batch_size, capacity)


def kv_cache_bytes_per_token(model: nn.Module) -> int:
    """Bytes of keys and values the cache holds per token: ``2 * layers * n_kv_heads * d_k *``
    the element size (the cost GQA and MQA divide)."""
    total = 0
    for block in model.blocks:
        attn = block.self_attn
        heads = getattr(attn, "n_kv_heads", attn.num_heads)
        total += 2 * heads * attn.d_k * attn.w_k.weight.element_size()
    return total


@torch.no_grad()
def generate(model: Llama, tokens: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, generator: torch.Generator | None = None, use_cache: bool = True) -> Tensor:
    """Notebook 09's :func:`course_utils.generation.generate` for a :class:`Llama`: the same sampling,
    each cached step a :func:`llama_decode_step`. ``(B, L0) -> (B, L0 + max_new_tokens)``."""
    return _generate_with(model, tokens, max_new_tokens, temperature, top_k, top_p, generator, use_cache,
                          decode_step=llama_decode_step)


__all__ = [
    "RMSNorm",
    "rotary_tables",
    "rotate_half",
    "apply_rotary",
    "swiglu_hidden_width",
    "SwiGLU",
    "repeat_kv_heads",
    "project_qkv",
    "attend_groups",
    "GroupedQueryAttention",
    "LlamaBlock",
    "Llama",
    "llama_decode_step",
    "llama_cache",
    "kv_cache_bytes_per_token",
    "generate",
]
