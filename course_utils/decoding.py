"""Greedy autoregressive decoding (backs notebooks 06 and 07).

Start every target with ``<bos>``, run the decoder on the prefix, append the most
likely next token, and repeat until every sequence has produced ``<eos>`` or
``max_len`` new tokens exist. :func:`greedy_decode` (notebook 06, also
``Transformer.greedy_decode``) re-runs the decoder on the whole prefix at each step
(cost grows with the square of the length). :func:`greedy_decode_cached` (notebook
07's worked section) gives the same tokens and feeds only the newest token through
the decoder, reusing the keys and values of earlier steps (:class:`KVCache`,
:func:`decode_step`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import fastpaths
from ._validate import check_int, check_mask, check_rank
from .attention import attention_weights, causal_mask
from .modes import eval_mode  # also importable from here, where it was first written
from .multihead import merge_heads, split_heads


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    src_mask: Tensor | None = None,
    pad_id: int | None = None,
) -> Tensor:
    """Decode a batch greedily with an encoder-decoder ``model``.

    Args:
        model: has ``encode(src, src_mask)``, ``decode(tgt, memory, tgt_mask,
            memory_mask)`` and ``output_projection`` (a :class:`~course_utils.Transformer`).
        src: ``(B, L_src)`` token ids.
        max_len: the most tokens to generate after ``<bos>``.
        src_mask: boolean ``(B, 1, L_src)``, ``True`` = real token; ``None`` = no padding.
        pad_id: written after a sequence's ``<eos>``; defaults to ``eos_id``.

    Returns:
        ``(B, T)`` token ids, ``T <= max_len + 1``; column 0 is ``<bos>``. Stops early
        when every sequence has produced ``<eos>``. Runs in eval mode (no dropout) and
        puts the model back in the mode it was in.
    """

    _check_decode_args(src, max_len)
    with eval_mode(model):
        memory = model.encode(src, src_mask)  # (B, L_src, D)

        def next_logits(ys: Tensor) -> Tensor:  # ys (B, T) -> (B, V)
            tgt_mask = causal_mask(ys.size(1), device=src.device)  # (T, T)
            out = model.decode(ys, memory, tgt_mask, src_mask)  # (B, T, D): the whole prefix, every step
            return model.output_projection(out[:, -1])  # (B, V)

        return _greedy_loop(src, max_len, bos_id, eos_id, pad_id, next_logits)


def _check_decode_args(src: Tensor, max_len: int) -> None:
    check_rank("src", src, 2, "(B, L_src) of token ids")
    check_int("max_len", max_len, low=0)


def _greedy_loop(
    src: Tensor, max_len: int, bos_id: int, eos_id: int, pad_id: int | None, next_logits: Callable[[Tensor], Tensor]
) -> Tensor:
    """The loop both greedy decoders share, so that they stop and pad alike.

    ``next_logits`` maps the tokens so far ``ys (B, T)`` to the logits of the next token
    ``(B, V)``. Every row starts with ``bos_id``; after a row's ``<eos>`` it gets
    ``pad_id`` (default ``eos_id``); the loop ends when every row has produced ``<eos>``
    or after ``max_len`` steps.
    """
    fill = eos_id if pad_id is None else pad_id
    B = src.size(0)
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
    for _ in range(max_len):
        next_token = next_logits(ys).argmax(dim=-1).masked_fill(finished, fill)  # (B,)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (B, T + 1)
        finished |= next_token == eos_id
        if bool(finished.all()):
            break
    return ys


# ------------------------------------------------------------------ key/value cache
#
# Notebook 07's worked section. At step t the naive loop above re-runs the decoder on
# all t + 1 tokens of the prefix, although only the newest position's output is used
# and, thanks to the causal mask, nothing about the earlier positions has changed:
# position j only ever looks at positions 0..j, so its hidden states, and so its keys
# and values in every layer, are the same at every later step. The cached version
# therefore
#
# * computes the cross-attention keys and values of the encoder's output (``memory``)
#   once, before the loop (they depend on the source only);
# * feeds only the newest token through the decoder, and in each layer's
#   self-attention appends the new position's key and value to those of the earlier
#   positions (a :class:`KVCache`). No causal mask is needed: the cache holds only the
#   past and the present, there is no future to hide.
#
# Each step now costs one position instead of t + 1, and the cross-attention
# projections of the source are no longer repeated at every step. The logits are the
# same numbers as the naive loop's up to float32 rounding (the matrix products have
# different shapes, so their sums may be added in another order), and so the tokens
# are the same: only two logits closer than that rounding (about 1e-6) could be
# ranked differently, and neither the tests nor the benchmark's 3,000 test sentences
# meet one. tests/test_decoding_cache.py checks both claims; benchmarks/decode_speed.py
# measures the speed-up.
#
# The code below reuses the reference Transformer's own submodules
# (``tgt_embedding``, ``positional_encoding.pe``, ``decoder.layers[i].self_attn.w_q``,
# ``norm1``, ``feed_forward``, ``decoder.norm``, ``output_projection``...) and so works
# for :class:`course_utils.Transformer` and any model with the same submodule names,
# not for an arbitrary encoder-decoder (use :func:`greedy_decode` for those). It calls
# the attention projections directly, not ``MultiHeadAttention.forward``, so
# :func:`course_utils.record_attention` sees no decoder attention while it runs.
# ``Transformer.greedy_decode`` stays the naive version: it is notebook 06's exercise
# and the baseline that the cache is measured against.


class KVCache:
    """The self-attention keys and values of the positions decoded so far.

    ``keys[i]`` and ``values[i]`` belong to decoder layer ``i``, each ``(B, H, T, d_k)``
    with ``T`` the number of positions fed so far (:attr:`length`).
    :func:`decode_step` appends one position per call.

    They live in buffers allocated once, room for ``capacity`` positions
    (``(B, H, capacity, d_k)`` per layer): :meth:`append` writes the new position in
    place, and ``keys[i]`` is a view of the first ``T`` positions. (``torch.cat`` of the
    old keys and the new one would copy the whole cache at every step.) A full buffer
    doubles its capacity. Fill it under ``torch.no_grad()``, as
    :func:`greedy_decode_cached` does: it is written in place.
    """

    def __init__(self, key_buffers: list[Tensor], value_buffers: list[Tensor]):
        self._keys = key_buffers  # per layer (B, H, capacity, d_k)
        self._values = value_buffers  # per layer (B, H, capacity, d_k)
        self._lengths = [0] * len(key_buffers)  # positions written, per layer

    @classmethod
    def empty(
        cls, model: nn.Module, batch_size: int, device: torch.device | str | None = None, capacity: int = 16
    ) -> KVCache:
        """A cache with ``T = 0`` positions for every decoder layer of ``model``, and room
        for ``capacity`` positions before it grows."""
        return cls.for_attentions([layer.self_attn for layer in model.decoder.layers], batch_size, capacity, device)

    @classmethod
    def for_attentions(
        cls, attentions: list[nn.Module], batch_size: int, capacity: int = 16, device: torch.device | str | None = None
    ) -> KVCache:
        """A cache with ``T = 0`` positions, one entry per self-attention in ``attentions`` (in
        order), the dtype of its ``w_k`` and on ``device`` (default: ``w_k``'s). An attention with
        fewer key/value heads than query heads (``n_kv_heads``, notebook 10's grouped-query
        attention) stores ``n_kv_heads`` heads."""
        check_int("capacity", capacity, low=1)
        keys, values = [], []
        for attn in attentions:
            heads = getattr(attn, "n_kv_heads", attn.num_heads)
            shape = (batch_size, heads, capacity, attn.d_k)  # (B, H_kv, capacity, d_k)
            weight = attn.w_k.weight
            where = weight.device if device is None else device
            keys.append(torch.zeros(shape, dtype=weight.dtype, device=where))
            values.append(torch.zeros(shape, dtype=weight.dtype, device=where))
        return cls(keys, values)

    @property
    def keys(self) -> list[Tensor]:
        """Per layer, the keys of the positions fed so far, ``(B, H, T, d_k)`` each."""
        return [buffer[:, :, :n] for buffer, n in zip(self._keys, self._lengths)]

    @property
    def values(self) -> list[Tensor]:
        """Per layer, the values of the positions fed so far, ``(B, H, T, d_k)`` each."""
        return [buffer[:, :, :n] for buffer, n in zip(self._values, self._lengths)]

    @property
    def length(self) -> int:
        """``T``, the number of positions cached (the same in every layer between steps)."""
        return self._lengths[0] if self._lengths else 0

    @property
    def num_layers(self) -> int:
        """The number of decoder layers cached."""
        return len(self._keys)

    @property
    def batch_size(self) -> int:
        """``B``; 0 for a model without decoder layers."""
        return self._keys[0].size(0) if self._keys else 0

    def append(self, layer_index: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new position's ``k, v (B, H, 1, d_k)`` to layer ``layer_index``.

        Returns the layer's keys and values including the new position,
        ``(B, H, T + 1, d_k)`` each.
        """
        keys, values = self._keys[layer_index], self._values[layer_index]
        expected = (keys.size(0), keys.size(1), 1, keys.size(3))
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise ValueError(
                f"k and v must be one position (B, H, 1, d_k) = {expected}, got "
                f"{tuple(k.shape)} and {tuple(v.shape)}"
            )
        n = self._lengths[layer_index]
        if n == keys.size(2):  # full: double the room
            keys = self._keys[layer_index] = torch.cat([keys, torch.zeros_like(keys)], dim=2)
            values = self._values[layer_index] = torch.cat([values, torch.zeros_like(values)], dim=2)
        keys[:, :, n : n + 1] = k
        values[:, :, n : n + 1] = v
        self._lengths[layer_index] = n + 1
        return keys[:, :, : n + 1], values[:, :, : n + 1]  # (B, H, T + 1, d_k) each


def memory_keys_values(model: nn.Module, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Cross-attention keys and values of ``memory (B, L_src, D)`` for every decoder layer.

    Returns one ``(k, v)`` pair per layer, each ``(B, H, L_src, d_k)``. They depend on
    the source only, so greedy decoding computes them once, not once per step.
    """
    check_rank("memory", memory, 3, "(B, L_src, D)")
    kv = []
    for layer in model.decoder.layers:
        attn = layer.cross_attn
        # contiguous: split_heads returns a transposed view, and every step's matrix
        # products would otherwise copy it again
        k = split_heads(attn.w_k(memory), attn.num_heads).contiguous()  # (B, H, L_src, d_k)
        v = split_heads(attn.w_v(memory), attn.num_heads).contiguous()  # (B, H, L_src, d_k)
        kv.append((k, v))
    return kv


def attend_cached(attn: nn.Module, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """``MultiHeadAttention.forward`` for one query position, keys and values given.

    ``x (B, 1, D)`` is the query input; ``k, v (B, H, L_k, d_k)`` are already projected;
    ``mask`` broadcastable to ``(B, H, 1, L_k)`` or ``None``. Returns ``(B, 1, D)``.
    """
    q = split_heads(attn.w_q(x), attn.num_heads)  # (B, H, 1, d_k)
    weights = attn.dropout(attention_weights(q, k, mask))  # (B, H, 1, L_k)
    return attn.w_o(merge_heads(_context(weights, v)))  # (B, 1, D)


@fastpaths.speed_path(fastpaths.single_query_context, when=fastpaths.on_cpu)
def _context(weights: Tensor, v: Tensor) -> Tensor:
    """``weights (B, H, 1, L_k) @ v (B, H, L_k, d_k) -> (B, H, 1, d_k)``: one query's context."""
    return weights @ v  # (B, H, 1, d_k)


def _check_reference_model(model: nn.Module) -> None:
    needed = ("tgt_embedding", "positional_encoding", "decoder", "output_projection")
    missing = [name for name in needed if not hasattr(model, name)]
    if not missing and not hasattr(model.decoder, "layers"):
        missing.append("decoder.layers")
    if missing:
        raise TypeError(
            f"the cached decoder relies on the submodule names of course_utils.Transformer "
            f"({', '.join(needed)}, decoder.layers); {type(model).__name__} has no "
            f"{', '.join(missing)}. Use greedy_decode for other models."
        )


def decode_step(
    model: nn.Module,
    token: Tensor,
    position: int,
    cache: KVCache,
    memory_kv: list[tuple[Tensor, Tensor]],
    memory_mask: Tensor | None = None,
) -> Tensor:
    """Run the decoder on one new position and return its next-token logits ``(B, V)``.

    Args:
        model: a :class:`course_utils.Transformer` (its submodules are used by name).
        token: ``(B,)`` token ids at ``position`` (``<bos>`` at position 0).
        position: the index of ``token`` in the target, ``0, 1, 2, ...`` in order; it
            must equal ``cache.length``.
        cache: keys and values of positions ``0 .. position - 1``; this call appends
            those of ``position`` to it (so it is modified in place).
        memory_kv: :func:`memory_keys_values` of the encoder's output.
        memory_mask: boolean, ``True`` = real source token, broadcastable to
            ``(B, 1, L_src)`` (usually ``padding_mask(src)``); ``None`` = no padding.

    Returns the same logits as ``model.output_projection(model.decode(prefix, memory,
    causal_mask(T), memory_mask)[:, -1])`` on the whole prefix (``T = position + 1``),
    up to float32 rounding. Call it in eval mode (dropout off), as
    :func:`greedy_decode_cached` does.
    """
    _check_reference_model(model)
    check_rank("token", token, 1, "(B,) of token ids")
    check_int("position", position, low=0)
    layers = model.decoder.layers
    if cache.num_layers != len(layers) or len(memory_kv) != len(layers):
        raise ValueError(
            f"cache and memory_kv need one entry per decoder layer ({len(layers)}), got "
            f"{cache.num_layers} and {len(memory_kv)}"
        )
    if cache.length != position:
        raise ValueError(
            f"the cache holds {cache.length} positions, so the next token is at position "
            f"{cache.length}, not {position}: feed positions 0, 1, 2, ... in order"
        )
    B = token.size(0)
    if cache.num_layers and cache.batch_size != B:
        raise ValueError(f"token has batch size {B} but the cache was built for {cache.batch_size}")
    pe = model.positional_encoding.pe  # (max_len, D)
    if position >= pe.size(0):
        raise ValueError(
            f"position {position} is beyond the positional encoding's max_len = {pe.size(0)}; "
            f"build the model with a larger max_len"
        )
    if memory_mask is not None and memory_mask.dim() == 3:
        memory_mask = memory_mask.unsqueeze(1)  # (B, 1, 1, L_src): broadcast over heads

    # embed the new token and add the encoding of its position (not of position 0)
    x = model.tgt_embedding(token.unsqueeze(1))  # (B, 1, D)
    x = model.positional_encoding.dropout(x + pe[position])  # (B, 1, D)

    for i, layer in enumerate(layers):
        # the same three sub-layers, residuals and norms as DecoderLayer.forward
        h = layer.norm1(x) if layer.norm_first else x  # (B, 1, D)
        attn = layer.self_attn
        k_new = split_heads(attn.w_k(h), attn.num_heads)  # (B, H, 1, d_k)
        v_new = split_heads(attn.w_v(h), attn.num_heads)  # (B, H, 1, d_k)
        k, v = cache.append(i, k_new, v_new)  # (B, H, position + 1, d_k) each
        out = layer.dropout1(attend_cached(attn, h, k, v, None))  # no mask: the cache holds no future
        x = x + out if layer.norm_first else layer.norm1(x + out)

        h = layer.norm2(x) if layer.norm_first else x
        mem_k, mem_v = memory_kv[i]  # (B, H, L_src, d_k) each
        out = layer.dropout2(attend_cached(layer.cross_attn, h, mem_k, mem_v, memory_mask))  # (B, 1, D)
        x = x + out if layer.norm_first else layer.norm2(x + out)

        h = layer.norm3(x) if layer.norm_first else x
        out = layer.dropout3(layer.feed_forward(h))  # (B, 1, D)
        x = x + out if layer.norm_first else layer.norm3(x + out)

    if model.decoder.norm is not None:  # pre-norm stacks end with a final norm
        x = model.decoder.norm(x)
    return model.output_projection(x[:, 0])  # (B, V)


@torch.no_grad()
def greedy_decode_cached(
    model: nn.Module,
    src: Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    src_mask: Tensor | None = None,
    pad_id: int | None = None,
) -> Tensor:
    """:func:`greedy_decode` with a key/value cache: same arguments, same tokens.

    Each step feeds only the newest token through the decoder (:func:`decode_step`);
    the self-attention keys and values of earlier positions come from a
    :class:`KVCache` and the cross-attention ones of the source are computed once. The
    result is the same ``(B, T)`` tensor as :func:`greedy_decode` (same tokens, same
    ``T``, same early stop, ``pad_id`` after ``<eos>``; the logits agree to float32
    rounding, see the comment above :class:`KVCache`), runs in eval mode and restores
    the model's mode. Needs a :class:`course_utils.Transformer` (or a model with its
    submodule names).
    """
    _check_reference_model(model)
    _check_decode_args(src, max_len)
    with eval_mode(model):
        memory = model.encode(src, src_mask)  # (B, L_src, D); also checks src_mask
        B, L_src = src.shape
        if src_mask is not None:
            # cross-attention has one query per step: the mask must not depend on it
            check_mask(src_mask, torch.Size((B, 1, L_src)), "(B, 1, L_src)")
        memory_kv = memory_keys_values(model, memory)  # per layer (B, H, L_src, d_k) x 2
        cache = KVCache.empty(model, B, device=src.device, capacity=max(max_len, 1))

        def next_logits(ys: Tensor) -> Tensor:  # ys (B, T) -> (B, V)
            t = ys.size(1) - 1  # the newest token's position; the cache holds 0 .. t - 1
            return decode_step(model, ys[:, t], t, cache, memory_kv, src_mask)  # (B, V): one position

        return _greedy_loop(src, max_len, bos_id, eos_id, pad_id, next_logits)


__all__ = [
    "greedy_decode",
    "greedy_decode_cached",
    "decode_step",
    "KVCache",
    "memory_keys_values",
    "attend_cached",
    "eval_mode",
]
