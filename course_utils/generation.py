"""Sampling and generation for a decoder-only language model (backs notebook 09, and 10).

* :func:`next_token_probs`: the distribution to sample from, with temperature, top-k and
  top-p (nucleus); :func:`sample_next_token` draws one token per row from it.
* :func:`generate`: autoregressive sampling, with a key/value cache: :func:`gpt_decode_step`
  feeds one new position through the blocks, keeping the keys and values in the
  :class:`~course_utils.decoding.KVCache` of notebook 07 (:func:`empty_cache`). Notebook
  10's :class:`~course_utils.llama.Llama` generates with the same loop and its own step.

Everything here reads only the contract's submodules of a GPT (``token_embedding``,
``position_embedding``, ``blocks``, ``norm``, ``lm_head``), so a student's ``GPT`` works too.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ._validate import check_int, check_min_rank, check_rank, check_vocab_ids, is_int, is_number
from .decoding import KVCache, attend_cached
from .gpt import GPT, context_length, vocabulary_size
from .modes import eval_mode
from .multihead import split_heads


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not is_number(temperature) or not 0 < temperature < math.inf:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r} (for greedy decoding use "
                         "argmax; an infinite temperature divides every logit to 0 or NaN)")
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (not is_number(top_p) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


def _check_logits(logits: Tensor) -> None:
    """Logits the softmax can turn into a distribution: no NaN or +inf, and in every row at least
    one token that is not -inf (else softmax gives NaN, and multinomial a cryptic error)."""
    bad = torch.isnan(logits) | (logits == math.inf)  # (..., V)
    if bool(bad.any()):
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"logits must be finite or -inf, got {float(logits[where])} at index {where} (of shape "
                         f"{tuple(logits.shape)}): a NaN or +inf logit leaves no distribution to sample from")
    empty = (logits == -math.inf).all(dim=-1)  # (...,): rows where every token is removed
    if bool(empty.any()):
        row = tuple(int(i) for i in torch.nonzero(empty)[0])
        raise ValueError(f"every logit of row {row} (of logits {tuple(logits.shape)}) is -inf: no token is left to "
                         "sample (keep at least one token finite)")


def next_token_probs(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """The distribution to sample the next token from: ``(..., V) -> (..., V)``, rows sum to 1.

    1. **temperature**: divide the logits by ``temperature`` *before* the softmax
       (``< 1`` sharpens, ``> 1`` flattens; the order of the tokens never changes);
    2. **top-k**: keep the ``top_k`` largest logits, remove the others;
    3. **top-p** (nucleus): of what is left, keep the most likely tokens, in order, until
       their probability adds up to at least ``top_p`` (the token that crosses ``top_p`` is
       kept, so at least one token always is);
    4. softmax over the kept tokens only: removed tokens get probability exactly 0 and the
       kept ones are renormalised to sum to 1.

    ``top_k=None`` / ``top_p=None`` switch a filter off. Ties with the k-th largest logit
    are all kept.
    """
    check_min_rank("logits", logits, 1, "(..., V)")
    _check_sampling(temperature, top_k, top_p)
    _check_logits(logits)
    scaled = logits.float() / temperature  # (..., V)
    blocked = torch.finfo(scaled.dtype).min
    if top_k is not None and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit
        scaled = scaled.masked_fill(scaled < kth, blocked)
    if top_p is not None and top_p < 1:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)  # (..., V)
        sorted_probs = sorted_logits.softmax(dim=-1)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (..., V): mass of the more likely tokens
        remove_sorted = before >= top_p  # the nucleus is already complete without this token
        remove = remove_sorted.scatter(-1, order, remove_sorted)  # (..., V), back in vocabulary order
        scaled = scaled.masked_fill(remove, blocked)
    return scaled.softmax(dim=-1)  # (..., V)


def sample_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token per row from ``next_token_probs(logits (B, V), ...)``: ``(B,)`` ids.
    ``temperature=0`` means greedy (the argmax)."""
    check_rank("logits", logits, 2, "(B, V)")
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    probs = next_token_probs(logits, temperature, top_k, top_p)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)


# ---------------------------------------------------------------- generation with a key/value cache
#
# As in notebook 07 (course_utils.decoding): thanks to the causal mask, appending a token
# never changes the keys and values of the earlier positions, so each layer keeps them in
# a KVCache and every step feeds only the newest token through the blocks. A decoder-only
# model has no memory and no cross-attention: each step is embed (token + position), then
# per block the cached causal self-attention and the feed-forward, both pre-norm.


def empty_cache(model: GPT, batch_size: int, capacity: int = 16) -> KVCache:
    """A :class:`~course_utils.decoding.KVCache` with no positions, one entry per block
    (``n_kv_heads`` heads where the attention has fewer key/value heads than query heads,
    notebook 10's grouped-query attention)."""
    return KVCache.for_attentions([block.self_attn for block in model.blocks], batch_size, capacity)


def output_logits(model: nn.Module, h: Tensor) -> Tensor:
    """The output layer of ``model`` on ``h (..., D)``: ``model.lm_head(h)``, or, for a ``GPT``
    without an ``lm_head`` module (the contract allows computing the tied head in ``forward``),
    ``h @ token_embedding.weight.T``. ``(..., V)``."""
    head = getattr(model, "lm_head", None)
    return head(h) if head is not None else torch.nn.functional.linear(h, model.token_embedding.weight)


def gpt_decode_step(model: GPT, token: Tensor, position: int, cache: KVCache) -> Tensor:
    """Feed one new position: ``token (B,)`` at ``position`` (``== cache.length``).

    Appends its keys and values to ``cache`` and returns its next-token logits ``(B, V)``:
    the same numbers, to float32 rounding, as ``model(prefix)[:, -1]`` on the whole prefix.
    Call it in eval mode under ``torch.no_grad()``, as :func:`generate` does. It uses only the
    contract's parts of ``model`` (embeddings, ``blocks`` with ``norm1``, ``self_attn``, ``norm2``,
    ``feed_forward``, then ``norm`` and the tied output layer), so a student's ``GPT`` works too.
    """
    check_rank("token", token, 1, "(B,) of token ids")
    if cache.length != position:
        raise ValueError(f"the cache holds {cache.length} positions, so the next one is {cache.length}, not {position}")
    max_len = context_length(model)
    if position >= max_len:
        raise ValueError(f"position {position} is beyond the model's max_len = {max_len}")
    pos = torch.tensor([position], device=token.device)  # (1,)
    # eval mode: every dropout is the identity, so none is applied (the contract names no block's dropout)
    x = model.token_embedding(token.unsqueeze(1)) + model.position_embedding(pos)  # (B, 1, D)
    for i, block in enumerate(model.blocks):
        attn = block.self_attn
        h = block.norm1(x)  # (B, 1, D)
        k, v = cache.append(i, split_heads(attn.w_k(h), attn.num_heads), split_heads(attn.w_v(h), attn.num_heads))
        x = x + attend_cached(attn, h, k, v, None)  # no mask: the cache holds no future
        x = x + block.feed_forward(block.norm2(x))  # (B, 1, D)
    return output_logits(model, model.norm(x))[:, 0]  # (B, V)


@torch.no_grad()
def generate(
    model: GPT,
    tokens: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    *,
    decode_step: Any = None,
) -> Tensor:
    """Continue ``tokens (B, L0)`` by ``max_new_tokens`` sampled tokens: ``(B, L0 + max_new_tokens)``.

    Each step samples from :func:`next_token_probs` of the last position's logits
    (``temperature=0``: greedy, the argmax; ``generator``: a seeded ``torch.Generator``
    makes the draws repeatable). Runs in eval mode (no dropout) and puts the model back in
    the mode it was in. With ``use_cache`` (and ``L0 + max_new_tokens <= max_len``) each step
    feeds only the new token (:func:`gpt_decode_step`); otherwise each step re-runs the
    model on the last ``max_len`` tokens. Both give the same tokens. ``decode_step`` (default
    :func:`gpt_decode_step`) feeds one cached position; notebook 10's model passes its own.
    """
    check_rank("tokens", tokens, 2, "(B, L0) of token ids")
    if tokens.size(1) < 1:
        raise ValueError("tokens must hold at least one token per row (a prompt), got length 0")
    check_int("max_new_tokens", max_new_tokens, low=0)
    if temperature != 0:
        _check_sampling(temperature, top_k, top_p)
    max_len = context_length(model)
    step = gpt_decode_step if decode_step is None else decode_step
    check_vocab_ids(tokens[:, -max_len:], vocabulary_size(model))
    with eval_mode(model):
        out = tokens
        if use_cache and tokens.size(1) + max_new_tokens <= max_len:
            cache = empty_cache(model, tokens.size(0), capacity=tokens.size(1) + max_new_tokens)
            for t in range(tokens.size(1)):  # the prompt, one position at a time
                logits = step(model, tokens[:, t], t, cache)  # (B, V)
            for _ in range(max_new_tokens):
                nxt = sample_next_token(logits, temperature, top_k, top_p, generator)  # (B,)
                out = torch.cat([out, nxt[:, None]], dim=1)  # (B, T + 1)
                if out.size(1) < tokens.size(1) + max_new_tokens:
                    logits = step(model, nxt, out.size(1) - 1, cache)
            return out
        for _ in range(max_new_tokens):
            logits = model(out[:, -max_len:])[:, -1]  # (B, V): the last position only
            nxt = sample_next_token(logits, temperature, top_k, top_p, generator)  # (B,)
            out = torch.cat([out, nxt[:, None]], dim=1)  # (B, T + 1)
        return out


__all__ = [
    "next_token_probs",
    "sample_next_token",
    "generate",
    "gpt_decode_step",
    "empty_cache",
    "output_logits",
]
