"""A decoder-only language model from the course's blocks, GPT-2 style (backs notebook 09).

``tokens (B, L) -> token embedding + learned position embedding -> N x GPTBlock -> LayerNorm
-> lm_head (tied to the token embedding) -> logits (B, L, V)``.

* :class:`GPTBlock`: a decoder layer without cross-attention, pre-norm, with a GELU
  feed-forward; its self-attention is always causal (the block builds the mask itself).
  It is :class:`~course_utils.EncoderLayer` with ``norm_first=True``, GPT-2's GELU and a
  causal mask.
* :class:`GPT`: the model. Its output layer has no bias and **shares** its weight matrix
  with the token embedding (``lm_head.weight is token_embedding.weight``), which saves
  ``V * D`` parameters. No ``sqrt(d_model)`` scaling of the embeddings (GPT-2 has none).
* :func:`next_token_probs`: the distribution to sample from, with temperature, top-k and
  top-p (nucleus); :func:`generate`: autoregressive sampling, with a key/value cache
  (:func:`gpt_decode_step`, the :class:`~course_utils.decoding.KVCache` of notebook 07).
* :func:`convert_gpt2_state_dict` / :func:`gpt_from_gpt2`: GPT-2's checkpoint layout
  (Hugging Face ``GPT2LMHeadModel``) mapped onto :class:`GPT`. GPT-2 stores its linear
  layers as ``Conv1D`` modules, whose weight is ``(in, out)`` (``y = x @ W + b``), the
  transpose of ``nn.Linear``'s ``(out, in)``; and its attention projects queries, keys and
  values with one fused ``c_attn`` of width ``3 D``, split here into ``w_q, w_k, w_v``.
  ``tests/test_gpt.py`` proves the logits equal ``GPT2LMHeadModel``'s on a random config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from . import fastpaths
from ._validate import check_int, check_mask, check_min_rank, check_nonempty, check_rank, check_vocab_ids, is_int, is_number
from .attention import causal_mask
from .decoding import KVCache, _attend, _eval_mode
from .layers import FeedForward, LayerNorm
from .multihead import MultiHeadAttention, split_heads


class GPTBlock(nn.Module):
    """One decoder-only block: causal self-attention then feed-forward, both pre-norm.

    ``x = x + dropout(self_attn(norm1(x)))`` then ``x = x + dropout(feed_forward(norm2(x)))``,
    where the self-attention always uses ``causal_mask(L)`` (``&`` the optional ``mask``,
    e.g. a padding mask ``(B, 1, L)``) and the feed-forward uses GPT-2's tanh-GELU.

    ``forward(x (B, L, D), mask=None) -> (B, L, D)``. Submodules: ``norm1``, ``self_attn``,
    ``norm2``, ``feed_forward`` (and ``dropout1``, ``dropout2``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation="gelu_tanh")
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_rank("x", x, 3, "(B, L, D)")
        B, L, _ = x.shape
        causal = causal_mask(L, device=x.device)  # (L, L): no position sees the ones after it
        if mask is not None:
            check_mask(mask, torch.Size((B, L, L)), "(B, L, L)")
            causal = causal & mask  # (L, L) or (B, L, L)
        h = self.norm1(x)  # (B, L, D)
        fused = mask is None and type(self.self_attn) is MultiHeadAttention  # and see fastpaths, path 4
        if fused and fastpaths.fused_attention_applies(self.self_attn, h):
            attended = fastpaths.causal_self_attention(self.self_attn, h)  # the same output, faster on a CPU
        else:
            attended = self.self_attn(h, h, h, causal)[0]  # (B, L, D)
        x = x + self.dropout1(attended)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))  # (B, L, D)


def init_gpt2_weights(model: nn.Module) -> None:
    """GPT-2's initialisation, in place: every weight matrix (and embedding table) from
    N(0, 0.02), every bias 0; norms keep their ones. Call it before tying two weights (it
    would see the tied Parameter twice)."""
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


class GPT(nn.Module):
    """A GPT-2-style language model: ``forward(tokens (B, L), mask=None) -> logits (B, L, V)``.

    Submodules: ``token_embedding`` (``nn.Embedding(V, D)``), ``position_embedding``
    (``nn.Embedding(max_len, D)``, learned), ``dropout``, ``blocks`` (``nn.ModuleList`` of
    ``num_layers`` :class:`GPTBlock`), ``norm`` (the final ``LayerNorm``) and ``lm_head``
    (``nn.Linear(D, V, bias=False)`` whose ``weight`` *is* ``token_embedding.weight``).
    Defaults are GPT-2 small's (124M parameters with ``V = 50257``). ``mask`` (optional,
    e.g. padding ``(B, 1, L)``) is combined with the causal mask in every block.
    Weights start as GPT-2's do: normal with standard deviation 0.02, biases zero.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 768,
        num_heads: int = 12,
        num_layers: int = 12,
        d_ff: int = 3072,
        dropout: float = 0.1,
        max_len: int = 1024,
    ):
        super().__init__()
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        init_gpt2_weights(self)
        # tie: one Parameter, two uses (set after the init, which would otherwise see it twice)
        self.lm_head.weight = self.token_embedding.weight

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        check_vocab_ids(tokens, self.vocab_size)
        _check_context(tokens, self.max_len)
        check_nonempty("tokens", tokens, 1, "L")  # nothing to predict from; LayerNorm would fail deep inside
        positions = torch.arange(tokens.size(1), device=tokens.device)  # (L,): 0, 1, ..., L - 1
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))  # (B, L, D)
        for block in self.blocks:
            x = block(x, mask)  # (B, L, D)
        return self.lm_head(self.norm(x))  # (B, L, V)


# ---------------------------------------------------------------- sizes read from the contract's parts
#
# The helpers below take any model with the contract's submodules (a student's GPT too), so
# they read the sizes from those parts, not from attributes only the reference class has.


def context_length(model: nn.Module) -> int:
    """``max_len`` of a GPT: the number of rows of its ``position_embedding``; a model without
    a position table (notebook 10's :class:`~course_utils.llama.Llama`, rotary positions) gives
    its ``max_len``."""
    table = getattr(model, "position_embedding", None)
    return table.weight.size(0) if table is not None else int(model.max_len)


def vocabulary_size(model: nn.Module) -> int:
    """``vocab_size`` of a GPT: the number of rows of its ``token_embedding``."""
    return model.token_embedding.weight.size(0)


def _check_context(tokens: Tensor, max_len: int) -> None:
    if tokens.size(1) > max_len:
        raise ValueError(
            f"tokens has length {tokens.size(1)}, more than the model's max_len = {max_len} "
            "(it has no position embedding beyond that): crop the context to the last max_len tokens"
        )


def language_model_loss(logits: Tensor, tokens: Tensor) -> Tensor:
    """Next-token cross-entropy: position ``t`` of ``logits (B, L, V)`` predicts ``tokens[:, t + 1]``.

    ``tokens (B, L)`` are the model's input; the last position has no target and is left
    out, so the mean is over ``B * (L - 1)`` predictions (in nats).
    """
    check_rank("logits", logits, 3, "(B, L, V)")
    check_rank("tokens", tokens, 2, "(B, L)")
    V = logits.size(-1)
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))


# ---------------------------------------------------------------- sampling
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
    keys, values = [], []
    for block in model.blocks:
        attn = block.self_attn
        heads = getattr(attn, "n_kv_heads", attn.num_heads)
        shape = (batch_size, heads, capacity, attn.d_k)  # (B, H_kv, capacity, d_k)
        weight = attn.w_k.weight
        keys.append(torch.zeros(shape, dtype=weight.dtype, device=weight.device))
        values.append(torch.zeros(shape, dtype=weight.dtype, device=weight.device))
    return KVCache(keys, values)


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
        x = x + _attend(attn, h, k, v, None)  # no mask: the cache holds no future
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
    with _eval_mode(model):
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


# ---------------------------------------------------------------- GPT-2's checkpoint layout
def _strip(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """GPT-2 keys without the ``transformer.`` prefix (GPT2LMHeadModel has it, GPT2Model not)."""
    return {k[len("transformer.") :] if k.startswith("transformer.") else k: v for k, v in state_dict.items()}


def gpt2_config(state_dict: Mapping[str, Tensor]) -> dict[str, int]:
    """``vocab_size, d_model, num_layers, d_ff, max_len`` read from a GPT-2 state dict's shapes
    (the number of heads cannot be read from the shapes: it is in GPT-2's config, ``n_head``)."""
    sd = _strip(state_dict)
    if "wte.weight" not in sd or "wpe.weight" not in sd:
        raise ValueError("not a GPT-2 state dict: it has no wte.weight / wpe.weight (token / position embeddings)")
    layers = {int(k.split(".")[1]) for k in sd if k.startswith("h.")}
    if layers != set(range(len(layers))):
        raise ValueError(f"GPT-2 blocks h.0 ... h.N-1 expected, got block indices {sorted(layers)}")
    vocab_size, d_model = sd["wte.weight"].shape
    c_fc = sd.get("h.0.mlp.c_fc.weight")  # (D, d_ff); transposed (d_ff, D) is refused by the conversion
    d_ff = 4 * int(d_model) if c_fc is None or c_fc.dim() != 2 else int(c_fc.shape[1 if c_fc.shape[0] == d_model else 0])
    return {
        "vocab_size": int(vocab_size),
        "d_model": int(d_model),
        "num_layers": len(layers),
        "d_ff": d_ff,
        "max_len": int(sd["wpe.weight"].shape[0]),
    }


_GPT2_BUFFERS = ("attn.bias", "attn.masked_bias")  # causal-mask buffers of some versions: not weights


def _gpt2_shapes(config: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Every tensor of a GPT-2 state dict (keys without ``transformer.``) with its shape; Conv1D
    weights are ``(in, out)``."""
    V, D, d_ff, T = config["vocab_size"], config["d_model"], config["d_ff"], config["max_len"]
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (V, D), "wpe.weight": (T, D), "ln_f.weight": (D,),
                                          "ln_f.bias": (D,)}
    per_block = {"ln_1.weight": (D,), "ln_1.bias": (D,), "attn.c_attn.weight": (D, 3 * D), "attn.c_attn.bias": (3 * D,),
                 "attn.c_proj.weight": (D, D), "attn.c_proj.bias": (D,), "ln_2.weight": (D,), "ln_2.bias": (D,),
                 "mlp.c_fc.weight": (D, d_ff), "mlp.c_fc.bias": (d_ff,), "mlp.c_proj.weight": (d_ff, D),
                 "mlp.c_proj.bias": (D,)}
    for i in range(config["num_layers"]):
        shapes.update({f"h.{i}.{k}": v for k, v in per_block.items()})
    return shapes


def _check_gpt2(sd: Mapping[str, Tensor], config: Mapping[str, int]) -> None:
    """Every tensor present with GPT-2's shape, nothing unknown: a ValueError names what is wrong
    (``load_state_dict`` would only list names, or a wrong orientation would load silently)."""
    shapes = _gpt2_shapes(config)
    n = config["num_layers"]
    missing = [k for k in shapes if k not in sd]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise ValueError(f"the GPT-2 state dict has blocks h.0 ... h.{n - 1} (num_layers = {n}, as gpt2_config "
                         f"reads it) but lacks {len(missing)} tensor(s): {shown}")
    known = set(shapes) | {"lm_head.weight"} | {f"h.{i}.{b}" for i in range(n) for b in _GPT2_BUFFERS}
    unknown = sorted(k for k in sd if k not in known)
    if unknown:
        shown = ", ".join(unknown[:6]) + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else "")
        raise ValueError(f"the GPT-2 state dict holds {len(unknown)} tensor(s) that GPT-2 (num_layers = {n}) has no "
                         f"place for: {shown}; remove them yourself if they are meant to be left out")
    for key, shape in shapes.items():
        got = tuple(sd[key].shape)
        if got == shape:
            continue
        if len(shape) == 2 and got == shape[::-1]:
            raise ValueError(f"{key} has shape {got}, the transpose of GPT-2's {shape}: GPT-2's Conv1D stores its "
                             "weight as (in, out), nn.Linear's (out, in); pass GPT-2's own layout (this function "
                             "transposes it)")
        raise ValueError(f"{key} has shape {got}; GPT-2 with d_model = {config['d_model']}, d_ff = {config['d_ff']} "
                         f"(read from wte and h.0.mlp.c_fc) needs {shape}")


def convert_gpt2_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A GPT-2 state dict (``GPT2LMHeadModel`` or ``GPT2Model``) renamed and reshaped for :class:`GPT`.

    ``Conv1D`` weights ``(in, out)`` are transposed to ``nn.Linear``'s ``(out, in)``; the fused
    ``c_attn`` ``(D, 3D)`` is split into ``w_q, w_k, w_v`` (its output columns are
    ``[q | k | v]``); ``lm_head.weight``, tied to ``wte``, is the token embedding (a checkpoint
    whose ``lm_head`` differs from ``wte`` is refused); the causal-mask buffers
    (``attn.bias``, ``attn.masked_bias`` of older versions) are dropped. A ``ValueError``
    names any missing tensor, any unknown key and any tensor of the wrong shape (a weight
    already transposed to ``nn.Linear``'s layout included).
    """
    sd = _strip(state_dict)
    config = gpt2_config(sd)
    _check_gpt2(sd, config)
    D = config["d_model"]
    if "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"], sd["wte.weight"]):
        raise ValueError("lm_head.weight differs from wte.weight: this GPT model keeps them tied (one matrix)")
    out = {
        "token_embedding.weight": sd["wte.weight"],
        "position_embedding.weight": sd["wpe.weight"],
        "norm.weight": sd["ln_f.weight"],
        "norm.bias": sd["ln_f.bias"],
    }
    for i in range(config["num_layers"]):
        p, q = f"h.{i}.", f"blocks.{i}."
        w, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]  # (D, 3D), (3D,)
        for j, name in enumerate(("w_q", "w_k", "w_v")):
            out[q + f"self_attn.{name}.weight"] = w[:, j * D : (j + 1) * D].t()  # (D, D): (out, in)
            out[q + f"self_attn.{name}.bias"] = b[j * D : (j + 1) * D]
        for theirs, ours in (
            ("attn.c_proj", "self_attn.w_o"),
            ("mlp.c_fc", "feed_forward.linear1"),
            ("mlp.c_proj", "feed_forward.linear2"),
        ):
            out[q + ours + ".weight"] = sd[p + theirs + ".weight"].t()  # Conv1D (in, out) -> Linear (out, in)
            out[q + ours + ".bias"] = sd[p + theirs + ".bias"]
        for theirs, ours in (("ln_1", "norm1"), ("ln_2", "norm2")):
            out[q + ours + ".weight"] = sd[p + theirs + ".weight"]
            out[q + ours + ".bias"] = sd[p + theirs + ".bias"]
    return {k: v.contiguous() for k, v in out.items()}


def gpt2_state_dict(model: GPT) -> dict[str, Tensor]:
    """The inverse of :func:`convert_gpt2_state_dict`: ``model``'s weights in GPT-2's layout
    (``GPT2LMHeadModel`` keys: ``transformer.wte.weight``, ``transformer.h.0.attn.c_attn.weight``
    ``(D, 3D)``, Conv1D weights ``(in, out)``, ... and ``lm_head.weight``, the same matrix as wte)."""
    sd = model.state_dict()
    out = {
        "transformer.wte.weight": sd["token_embedding.weight"],
        "transformer.wpe.weight": sd["position_embedding.weight"],
        "transformer.ln_f.weight": sd["norm.weight"],
        "transformer.ln_f.bias": sd["norm.bias"],
    }
    for i in range(len(model.blocks)):
        p, q = f"transformer.h.{i}.", f"blocks.{i}."
        names = ("w_q", "w_k", "w_v")
        out[p + "attn.c_attn.weight"] = torch.cat([sd[q + f"self_attn.{n}.weight"].t() for n in names], dim=1)  # (D, 3D)
        out[p + "attn.c_attn.bias"] = torch.cat([sd[q + f"self_attn.{n}.bias"] for n in names])  # (3D,)
        for theirs, ours in (("attn.c_proj", "self_attn.w_o"), ("mlp.c_fc", "feed_forward.linear1"),
                             ("mlp.c_proj", "feed_forward.linear2")):
            out[p + theirs + ".weight"] = sd[q + ours + ".weight"].t().contiguous()  # Linear (out, in) -> (in, out)
            out[p + theirs + ".bias"] = sd[q + ours + ".bias"]
        for theirs, ours in (("ln_1", "norm1"), ("ln_2", "norm2")):
            out[p + theirs + ".weight"] = sd[q + ours + ".weight"]
            out[p + theirs + ".bias"] = sd[q + ours + ".bias"]
    out["lm_head.weight"] = sd["token_embedding.weight"]
    return out


def load_gpt2_weights(model: nn.Module, state_dict: Mapping[str, Tensor]) -> None:
    """Copy a GPT-2 checkpoint into ``model``, in place (notebook 09's last exercise).

    ``state_dict`` has ``GPT2LMHeadModel.state_dict()``'s layout (``transformer.wte.weight``,
    ``transformer.h.{i}.attn.c_attn.weight`` ``(D, 3D)``, ... ``lm_head.weight``); ``model`` is
    a :class:`GPT` of the contract (its submodule names) with the checkpoint's sizes. Every
    ``Conv1D`` weight is transposed, ``c_attn`` is split into ``w_q, w_k, w_v``, and the values
    are copied into the model's own Parameters under ``torch.no_grad()``, so the output layer
    stays tied (``lm_head.weight is token_embedding.weight``) and the model keeps training as
    before. A parameter whose shape differs from the checkpoint's (a model with another
    context, width or vocabulary) raises ``ValueError`` naming both shapes, before anything is
    copied.
    """
    converted = convert_gpt2_state_dict(state_dict)  # our names, nn.Linear's (out, in)
    params = dict(model.named_parameters())  # the tied head once, as token_embedding.weight
    missing = [name for name in converted if name not in params]
    if missing:
        raise ValueError(f"the model has no parameter {missing[0]!r}: it must have the course GPT's submodule names")
    for name, value in converted.items():
        if params[name].shape != value.shape:
            raise ValueError(f"{name} has shape {tuple(params[name].shape)} in the model but {tuple(value.shape)} in "
                             "the checkpoint: build the model with the checkpoint's sizes")
    with torch.no_grad():
        for name, value in converted.items():
            params[name].copy_(value)


def gpt_from_gpt2(state_dict: Mapping[str, Tensor], num_heads: int) -> GPT:
    """A :class:`GPT` (eval mode, no dropout) holding a GPT-2 checkpoint's weights.

    ``num_heads`` is GPT-2's ``config.n_head`` (12 for ``gpt2``). The output layer stays tied.
    """
    config = gpt2_config(state_dict)
    model = GPT(num_heads=num_heads, dropout=0.0, **config)
    load_gpt2_weights(model, state_dict)
    return model.eval()


def gpt_from_hf(hf_model: Any) -> GPT:
    """:func:`gpt_from_gpt2` of a Hugging Face ``GPT2LMHeadModel`` (its state dict and ``n_head``)."""
    config = hf_model.config
    layers = gpt2_config(hf_model.state_dict())["num_layers"]
    if getattr(config, "n_layer", layers) != layers:
        raise ValueError(f"the model's config says n_layer = {config.n_layer}, its state dict holds {layers} blocks")
    if getattr(config, "activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"GPT uses GPT-2's tanh GELU; this model uses {config.activation_function!r}")
    if abs(getattr(config, "layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
        raise ValueError(f"GPT's LayerNorm uses eps=1e-5; this model uses {config.layer_norm_epsilon}")
    return gpt_from_gpt2(hf_model.state_dict(), config.n_head)


__all__ = [
    "GPTBlock",
    "GPT",
    "language_model_loss",
    "next_token_probs",
    "sample_next_token",
    "generate",
    "gpt_decode_step",
    "empty_cache",
    "output_logits",
    "context_length",
    "vocabulary_size",
    "convert_gpt2_state_dict",
    "gpt2_state_dict",
    "load_gpt2_weights",
    "gpt_from_gpt2",
    "gpt_from_hf",
    "gpt2_config",
]
