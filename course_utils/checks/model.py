"""Checkers for notebook 06 (the full model): ``Transformer``, ``make_src_mask``,
``make_tgt_mask`` and ``greedy_decode``.

``Transformer``: built by the checker with awkward random sizes (``B``, ``L_src``,
``L_tgt``, ``D``, ``d_ff``, ``V_src``, ``V_tgt`` all different), for both ``norm_first``
values, in eval mode, with every learnable parameter randomised. When its parameter names
are the reference's (``src_embedding``, ``tgt_embedding``, ``encoder``, ``decoder``,
``output_projection``; a bare ``nn.Embedding`` in place of ``TokenEmbedding`` is fine),
the parameters are copied into :class:`course_utils.Transformer` and ``forward``,
``encode`` and ``decode`` are compared value by value, with and without masks; a wrong
result is compared with the reference computed with each catalogued mistake. Otherwise
(names the contract does not fix) the model is tested by its behaviour: the logits'
shape, causality under a causal ``tgt_mask``, invariance to the source padding tokens
under ``src_mask``, ``forward`` agreeing with ``encode`` + ``decode`` + projection, and a
permutation test that finds a missing positional encoding (unscaled embeddings cannot
be seen this way).

Masks: token ids with trailing padding of different lengths per example, a non-zero
``pad_id`` and real tokens with id 0 (so a hard-coded 0 shows).

``greedy_decode``: a small random pre-norm :class:`course_utils.Transformer` (2 layers,
2 heads, ``dropout=1.0``) is built by the checker; its greedy trajectories for a batch of
sources are computed once and ``eos_id`` is chosen among the tokens it produces so that
(A) every sequence ends before ``max_len`` at different steps (``pad_id`` given), and (B)
one sequence never ends and ``max_len`` cuts the output (``pad_id`` left at its default,
``eos_id``). Rows are kept only where every greedy choice wins by a clear margin (so a
correct implementation computed in a different order gives the same tokens) and where
every catalogued mistake gives a different, recognisable output. Case (C) repeats (A)
with the model in train mode: with ``dropout=1.0`` a decoder that forgets ``model.eval()``
produces a fixed, recognisable wrong sequence.

Decision: running past "all finished" is wrong. The contract stops early, so the output
has ``T = 1 + (steps until every sequence has produced <eos>)`` columns, or
``max_len + 1`` when some sequence never does. Whether the model is put back in the mode
it came in is not checked.

Catalogue (``CheckResult.mistake``):

* ``Transformer``: ``"not a class"``, ``"missing method"``, ``"future tokens leak"``
  (``tgt_mask`` not used), ``"src_mask not used for cross-attention"``, ``"src_mask not
  used by the encoder"``, ``"src_mask not used"``, ``"embeddings not scaled"``,
  ``"positional encoding missing"``, ``"output projection missing"`` (returns
  ``(B, L, D)``), ``"returns probabilities"``, ``"forward disagrees with encode/decode"``,
  ``"dropout in eval mode"``, ``"wrong return"``, ``"input modified in place"``.
* the three functions: ``"not a function"`` (a class or a non-callable was passed).
* ``make_src_mask``: ``"mask inverted"``, ``"missing query axis (B, L)"``, ``"axis in the
  wrong place (B, L, 1)"``, ``"pad id hard-coded as 0"``, ``"not a bool mask"``,
  ``"input modified in place"``.
* ``make_tgt_mask``: ``"causal only"``, ``"padding only"``, ``"upper triangle"``,
  ``"padding on the query axis"``, ``"strictly lower triangle"``, ``"| instead of &"``,
  ``"mask inverted"``, ``"pad id hard-coded as 0"``, ``"extra head axis"``, ``"not a bool
  mask"``, ``"input modified in place"``.
* ``greedy_decode``: ``"keeps generating after eos"``, ``"runs to max_len after all
  finished"``, ``"stops at the first eos"``, ``"pad_id ignored"``, ``"no bos in column
  0"``, ``"no causal mask"``, ``"argmax over wrong axis"``, ``"reads the first
  position"``, ``"src_mask not used"``, ``"max_len off by one"``, ``"model left in train
  mode"``, ``"wrong dtype"``, ``"input modified in place"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import causal_mask, padding_mask
from ..decoding import greedy_decode
from ..model import Transformer
from ._core import (
    Failure,
    Mistake,
    StudentError,
    call_student,
    check_unchanged,
    checker,
    describe_shape,
    expect_close,
    fail,
    matches,
    randint,
    register_hints,
    require_function,
    require_module_class,
)
from .decoder import (
    build_student,
    check_dropout,
    copy_parameters,
    match_parameters,
    randomise_parameters,
    trailing_padding,
)

__all__ = ["check_transformer", "check_make_src_mask", "check_make_tgt_mask", "check_greedy_decode"]


def _tokens(B: int, L: int, vocab: int, pad_id: int, real: Tensor) -> Tensor:
    """``(B, L)`` ids: random non-pad ids where ``real`` (``(B, L)`` bool) is True, ``pad_id``
    elsewhere; id 0 appears among the real tokens when it is not the pad."""
    ids = torch.randint(0, vocab - 1, (B, L))  # (B, L)
    ids = ids + (ids >= pad_id).long()  # skip pad_id
    if pad_id != 0:
        ids[0, 0] = 0
    return torch.where(real, ids, torch.full_like(ids, pad_id))


def _not_bool(what: str, got: Any, expected: Tensor, case: str) -> None:
    if isinstance(got, Tensor) and got.dtype != torch.bool:
        right = got.shape == expected.shape and bool(torch.equal(got != 0, expected))
        fail(
            f"{what} ({case}) has dtype {got.dtype}" + (" (with the right values)" if right else "")
            + ": masks are torch.bool, True = may attend. A comparison such as `tokens != pad_id` "
            "already gives a bool tensor; don't convert it with .float() or .int().",
            mistake="not a bool mask",
        )


# ---------------------------------------------------------------- make_src_mask
@checker("make_src_mask")
def check_make_src_mask(fn: Callable[..., Any]) -> str:
    require_function(fn, "make_src_mask")
    for pad_id in (randint(1, 9), 0):
        while True:
            B, L = randint(2, 5), randint(4, 9)
            if B != L:
                break
        vocab = 12
        src = _tokens(B, L, vocab, pad_id, trailing_padding(B, L)[:, 0])  # (B, L)
        src0 = src.clone()
        case = f"src of shape ({B}, {L}), pad_id={pad_id}"
        got = call_student(fn, src, pad_id, context=f"calling make_src_mask({case})")
        check_unchanged(["src"], [src], [src0], case)
        expected = padding_mask(src0, pad_id)  # (B, 1, L)
        real = src0 != pad_id  # (B, L)
        mistakes: list[Mistake] = [
            (
                "mask inverted",
                "the mask is inverted: True must mark the real tokens (a key that may be attended "
                "to) and False the padding. Compare with !=, not ==.",
                (~real).unsqueeze(1),
            ),
            (
                "missing query axis (B, L)",
                f"you returned shape (B, L_src) = {describe_shape(real)}; the contract's shape is "
                "(B, 1, L_src): the axis of size 1 stands for the queries, so the mask broadcasts "
                "over them against scores (B, L_q, L_src). Add it with .unsqueeze(1).",
                real,
            ),
            (
                "axis in the wrong place (B, L, 1)",
                "you returned shape (B, L_src, 1): that would mask queries, not keys. The axis of "
                "size 1 goes in the middle, (B, 1, L_src): .unsqueeze(1), not .unsqueeze(-1).",
                real.unsqueeze(-1),
            ),
        ]
        if pad_id != 0:
            mistakes.append(
                (
                    "pad id hard-coded as 0",
                    f"your mask compares with 0 instead of pad_id (here {pad_id}): real tokens with "
                    "id 0 are masked and the padding is not. Use the pad_id argument.",
                    (src0 != 0).unsqueeze(1),
                )
            )
        _not_bool("the mask", got, expected, case)
        expect_close("the mask", got, expected, mistakes, case=case)
    return "(B, 1, L_src), True on real tokens, pad_id 0 and non-zero"


# ---------------------------------------------------------------- make_tgt_mask
@checker("make_tgt_mask")
def check_make_tgt_mask(fn: Callable[..., Any]) -> str:
    require_function(fn, "make_tgt_mask")
    for pad_id in (randint(1, 9), 0):
        while True:
            B, L = randint(2, 5), randint(4, 9)
            if B != L:
                break
        tgt = _tokens(B, L, 12, pad_id, trailing_padding(B, L)[:, 0])  # (B, L)
        tgt0 = tgt.clone()
        case = f"tgt of shape ({B}, {L}), pad_id={pad_id}"
        got = call_student(fn, tgt, pad_id, context=f"calling make_tgt_mask({case})")
        check_unchanged(["tgt"], [tgt], [tgt0], case)
        pad = padding_mask(tgt0, pad_id)  # (B, 1, L) keys that are real
        causal = causal_mask(L)  # (L, L)
        expected = pad & causal  # (B, L, L)
        full = (B, L, L)
        mistakes: list[Mistake] = [
            (
                "causal only",
                "the mask is only causal: padding keys are not blocked. Combine the causal mask with "
                "the padding mask: padding_mask(tgt, pad_id) & causal_mask(L).",
                causal,
            ),
            ("causal only", "the mask is only causal: padding keys are not blocked. Combine it with "
             "the padding mask using &.", causal.expand(full)),
            (
                "padding only",
                "the mask only blocks padding: nothing stops a position from looking at later "
                "(future) tokens. Combine the padding mask with causal_mask(L) using &.",
                pad,
            ),
            ("padding only", "the mask only blocks padding, not the future: combine it with causal_mask(L) "
             "using &.", pad.expand(full)),
            (
                "upper triangle",
                "the causal part is the upper triangle: each position may look at the future, not "
                "the past. Position i may attend to keys 0..i: keep the lower triangle (tril).",
                pad & torch.ones(L, L, dtype=torch.bool).triu(),
            ),
            (
                "strictly lower triangle",
                "the causal part leaves out the diagonal: each position must also be allowed to "
                "attend to itself (tril(), not tril(-1)).",
                pad & torch.ones(L, L, dtype=torch.bool).tril(-1),
            ),
            (
                "padding on the query axis",
                "the padding is applied on the query axis (rows) instead of the key axis (columns): "
                "padding *keys* must be blocked for every query, so use the (B, 1, L) padding mask "
                "(unsqueeze(1)), not (B, L, 1).",
                pad.transpose(1, 2) & causal,
            ),
            (
                "| instead of &",
                "the two masks are combined with | (or): a key is allowed if it is in the past OR "
                "real. It must be both: use &.",
                pad | causal,
            ),
            ("mask inverted", "the mask is inverted: True means 'may attend'.", ~expected),
            (
                "extra head axis",
                "the mask has an extra head axis, (B, 1, L, L); the contract's shape is "
                "(B, L_tgt, L_tgt) (MultiHeadAttention adds the head axis itself).",
                expected.unsqueeze(1),
            ),
        ]
        if pad_id != 0:
            mistakes.append(
                (
                    "pad id hard-coded as 0",
                    f"the padding part compares with 0 instead of pad_id (here {pad_id}). Use the "
                    "pad_id argument.",
                    padding_mask(tgt0, 0) & causal,
                )
            )
        _not_bool("the mask", got, expected, case)
        expect_close("the mask", got, expected, mistakes, case=case)
    return "(B, L_tgt, L_tgt) = padding & causal, pad_id 0 and non-zero"


# ---------------------------------------------------------------- Transformer
@dataclass
class _Sizes:
    B: int
    L_src: int
    L_tgt: int
    D: int
    H: int
    d_ff: int
    V_src: int
    V_tgt: int
    N: int
    pad_src: int
    pad_tgt: int

    def kwargs(self, norm_first: bool) -> dict[str, Any]:
        return dict(
            d_model=self.D, num_heads=self.H, num_layers=self.N, d_ff=self.d_ff, dropout=0.1,
            max_len=40, norm_first=norm_first,
        )

    def shown(self, norm_first: bool) -> str:
        kw = ", ".join(f"{k}={v}" for k, v in self.kwargs(norm_first).items())
        return f"{self.V_src}, {self.V_tgt}, {kw}"


def _transformer_sizes() -> _Sizes:
    while True:
        B, L_src, L_tgt = randint(2, 4), randint(5, 9), randint(4, 8)
        H, d_k = 2, randint(3, 6)
        D, d_ff = H * d_k, randint(10, 24)
        V_src, V_tgt = randint(11, 17), randint(11, 17)
        sizes = [B, L_src, L_tgt, D, d_ff, V_src, V_tgt]
        if len(set(sizes)) == len(sizes):
            return _Sizes(B, L_src, L_tgt, D, H, d_ff, V_src, V_tgt, randint(1, 2), randint(0, 10), randint(0, 10))


def _transformer_variant(
    ref: Transformer,
    src: Tensor,
    tgt: Tensor,
    src_mask: Tensor | None,
    tgt_mask: Tensor | None,
    *,
    scale: tuple[bool, bool] = (True, True),
    pe: tuple[bool, bool] = (True, True),
    enc_mask: bool = True,
    cross_mask: bool = True,
    self_mask: bool = True,
    part: str = "logits",
    post: str | None = None,
) -> Tensor:
    """The reference's forward (or ``part="memory"``/``"decoded"``) with optional mistakes."""
    root = math.sqrt(ref.d_model)

    def embed(module: nn.Module, tokens: Tensor, scaled: bool, positions: bool) -> Tensor:
        x = module.embedding(tokens) * (root if scaled else 1.0)  # (B, L, D)
        return ref.positional_encoding(x) if positions else x

    memory = ref.encoder(embed(ref.src_embedding, src, scale[0], pe[0]), src_mask if enc_mask else None)
    if part == "memory":
        return memory  # (B, L_src, D)
    y = embed(ref.tgt_embedding, tgt, scale[1], pe[1])  # (B, L_tgt, D)
    out = ref.decoder(y, memory, tgt_mask if self_mask else None, src_mask if cross_mask else None)
    if part == "decoded":
        return out  # (B, L_tgt, D)
    logits = ref.output_projection(out)  # (B, L_tgt, V_tgt)
    if post == "softmax":
        return logits.softmax(-1)
    if post == "log_softmax":
        return logits.log_softmax(-1)
    return logits


_SIDES = {(False, True): "source", (True, False): "target", (False, False): "source and target"}


def _transformer_mistakes(part: str, has_src_mask: bool, has_tgt_mask: bool) -> list[tuple[str, str, dict[str, Any]]]:
    out: list[tuple[str, str, dict[str, Any]]] = []
    if has_tgt_mask and part != "memory":
        out.append(
            (
                "future tokens leak",
                "tgt_mask has no effect: every target position sees the later (future) target "
                "tokens. Pass tgt_mask on to the decoder's self-attention.",
                dict(self_mask=False),
            )
        )
    if has_src_mask:
        if part != "memory":
            out.append(
                (
                    "src_mask not used for cross-attention",
                    "the decoder's cross-attention ignores src_mask, so target positions attend to "
                    "source padding. Pass src_mask to the decoder as memory_mask.",
                    dict(cross_mask=False),
                )
            )
        if part != "decoded":  # decode gets the reference's memory
            out.append(
                (
                    "src_mask not used by the encoder",
                    "the encoder ignores src_mask, so source positions attend to padding. Pass src_mask "
                    "to the encoder.",
                    dict(enc_mask=False),
                )
            )
        if part == "logits":
            out.append(
                (
                    "src_mask not used",
                    "src_mask is not used at all: pass it to the encoder and, as memory_mask, to the "
                    "decoder's cross-attention.",
                    dict(enc_mask=False, cross_mask=False),
                )
            )
    for flags, side in _SIDES.items():
        if part == "memory" and flags[0]:
            continue
        if part == "decoded" and not flags[0]:
            continue  # decode gets the reference memory: only the target side can be wrong
        out.append(
            (
                "embeddings not scaled",
                f"the {side} token embeddings are not multiplied by sqrt(d_model) before the "
                "positional encoding is added (TokenEmbedding does it).",
                dict(scale=flags),
            )
        )
        out.append(
            (
                "positional encoding missing",
                f"no positional encoding is added to the {side} embeddings, so the model cannot tell "
                "positions apart: pass the embeddings through the PositionalEncoding module.",
                dict(pe=flags),
            )
        )
    if part == "logits":
        out.append(
            (
                "output projection missing",
                "forward returns the decoder output (B, L_tgt, d_model): project it to the target "
                "vocabulary with the output projection, nn.Linear(d_model, tgt_vocab_size), to get "
                "logits (B, L_tgt, tgt_vocab_size).",
                dict(part="decoded"),
            )
        )
        for post in ("softmax", "log_softmax"):
            out.append(
                (
                    "returns probabilities",
                    f"forward applies {post} to the logits; return the raw logits (the loss, "
                    "F.cross_entropy, applies log-softmax itself).",
                    dict(post=post),
                )
            )
    return out


def _require_methods(model: nn.Module) -> None:
    for name, sig in (("encode", "encode(src, src_mask)"), ("decode", "decode(tgt, memory, tgt_mask, memory_mask)")):
        if not callable(getattr(model, name, None)):
            fail(
                f"your Transformer has no method {sig}; the contract asks for encode and decode "
                "(greedy decoding runs the encoder once and the decoder once per step).",
                mistake="missing method",
            )


def _student_call(what: str, fn: Callable[..., Any], args: tuple[Any, ...], names: list[str], case: str) -> Any:
    originals = [a.clone() if isinstance(a, Tensor) else a for a in args]
    got = call_student(fn, *args, context=f"calling {what} ({case})")
    check_unchanged(names, args, originals, case)
    if isinstance(got, (tuple, list)):
        fail(
            f"{what} should return one tensor; yours returned a {type(got).__name__} of {len(got)} items ({case}).",
            mistake="wrong return",
        )
    return got


def _mapped_cases(model: nn.Module, ref: Transformer, s: _Sizes, norm_first: bool) -> None:
    src = _tokens(s.B, s.L_src, s.V_src, s.pad_src, trailing_padding(s.B, s.L_src)[:, 0])  # (B, L_src)
    tgt = _tokens(s.B, s.L_tgt, s.V_tgt, s.pad_tgt, trailing_padding(s.B, s.L_tgt)[:, 0])  # (B, L_tgt)
    src_mask = padding_mask(src, s.pad_src)  # (B, 1, L_src)
    tgt_full = padding_mask(tgt, s.pad_tgt) & causal_mask(s.L_tgt)  # (B, L_tgt, L_tgt)
    nf = f"norm_first={norm_first}"
    sizes = f"src ({s.B}, {s.L_src}), tgt ({s.B}, {s.L_tgt})"
    cases = [
        ((src, tgt, src_mask, tgt_full), f"{nf}, {sizes}, src_mask (B, 1, L_src), tgt_mask causal + padding"),
        ((src, tgt), f"{nf}, {sizes}, no masks"),
        ((src, tgt, src_mask, causal_mask(s.L_tgt)), f"{nf}, {sizes}, src_mask, tgt_mask causal (L_tgt, L_tgt)"),
    ]
    with torch.no_grad():
        for args, case in cases:
            full = tuple(args) + (None,) * (4 - len(args))
            expected = ref(*full)  # (B, L_tgt, V_tgt)
            got = _student_call("forward", model, args, ["src", "tgt", "src_mask", "tgt_mask"][: len(args)], case)
            check_dropout(lambda args=args: call_student(model, *args), got, expected)
            mistakes = [
                (name, diag, lambda kw=kw, full=full: _transformer_variant(ref, *full, **kw))
                for name, diag, kw in _transformer_mistakes("logits", full[2] is not None, full[3] is not None)
            ]
            expect_close("logits", got, expected, mistakes, case=case)

        case = f"{nf}, encode(src, src_mask), src ({s.B}, {s.L_src})"
        memory = _student_call("encode", model.encode, (src, src_mask), ["src", "src_mask"], case)
        mistakes = [
            (name, diag, lambda kw=kw: _transformer_variant(ref, src, tgt, src_mask, None, part="memory", **kw))
            for name, diag, kw in _transformer_mistakes("memory", True, False)
        ]
        expect_close("memory", memory, ref.encode(src, src_mask), mistakes, case=case)

        memory = ref.encode(src, src_mask)  # (B, L_src, D)
        case = f"{nf}, decode(tgt, memory, tgt_mask, src_mask), tgt ({s.B}, {s.L_tgt})"
        args = (tgt, memory, tgt_full, src_mask)
        got = _student_call("decode", model.decode, args, ["tgt", "memory", "tgt_mask", "memory_mask"], case)
        mistakes = [
            (name, diag, lambda kw=kw: _transformer_variant(ref, src, tgt, src_mask, tgt_full, part="decoded", **kw))
            for name, diag, kw in _transformer_mistakes("decoded", True, True)
        ]
        expect_close("decoded", got, ref.decode(*args), mistakes, case=case)


def _behaviour_cases(model: nn.Module, s: _Sizes, norm_first: bool) -> None:
    """Checks that need no parameter names: shapes, causality, padding, encode/decode, positions."""
    nf = f"norm_first={norm_first}"
    B, L_src, L_tgt = s.B, s.L_src, s.L_tgt
    real_src = trailing_padding(B, L_src)[:, 0]  # (B, L_src)
    src = _tokens(B, L_src, s.V_src, s.pad_src, real_src)
    tgt = torch.stack([torch.randperm(s.V_tgt)[:L_tgt] for _ in range(B)])  # (B, L_tgt), distinct ids per row
    src_mask = padding_mask(src, s.pad_src)  # (B, 1, L_src)
    causal = causal_mask(L_tgt)  # (L_tgt, L_tgt)
    case = f"{nf}, src ({B}, {L_src}), tgt ({B}, {L_tgt}), src_mask, causal tgt_mask"
    with torch.no_grad():
        logits = _student_call("forward", model, (src, tgt, src_mask, causal), ["src", "tgt", "src_mask", "tgt_mask"], case)
        if not isinstance(logits, Tensor):
            fail(f"forward should return a tensor of logits; yours returned {type(logits).__name__} ({case}).", mistake="wrong return")
        if tuple(logits.shape) == (B, L_tgt, s.D):
            fail(
                f"forward returns shape {describe_shape(logits)} = (B, L_tgt, d_model), the decoder "
                "output: project it to the target vocabulary with nn.Linear(d_model, tgt_vocab_size) "
                "to get logits (B, L_tgt, tgt_vocab_size).",
                mistake="output projection missing",
            )
        if tuple(logits.shape) != (B, L_tgt, s.V_tgt):
            fail(
                f"forward returns shape {describe_shape(logits)}, expected (B, L_tgt, tgt_vocab_size) = "
                f"({B}, {L_tgt}, {s.V_tgt}) ({case}).",
                mistake="wrong shape",
            )
        again = call_student(model, src, tgt, src_mask, causal)
        if isinstance(again, Tensor) and not torch.equal(again, logits):
            fail(
                "the same input gave two different outputs in eval mode: some dropout still runs after "
                "model.eval(). Use nn.Dropout modules, or pass training=self.training to F.dropout.",
                mistake="dropout in eval mode",
            )
        # causality: changing tokens after position t must not change the logits up to t
        t = randint(0, L_tgt - 2)
        tgt2 = tgt.clone()
        tgt2[:, t + 1 :] = torch.randint(0, s.V_tgt, (B, L_tgt - t - 1))
        changed = call_student(model, src, tgt2, src_mask, causal, context="running forward (causality test)")
        if not (isinstance(changed, Tensor) and matches(changed[:, : t + 1], logits[:, : t + 1])):
            fail(
                f"with a causal tgt_mask, changing the target tokens after position {t} changed the "
                f"logits at positions 0..{t}: future tokens leak. Pass tgt_mask on to the decoder's "
                "self-attention.",
                mistake="future tokens leak",
            )
        # padding: the ids at padded source positions must not matter under src_mask
        src2 = torch.where(real_src, src, torch.randint(0, s.V_src, src.shape))
        changed = call_student(model, src2, tgt, src_mask, causal, context="running forward (padding test)")
        if not (isinstance(changed, Tensor) and matches(changed, logits)):
            fail(
                "changing the token ids at padded source positions changed the logits although src_mask "
                "blocks them: src_mask is not used (pass it to the encoder and, as memory_mask, to the "
                "decoder's cross-attention).",
                mistake="src_mask not used",
            )
        # encode / decode agree with forward; more rows than D + 1, so that without an
        # `output_projection` attribute a least-squares fit can tell an affine map from another
        B2 = B + -(-(s.D + 8) // L_tgt)
        src_c = _tokens(B2, L_src, s.V_src, s.pad_src, trailing_padding(B2, L_src)[:, 0])  # (B2, L_src)
        tgt_c = torch.randint(0, s.V_tgt, (B2, L_tgt))  # (B2, L_tgt)
        mask_c = padding_mask(src_c, s.pad_src)  # (B2, 1, L_src)
        case = f"{nf}, src ({B2}, {L_src}), tgt ({B2}, {L_tgt}), src_mask, causal tgt_mask"
        logits = call_student(model, src_c, tgt_c, mask_c, causal, context=f"running forward ({case})")
        memory = _student_call("encode", model.encode, (src_c, mask_c), ["src", "src_mask"], case)
        if not (isinstance(memory, Tensor) and tuple(memory.shape) == (B2, L_src, s.D)):
            fail(f"encode(src, src_mask) should return memory of shape (B, L_src, d_model) = ({B2}, {L_src}, {s.D}); "
                 f"yours returned {describe_shape(memory)}.", mistake="forward disagrees with encode/decode")
        out = _student_call("decode", model.decode, (tgt_c, memory, causal, mask_c), ["tgt", "memory", "tgt_mask", "memory_mask"], case)
        if not (isinstance(out, Tensor) and tuple(out.shape) == (B2, L_tgt, s.D)):
            fail(f"decode(tgt, memory, tgt_mask, memory_mask) should return (B, L_tgt, d_model) = ({B2}, {L_tgt}, {s.D}); "
                 f"yours returned {describe_shape(out)}.", mistake="forward disagrees with encode/decode")
        if not (isinstance(logits, Tensor) and logits.shape == (B2, L_tgt, s.V_tgt)) or not _affine_fit(
            out.reshape(-1, s.D), logits.reshape(-1, s.V_tgt), getattr(model, "output_projection", None)
        ):
            fail(
                "forward's logits are not the output projection of decode(tgt, encode(src, src_mask), "
                "tgt_mask, src_mask): forward should be exactly encode, then decode, then the projection.",
                mistake="forward disagrees with encode/decode",
            )
        # positions: without a positional encoding, permuting the target permutes the logits,
        # and permuting the source changes nothing
        perm = torch.roll(torch.arange(L_tgt), 1)
        plain = call_student(model, src, tgt, context="running forward (no masks)")
        shuffled = call_student(model, src, tgt[:, perm], context="running forward (permuted target)")
        if isinstance(plain, Tensor) and isinstance(shuffled, Tensor) and matches(shuffled, plain[:, perm]):
            fail(
                "permuting the target tokens just permutes the logits: the decoder cannot tell positions "
                "apart, so the positional encoding is missing on the target side.",
                mistake="positional encoding missing",
            )
        perm_src = torch.roll(torch.arange(L_src), 1)
        shuffled = call_student(model, src[:, perm_src], tgt, context="running forward (permuted source)")
        if isinstance(plain, Tensor) and isinstance(shuffled, Tensor) and matches(shuffled, plain):
            fail(
                "permuting the source tokens leaves the logits unchanged: the encoder cannot tell "
                "positions apart, so the positional encoding is missing on the source side.",
                mistake="positional encoding missing",
            )


def _affine_fit(x: Tensor, y: Tensor, projection: Any) -> bool:
    """Is ``y`` the model's output projection of ``x`` (or, with no ``output_projection``
    attribute, some affine map of it: least squares over more rows than unknowns)?"""
    if callable(projection):
        try:
            return matches(projection(x), y)
        except Exception:  # noqa: BLE001 - a projection that cannot take x is not this one
            pass
    X = torch.cat([x, torch.ones(x.size(0), 1)], dim=1).double()  # (N, D + 1), N >= D + 8
    sol = torch.linalg.lstsq(X, y.double()).solution  # (D + 1, V)
    return bool(torch.allclose(X @ sol, y.double(), atol=1e-4, rtol=1e-3))


_TRANSFORMER_NAMES = ("src_embedding", "tgt_embedding", "encoder", "decoder", "output_projection")


@checker("Transformer")
def check_transformer(cls: Any) -> str:
    require_module_class(cls, "Transformer")
    s = _transformer_sizes()
    modes = []
    for norm_first in (False, True):
        model = build_student(cls, "Transformer", (s.V_src, s.V_tgt), s.kwargs(norm_first), s.shown(norm_first))
        _require_methods(model)
        ref = Transformer(s.V_src, s.V_tgt, **s.kwargs(norm_first)).eval()
        pairs, missing, unexpected, wrong_shape = match_parameters(model, ref)
        if not (missing or unexpected or wrong_shape):
            copy_parameters(pairs)
            _mapped_cases(model, ref, s, norm_first)
            modes.append("compared with the reference")
        else:
            _behaviour_cases(model, s, norm_first)
            modes.append("tested by behaviour (parameter names differ from the reference's)")
    how = modes[0] if modes[0] == modes[1] else "; ".join(modes)
    return f"post-norm and pre-norm, with and without masks, {how}"


# ---------------------------------------------------------------- greedy_decode
_MARGIN = 1e-3  # a greedy choice the correct answer depends on wins by at least this much
_MARGIN_VARIANT = 1e-4


def _greedy_raw(
    model: Transformer,
    src: Tensor,
    src_mask: Tensor | None,
    bos_id: int,
    steps: int,
    *,
    causal: bool = True,
    position: int = -1,
    argmax: str = "vocab",
    use_src_mask: bool = True,
) -> tuple[Tensor, Tensor]:
    """Greedy tokens with no stopping and no filling, ``(B, steps + 1)``, and each step's
    top-1 minus top-2 logit, ``(B, steps)`` (``inf`` where the choice is not a vocabulary argmax)."""
    mask = src_mask if use_src_mask else None
    memory = model.encode(src, mask)  # (B, L_src, D)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    margins = []
    for _ in range(steps):
        T = ys.size(1)
        out = model.decode(ys, memory, causal_mask(T) if causal else None, mask)  # (B, T, D)
        if argmax == "positions":  # argmax over the positions of (B, T, V), then the last column
            nxt = model.output_projection(out).argmax(dim=1)[:, -1]  # (B,)
            margins.append(torch.full((ys.size(0),), math.inf))
        else:
            logits = model.output_projection(out[:, position])  # (B, V)
            top = logits.topk(2, dim=-1).values  # (B, 2)
            margins.append(top[:, 0] - top[:, 1])
            nxt = logits.argmax(dim=-1)  # (B,)
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, T + 1)
    return ys, torch.stack(margins, dim=1)


def _finish(
    raw: Tensor, eos_id: int, fill: int, max_len: int, *, stop: str = "all", do_fill: bool = True, bos: bool = True
) -> Tensor:
    """What greedy decoding returns given the un-stopped trajectory ``raw``, with optional mistakes."""
    cols = [raw[:, 0]]
    finished = torch.zeros(raw.size(0), dtype=torch.bool)
    for step in range(1, max_len + 1):
        tok = raw[:, step].clone()
        if do_fill:
            tok[finished] = fill
        cols.append(tok)
        finished = finished | (tok == eos_id)
        if (stop == "all" and bool(finished.all())) or (stop == "any" and bool(finished.any())):
            break
    out = torch.stack(cols, dim=1)  # (B, T)
    return out if bos else out[:, 1:]


@dataclass
class _GreedyCase:
    rows: Tensor
    eos_id: int
    pad_id: int | None
    train: bool
    words: str
    expected: Tensor = field(default_factory=lambda: torch.empty(0))
    mistakes: list[tuple[str, str, Tensor]] = field(default_factory=list)


@dataclass
class _GreedySetup:
    model: Transformer
    src: Tensor
    src_mask: Tensor
    bos_id: int
    pad_id: int
    max_len: int
    cases: list[_GreedyCase]


def _first_eos(raw: Tensor, eos_id: int, max_len: int) -> Tensor:
    """Step (1..max_len) of each row's first ``eos_id``; ``max_len + 1`` when there is none."""
    hit = raw[:, 1 : max_len + 1] == eos_id  # (B, max_len)
    first = hit.float().argmax(dim=1) + 1  # (B,)
    return torch.where(hit.any(dim=1), first, torch.full_like(first, max_len + 1))


def _greedy_mistakes(
    raws: dict[str, Tensor], rows: Tensor, eos: int, fill: int, pad_id: int | None, M: int, train: bool
) -> list[tuple[str, str, Tensor]]:
    def fin(kind: str = "ok", **kw: Any) -> Tensor:
        kw.setdefault("max_len", M)
        return _finish(raws[kind][rows], eos, kw.pop("fill", fill), kw.pop("max_len"), **kw)

    if train:
        return [
            (
                "model left in train mode",
                "your decoding runs with dropout active: the model came in train mode and was never "
                "switched to eval mode. Call model.eval() at the start (and decode under torch.no_grad()).",
                fin("train"),
            )
        ]
    out = [
        (
            "no bos in column 0",
            "column 0 must be bos_id: start every sequence with <bos> and keep it in the output.",
            fin(bos=False),
        ),
    ]
    if pad_id is not None and pad_id != eos:  # listed before "keeps generating": see _greedy_cases
        out.append(
            (
                "pad_id ignored",
                "finished sequences are filled with eos_id although pad_id was given: fill with pad_id "
                "(eos_id only when pad_id is None).",
                fin(fill=eos),
            )
        )
    out += [
        (
            "keeps generating after eos",
            "a sequence keeps producing real tokens after its <eos>: once a sequence has finished, "
            "write pad_id (eos_id when pad_id is None) in its later positions.",
            fin(do_fill=False),
        ),
        (
            "keeps generating after eos",
            "decoding ignores <eos>: sequences keep producing real tokens until max_len. Stop when "
            "every sequence has produced eos_id, and fill the finished ones with pad_id.",
            fin(do_fill=False, stop="never"),
        ),
        (
            "runs to max_len after all finished",
            "decoding goes on until max_len although every sequence had already produced <eos>: stop "
            "as soon as all of them have finished (T = 1 + the number of steps taken).",
            fin(stop="never"),
        ),
        (
            "stops at the first eos",
            "decoding stops as soon as one sequence produces <eos>; stop only when every sequence has "
            "finished (track a `finished` flag per sequence and test finished.all()).",
            fin(stop="any"),
        ),
        (
            "no causal mask",
            "the decoder runs without a causal mask: pass causal_mask(T) as tgt_mask at every step, as "
            "in training; without it the earlier positions see the later ones and the prediction changes.",
            fin("no causal"),
        ),
        (
            "argmax over wrong axis",
            "the argmax is taken over the positions axis of the (B, T, V) logits; take the logits of "
            "the last position, (B, V), and the argmax over the vocabulary (dim=-1).",
            fin("positions"),
        ),
        (
            "reads the first position",
            "the next token is read from the first position (out[:, 0]); the prediction for the next "
            "token is at the last position, out[:, -1].",
            fin("first"),
        ),
        (
            "src_mask not used",
            "src_mask is not used: pass it to model.encode and, as memory_mask, to model.decode.",
            fin("no src mask"),
        ),
        (
            "max_len off by one",
            f"with max_len={M} your output has {M + 2} columns: generate at most max_len tokens after "
            "<bos> (T <= max_len + 1).",
            fin(max_len=M + 1),
        ),
        (
            "max_len off by one",
            f"with max_len={M} your output has only {M} columns: generate up to max_len tokens after "
            "<bos> (T <= max_len + 1).",
            fin(max_len=M - 1),
        ),
    ]
    return out


def _same(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))


def _distinguishable(cases: list[_GreedyCase]) -> bool:
    """Every catalogued mistake differs from the right answer in some case and, in the first
    such case, from every differently named mistake listed before it."""
    keys = {(n, d) for c in cases for n, d, _ in c.mistakes}  # each variant, not just each name
    caught: set[tuple[str, str]] = set()
    for c in cases:
        for i, (name, diagnosis, value) in enumerate(c.mistakes):
            if _same(value, c.expected) or (name, diagnosis) in caught:
                continue
            if any(_same(value, v) and n != name for n, _, v in c.mistakes[:i]):
                return False
            caught.add((name, diagnosis))
    return caught == keys


def _choose_rows(candidates: Tensor, need: list[Tensor], size: int) -> Tensor | None:
    """At least ``size`` random row indices among ``candidates`` (bool), one from each ``need``
    group (a row may serve several groups)."""
    chosen: list[int] = []
    for group in need:
        idx = torch.nonzero(group & candidates).flatten().tolist()
        if not idx:
            return None
        if not any(i in chosen for i in idx):
            chosen.append(idx[int(torch.randint(len(idx), ()))])
    rest = [i for i in torch.nonzero(candidates).flatten().tolist() if i not in chosen]
    order = torch.randperm(len(rest)).tolist()
    chosen += [rest[i] for i in order[: max(0, size - len(chosen))]]
    if len(chosen) < size:
        return None
    return torch.tensor(sorted(chosen))


_VARIANTS = {
    "no causal": dict(causal=False),
    "positions": dict(argmax="positions"),
    "first": dict(position=0),
    "no src mask": dict(use_src_mask=False),
}


def _promising(raw: Tensor, margins: Tensor, usable: Tensor, bos_id: int, pad_id: int, M: int) -> bool:
    """Some eos_id ends clear rows at two different steps before max_len, and leaves another never ending."""
    steps = torch.arange(1, M + 2)  # (M + 1,)
    for eos_id in range(int(raw.max()) + 1):
        if eos_id in (bos_id, pad_id):
            continue
        first = _first_eos(raw, eos_id, M)  # (N,)
        clear = usable & ((margins > _MARGIN) | (steps[None, :] > first[:, None])).all(dim=1)
        if len(set(first[clear & (first <= M - 1)].tolist())) >= 2 and bool((clear & (first > M)).any()):
            return True
    return False


def _greedy_setup() -> _GreedySetup:
    for _ in range(20):
        V, D, M = randint(11, 13), 8 * randint(2, 4), randint(6, 8)
        model = Transformer(V, V, d_model=D, num_heads=2, num_layers=2, d_ff=randint(20, 40), dropout=1.0,
                            max_len=64, norm_first=True)
        randomise_parameters(model)
        with torch.no_grad():  # sharper attention: more varied sequences, and the causal mask matters more
            for name, p in model.named_parameters():
                if name.endswith(("w_q.weight", "w_k.weight")):
                    p.mul_(3.0)
        model.eval()
        bos_id = randint(0, V - 1)
        pad_id = (bos_id + randint(1, V - 1)) % V
        N, L_src = 24, randint(5, 8)
        real = trailing_padding(N, L_src)[:, 0]  # (N, L_src)
        src = _tokens(N, L_src, V, pad_id, real)
        src_mask = padding_mask(src, pad_id)  # (N, 1, L_src)
        raws: dict[str, Tensor] = {}
        with torch.no_grad():
            raws["ok"], margins = _greedy_raw(model, src, src_mask, bos_id, M + 1)  # (N, M + 2), (N, M + 1)
            usable = ~(raws["ok"][:, 1:] == pad_id).any(dim=1)  # (N,) no pad id among the real tokens
            if not _promising(raws["ok"], margins, usable, bos_id, pad_id, M):
                continue  # too uniform a model: skip the costly variants
            for kind, kw in _VARIANTS.items():
                raws[kind], m = _greedy_raw(model, src, src_mask, bos_id, M + 1, **kw)
                usable &= (m > _MARGIN_VARIANT).all(dim=1)
            model.train()  # dropout=1.0: deterministic, and nothing like eval mode
            raws["train"], _ = _greedy_raw(model, src, src_mask, bos_id, M + 1)
            model.eval()
        steps = torch.arange(1, M + 2)  # (M + 1,)
        for eos_id in torch.randperm(V).tolist():
            if eos_id in (bos_id, pad_id):
                continue
            first = _first_eos(raws["ok"], eos_id, M)  # (N,)
            upto = steps[None, :] <= first[:, None]  # (N, M + 1) the choices that matter
            clear = usable & ((margins > _MARGIN) | ~upto).all(dim=1)  # ... win clearly
            ends = clear & (first <= M - 1)
            if not ends.any():
                continue
            # rows where a mistake changes the tokens within max_len
            shown = upto & (steps[None, :] <= M)  # (N, M + 1)
            differs = {k: ((raws[k][:, 1:] != raws["ok"][:, 1:]) & shown).any(dim=1) for k in _VARIANTS}
            # rows that go on with other tokens after their eos (else "keeps generating" = filling)
            goes_on = ((raws["ok"][:, 1:] != eos_id) & ~upto & (steps[None, :] <= M)).any(dim=1)
            a_rows = _choose_rows(
                ends, [first == first[ends].min(), first == first[ends].max(), differs["no src mask"]], randint(3, 4)
            )
            if a_rows is None or len(set(first[a_rows].tolist())) < 2:
                continue
            b_rows = _choose_rows(clear, [first > M, (first < M) & goes_on, differs["no causal"]], randint(3, 4))
            if b_rows is None:
                continue
            setup = _greedy_cases(model, src, src_mask, raws, bos_id, pad_id, M, eos_id, a_rows, b_rows)
            if setup is not None:
                return setup
    raise RuntimeError("could not build a greedy-decoding test case; please run the check again")


def _greedy_cases(
    model: Transformer, src: Tensor, src_mask: Tensor, raws: dict[str, Tensor], bos_id: int, pad_id: int,
    M: int, eos_id: int, a_rows: Tensor, b_rows: Tensor,
) -> _GreedySetup | None:
    # B first: there pad_id is None, so "keeps generating" cannot look like "pad_id ignored"
    cases = [
        _GreedyCase(b_rows, eos_id, None, False, "one sequence never produces <eos>, pad_id=None"),
        _GreedyCase(a_rows, eos_id, pad_id, False, "every sequence produces <eos> before max_len, pad_id given"),
        _GreedyCase(a_rows, eos_id, pad_id, True, "the model passed in train mode"),
    ]
    for c in cases:
        fill = c.eos_id if c.pad_id is None else c.pad_id
        with torch.no_grad():
            c.expected = greedy_decode(model, src[c.rows], M, bos_id, eos_id, src_mask=src_mask[c.rows], pad_id=c.pad_id)
        model.eval()
        if not _same(c.expected, _finish(raws["ok"][c.rows], eos_id, fill, M)):
            return None  # the smaller batch changed a close call: pick other rows
        c.mistakes = _greedy_mistakes(raws, c.rows, eos_id, fill, c.pad_id, M, c.train)
    if not _distinguishable(cases):
        return None
    return _GreedySetup(model, src, src_mask, bos_id, pad_id, M, cases)


def _token_diagnosis(got: Any, expected: Tensor, case: str, max_len: int) -> None:
    """Say which row differs, in tokens, instead of a float difference."""
    if not isinstance(got, Tensor) or got.dim() != 2:
        return
    if got.shape != expected.shape:
        if got.size(0) == expected.size(0):
            fail(
                f"the output ({case}) has {got.size(1)} columns, expected {expected.size(1)}: T = 1 (<bos>) "
                f"+ the number of steps until every sequence has produced <eos>, at most max_len={max_len}.\n"
                f"    yours    row 0: {got[0].tolist()}\n    expected row 0: {expected[0].tolist()}",
                mistake="values differ",
            )
        return
    wrong = torch.nonzero((got != expected).any(dim=1)).flatten()
    if len(wrong):
        r = int(wrong[0])
        fail(
            f"the output ({case}) differs from the expected tokens in {len(wrong)} of {got.size(0)} rows; "
            f"row {r}:\n    yours:    {got[r].tolist()}\n    expected: {expected[r].tolist()}",
            mistake="values differ",
        )


def _greedy_probe(fn: Callable[..., Any], setup: _GreedySetup, case: _GreedyCase, err: StudentError) -> None:
    """A shape error may come from an argmax over the batch axis, which only runs when B == V."""
    model, V = setup.model, setup.model.output_projection.out_features
    if not isinstance(err.exc, RuntimeError) or len(case.rows) == V or setup.src.size(0) < V:
        return
    src, mask = setup.src[:V], setup.src_mask[:V]
    fill = case.eos_id if case.pad_id is None else case.pad_id
    try:
        with torch.no_grad():
            got = fn(model, src.clone(), setup.max_len, setup.bos_id, case.eos_id, src_mask=mask.clone(), pad_id=case.pad_id)
            model.eval()
            # the rows are not independent here, so decode step by step with the filling
            memory = model.encode(src, mask)  # (V, L_src, D)
            ys = torch.full((V, 1), setup.bos_id, dtype=torch.long)  # (V, 1)
            finished = torch.zeros(V, dtype=torch.bool)
            for _ in range(setup.max_len):
                out = model.decode(ys, memory, causal_mask(ys.size(1)), mask)  # (V, T, D)
                nxt = model.output_projection(out[:, -1]).argmax(dim=0).masked_fill(finished, fill)  # (V,)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                finished = finished | (nxt == case.eos_id)
                if bool(finished.all()):
                    break
    except Exception:  # noqa: BLE001 - the probe only adds a diagnosis
        model.eval()
        return
    model.eval()
    if isinstance(got, Tensor) and _same(got.long(), ys):
        fail(
            f"your code raised {type(err.exc).__name__}: {str(err.exc).splitlines()[0] if str(err.exc) else ''} "
            f"with a batch of {len(case.rows)} sources, but runs with exactly vocab_size={V} of them: the "
            "argmax is taken over the batch axis of the (B, V) logits. Take it over the vocabulary, dim=-1.",
            mistake="argmax over wrong axis",
        )


@checker("greedy_decode")
def check_greedy_decode(fn: Callable[..., Any]) -> str:
    require_function(fn, "greedy_decode")
    setup = _greedy_setup()
    model, M, bos_id = setup.model, setup.max_len, setup.bos_id
    for case in setup.cases:
        src, mask = setup.src[case.rows], setup.src_mask[case.rows]
        src0, mask0 = src.clone(), mask.clone()
        model.train(case.train)
        pad = "" if case.pad_id is None else f", pad_id={case.pad_id}"
        words = (
            f"{case.words}: batch of {len(case.rows)}, max_len={M}, bos_id={bos_id}, eos_id={case.eos_id}{pad}"
        )
        kwargs: dict[str, Any] = {"src_mask": mask}
        if case.pad_id is not None:
            kwargs["pad_id"] = case.pad_id
        try:
            got = call_student(fn, model, src, M, bos_id, case.eos_id, context=f"decoding ({words})", **kwargs)
        except StudentError as err:
            model.eval()
            if not isinstance(err.exc, NotImplementedError):
                _greedy_probe(fn, setup, case, err)
            raise
        model.eval()
        check_unchanged(["src", "src_mask"], [src, mask], [src0, mask0], words)
        if isinstance(got, Tensor) and got.dtype != torch.long:
            right = got.shape == case.expected.shape and bool(torch.equal(got.long(), case.expected))
            if right or got.dtype in (torch.int32, torch.int16, torch.int8, torch.uint8) or got.is_floating_point():
                fail(
                    f"the output has dtype {got.dtype}" + (" (with the right tokens)" if right else "")
                    + ": token ids are torch.long (int64). Build the start column with "
                    "torch.full(..., bos_id, dtype=torch.long); argmax already returns long.",
                    mistake="wrong dtype",
                )
        try:
            expect_close("the output", got, case.expected, case.mistakes, atol=0, rtol=0, case=words)
        except Failure as f:
            if f.mistake in ("values differ", "wrong shape"):
                _token_diagnosis(got, case.expected, words, M)
            raise
    return "stops when all sequences have produced <eos>, fills finished ones with pad_id, respects max_len, eval mode"


# ---------------------------------------------------------------- hints
register_hints(
    "make_src_mask",
    [
        "The source mask marks which source tokens are real: True = may attend, False = padding.",
        "padding_mask from notebook 01 does exactly this: (src != pad_id) with a middle axis of size 1, "
        "shape (B, 1, L_src), so it broadcasts over the queries.",
    ],
)
register_hints(
    "make_tgt_mask",
    [
        "A target position may attend to a key only if the key is real (not padding) AND not in the "
        "future. Build the two masks and combine them.",
        "padding_mask(tgt, pad_id) is (B, 1, L_tgt) and blocks padding keys; causal_mask(L_tgt) is "
        "(L_tgt, L_tgt), True on and below the diagonal.",
        "Combine them with & (both conditions): broadcasting gives (B, L_tgt, L_tgt). Pass the device "
        "of tgt to causal_mask.",
    ],
)
register_hints(
    "Transformer",
    [
        "In __init__: two TokenEmbeddings (source and target vocabularies), one PositionalEncoding, an "
        "Encoder and a Decoder with the same settings, and an nn.Linear(d_model, tgt_vocab_size) called "
        "output_projection.",
        "encode(src, src_mask): embed the source ids, add the positional encoding, run the encoder with "
        "src_mask. decode(tgt, memory, tgt_mask, memory_mask): the same on the target side, then the decoder.",
        "forward(src, tgt, src_mask, tgt_mask): memory = encode(src, src_mask); the decoder's cross-attention "
        "uses src_mask as memory_mask; finish with the output projection to get logits (no softmax).",
    ],
)
register_hints(
    "greedy_decode",
    [
        "Encode the source once. Start ys as a (B, 1) column of bos_id (dtype long); at each step decode "
        "the whole prefix with a causal mask and pick the most likely next token.",
        "The next-token logits are output_projection(out[:, -1]) of shape (B, V): take argmax(dim=-1), "
        "append it as a new column with torch.cat, and run in eval mode under torch.no_grad().",
        "Keep a bool `finished` per sequence: after a sequence's eos_id, write pad_id (eos_id if pad_id is "
        "None) instead of the prediction, and stop as soon as finished.all() (or after max_len steps).",
    ],
)
