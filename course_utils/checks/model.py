"""Checkers for notebook 06 (the full model): ``Transformer``, ``make_src_mask``,
``make_tgt_mask`` and ``greedy_decode``. docs/course-contract.md says what each verifies.
Each exercise's mistakes are one table (:mod:`.catalogue`), in the order the check tries them:
``SRC_MASK``, ``TGT_MASK``, ``TRANSFORMER`` (its value and dropout mistakes generated per side
into entries), ``GREEDY``; ``MISTAKES`` lists their names.

``Transformer``: built with awkward random sizes (all different, two layers, ``max_len``
larger than every other size), for both ``norm_first``. Right after construction: the
sinusoidal table a buffer; the parameters paired with the reference's by name or by
structure (any order of the top-level parts, any names); matrices within the Xavier-uniform
bound with its mean square (> 7 standard deviations for >= 576 entries), LayerNorm scales 1
and shifts 0. Then, every parameter randomised and copied into the reference: eval-mode
``forward`` (with and without masks), ``encode`` and ``decode``, a wrong result compared
with the reference computed with each catalogued mistake; training mode with
``dropout=P_PROBE`` (every dropout of the contract then zeroes its input: deterministic)
and with ``p = 0.5`` (hooks on the stacks' inputs).

Masks: trailing padding of different lengths, a non-zero ``pad_id`` and real tokens of id 0
(a hard-coded 0 shows); the device probed by ``check_input_device``.

``greedy_decode``: a small random pre-norm model (``dropout=1.0``) and its greedy
trajectories, computed once per draw. ``eos_id`` and the rows are chosen so that (A) every
sequence ends before ``max_len``, at different steps (``pad_id=0`` given: ``pad_id or
eos_id`` shows), (B) one never ends (``pad_id`` left out) and (C) is (A) in train mode with
``pad_id=None``; every greedy choice wins by a clear margin (another order of computation
gives the same tokens) and every catalogued mistake gives another, recognisable output
(the ``src_mask`` ones listed first: nothing can take their place). Decision: the output
has ``T = 1 + (steps until every sequence has produced <eos>)`` columns, ``max_len + 1``
when some never does; running past "all finished" is wrong. Hooks watch the modes, the
gradient tracking and the encoder's calls; the device is watched once the tokens are right.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, NamedTuple, NoReturn

import torch
from torch import Tensor, nn

from ..attention import causal_mask, padding_mask
from ..decoding import greedy_decode
from ..layers import LayerNorm
from ..model import Transformer
from ..positional import sinusoidal_positional_encoding
from ._blocks import P_PROBE, check_dropout, reference
from ._core import (
    Failure,
    StudentError,
    allclose,
    call_student,
    check_input_device,
    check_unchanged,
    checker,
    describe_shape,
    drawn_once,
    dropout_scale,
    equal,
    expect_close,
    fail,
    fail_fixed_p,
    gradient_probe,
    isclose,
    matches,
    module_copy,
    randint,
    register_hints,
    require_distinct_roles,
    require_function,
    require_module_class,
    require_no_grad,
)
from ._pairing import copy_parameters, named, pair_parameters, randomise_parameters
from .attention import causal_mask_candidates, compare_mask, padding_shape_diagnosis
from .catalogue import GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Reference
from .decoder import trailing_padding

__all__ = ["check_transformer", "check_make_src_mask", "check_make_tgt_mask", "check_greedy_decode"]


def _tokens(B: int, L: int, vocab: int, pad_id: int, real: Tensor) -> Tensor:
    """``(B, L)`` ids: random non-pad ids where ``real`` (``(B, L)`` bool) is True, ``pad_id``
    elsewhere; id 0 appears among the real tokens when it is not the pad."""
    ids = torch.randint(0, vocab - 1, (B, L))  # (B, L)
    ids = ids + (ids >= pad_id).long()  # skip pad_id
    if pad_id != 0:
        ids[0, 0] = 0
    return torch.where(real, ids, torch.full_like(ids, pad_id))


def _mask_cases(fn: Callable[..., Any], name: str, arg: str) -> Any:
    """For a non-zero ``pad_id`` and for 0: ``(B, L, pad_id, tokens, case, got)``, the
    student's ``fn(tokens, pad_id)`` on ``(B, L)`` ids with trailing padding (``B != L``); last,
    padding at the start of the rows (the ids decide what is padding, not the lengths)."""
    for pad_id, leading in ((randint(1, 9), False), (0, False), (randint(1, 9), True)):
        while True:
            B, L = randint(2, 5), randint(4, 9)
            if B != L:
                break
        real = trailing_padding(B, L)[:, 0]  # (B, L)
        tokens = _tokens(B, L, 12, pad_id, real.flip(1) if leading else real)  # (B, L)
        given = tokens.clone()
        case = f"{arg} of shape ({B}, {L}), pad_id={pad_id}" + (", padding at the start" if leading else "")
        got = call_student(fn, given, pad_id, context=f"calling {name}({case})")
        check_unchanged([arg], [given], [tokens], case)
        yield B, L, pad_id, tokens, case, got


# ---------------------------------------------------------------- the masks' tables
def _padding_wrong(c: Any) -> dict[str, list[tuple[dict[str, Any], Tensor]]]:
    """The wrong padding parts of the case's ``tokens``, by name, each ``(fields, mask (B, 1, L))``."""
    tokens, pad_id = c.tokens, c.pad_id
    n_real = (tokens != pad_id).sum(1, keepdim=True)  # (B, 1)
    first_n = torch.arange(tokens.size(1)) < n_real  # (B, L): what a length-based code builds
    below = sorted(set(tokens[tokens < pad_id].tolist()))  # real ids smaller than pad_id
    return {
        "inverted mask": [({}, (tokens == pad_id).unsqueeze(1))],
        "assumed trailing padding": [({}, first_n.unsqueeze(1))],
        "ids below pad_id as padding": [(dict(below=below), (tokens > pad_id).unsqueeze(1))] if below else [],
        "hard-coded pad id": [({}, (tokens != 0).unsqueeze(1))] if pad_id != 0 else [],
    }


# the padding part wrong, in the order tried; {whose}: "your mask" (make_src_mask) or "the padding part of your
# mask" (make_tgt_mask, where the wrong part is combined with the causal mask)
_PADDING_WORDS = {
    "inverted mask": "{whose} is inverted: True at the padding, False at the real tokens. True must mark the real "
    "tokens (a key that may be attended to): compare with !=, not ==.",
    "assumed trailing padding": "{whose} treats the first n tokens of each row as real (n = its number of real "
    "tokens), which is right only when the padding is at the end. Read the ids instead: tokens != pad_id.",
    "ids below pad_id as padding": "{whose} marks the real tokens with ids smaller than pad_id ({below}) as padding "
    "too: `tokens > pad_id` assumes pad_id is the smallest id. Compare for inequality: tokens != pad_id.",
    "hard-coded pad id": "{whose} compares with 0 instead of pad_id (here {pad_id}): real tokens with id 0 are "
    "blocked and the padding is not. Use the pad_id argument.",
}


def _padding_entries(causal: bool) -> list[Entry]:
    """The padding part's mistakes, alone (``make_src_mask``) or ``& causal`` (``make_tgt_mask``)."""
    def build(name: str) -> Reference:
        return Reference(lambda c: [(f, m & c.causal if causal else m) for f, m in _padding_wrong(c)[name]])
    return [Entry(name, None, build(name), words) for name, words in _PADDING_WORDS.items()]


# what compare_mask (notebook 01's, shared by every mask check) reports, before and after the catalogued patterns
_MASK_TYPE = [Entry(name, None, Probe("compare_mask")) for name in ("not a tensor", "wrong device")]
_MASK_FORM = [Entry(name, None, Probe("compare_mask")) for name in ("wrong shape", "additive float mask")]
_MASK_LAST = [Entry(name, None, Probe("compare_mask")) for name in ("not a bool mask", "values differ")]


def _shaped(shape: Callable[[Any], tuple[int, ...]]) -> Callable[[Any], bool]:
    """A test that the student's mask ``m.got`` has ``shape(m)``."""
    return lambda m: tuple(m.got.shape) == shape(m)


SRC_MASK = Catalogue("make_src_mask", "06", [
    Entry("not a function", None, Probe("require_function")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    *_MASK_TYPE,
    # another shape than (B, 1, L_src) (stage "head axis", then "square": a (B, L_src, L_src) mask)
    Entry("extra head axis", "a mask with a head axis the contract does not have",
          Output(_shaped(lambda m: (m.B, 1, 1, m.L)), "head axis"),
          "{what} has shape {shape} = (B, 1, 1, L_src): an extra head axis (the Annotated Transformer's and Hugging "
          "Face's habit). This course's source mask is (B, 1, L_src) = ({B}, 1, {L}): padding_mask(src, pad_id), or "
          "(src != pad_id).unsqueeze(1). MultiHeadAttention adds the head axis itself."),
    Entry("causal mask in the encoder",
          "the encoder's mask is causal as well as padding (the encoder reads the whole input)",
          Reference(lambda c: [({}, c.pad & causal_mask(c.L))], "square"),
          "the source mask is causal as well as padding: each source token would see only the tokens before it. The "
          "encoder reads the whole source at once, so the source mask blocks the padding only: padding_mask(src, "
          "pad_id), shape (B, 1, L_src)."),
    Entry("padding on both axes", "the target mask blocks the padding positions' rows (queries) as well as their keys",
          Reference(lambda c: [({}, c.pad & c.pad.transpose(1, 2))], "square"),
          "the source mask blocks the padding on both axes, the padding keys (columns) and the padding positions' own "
          "rows (queries). Block the keys only: padding_mask(src, pad_id), shape (B, 1, L_src)."),
    Entry("wrong shape", None, Output(_shaped(lambda m: (m.B, m.L, m.L)), "square"),
          "{what} has shape {shape} = (B, L_src, L_src), expected (B, 1, L_src) = ({B}, 1, {L}): the source mask has "
          "a query axis of size 1, which broadcasts over whatever queries read the source: the encoder's L_src and "
          "the decoder's cross-attention's L_tgt. Build it from the keys only: (src != pad_id).unsqueeze(1)."),
    *(Entry(name, None, Probe("padding_shape_diagnosis")) for name in ("missing query axis", "wrong axis")),
    *_MASK_FORM,
    # the pattern (read as bool) is one of these, in this order
    *_padding_entries(causal=False),
    *_MASK_LAST,
    Entry("wrong device", None, Probe("check_input_device")),
])

_CAUSAL_ONLY = ("the mask is only causal: padding keys are not blocked. Combine the causal mask with the padding "
                "mask: padding_mask(tgt, pad_id) & causal_mask(L).")
_PADDING_ONLY = ("the mask only blocks padding: nothing stops a position from looking at later (future) tokens. "
                 "Combine the padding mask with causal_mask(L) using &.")
_CAUSAL_PARTS = ("upper triangle", "inverted mask", "diagonal excluded")  # causal_mask_candidates' names, in order


def _causal_part(name: str, stage: str, padded: bool) -> Reference:
    """causal_mask's wrong mask ``name`` (its words the field ``words``), with the padding part (``padded``)."""
    return Reference(lambda c: [(dict(words=words), c.pad & wrong if padded else wrong)
                                for n, words, wrong in causal_mask_candidates(c.L) if n == name], stage)


TGT_MASK = Catalogue("make_tgt_mask", "06", [
    Entry("not a function", None, Probe("require_function")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # trailing padding gives padding on the query axis and on both axes the same mask: the rows reversed tell
    Entry("padding on both axes", None, Output(lambda c: matches(c.got, c.pad & c.pad.transpose(1, 2) & c.causal),
                                               "rows reversed"),
          "the mask ({case}) blocks the padding on both axes: the padding keys (columns), as it should, and also the "
          "padding positions' own rows (queries), which then may attend to no key at all. Block the keys only: "
          "padding_mask(tgt, pad_id), shape (B, 1, L), & causal_mask(L); the loss ignores the padding positions' "
          "outputs anyway."),
    *_MASK_TYPE,
    # another shape than (B, L, L): one (L, L) pattern for the batch (stages "folded", "square"), ...
    Entry("padding folded over the batch",
          "one (L, L) target mask whose padding part is folded over the batch (.all(0), .any(0))",
          Output(lambda m: _folded(m.fn, m.tgt, m.pad_id, m.square), "folded"),
          "{what} has shape {shape}, expected (B, L, L) = ({B}, {L}, {L}): the padding of the whole batch is folded "
          "into one (L, L) pattern ({how}), so each sequence's own padding is not blocked. Keep the batch axis: "
          "padding_mask(tgt, pad_id) is (B, 1, L), and & with causal_mask(L), (L, L), broadcasts to (B, L, L)."),
    Entry("causal only", "the target mask has the causal part but not the padding part",
          Reference(lambda c: [({}, c.causal)], "square"), _CAUSAL_ONLY),
    *(Entry(name, None, _causal_part(name, "square", padded=False),
            "the causal part is wrong: {words} And it has no batch axis, so no sequence's padding is blocked: combine "
            "it with padding_mask(tgt, pad_id) using &.") for name in _CAUSAL_PARTS),
    Entry("wrong shape", None, Output(lambda m: True, "square"),
          "{what} has shape {shape}, expected (B, L, L) = ({B}, {L}, {L}): one (L, L) pattern for every sequence "
          "cannot block each sequence's own padding. Combine the padding mask (B, 1, L) with the causal mask (L, L) "
          "using &: broadcasting gives (B, L, L)."),
    # ... a head axis, or no query axis
    Entry("extra head axis", None, Output(_shaped(lambda m: (m.B, 1, m.L, m.L)), "head axis"),
          "{what}: the mask has an extra head axis, {shape} = (B, 1, L, L); the exercise's shape is (B, L_tgt, L_tgt) "
          "(MultiHeadAttention adds the head axis itself)."),
    Entry("padding only", "the target mask has the padding part but not the causal part",
          Reference(lambda c: [({}, c.pad)], "other shape"), _PADDING_ONLY),
    Entry("inverted mask", None, Reference(lambda c: [({}, ~c.pad)], "other shape"),
          "the mask is inverted (True at the padding; True means 'may attend') and only blocks padding, nothing in "
          "the future: padding_mask(tgt, pad_id) & causal_mask(L)."),
    Entry("padding on the query axis", "the padding mask is laid along the query axis",
          Reference(lambda c: [({}, c.pad.transpose(1, 2))], "other shape"),
          "the padding is laid along the query axis, (B, L, 1), and nothing blocks the future: padding *keys* must be "
          "blocked for every query, so use the (B, 1, L) padding mask (unsqueeze(1)) and & it with causal_mask(L)."),
    # issue 24 item 6: Hugging Face's padding mask (B, 1, 1, L), returned as the target mask
    Entry("padding only", None, Reference(lambda c: [({}, c.pad.unsqueeze(1))], "other shape"),
          "the mask has shape (B, 1, 1, L) = ({B}, 1, 1, {L}), Hugging Face's padding mask: a head axis and no causal "
          "part, so nothing stops a position from looking at later (future) tokens. The target mask is (B, L, L) = "
          "({B}, {L}, {L}): padding_mask(tgt, pad_id) & causal_mask(L); MultiHeadAttention adds the head axis itself."),
    Entry("wrong shape", None, Output(lambda m: tuple(m.got.shape) in ((m.B, 1, m.L), (m.B, m.L)), "other shape"),
          "{what} has shape {shape}, expected (B, L, L) = ({B}, {L}, {L}): a mask without a query axis gives every "
          "query the same keys, so it cannot be causal. Combine the padding mask (B, 1, L) with causal_mask(L) using "
          "&: broadcasting gives (B, L, L)."),
    *_MASK_FORM,
    # the pattern (read as bool) is one of these, in this order
    Entry("causal only", None, Reference(lambda c: [({}, c.causal.expand(c.B, c.L, c.L))]), _CAUSAL_ONLY),
    Entry("padding only", None, Reference(lambda c: [({}, c.pad.expand(c.B, c.L, c.L))]), _PADDING_ONLY),
    *(Entry(name, None, _causal_part(name, "", padded=True), "the causal part is wrong: {words}")
      for name in _CAUSAL_PARTS),
    Entry("diagonal shifted", None, Reference(lambda c: [({}, c.pad & torch.ones(c.L, c.L, dtype=torch.bool).tril(1))]),
          "the causal part is tril(1): each position also sees the next token, the one it has to predict. Query i may "
          "attend to keys 0..i: torch.tril with the default diagonal=0."),
    Entry("padding on the query axis", None, Reference(lambda c: [({}, c.pad.transpose(1, 2) & c.causal)]),
          "the padding is applied on the query axis (rows) instead of the key axis (columns): padding *keys* must be "
          "blocked for every query, so use the (B, 1, L) padding mask (unsqueeze(1)), not (B, L, 1)."),
    Entry("| instead of &", "causal and padding masks combined with | instead of &",
          Reference(lambda c: [({}, c.pad | c.causal)]),
          "the two masks are combined with | (or): a key is allowed if it is in the past OR real. It must be both: "
          "use &."),
    Entry("inverted mask", None, Reference(lambda c: [({}, ~(c.pad & c.causal))]),
          "the mask is inverted: True means 'may attend'."),
    *_padding_entries(causal=True),
    *_MASK_LAST,
    Entry("wrong device", None, Probe("check_input_device")),
])


def _mask_case(tokens: Tensor, pad_id: int, **more: Any) -> SimpleNamespace:
    """A mask check's case: the ids, their padding mask (B, 1, L) and causal mask (L, L)."""
    B, L = tokens.shape
    return SimpleNamespace(tokens=tokens, pad_id=pad_id, B=B, L=L, pad=padding_mask(tokens, pad_id),
                           causal=causal_mask(L), **more)


# ---------------------------------------------------------------- make_src_mask
def _pattern(got: Tensor) -> Tensor:
    """The True/False pattern of a mask of any dtype (``!= 0``), as ``compare_mask`` reads it."""
    return got if got.dtype == torch.bool else got != 0


def _named_by_shape(what: str, got: Tensor, candidates: list[tuple[str, str, Tensor]]) -> None:
    """A mask of another shape than the contract's named by the first candidate of its shape and pattern."""
    pattern = _pattern(got)
    for name, words, candidate in candidates:
        if pattern.shape == candidate.shape and equal(pattern, candidate):
            fail(f"{what}: {words}", mistake=name)


def _src_shape(src: Tensor, pad_id: int, what: str) -> Callable[[Tensor], None]:
    """What a source mask of the wrong shape is: a head axis (the Annotated Transformer's
    ``(B, 1, 1, L)``), a full ``(B, L, L)`` (causal, padding on both axes or copied over the
    queries), else ``check_padding_mask``'s words for ``(B, L)`` and ``(B, L, 1)``."""
    c = _mask_case(src, pad_id)

    def diagnose(got: Tensor) -> None:
        m = SimpleNamespace(got=got, B=c.B, L=c.L)
        fields = dict(what=what, shape=describe_shape(got), B=c.B, L=c.L)
        SRC_MASK.detect("head axis", m, **fields)
        if tuple(got.shape) == (c.B, c.L, c.L):
            _named_by_shape(what, got, SRC_MASK.candidates(c, "square", **fields))
        SRC_MASK.detect("square", m, **fields)
        padding_shape_diagnosis(c.B, c.L, what)(got)  # the same words as check_padding_mask

    return diagnose


@checker("make_src_mask")
def check_make_src_mask(fn: Callable[..., Any]) -> str:
    require_function(fn, "make_src_mask")
    for B, L, pad_id, src, case, got in _mask_cases(fn, "make_src_mask", "src"):
        expected = padding_mask(src, pad_id)  # (B, 1, L)
        mistakes = SRC_MASK.candidates(_mask_case(src, pad_id), whose="your mask", pad_id=pad_id)
        what = f"the mask ({case})"
        compare_mask(what, got, expected, mistakes, _src_shape(src, pad_id, what),
                    f"Entry [b, 0, j] is True when token j of row b is a real token (not pad_id = {pad_id}).",
                    lambda idx, src=src: f" (token {int(src[idx[0], idx[-1]])})")
    check_input_device(lambda: fn(src.to("meta"), pad_id), lambda: fn(src.clone(), pad_id), "your make_src_mask", case)
    return "(B, 1, L_src), True on real tokens, pad_id 0 and non-zero"


# ---------------------------------------------------------------- make_tgt_mask
def _folded(fn: Callable[..., Any], tgt: Tensor, pad_id: int, square: Tensor) -> dict[str, str] | None:
    """How an ``(L, L)`` target mask folded the batch's padding into one pattern (``.all(0)`` or
    ``.any(0)`` of the padding, the field ``how``), or None. Where no key is padding in every sequence, ``.any(0)``
    gives the causal mask alone: the code is then run once more with the last key padding
    in every sequence, so that the name does not depend on the draw."""
    B, L = tgt.shape
    causal = causal_mask(L)  # (L, L)
    tries = [(tgt, square)]
    if equal(square, causal):
        probe = tgt.clone()
        probe[:, -1] = pad_id  # (B, L): key L - 1 is padding in every sequence
        again = _pattern(call_student(fn, probe, pad_id, context="building the mask once more"))
        tries = [(probe, again.reshape(L, L))] if again.numel() == L * L else []
    for t, got in tries:
        folds = {how: getattr(padding_mask(t, pad_id), how)(0) for how in ("all", "any")}  # each (1, L)
        hows = [how for how, fold in folds.items() if not equal(fold & causal, causal) and equal(got, fold & causal)]
        if hows:  # both: these inputs cannot tell them apart
            return dict(how="(tgt != pad_id)" + " or ".join(f".{how}(0)" for how in hows))
    return None


def _tgt_shape(tgt: Tensor, pad_id: int, what: str, fn: Callable[..., Any]) -> Callable[[Tensor], None]:
    """What a target mask of the wrong shape is. Without a batch axis it cannot hold each
    sequence's padding (what it is besides is said first); a head axis is extra; without a
    query axis it cannot be causal."""
    c = _mask_case(tgt, pad_id)
    B, L = c.B, c.L

    def diagnose(got: Tensor) -> None:
        pattern = _pattern(got)
        fields = dict(what=what, shape=describe_shape(got), B=B, L=L)
        if got.numel() == L * L and got.dim() >= 2 and all(s == 1 for s in got.shape[:-2]):
            square = pattern.reshape(L, L)  # (L, L): the same for every sequence
            m = SimpleNamespace(got=got, fn=fn, tgt=tgt, pad_id=pad_id, square=square)
            TGT_MASK.detect("folded", m, **fields)
            _named_by_shape(what, square, TGT_MASK.candidates(c, "square", **fields))
            TGT_MASK.detect("square", m, **fields)
        m = SimpleNamespace(got=got, B=B, L=L)
        TGT_MASK.detect("head axis", m, **fields)
        _named_by_shape(what, pattern, TGT_MASK.candidates(c, "other shape", **fields))
        TGT_MASK.detect("other shape", m, **fields)

    return diagnose


@checker("make_tgt_mask")
def check_make_tgt_mask(fn: Callable[..., Any]) -> str:
    require_function(fn, "make_tgt_mask")
    for B, L, pad_id, tgt, case, got in _mask_cases(fn, "make_tgt_mask", "tgt"):
        c = _mask_case(tgt, pad_id)
        expected = c.pad & c.causal  # (B, L, L)
        mistakes = TGT_MASK.candidates(c, whose="the padding part of your mask", pad_id=pad_id)
        if "at the start" not in case and matches(got, c.pad.transpose(1, 2) & c.causal):  # trailing: as both axes
            _query_axis_or_both(fn, tgt, pad_id, case)
        what = f"the mask ({case})"
        compare_mask(what, got, expected, mistakes, _tgt_shape(tgt, pad_id, what, fn),
                    f"Entry [b, i, j] is True when query i of row b may attend to key j: j <= i (not a later "
                    f"position) and token j is real (not pad_id = {pad_id}).",
                    lambda idx, tgt=tgt: f" (key token {int(tgt[idx[0], idx[2]])}"
                                         + (", after the query)" if idx[2] > idx[1] else ")"))
    check_input_device(lambda: fn(tgt.to("meta"), pad_id), lambda: fn(tgt.clone(), pad_id), "your make_tgt_mask",
                       case, "create every part on tgt's device: causal_mask(L, device=tgt.device)")
    return "(B, L_tgt, L_tgt) = padding & causal, pad_id 0 and non-zero"


def _query_axis_or_both(fn: Callable[..., Any], tgt: Tensor, pad_id: int, case: str) -> None:
    """On trailing padding a real query's past holds no padding, so padding on the query axis
    alone and padding on both axes give the same mask: the rows reversed (padding first) part them."""
    flipped = tgt.flip(1)  # (B, L)
    got = call_student(fn, flipped.clone(), pad_id, context=f"calling make_tgt_mask({case}, rows reversed)")
    TGT_MASK.detect("rows reversed", _mask_case(flipped, pad_id, got=got), case=case)


# ---------------------------------------------------------------- Transformer
_MAX_LEN = 64  # larger than every other size, so a learned (max_len, D) table is recognised by its shape


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

    def kwargs(self, norm_first: bool, dropout: float = 0.1) -> dict[str, Any]:
        return dict(d_model=self.D, num_heads=self.H, num_layers=self.N, d_ff=self.d_ff, dropout=dropout,
                    max_len=_MAX_LEN, norm_first=norm_first)

    def shown(self, norm_first: bool, dropout: float = 0.1) -> str:
        kw = ", ".join(f"{k}={v}" for k, v in self.kwargs(norm_first, dropout).items())
        return f"{self.V_src}, {self.V_tgt}, {kw}"


def _transformer_sizes() -> _Sizes:
    # D >= 24: every matrix has >= 576 entries, enough to tell Xavier-uniform from another init
    while True:
        B, L_src, L_tgt = randint(2, 4), randint(5, 9), randint(4, 8)
        H = randint(3, 4)
        D, d_ff = H * 2 * randint(4, 5), randint(40, 56)  # even D: sin/cos pairs
        V_src, V_tgt = randint(28, 48), randint(28, 48)
        sizes = [B, L_src, L_tgt, D, d_ff, V_src, V_tgt]
        if len(set(sizes)) == len(sizes):
            # two layers: a num_layers that is not passed on always shows
            return _Sizes(B, L_src, L_tgt, D, H, d_ff, V_src, V_tgt, 2, randint(0, 10), randint(0, 10))


@contextmanager
def _dropout_off(module: nn.Module, off: bool) -> Iterator[None]:
    """Every ``nn.Dropout`` inside ``module`` with ``p = 0`` for the block (when ``off``)."""
    drops = [m for m in module.modules() if isinstance(m, nn.Dropout)] if off else []
    saved = [m.p for m in drops]
    for m in drops:
        m.p = 0.0
    try:
        yield
    finally:
        for m, p in zip(drops, saved):
            m.p = p


def _transformer_variant(
    ref: Transformer, src: Tensor, tgt: Tensor, src_mask: Tensor | None, tgt_mask: Tensor | None, *,
    scale: tuple[float, float] = (0.5, 0.5), pe: tuple[int, int] = (1, 1),
    pe_drop: tuple[str, str] = ("after", "after"), layer_drop: tuple[bool, bool] = (True, True),
    enc_mask: bool = True, cross_mask: bool = True, self_mask: bool = True, part: str = "logits",
    memory: Tensor | None = None, pe_memory: bool = False, post: str | None = None, own_causal: bool = False,
) -> Tensor:
    """The reference's forward (or ``part="memory"``/``"decoded"``) with optional mistakes:
    embeddings times ``d_model ** scale`` per side, the positional table added ``pe`` times, its
    dropout ``"after"`` adding the table, ``"none"`` or ``"before"``, the layers' dropout
    off, masks left out, softmax or log_softmax on the logits. ``memory`` replaces the
    encoder's output for ``part="decoded"``; ``pe_memory`` adds the table to it (eval mode);
    ``own_causal``: a causal mask where ``tgt_mask`` is None."""
    if own_causal and tgt_mask is None:
        tgt_mask = causal_mask(tgt.size(1))  # (L_tgt, L_tgt)

    def embed(module: nn.Module, tokens: Tensor, side: int) -> Tensor:
        x = module.embedding(tokens) * ref.d_model ** scale[side]  # (B, L, D)
        if not pe[side]:
            return x
        table, drop = pe[side] * ref.positional_encoding.pe[: x.size(1)], ref.positional_encoding.dropout  # (L, D)
        if pe_drop[side] == "before":
            return drop(x) + table
        return x + table if pe_drop[side] == "none" else drop(x + table)

    if memory is None:
        with _dropout_off(ref.encoder, not layer_drop[0]):
            memory = ref.encoder(embed(ref.src_embedding, src, 0), src_mask if enc_mask else None)  # (B, L_src, D)
    if pe_memory:
        memory = memory + ref.positional_encoding.pe[: memory.size(1)]  # (B, L_src, D)
    if part == "memory":
        return memory
    with _dropout_off(ref.decoder, not layer_drop[1]):
        y = embed(ref.tgt_embedding, tgt, 1)  # (B, L_tgt, D)
        out = ref.decoder(y, memory, tgt_mask if self_mask else None, src_mask if cross_mask else None)
    if part == "decoded":
        return out  # (B, L_tgt, D)
    logits = ref.output_projection(out)  # (B, L_tgt, V_tgt)
    return getattr(logits, post)(-1) if post else logits


_SIDES = {(0,): "source", (1,): "target", (0, 1): "source and target"}
_PARTS = {"memory": (0,), "decoded": (1,), "logits": (0, 1)}  # the sides each output depends on


def _per_side(sides: tuple[int, ...], value: Any, default: Any) -> tuple[Any, Any]:
    return tuple(value if i in sides else default for i in (0, 1))  # type: ignore[return-value]


def _values(applies: Callable[[Any], bool], fields: dict[str, Any] | None = None, **kw: Any) -> Reference:
    """The reference run with the mistake ``kw`` (``_transformer_variant``'s keywords) on the cases where it
    ``applies``: a case ``c`` says which output it compares (``c.part``: ``"memory"``, ``"decoded"`` or
    ``"logits"``), which masks it passes (``c.src_mask``, ``c.tgt_mask``) and runs the variant (``c.run(kw)``)."""
    return Reference(lambda c: [(fields or {}, lambda: c.run(kw))] if applies(c) else [], "values")


def _embedding_entries() -> list[Entry]:
    """The embeddings' scale and positional table, wrong on the source, the target or both (the
    sides the compared output depends on), in this order."""
    out: list[Entry] = []
    for sides, words in _SIDES.items():
        def on(c: Any, sides: tuple[int, ...] = sides) -> bool:
            return set(sides) <= set(_PARTS[c.part])  # encode only embeds the source, decode only the target

        first = not out
        out += [
            Entry("embeddings not scaled", None, _values(on, dict(side=words), scale=_per_side(sides, 0.0, 0.5)),
                  "the {side} token embeddings are not multiplied by sqrt(d_model) before the positional encoding is "
                  "added (TokenEmbedding does it)."),
            Entry("embeddings scaled twice", None, _values(on, dict(side=words), scale=_per_side(sides, 1.0, 0.5)),
                  "the {side} token embeddings are multiplied by d_model, not sqrt(d_model): TokenEmbedding already "
                  "scales by sqrt(d_model), so do not multiply its output again."),
            Entry("positional encoding missing", "no positional encoding is added" if first else None,
                  _values(on, dict(side=words), pe=_per_side(sides, 0, 1)),
                  "no positional encoding is added to the {side} embeddings, so the model cannot tell positions apart: "
                  "pass the embeddings through the PositionalEncoding module."),
            Entry("positional encoding added twice",
                  "the positional table added twice (two positional modules, or one called twice)" if first else None,
                  _values(on, dict(side=words), pe=_per_side(sides, 2, 1)),
                  "the positional table is added twice to the {side} embeddings (x + 2 pe): PositionalEncoding adds it "
                  "once; pass the embeddings through it once, and through no second positional module."),
        ]
    return out


_STACKS = ("the encoder", "the decoder")
_RAW_LOGITS = ("forward applies {post} to the logits; return the raw logits (the loss, F.cross_entropy, applies "
               "log-softmax itself, and greedy decoding needs no softmax).")
_PE_DROP_WORDS = {
    "none": "gets no dropout after the positional table is added (pass the dropout argument on to "
    "PositionalEncoding(d_model, max_len, dropout); a hand-written dropout that keeps with probability p "
    "instead of 1 - p, a keep mask torch.rand(...) < p or F.dropout(x, 1 - p), looks the same here)",
    "before": "gets its dropout before the positional table is added (dropout(x) + pe); the Transformer applies "
    "it to the sum, dropout(x + pe), which PositionalEncoding does",
}
_DROPOUT_MEANINGS = {"positional dropout missing": "no dropout after adding the positional table",
                     "layer dropout missing": "the layers apply no dropout", "dropout missing": None,
                     "dropout before adding": None}


def _dropout_entries() -> list[Entry]:
    """Each way to leave out or misplace the training-mode dropout of one side, for a probe
    with ``dropout=P_PROBE`` (every correct dropout then outputs zeros): encode's (the source)
    and decode's (the target), each tried on its own output."""
    out: list[Entry] = []
    for side in (0, 1):
        words, stack = ("source", "target")[side], _STACKS[side]
        for mode in ("after", "none", "before"):
            for layers in (True, False):
                if mode == "after" and layers:
                    continue  # the right one
                said = [f"the {words} embedding {_PE_DROP_WORDS[mode]}"] if mode != "after" else []
                if not layers:
                    said.append(f"the layers of {stack} apply no dropout (pass the dropout argument on to "
                                f"{'Encoder' if side == 0 else 'Decoder'}(..., dropout, norm_first))")
                name = {("none", True): "positional dropout missing", ("after", False): "layer dropout missing",
                        ("none", False): "dropout missing"}.get((mode, layers), "dropout before adding")
                kw = dict(pe_drop=_per_side((side,), mode, "after"), layer_drop=_per_side((side,), layers, True))
                meaning = _DROPOUT_MEANINGS[name] if side == 0 and not any(e.name == name for e in out) else None
                out.append(Entry(name, meaning, Reference(lambda c, side=side, kw=kw: [({}, lambda: c.run(kw))]
                                                          if side in _PARTS[c.part] else [], "dropout"),
                                 "in training mode " + "; and ".join(said) + "."))
    return out


def _missing_method(model: nn.Module) -> dict[str, str] | None:
    for name, sig in (("encode", "encode(src, src_mask)"), ("decode", "decode(tgt, memory, tgt_mask, memory_mask)")):
        if not callable(getattr(model, name, None)):
            return dict(sig=sig)
    return None


# The later cells of notebooks 06 and 07 (and greedy_decode) reach into the model by these names:
# model.output_projection, shared.src_embedding.embedding.weight, base.encoder.layers[0], ...
_NAMED_PARTS = {
    "src_embedding.embedding": "src_embedding = TokenEmbedding(src_vocab_size, d_model)",
    "tgt_embedding.embedding": "tgt_embedding = TokenEmbedding(tgt_vocab_size, d_model)",
    "positional_encoding": "positional_encoding = PositionalEncoding(d_model, max_len, dropout)",
    "encoder.layers": "encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)",
    "decoder.layers": "decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)",
    "output_projection": "output_projection = nn.Linear(d_model, tgt_vocab_size)",
}


_THREE_MATRICES = (
    "the exercise's Transformer keeps three matrices, the source embedding, the target embedding and the "
    "output projection, whatever the vocabulary sizes (tying them is the option discussed later, done on purpose)."
)


def _part(model: nn.Module, path: str) -> Any:
    """``model``'s submodule at the dotted ``path``, or None."""
    part: Any = model
    for attr in path.split("."):
        part = getattr(part, attr, None)
    return part


def _missing_part(model: nn.Module) -> dict[str, str] | None:
    """The first submodule name the notebook gives (which its later cells and greedy_decode use) that is missing."""
    for path, built in _NAMED_PARTS.items():
        if _part(model, path) is None:
            return dict(path=path, built=built)
    return None


def _student_call(what: str, fn: Callable[..., Any], args: tuple[Any, ...], names: list[str], case: str) -> Any:
    originals = [a.clone() if isinstance(a, Tensor) else a for a in args]
    got = call_student(fn, *args, context=f"calling {what} ({case})")
    check_unchanged(names, args, originals, case)
    TRANSFORMER.detect("return", got, what=what, case=case)
    return got


# ---------------------------------------------------------------- Transformer: structure and initialisation
@contextmanager
def _final_norms(ref: Transformer, enc: bool, dec: bool) -> Iterator[None]:
    """``ref`` with a final norm in the encoder / decoder where it has none and none where
    it has one, for the block."""
    saved = ref.encoder.norm, ref.decoder.norm
    for stack, toggle in ((ref.encoder, enc), (ref.decoder, dec)):
        if toggle:
            stack.norm = None if stack.norm is not None else LayerNorm(ref.d_model)
    try:
        yield
    finally:
        ref.encoder.norm, ref.decoder.norm = saved


# the parts whose first axis counts a vocabulary: (path, which vocabulary, the other, what that axis counts,
# the mistake of sizing it by the other)
_VOCABULARY_PARTS = (
    ("src_embedding.embedding", "src", "tgt", "rows", "src_embedding has tgt_vocab_size rows"),
    ("tgt_embedding.embedding", "tgt", "src", "rows", "tgt_embedding has src_vocab_size rows"),
    ("output_projection", "tgt", "src", "outputs", "output_projection has src_vocab_size outputs"),
)


def _sized_by_the_other(c: Any, path: str) -> dict[str, Any] | None:
    """The part at ``path`` sized by the other vocabulary (the checker draws the two sizes different)."""
    _, own, other, counts, _ = next(v for v in _VOCABULARY_PARTS if v[0] == path)
    sizes = {"src": c.ref.src_embedding.embedding.weight.size(0), "tgt": c.ref.output_projection.weight.size(0)}
    weight = getattr(_part(c.model, path), "weight", None)
    if isinstance(weight, Tensor) and weight.dim() == 2 and weight.size(0) == sizes[other] \
            and weight.size(1) == c.ref.d_model:
        return dict(name=path.split(".")[0], n=sizes[other], counts=counts, other=other, need=sizes[own], own=own,
                    built=_NAMED_PARTS[path])
    return None


def _final_norm_fit(model: nn.Module, ref: Transformer, norm_first: bool) -> dict[str, Any] | None:
    """The stacks whose final norm, added or taken away, makes ``model`` fit the reference, or None."""
    for enc, dec in ((True, True), (True, False), (False, True)):
        with _final_norms(ref, enc, dec):
            if pair_parameters(model, ref, by_structure=True) is not None:
                one = enc != dec
                return dict(which=" and ".join(w for w, on in zip(_STACKS, (enc, dec)) if on), norm_first=norm_first,
                            lack="lacks" if one else "lack", have="has" if one else "have")
    return None


def _unpaired(model: nn.Module, ref: Transformer) -> str:
    """What sets ``model``'s parameter tensors apart from the reference's, in words."""
    theirs = Counter(tuple(p.shape) for _, p in model.named_parameters(remove_duplicate=False))
    ours = Counter(tuple(p.shape) for p in ref.parameters())
    extra, lacking = theirs - ours, ours - theirs
    alien = [f"`{n}`" for n, p in model.named_parameters() if not ours[tuple(p.shape)]]  # shapes the reference lacks

    def listed(counts: Counter) -> str:
        return ", ".join(f"{k} x {shape}" for shape, k in list(counts.items())[:4]) + (" ..." if len(counts) > 4 else "")  # noqa: E501

    said = "; ".join(
        ([f"it has more parameter tensors than the reference of shape {listed(extra)}"] if extra else [])
        + ([f"such as {', '.join(alien[:3])}"] if alien else [])
        + ([f"it has fewer of shape {listed(lacking)}"] if lacking else [])
    )
    return said or "the same shapes, in an order that matches no arrangement of the exercise's parts"


def _structure_failure(model: nn.Module, ref: Transformer, norm_first: bool) -> NoReturn:
    """The student's parameters pair with no arrangement of the reference's: say why."""
    fit = _final_norm_fit(model, ref, norm_first)
    if fit:
        TRANSFORMER.detect("final norm", SimpleNamespace(model=model, **fit), **fit)
    TRANSFORMER.detect("vocabulary", SimpleNamespace(model=model, ref=ref))
    TRANSFORMER.detect("structure", True, said=_unpaired(model, ref))
    raise AssertionError("unreachable: the last entry of the stage always fails")


def _is_table(t: Tensor, table: Tensor) -> bool:
    """``t`` holds the sinusoidal ``table`` ``(max_len, D)`` in its first rows (any leading 1-axes)."""
    if t.dim() < 2 or t.shape[-1] != table.size(1) or t.numel() < table.numel() or t.is_complex():
        return False
    rows = t.detach().reshape(-1, table.size(1))[: table.size(0)].double()  # (max_len, D)
    return bool(allclose(rows, table.double(), atol=1e-4))


def _learned_table(c: Any) -> dict[str, Any] | None:
    """The first parameter of a positional table's size (a learned or fixed table made a Parameter)."""
    for name, p in c.model.named_parameters():
        if p.dim() >= 2 and p.shape[-1] == c.D and max(p.shape[:-1]) >= _MAX_LEN:
            return dict(name=name, shape=tuple(p.shape), fixed=_is_table(p, c.table))
    return None


def _plain_table(c: Any) -> dict[str, str] | None:
    """The positional table kept as a plain tensor attribute (no buffer holds it)."""
    if any(_is_table(b, c.table) for _, b in c.model.named_buffers()):
        return None
    plain = [f"{m_name}.{k}".lstrip(".") for m_name, m in c.model.named_modules() for k, v in vars(m).items()
             if isinstance(v, Tensor) and _is_table(v, c.table)]
    return dict(name=plain[0]) if plain else None


def _check_state(model: nn.Module, D: int) -> None:
    """The positional table: a buffer, neither learned nor a parameter nor a plain attribute."""
    TRANSFORMER.detect("state", SimpleNamespace(model=model, D=D, table=sinusoidal_positional_encoding(_MAX_LEN, D)))


def _not_xavier(c: Any) -> dict[str, Any] | None:
    """The matrices that are not Xavier-uniform right after construction, the first in numbers."""
    wrong = []
    for sp, rp in c.pairs:
        if rp.dim() > 1:
            fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(rp)
            u = sp.detach().double() / math.sqrt(6.0 / (fan_in + fan_out))  # Xavier-uniform: U(-1, 1)
            # U(-1, 1) has mean square 1/3; with >= 441 entries its estimate is within 0.1 by > 7 sd
            if float(u.abs().max()) > 1 + 1e-5 or abs(float(u.pow(2).mean()) - 1 / 3) > 0.1:
                wrong.append((c.names[id(sp)], sp, math.sqrt(6.0 / (fan_in + fan_out))))
    if not wrong:
        return None
    name, p, bound = wrong[0]
    return dict(n=len(wrong), total=sum(rp.dim() > 1 for _, rp in c.pairs), name=name, shape=tuple(p.shape),
                top=float(p.detach().abs().max()), rms=float(p.detach().pow(2).mean().sqrt()), bound=bound,
                bound_rms=bound / math.sqrt(3))


def _norm_not_fresh(c: Any, scale: bool) -> dict[str, Any] | None:
    """The first LayerNorm scale (``scale``) or shift, whichever comes first, not at its start value."""
    for sp, rp in c.pairs:
        if id(rp) in c.norms and not bool((sp.detach() == c.norms[id(rp)]).all()):
            if (c.norms[id(rp)] == 1.0) != scale:
                return None
            zero = scale and not bool(sp.detach().any())
            return dict(name=c.names[id(sp)], start=sp.detach().flatten()[:3].tolist(),
                        zero="A norm with a zero scale outputs only its shift, so every logit starts the same. "
                        if zero else "")
    return None


def _check_init(model: nn.Module, ref: Transformer, pairs: list[tuple[Tensor, Tensor]]) -> None:
    """Right after construction: Xavier-uniform matrices, LayerNorm scales 1 and shifts 0."""
    norms = {id(m.weight): 1.0 for m in ref.modules() if isinstance(m, LayerNorm)}
    norms.update({id(m.bias): 0.0 for m in ref.modules() if isinstance(m, LayerNorm)})
    names = {id(p): n for n, p in reversed(list(model.named_parameters(remove_duplicate=False)))}
    TRANSFORMER.detect("init", SimpleNamespace(pairs=pairs, norms=norms, names=names))


def _build_aligned(cls: Any, s: _Sizes, norm_first: bool, dropout: float) -> tuple[nn.Module, Transformer]:
    """The student's model and the reference with the same (random) parameters; the
    student's structure, state and initialisation are checked first."""
    model = call_student(cls, s.V_src, s.V_tgt, context=f"constructing Transformer({s.shown(norm_first, dropout)})",
                         **s.kwargs(norm_first, dropout))
    TRANSFORMER.detect("built", model, type=type(model).__name__)
    TRANSFORMER.detect("methods", model)
    TRANSFORMER.detect("parts", model)
    # shared by the checks built from the same random state: each overwrites all its parameters and sets its mode
    ref = reference(Transformer, s.V_src, s.V_tgt, **s.kwargs(norm_first, dropout))
    require_distinct_roles(model, ref, "Transformer", "But " + _THREE_MATRICES)  # e.g. the output layer tied to tgt_embedding  # noqa: E501
    _check_state(model, s.D)
    pairs = pair_parameters(model, ref, by_structure=True)
    if pairs is None:
        _structure_failure(model, ref, norm_first)
    _check_init(model, ref, pairs or [])
    randomise_parameters(model)
    copy_parameters(pairs)
    return model, ref


def _transformer_inputs(s: _Sizes) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    src = _tokens(s.B, s.L_src, s.V_src, s.pad_src, trailing_padding(s.B, s.L_src)[:, 0])  # (B, L_src)
    tgt = _tokens(s.B, s.L_tgt, s.V_tgt, s.pad_tgt, trailing_padding(s.B, s.L_tgt)[:, 0])  # (B, L_tgt)
    src_mask = padding_mask(src, s.pad_src)  # (B, 1, L_src)
    tgt_mask = padding_mask(tgt, s.pad_tgt) & causal_mask(s.L_tgt)  # (B, L_tgt, L_tgt)
    return src, tgt, src_mask, tgt_mask


def _compare_parts(model: nn.Module, ref: Transformer, inputs: tuple[Tensor, ...], where: str, stage: str) -> None:
    """encode, then decode (given the reference's memory) against the reference, each wrong
    result compared with the table's mistakes of ``stage`` (``"values"`` or ``"dropout"``)."""
    src, tgt, src_mask, tgt_mask = inputs
    case = f"{where}, encode(src, src_mask), src {describe_shape(src)}"
    got = _student_call("encode", model.encode, (src, src_mask), ["src", "src_mask"], case)
    memory = _transformer_variant(ref, *inputs, part="memory")  # (B, L_src, D)
    run = functools.partial(_transformer_variant, ref, *inputs, part="memory")
    variants = TRANSFORMER.candidates(_VariantCase("memory", True, True, lambda kw: run(**kw)), stage)
    expect_close("memory", got, memory, variants, case=case, atol=1e-4)
    case = f"{where}, decode(tgt, memory, tgt_mask, src_mask), tgt {describe_shape(tgt)}"
    args = (tgt, memory, tgt_mask, src_mask)
    got = _student_call("decode", model.decode, args, ["tgt", "memory", "tgt_mask", "memory_mask"], case)
    run = functools.partial(_transformer_variant, ref, *inputs, part="decoded", memory=memory)
    variants = TRANSFORMER.candidates(_VariantCase("decoded", True, True, lambda kw: run(**kw)), stage)
    expected = _transformer_variant(ref, *inputs, part="decoded", memory=memory)
    expect_close("decoded", got, expected, variants, case=case, atol=1e-4)


def _mapped_cases(model: nn.Module, ref: Transformer, s: _Sizes, norm_first: bool,
                  first_only: bool = False) -> None:
    """Eval mode: forward with and without masks, encode and decode, value by value
    (``first_only``: forward with both masks only, then encode and decode)."""
    src, tgt, src_mask, tgt_full = inputs = _transformer_inputs(s)
    nf = f"norm_first={norm_first}"
    sizes = f"src ({s.B}, {s.L_src}), tgt ({s.B}, {s.L_tgt})"
    cases = [
        ((src, tgt, src_mask, tgt_full), f"{nf}, {sizes}, src_mask (B, 1, L_src), tgt_mask causal + padding"),
        ((src, tgt), f"{nf}, {sizes}, no masks"),
        ((src, tgt, src_mask, causal_mask(s.L_tgt)), f"{nf}, {sizes}, src_mask, tgt_mask causal (L_tgt, L_tgt)"),
    ][: 1 if norm_first or first_only else 3]  # pre-norm changes the layers, not the way the masks travel
    model.eval()
    ref.eval()
    with torch.no_grad():
        for args, case in cases:
            full = tuple(args) + (None,) * (4 - len(args))
            expected = ref(*full)  # (B, L_tgt, V_tgt)
            got = _student_call("forward", model, args, ["src", "tgt", "src_mask", "tgt_mask"][: len(args)], case)
            check_dropout(lambda args=args: call_student(model, *args), got, expected)
            def run(kw: dict[str, Any], full: tuple[Any, ...] = full, expected: Tensor = expected) -> Tensor:
                # softmax on the logits needs no second forward pass
                return getattr(expected, kw["post"])(-1) if "post" in kw else _transformer_variant(ref, *full, **kw)

            mistakes = TRANSFORMER.candidates(_VariantCase("logits", full[2] is not None, full[3] is not None, run),
                                              "values")
            try:
                expect_close("logits", got, expected, mistakes, case=case, atol=1e-4)
            except Failure as f:
                if f.mistake != "values differ":
                    raise
                # encode and decode may name the mistake; if they are right, forward is the culprit
                _compare_parts(model, ref, inputs, nf, "values")
                TRANSFORMER.detect("forward", True, case=case)
        _compare_parts(model, ref, inputs, nf, "values")


def _dropout_probe(cls: Any, s: _Sizes) -> str | None:
    """Training mode with ``dropout=P_PROBE`` (post-norm): every dropout of the contract zeroes
    its input, so the output is deterministic and shows a missing, misplaced or hard-coded
    one. Runs first, as it fails fast; a difference it cannot name is returned, to be
    reported only if the eval-mode comparisons (which name more) find nothing."""
    model, ref = _build_aligned(cls, s, False, P_PROBE)
    model.train()
    ref.train()
    inputs = _transformer_inputs(s)
    where = f"training mode, dropout={P_PROBE}, norm_first=False"
    with torch.no_grad():
        first = call_student(model, *inputs, context=f"running forward ({where})")
        again = call_student(model, *inputs, context=f"running forward ({where})")
        if isinstance(first, Tensor) and isinstance(again, Tensor) and first.shape == again.shape and not equal(first, again):  # noqa: E501
            fixed = [f"`{n}` (p={m.p})" for n, m in model.named_modules() if isinstance(m, nn.Dropout) and m.p != P_PROBE]  # noqa: E501
            TRANSFORMER.detect("random", True, where=where,
                               fixed=f": {', '.join(fixed[:4])}" if fixed else " (an F.dropout with a fixed p?)")
        try:
            _compare_parts(model, ref, inputs, where, "dropout")
        except Failure as f:
            if f.mistake in {entry.name for entry in TRANSFORMER.of(Reference, "dropout")}:
                raise
            return f.message
        expected = ref(*inputs)  # (B, L_tgt, V_tgt)
    if isinstance(first, Tensor) and first.shape == expected.shape and not matches(first, expected, atol=1e-4):
        return f"forward's logits differ from the reference's ({where}), although encode and decode are right"
    return None


def _shared_embeddings(cls: Any, s: _Sizes) -> None:
    """With equal vocabulary sizes both embeddings and the output projection have the same
    shape (V, D): every pair of these roles must still be two matrices."""
    shown = s.shown(False).replace(f"{s.V_src}, {s.V_tgt}", f"{s.V_src}, {s.V_src}", 1)
    model = call_student(cls, s.V_src, s.V_src, context=f"constructing Transformer({shown})", **s.kwargs(False))
    if isinstance(model, nn.Module):
        why = f"This one was built with src_vocab_size == tgt_vocab_size, Transformer({shown}): " + _THREE_MATRICES
        ref = reference(Transformer, s.V_src, s.V_src, **s.kwargs(False))  # its structure only
        require_distinct_roles(model, ref, "Transformer", why)


def _table_length(model: nn.Module, D: int) -> None:
    """A sinusoidal table shorter than max_len: the max_len argument was not passed on."""
    table = sinusoidal_positional_encoding(_MAX_LEN, D)  # (max_len, D)
    for name, b in model.named_buffers():
        if b.dim() >= 2 and b.shape[-1] == D and b.is_floating_point():
            rows = b.detach().reshape(-1, D)
            n = rows.size(0)
            TRANSFORMER.detect("table", 0 < n < _MAX_LEN and allclose(rows.double(), table[:n].double(), atol=1e-4),
                               name=name, n=n, max_len=_MAX_LEN)


def check_modes_kept(model: nn.Module, forward: Callable[[], Any], what: str,
                     parts: tuple[tuple[str, Callable[[], Any]], ...] = ()) -> None:
    """``forward()`` in train mode, then in eval mode, must leave ``model``'s mode, and every
    submodule's, as it found them (a ``self.eval()`` inside forward switches dropout off for the
    rest of training; a ``self.train()`` makes evaluation random). When it does not, each of
    ``parts`` (``("encode", call)``, ...) is tried in the same mode to name the method at fault.
    A call that raises is left to the comparisons, which report it."""

    def changed_by(call: Callable[[], Any], training: bool) -> list[str] | None:
        model.train(training)
        with torch.no_grad():
            try:
                call()
            except StudentError:
                return None
        return [n or "the model" for n, m in model.named_modules() if m.training != training]

    try:
        for training in (True, False):
            changed = changed_by(forward, training)
            if not changed:
                continue
            method = next((name for name, call in parts if changed_by(call, training)), "forward")
            mode, other = ("train", "eval") if training else ("eval", "train")
            shown = ", ".join(f"`{n}`" if n != "the model" else n for n in changed[:3])
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            names = [name for name, _ in parts]
            methods = f"{', '.join(names)} and forward" if names else "forward"
            TRANSFORMER.detect("modes", True, mode=mode, method=method, shown=shown, more=more, other=other,
                               what=what, methods=methods, they="they" if names else "it")
    finally:
        model.eval()


def _dropped(c: Any) -> Tensor:
    """The entries a dropout with the right scale dropped: zero here, not in eval mode, (B, L, D)."""
    return isclose(c.got, torch.zeros_like(c.got), atol=1e-6) & ~isclose(c.kept, torch.zeros_like(c.kept), atol=1e-6)


def _once(c: Any) -> bool:
    """The kept entries scaled by 1 / (1 - p): one dropout of the eval-mode input, as far as the scale tells."""
    return c.scale is not None and abs(c.scale * (1 - c.p) - 1) < 1e-3


def _dropped_before_adding(c: Any) -> bool:
    before = dropout_scale(c.got - c.table, c.kept - c.table, atol=1e-4)  # dropout(x) + pe
    return before is not None and abs(before * (1 - c.p) - 1) < 1e-3


def _dropped_before_and_after(c: Any) -> bool:
    kept_out = ~isclose(c.got, torch.zeros_like(c.got), atol=1e-5)  # (B, L, D): what the outer dropout kept
    inner = (c.got * (1 - c.p) - c.table)[kept_out]  # dropout(x) before adding the table, on the kept entries
    return bool(kept_out.any()) and dropout_scale(inner, (c.kept - c.table)[kept_out], atol=1e-4) is not None


def check_stack_input_dropout(got: Any, kept: Any, p: float, what: str, stack: str, where: str,
                              again: Any = None) -> None:
    """In training mode a stack's input must be its eval-mode input ``x + pe`` dropped out once:
    every entry 0 or the eval-mode value times 1 / (1 - p), drawn entry by entry and anew at every
    call (``again``: a second call's input). Dropped twice (kept entries times 1 / (1 - p)^2, or
    once before adding the table and once after), before adding the table, with another p, not
    rescaled, one mask for the batch, whole vectors or a kept mask ("wrong dropout") are named.
    With p = 0.5 and these sizes a correct dropout matches one of the structures by chance with
    probability below 2^-16."""
    if not (isinstance(got, Tensor) and isinstance(kept, Tensor) and got.shape == kept.shape and got.dim() == 3):
        return
    scale = dropout_scale(got, kept, atol=1e-5)
    B, L, D = got.shape
    c = SimpleNamespace(got=got, kept=kept, again=again, p=p, scale=scale, B=B,
                        table=sinusoidal_positional_encoding(L, D).to(got.dtype))  # (L, D)
    fields = dict(what=what, stack=stack, where=where, B=B, L=L, D=D, scale=scale, inv=1 / (1 - p))
    if _once(c):
        TRANSFORMER.detect("drop structure", c, **fields)
        return
    TRANSFORMER.detect("stack input", c, **fields)
    if scale is not None and abs(scale - 1) > 1e-3:
        fail_fixed_p(scale, p, f"{what} on their way to {stack}", where)
    TRANSFORMER.detect("stack input left", c, rescaled=": the kept entries are not rescaled" if scale is not None
                       else "", **fields)


def _extra_dropout_probe(cls: Any, s: _Sizes) -> None:
    """Dropout with 0 < p < 1 (which p = 1 cannot show twice): in training mode the encoder's and the
    decoder's inputs must be the eval-mode inputs dropped once (kept entries scaled by 1 / (1 - p)),
    and the decoder must get the encoder's output as its memory, undropped. Watched with hooks."""
    p = 0.5
    shown = s.shown(False, p)
    model = call_student(cls, s.V_src, s.V_tgt, context=f"constructing Transformer({shown})", **s.kwargs(False, p))
    enc, dec = getattr(model, "encoder", None), getattr(model, "decoder", None)
    if not (isinstance(enc, nn.Module) and isinstance(dec, nn.Module)):
        return
    seen: dict[str, Any] = {}

    def pre(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen[name] = args[0] if args else kwargs.get("x")
            if name == "decoder":
                seen["memory"] = args[1] if len(args) > 1 else kwargs.get("memory")
        return hook

    handles = [enc.register_forward_pre_hook(pre("encoder"), with_kwargs=True),
               dec.register_forward_pre_hook(pre("decoder"), with_kwargs=True),
               enc.register_forward_hook(lambda m, a, out: seen.__setitem__("encoded", out))]
    src, tgt, src_mask, tgt_mask = _transformer_inputs(s)
    where = f"training mode, dropout={p}"
    try:
        with torch.no_grad():
            call_student(model.eval(), src, tgt, src_mask, tgt_mask, context="running forward (eval mode)")
            clean = dict(seen)
            call_student(model.train(), src, tgt, src_mask, tgt_mask, context=f"running forward ({where})")
            first = dict(seen)
            call_student(model.train(), src, tgt, src_mask, tgt_mask, context=f"running forward ({where})")
    finally:
        for h in handles:
            h.remove()
        model.eval()
    for side, words in (("encoder", "source"), ("decoder", "target")):
        check_stack_input_dropout(first.get(side), clean.get(side), p, f"the {words} embeddings", f"the {side}", where,
                                  seen.get(side))
    memory, encoded = first.get("memory"), first.get("encoded")
    TRANSFORMER.detect("memory", SimpleNamespace(memory=memory, encoded=encoded), where=where)


def _embedding_probe(model: nn.Module, s: _Sizes) -> None:
    """forward once (eval mode), counting the lookups of each embedding: encode must embed the
    source with src_embedding, decode the target with tgt_embedding. The vocabulary sizes
    differ, so a swapped table often raises (an id out of range) before the values can show:
    the pre-hooks have counted the lookup by then."""
    # each side's lookups, counted on TokenEmbedding (whose range check may raise first) and on
    # its nn.Embedding (which a student may call directly): the larger count is the number of calls
    names = ("src_embedding", "tgt_embedding")
    counts: Counter = Counter()
    handles = []
    for name in names:
        outer = getattr(model, name, None)
        for level, sub in enumerate((outer, getattr(outer, "embedding", None))):
            if isinstance(sub, nn.Module):
                key = (name, level)
                handles.append(sub.register_forward_pre_hook(lambda m, a, key=key: counts.update([key])))
    raised = False
    try:
        with torch.no_grad():
            call_student(model.eval(), *_transformer_inputs(s), context="running forward (eval mode)")
    except StudentError:
        raised = True  # reported by the comparisons, unless the lookups below explain it
    finally:
        for h in handles:
            h.remove()
    used = {n: max(counts[(n, 0)], counts[(n, 1)]) for n in names}
    fit = f" (with vocabulary sizes {s.V_src} and {s.V_tgt} some ids do not even fit)" if raised else ""
    TRANSFORMER.detect("lookups", SimpleNamespace(used=used, raised=raised), fit=fit)


def _mask_routing(model: nn.Module, s: _Sizes) -> None:
    """forward once (eval mode), the masks the encoder and the decoder get watched with pre-hooks:
    src_mask (B, 1, L_src) and tgt_mask (B, L_tgt, L_tgt) differ in shape, so a swap often raises
    inside attention (the hooks have seen the masks by then) or gives the wrong values."""
    enc, dec = getattr(model, "encoder", None), getattr(model, "decoder", None)
    if not (isinstance(enc, nn.Module) and isinstance(dec, nn.Module)):
        return
    seen: dict[str, Any] = {}

    def pre(names: tuple[str, ...], first: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            for i, name in enumerate(names):
                seen.setdefault(name, args[first + i] if len(args) > first + i else kwargs.get(name))
        return hook

    handles = [enc.register_forward_pre_hook(pre(("mask",), 1), with_kwargs=True),
               dec.register_forward_pre_hook(pre(("tgt_mask", "memory_mask"), 2), with_kwargs=True)]
    src, tgt, src_mask, tgt_mask = inputs = _transformer_inputs(s)
    try:
        with torch.no_grad():
            call_student(model.eval(), *inputs, context="running forward (eval mode)")
    except StudentError:
        pass  # reported by the comparisons, unless the masks below explain it
    finally:
        for h in handles:
            h.remove()

    def holds(got: Any, mask: Tensor) -> bool:
        return isinstance(got, Tensor) and got.shape == mask.shape and equal(got, mask)

    wrong = [f"{where} gets {name}" for where, key, mask, name in (
        ("the encoder", "mask", tgt_mask, "tgt_mask"),
        ("the decoder's self-attention (tgt_mask)", "tgt_mask", src_mask, "src_mask"),
        ("the decoder's cross-attention (memory_mask)", "memory_mask", tgt_mask, "tgt_mask"),
    ) if holds(seen.get(key), mask)]
    TRANSFORMER.detect("routing", wrong, wrong=" and ".join(wrong))


def _transformer_modes(model: nn.Module, s: _Sizes) -> None:
    src, tgt, src_mask, tgt_mask = inputs = _transformer_inputs(s)
    memory = torch.randn(s.B, s.L_src, s.D)  # (B, L_src, D)
    check_modes_kept(model, lambda: call_student(model, *inputs, context="running forward"), "Transformer",
                     (("encode", lambda: call_student(model.encode, src, src_mask, context="running encode")),
                      ("decode", lambda: call_student(model.decode, tgt, memory, tgt_mask, src_mask,
                                                      context="running decode"))))


def _dropout_in_the_wrong_place(unexplained: str | None) -> None:
    TRANSFORMER.detect("unexplained", unexplained, unexplained=unexplained)


class _VariantCase(NamedTuple):
    """A comparison of the values stage: the output compared (``"memory"``, ``"decoded"`` or ``"logits"``),
    whether the call passed each mask, and the reference run with a mistake's keywords."""

    part: str
    src_mask: bool
    tgt_mask: bool
    run: Callable[[dict[str, Any]], Tensor]


def _swapped_lookup(own: str, other: str, encode: bool) -> Callable[[Any], bool]:
    """encode (decode) looked its tokens up in the other embedding only; encode runs first, so one wrong
    lookup that raised is enough there; decode's comes after encode's."""
    return lambda c: c.used[own] == 0 and (c.used[other] > 1 or (encode and c.raised and c.used[other] == 1))


def _structure_ways(how: str, test: Callable[[Any], bool]) -> Entry:
    return Entry("wrong dropout", None, Output(test, "drop structure"),
                 "in {where}, {what}, (B, L, D) = ({B}, {L}, {D}), reach {stack} with the kept entries scaled right, "
                 "but " + how + ". nn.Dropout(dropout) draws every entry independently at every call.")


_NORM_FRESH = ("right after construction, the LayerNorm {which} `{name}` is not all {values} (it starts with values "
               "like {start}). {zero}Initialise only the matrices (p.dim() > 1) and leave the vectors, biases and norm "
               "parameters, as their modules made them.")

TRANSFORMER = Catalogue("Transformer", "06", [
    Entry("not a class", None, Probe("require_module_class")),
    # built with awkward sizes: an nn.Module with the exercise's methods and parts
    Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
          "Transformer(...) should build an nn.Module; got {type}."),
    Entry("missing method", "the Transformer lacks encode or decode", Output(_missing_method, "methods"),
          "your Transformer has no method {sig}; the exercise asks for encode and decode (greedy decoding runs the "
          "encoder once and the decoder once per step)."),
    Entry("missing submodule", None, Output(_missing_part, "parts"),
          "your Transformer has no `{path}`: the notebook's later cells and greedy_decode use the submodule names of "
          "the exercise (model.output_projection, model.src_embedding.embedding, model.encoder.layers, ...). Build it "
          "as self.{built}."),
    Entry("modules shared", None, Probe("require_distinct_roles")),
    # the positional table (stage "state")
    Entry("pe is a Parameter", None, Output(lambda c: (found := _learned_table(c)) and found["fixed"] and found,
                                            "state"),
          "the positional table `{name}` is an nn.Parameter: it is fixed, not learned, so register it with "
          "self.register_buffer('pe', table) (a buffer moves with .to(device) and is saved, but the optimizer never "
          "sees it)."),
    Entry("learned positions", "learned positions instead of the sinusoidal table", Output(_learned_table, "state"),
          "`{name}` {shape} is a learned positional table: the Transformer adds the fixed sinusoidal table instead "
          "(PositionalEncoding, whose `pe` is a buffer, not a parameter)."),
    Entry("pe not a buffer", None, Output(_plain_table, "state"),
          "the positional table `{name}` is a plain tensor attribute: model.to(device) would leave it behind and "
          "state_dict() would not save it. Register it with self.register_buffer('pe', table)."),
    # parameters that pair with no arrangement of the reference's: a final norm (stage "final norm"), ...
    Entry("norm_first not passed on", "the stack's norm_first does not reach its layers",
          Output(lambda c: c.norm_first and any(getattr(m, "norm_first", True) is False for m in c.model.modules()),
                 "final norm"),
          "built with norm_first=True, your model's encoder and decoder are post-norm (their norm_first is False) and "
          "have no final norm: pass norm_first on, Encoder(..., norm_first=norm_first) and Decoder(..., "
          "norm_first=norm_first)."),
    Entry("missing final norm", "no final norm where the contract has one (pre-norm)",
          Output(lambda c: c.norm_first, "final norm"),
          "{which} {lack} the final norm: with norm_first=True the stack must end with a LayerNorm (the residual "
          "stream is never normalised otherwise). Build Encoder/Decoder with norm_first passed on."),
    Entry("final norm in post-norm", "a final norm applied with norm_first=False", Output(lambda c: True, "final norm"),
          "{which} {have} a final norm with norm_first=False: the Transformer has one only when norm_first=True (each "
          "post-norm layer already ends with a norm). Build it only `if norm_first`."),
    # ... a part sized by the other vocabulary (stage "vocabulary"), or anything else (stage "structure")
    *(Entry(name, meaning, Output(functools.partial(_sized_by_the_other, path=path), "vocabulary"),
            "your {name} has {n} {counts}, the {other}_vocab_size, where it needs {need}, the {own}_vocab_size (this "
            "check draws the two vocabularies different): build it as self.{built}.")
      for (path, *_, name), meaning in zip(_VOCABULARY_PARTS, (
          "the source embedding built with the target vocabulary's size",
          "the target embedding built with the source vocabulary's size",
          "the output projection built with the source vocabulary's size"))),
    Entry("parameters differ from the reference",
          "the Transformer's parameters fit no arrangement of the contract's parts",
          Output(lambda c: True, "structure"),
          "your Transformer's parameters do not correspond to the reference's (built with the same arguments): "
          "{said}. The checker pairs them by position and shape, whatever their names, so keep to the exercise's "
          "parts: two TokenEmbeddings, one PositionalEncoding (no parameters), the Encoder, the Decoder and "
          "nn.Linear(d_model, tgt_vocab_size)."),
    # the initialisation (stage "init")
    Entry("no Xavier initialisation", "matrices not Xavier-uniform initialised", Output(_not_xavier, "init"),
          "right after construction, {n} of the {total} weight matrices are not Xavier-uniform; `{name}` {shape} has "
          "values up to {top:.3g} in size (root mean square {rms:.3g}), where xavier_uniform_ draws uniformly from "
          "+-{bound:.3g} (root mean square {bound_rms:.3g}). After building the submodules, re-initialise every "
          "parameter with more than one dimension: `for p in self.parameters(): if p.dim() > 1: "
          "nn.init.xavier_uniform_(p)`."),
    Entry("norm scales not ones", "LayerNorm scales do not start at 1",
          Output(lambda c: _norm_not_fresh(c, True), "init"), _NORM_FRESH.replace("{which}", "scale").replace(
              "{values}", "ones")),
    Entry("norm shifts not zeros", "LayerNorm shifts do not start at 0",
          Output(lambda c: _norm_not_fresh(c, False), "init"), _NORM_FRESH.replace("{which}", "shift").replace(
              "{values}", "zeros")),
    # the table's length, the embeddings' lookups and the masks' routes, each watched in one forward pass
    Entry("max_len ignored", "the positional table's length does not follow the max_len argument",
          Output(bool, "table"),
          "the positional table `{name}` has {n} rows although the model was built with max_len={max_len}: pass "
          "max_len on, PositionalEncoding(d_model, max_len, dropout)."),
    Entry("embeddings swapped", "encode or decode looks its tokens up in the other language's embedding",
          Output(_swapped_lookup("src_embedding", "tgt_embedding", True), "lookups"),
          "encode looks the source tokens up in self.tgt_embedding, the other language's embedding, and "
          "self.src_embedding is never used{fit}: encode embeds with self.src_embedding."),
    Entry("embeddings swapped", None, Output(_swapped_lookup("tgt_embedding", "src_embedding", False), "lookups"),
          "decode looks the target tokens up in self.src_embedding, the other language's embedding, and "
          "self.tgt_embedding is never used{fit}: decode embeds with self.tgt_embedding."),
    Entry("masks swapped", "masks passed to the wrong attentions or arguments", Output(bool, "routing"),
          "the masks are swapped: {wrong}. src_mask (B, 1, L_src) blocks source padding: it goes to the encoder and to "
          "the decoder's cross-attention as memory_mask; tgt_mask (B, L_tgt, L_tgt) goes to the decoder's "
          "self-attention. Check the order of the arguments in forward's self.decode(tgt, memory, tgt_mask, "
          "src_mask) and in decode's self.decoder(y, memory, tgt_mask, memory_mask)."),
    Entry("mode not restored", "the caller's train/eval mode is not restored", Output(bool, "modes"),
          "after model.{mode}(), one call of {method} left {shown}{more} in {other} mode (a self.{other}() inside "
          "your {what}?): the caller chooses the mode, model.train() to train and model.eval() to evaluate, and "
          "{methods} must leave it, and every submodule's, as {they} found it. Remove the self.{other}() call."),
    # training mode with dropout=P_PROBE: deterministic (stage "random"), then encode and decode (stage "dropout")
    Entry("hard-coded dropout p", None, Output(bool, "random"),
          "two forward passes in {where} gave different outputs: with this p every dropout zeroes its input, so the "
          "output would be the same each time; some dropout uses its own p instead of the dropout argument{fixed}. "
          "Pass the dropout argument on to every module that drops."),
    Entry("wrong return", None, Output(lambda got: isinstance(got, (tuple, list)) and dict(
        type=type(got).__name__, n=len(got)), "return"),
          "{what} should return one tensor; yours returned a {type} of {n} items ({case})."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    *_dropout_entries(),
    # eval mode: forward, encode and decode against the reference (stage "values"), each part on its own
    Entry("dropout ignores eval mode", None, Probe("check_dropout")),
    Entry("future leaking", "a position sees later positions (causal mask missing or wrong)",
          _values(lambda c: c.tgt_mask and c.part != "memory", self_mask=False),
          "tgt_mask has no effect: every target position sees the later (future) target tokens. Pass tgt_mask on to "
          "the decoder's self-attention."),
    Entry("src_mask not used for cross-attention", "cross-attention does not get src_mask",
          _values(lambda c: c.src_mask and c.part != "memory", cross_mask=False),
          "the decoder's cross-attention ignores src_mask, so target positions attend to source padding. Pass "
          "src_mask to the decoder as memory_mask."),
    Entry("src_mask not used by the encoder", "the encoder does not get src_mask",
          _values(lambda c: c.src_mask and c.part != "decoded", enc_mask=False),  # decode gets the reference's memory
          "the encoder ignores src_mask, so source positions attend to padding. Pass src_mask to the encoder."),
    Entry("src_mask not used", "src_mask is not used",
          _values(lambda c: c.src_mask and c.part == "logits", enc_mask=False, cross_mask=False),
          "src_mask is not used at all: pass it to the encoder and, as memory_mask, to the decoder's "
          "cross-attention."),
    *_embedding_entries(),
    Entry("positional encoding after the encoder",
          "the positional table added to the encoder's output, not to the source embeddings",
          _values(lambda c: c.part != "decoded", pe=(0, 1), pe_memory=True),
          "the positional table is added to the encoder's output, not to the source embeddings going in: the "
          "encoder's self-attention then cannot tell the positions apart. encode is "
          "self.encoder(self.positional_encoding(self.src_embedding(src)), src_mask)."),
    Entry("positional encoding on the memory", "decode adds the positional table to the memory (the encoder's output)",
          _values(lambda c: c.part != "memory", pe_memory=True),
          "decode adds the positional table to the memory as well: the encoder's output already carries the source "
          "positions (encode added them to the source embeddings); pass memory to the decoder as it is."),
    Entry("missing output projection", None, _values(lambda c: c.part == "logits", part="decoded"),
          "forward returns the decoder output (B, L_tgt, d_model): project it to the target vocabulary with the "
          "output projection, nn.Linear(d_model, tgt_vocab_size), to get logits (B, L_tgt, tgt_vocab_size)."),
    Entry("returns probabilities", "probabilities (softmax) returned instead of logits",
          _values(lambda c: c.part == "logits", dict(post="softmax"), post="softmax"), _RAW_LOGITS),
    Entry("returns log-probabilities", "log-probabilities (log_softmax) returned instead of logits",
          _values(lambda c: c.part == "logits", dict(post="log_softmax"), post="log_softmax"), _RAW_LOGITS),
    # issue 24 item 6 (T59): the "no masks" case is told apart from a causal mask made up inside forward
    Entry("causal mask when tgt_mask is None",
          "forward builds a causal mask when tgt_mask is None (None means no mask)",
          _values(lambda c: c.part == "logits" and not c.tgt_mask, own_causal=True),
          "called with tgt_mask=None, forward masks the future positions all the same: it builds its own causal mask "
          "when none is given. None means no mask: the caller chooses (the training loop passes make_tgt_mask's "
          "mask, greedy_decode causal_mask(T)), so pass tgt_mask on to decode as it is, None included."),
    Entry("forward disagrees with encode/decode", "forward is not decode(encode(...)) plus the projection",
          Output(bool, "forward"),
          "encode and decode give the reference's values but forward's logits do not ({case}): forward should be "
          "exactly output_projection(decode(tgt, encode(src, src_mask), tgt_mask, src_mask)): encode, then decode, "
          "then the projection."),
    # training mode with 0 < p < 1: each stack's input dropped once (stages "drop structure", "stack input",
    # fail_fixed_p's probe, "stack input left"), the memory not at all
    _structure_ways("the same entries are dropped at every call (a mask drawn once and kept): draw a new one each "
                    "time", lambda c: isinstance(c.again, Tensor) and c.again.shape == c.got.shape
                    and bool(equal(c.again, c.got))),
    _structure_ways("every sequence of the batch has the same entries dropped (one mask for the batch): draw one per "
                    "entry", lambda c: c.B > 1 and bool((_dropped(c) == _dropped(c)[:1]).all())),
    _structure_ways("whole token vectors are dropped (one draw per position, shape (B, L, 1)): draw one per entry",
                    lambda c: bool((_dropped(c) == _dropped(c)[..., :1]).all())),
    Entry("dropout applied twice", "dropout applied two or more times to the same tensor",
          Output(lambda c: c.scale is not None and abs(c.scale * (1 - c.p) ** 2 - 1) < 1e-3, "stack input"),
          "in {where}, {what} reach {stack} dropped twice (the kept entries are scaled by {scale:.3g} = "
          "1 / (1 - p)^2): PositionalEncoding already applies dropout after adding the table; remove the second one."),
    Entry("positional dropout missing", None, Output(lambda c: bool(equal(c.got, c.kept)), "stack input"),
          "in {where}, {what} reach {stack} without any dropout: PositionalEncoding(d_model, max_len, dropout) drops "
          "after adding the table; pass the embeddings through it (and keep the model in the mode the caller chose)."),
    Entry("dropout before adding", None, Output(_dropped_before_adding, "stack input"),
          "in {where}, {what} reach {stack} as dropout(x) + pe: the dropout acts before the positional table is added. "
          "The Transformer applies it to the sum, dropout(x + pe), which PositionalEncoding does."),
    Entry("dropout applied twice", None, Output(_dropped_before_and_after, "stack input"),
          "in {where}, {what} reach {stack} dropped twice: once before adding the positional table and once after "
          "(dropout(dropout(x) + pe)): PositionalEncoding already applies dropout after adding the table; remove the "
          "second one, the dropout on the embeddings."),
    Entry("hard-coded dropout p", None, Probe("fail_fixed_p")),
    Entry("wrong dropout", "with 0 < p < 1, the entries are not each 0 or scaled by 1 / (1 - p): not one dropout",
          Output(lambda c: True, "stack input left"),
          "in {where}, {what} reach {stack} changed in another way than one dropout of their eval-mode values x + pe "
          "(every entry either 0 or its eval-mode value times 1 / (1 - p) = {inv:.3g}){rescaled}. Use "
          "PositionalEncoding's nn.Dropout(dropout), which drops the sum after adding the table, and no other dropout "
          "or noise on the way."),
    Entry("dropout on the memory", "dropout applied to the encoder's output before the decoder reads it",
          Output(lambda c: isinstance(c.memory, Tensor) and isinstance(c.encoded, Tensor)
                 and c.memory.shape == c.encoded.shape and not equal(c.memory, c.encoded)
                 and dropout_scale(c.memory, c.encoded, atol=1e-5) is not None, "memory"),
          "in {where}, the decoder gets a dropped-out copy of the encoder's output as its memory: the memory goes to "
          "the cross-attention as the encoder returns it (dropout acts inside the layers and after the positional "
          "table, nowhere else)."),
    Entry("dropout in the wrong place", None, Output(bool, "unexplained"),
          "eval mode is right, but in training mode {unexplained}: some dropout acts where the Transformer has none. "
          "Dropout belongs after adding the positional table (PositionalEncoding) and inside the layers, nowhere "
          "else."),
    *GRADIENT_PROBE,
])


@checker("Transformer")
def check_transformer(cls: Any) -> str:
    require_module_class(cls, "Transformer")
    s = _transformer_sizes()
    built = [_build_aligned(cls, s, norm_first, 0.1) for norm_first in (False, True)]  # structure first: fast
    _table_length(built[0][0], s.D)
    _embedding_probe(built[0][0], s)
    _mask_routing(built[0][0], s)
    _transformer_modes(built[0][0], s)
    _shared_embeddings(cls, replace(s, N=1))
    try:
        unexplained = _dropout_probe(cls, replace(s, N=1))
    except Failure:
        # a training-mode diagnosis stands only when eval mode is right: a second positional table
        # added after the first one's dropout looks like dropout before adding, and is named there
        _mapped_cases(*built[0], s, False, first_only=True)
        raise
    for (model, ref), norm_first in zip(built, (False, True)):
        _mapped_cases(model, ref, s, norm_first)
    # after the eval-mode values: a positional table missing, doubled or misplaced changes the stacks' inputs
    # in training mode too, and is named there by what it is
    _extra_dropout_probe(cls, replace(s, N=1))
    _dropout_in_the_wrong_place(unexplained)
    _transformer_gradient(*built[1], s)
    # the notebooks store this line (nbval): change it together with solutions/06
    return "post-norm and pre-norm, with and without masks, compared with the reference"


def _transformer_gradient(model: nn.Module, ref: nn.Module, s: _Sizes) -> None:
    """The gradient probe, once, on the pre-norm pair (every parameter, final norms too): what
    norm_first changes lives in the layers and stacks, whose checkers probe both settings.
    Eval mode, as _mapped_cases leaves the pair."""
    inputs = dict(zip(("src", "tgt", "src_mask", "tgt_mask"), _transformer_inputs(s)))
    pairs = named(model, pair_parameters(model, ref, by_structure=True) or [])
    gradient_probe(model, ref, inputs, pairs, what="Transformer", case="norm_first=True")


def _values_step(model: nn.Module, ref: Transformer, s: _Sizes) -> None:
    # the masks and the parts travel alike in both norm placements: post-norm suffices, and forward with
    # both masks (then encode and decode) names every catalogued value mistake
    _embedding_probe(model, s)
    _mask_routing(model, s)
    _mapped_cases(model, ref, s, False, first_only=True)


def _gradient_step(model: nn.Module, ref: Transformer, s: _Sizes) -> None:
    _mapped_cases(model, ref, s, True)
    _transformer_gradient(model, ref, s)


_STAGES: dict[str, Callable[[Any, _Sizes], Any]] = {  # one step of check_transformer, on a draw of its own
    "build": lambda cls, s: [_build_aligned(cls, s, norm_first, 0.1) for norm_first in (False, True)],
    "values": lambda cls, s: _values_step(*_build_aligned(cls, s, False, 0.1), s),
    "masks left out": lambda cls, s: _mapped_cases(*_build_aligned(cls, s, False, 0.1), s, False),
    "table": lambda cls, s: _table_length(_build_aligned(cls, s, False, 0.1)[0], s.D),
    "dropout": lambda cls, s: _dropout_in_the_wrong_place(_dropout_probe(cls, replace(s, N=1))),
    "extra dropout": lambda cls, s: _extra_dropout_probe(cls, replace(s, N=1)),
    "modes": lambda cls, s: _transformer_modes(_build_aligned(cls, s, False, 0.1)[0], s),
    "shared": lambda cls, s: _shared_embeddings(cls, replace(s, N=1)),
    "gradient": lambda cls, s: _gradient_step(*_build_aligned(cls, s, True, 0.1), s),
}


@checker("Transformer")
def _check_transformer_stage(cls: Any, stage: str) -> str:
    """The step of check_transformer that names a family (``_STAGES``), for the tests, which
    draw each catalogued mistake many times. Private: a check cell runs the whole check."""
    require_module_class(cls, "Transformer")
    if stage not in _STAGES:
        raise ValueError(f"stage must be one of {', '.join(_STAGES)}; got {stage!r}")
    _STAGES[stage](cls, _transformer_sizes())
    return f"the {stage} step"


# ---------------------------------------------------------------- greedy_decode
_UPPER_CAUSAL = ("the target mask is the upper triangle (causal_mask(T).T or triu): each position sees the later "
                 "ones and not the earlier ones. Pass causal_mask(T), True on and below the diagonal.")
_INVERTED_CAUSAL = ("the causal mask is inverted (~causal_mask(T)): True marks the future keys, the blocked ones, "
                    "so each position sees only the later ones (and the last, none). In this course True = may "
                    "attend: pass causal_mask(T) as it is.")
_MARGIN = 1e-3  # a greedy choice the correct answer depends on wins by at least this much
_MARGIN_VARIANT = 1e-4


def _greedy_raw(
    model: Transformer, src: Tensor, src_mask: Tensor | None, bos_id: int, steps: int, *, causal: bool | str = True,
    position: int = -1, argmax: str = "vocab", src_mask_to: tuple[bool, bool] = (True, True),
) -> tuple[Tensor, Tensor]:
    """Greedy tokens with no stopping and no filling, ``(B, steps + 1)``, and each step's
    top-1 minus top-2 logit, ``(B, steps)`` (``inf`` where the choice is not a vocabulary argmax).
    ``src_mask_to``: whether ``encode`` and ``decode`` get ``src_mask``; ``causal="inverted"``:
    ``~causal_mask(T)``."""
    memory = model.encode(src, src_mask if src_mask_to[0] else None)  # (B, L_src, D)
    mask = src_mask if src_mask_to[1] else None
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    margins = []
    for _ in range(steps):
        T = ys.size(1)
        tgt_mask = {True: causal_mask(T), False: None, "inverted": ~causal_mask(T), "upper": causal_mask(T).T}[causal]  # (T, T)  # noqa: E501
        out = model.decode(ys, memory, tgt_mask, mask)  # (B, T, D)
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
    pass_pad: bool = True  # False: pad_id left at its default
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


def _fin(c: Any, kind: str = "ok", **kw: Any) -> Tensor:
    """What greedy decoding returns on the case's rows from the un-stopped trajectory ``kind``, with the
    mistakes ``kw`` of ``_finish``."""
    kw.setdefault("max_len", c.M + kw.pop("shift", 0))
    return _finish(c.raws[kind][c.rows], c.eos, kw.pop("fill", c.fill), kw.pop("max_len"), **kw)


def _decoded(applies: Callable[[Any], bool], kind: str = "ok", fields: Callable[[Any], dict[str, Any]] | None = None,
             **kw: Any) -> Reference:
    """The tokens of the trajectory ``kind`` finished with the mistakes ``kw``, on the cases where it
    ``applies`` (in eval mode; the train-mode case has one mistake of its own)."""
    return Reference(lambda c: [(fields(c) if fields else {}, _fin(c, kind, **kw))] if applies(c) else [])


def _evaluated(c: Any) -> bool:
    return not c.train


def _same(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(equal(a, b))


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
    "upper": dict(causal="upper"),
    "inverted causal": dict(causal="inverted"),
    "positions": dict(argmax="positions"),
    "first": dict(position=0),
    "no src mask": dict(src_mask_to=(False, False)),
    "no src mask in encode": dict(src_mask_to=(False, True)),
    "no src mask in decode": dict(src_mask_to=(True, False)),
}
_SRC_MASK_KINDS = ("no src mask", "no src mask in encode", "no src mask in decode")  # listed first: nothing hides them


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
        # pad_id 0 on every draw: `fill = pad_id or eos_id` (0 is falsy) must always show
        bos_id, pad_id = randint(1, V - 1), 0
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
            a_rows = _choose_rows(ends, [first == first[ends].min(), first == first[ends].max()]
                                  + [differs[k] for k in _SRC_MASK_KINDS], randint(3, 4))
            if a_rows is None or len(set(first[a_rows].tolist())) < 2:
                continue
            # no row of B ends at step M - 1: stopping there (at the first <eos>, or row 0's) gives M columns,
            # exactly what decoding max_len - 1 steps gives, and the two mistakes could not be told apart
            b_rows = _choose_rows(clear & (first != M - 1), [first > M, (first < M) & goes_on, differs["no causal"]]
                                  + [differs[k] for k in _SRC_MASK_KINDS], randint(3, 4))
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
        _GreedyCase(b_rows, eos_id, None, False, "one sequence never produces <eos>, pad_id left out", False),
        _GreedyCase(a_rows, eos_id, pad_id, False, "every sequence produces <eos> before max_len, pad_id given"),
        _GreedyCase(a_rows, eos_id, None, True, "the model passed in train mode, pad_id=None"),
    ]
    for c in cases:
        fill = c.eos_id if c.pad_id is None else c.pad_id
        with torch.no_grad():
            c.expected = greedy_decode(model, src[c.rows], M, bos_id, eos_id, src_mask=src_mask[c.rows], pad_id=c.pad_id)  # noqa: E501
        model.eval()
        if not _same(c.expected, _finish(raws["ok"][c.rows], eos_id, fill, M)):
            return None  # the smaller batch changed a close call: pick other rows
        c.mistakes = GREEDY.candidates(SimpleNamespace(raws=raws, rows=c.rows, eos=eos_id, fill=fill, pad_id=c.pad_id,
                                                       M=M, train=c.train))
    if not _distinguishable(cases):
        return None
    return _GreedySetup(model, src, src_mask, bos_id, pad_id, M, cases)


class _GreedyWatch:
    """Pre-hooks on ``model.encoder`` and ``model.decoder`` noting, at every call: whether
    gradients are tracked, which sub-modules are in train mode, and (encoder) how many
    source rows it encodes. A full ``model(src, ys, ...)`` runs the encoder too."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.grad: list[bool] = []
        self.training: set[str] = set()  # sub-modules that ran in train mode
        self.encoder_calls = self.rows_encoded = self.decoder_calls = self.projections = 0
        self.fed: list[int] = []  # the length of the decoder's input at each call
        self.handles = [model.encoder.register_forward_pre_hook(self._hook(True), with_kwargs=True),
                        model.decoder.register_forward_pre_hook(self._hook(False), with_kwargs=True)]
        if isinstance(getattr(model, "output_projection", None), nn.Module):
            self.handles.append(model.output_projection.register_forward_pre_hook(self._projected))

    def _projected(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        self.projections += 1

    def _hook(self, encoder: bool) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self.grad.append(torch.is_grad_enabled())
            self.training.update(n for n, m in self.model.named_modules() if n and m.training)
            if encoder:
                x = args[0] if args else kwargs.get("x")
                self.encoder_calls += 1
                self.rows_encoded += x.size(0) if isinstance(x, Tensor) and x.dim() == 3 else 0
            else:
                self.decoder_calls += 1
                x = args[0] if args else kwargs.get("x")
                self.fed.append(x.size(1) if isinstance(x, Tensor) and x.dim() == 3 else 0)
        return hook

    def fail_if_one_token_fed(self, words: str) -> None:
        """A loop that fed model.decoder one position at every step (a key/value cache, as in
        notebook 07, calls the layers itself, never model.decoder)."""
        GREEDY.detect("one token", self.fed, words=words, n=len(self.fed))

    def fail_if_unprojected(self, words: str) -> None:
        """Wrong tokens (or an error) from a loop that decoded but never ran the output projection."""
        n = self.decoder_calls
        GREEDY.detect("unprojected", self, words=words, n=n, s="s" * (n != 1))

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def in_train_mode(self) -> list[str]:
        """The topmost sub-modules that ran in train mode, in the model's order."""
        return [n for n, _ in self.model.named_modules()
                if n in self.training and not any(n.startswith(p + ".") for p in self.training)]


def _watch_before_tokens(watch: _GreedyWatch, words: str) -> None:
    """What changes the tokens: dropout still on in a part of the model."""
    parts = watch.in_train_mode()
    shown = ", ".join(f"model.{n}" for n in parts[:4]) + (f" and {len(parts) - 4} more" if len(parts) > 4 else "")
    GREEDY.detect("train mode", parts, words=words, shown=shown)


def _watch_after_tokens(watch: _GreedyWatch, B: int, words: str) -> None:
    """Right tokens, wrong cost: the source encoded again at every step, gradients tracked."""
    GREEDY.detect("encoder calls", watch.rows_encoded > B, words=words, calls=watch.encoder_calls,
                  rows=watch.rows_encoded, B=B)
    require_no_grad(watch.grad, "decoding", "greedy_decode", words)


_LAST_ONLY = ("the decoder is fed only the newest token, ys[:, -1:], at every step, so it predicts from one token "
              "at position 0 and forgets the prefix (only a key/value cache may do that, and it keeps the earlier "
              "keys and values). Feed the whole prefix, model.decode(ys, memory, causal_mask(T), src_mask), and "
              "read its last position, out[:, -1].")


def _lazy_greedy(model: Transformer, src: Tensor, src_mask: Tensor, bos_id: int, eos_id: int, fill: int, M: int,
                 eos_filled: bool = False, cumulative: bool = True, dim: int = -1, stop_row0: bool = False) -> Tensor:
    """Greedy decoding, filling as it goes, with a filling mistake or an argmax over ``dim``: the
    tokens after a fill depend on it (and the rows on each other with ``dim=0``), so the setup's
    un-filled trajectories cannot give them. Tried only once the tokens are wrong."""
    memory = model.encode(src, src_mask)  # (B, L_src, D)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool)  # (B,)
    for _ in range(M):
        out = model.decode(ys, memory, causal_mask(ys.size(1)), src_mask)  # (B, T, D)
        nxt = model.output_projection(out[:, -1]).argmax(dim=dim)  # (B,)
        if eos_filled:
            finished = finished | (nxt == eos_id)
        nxt = nxt.masked_fill(finished, fill)
        if not eos_filled:
            finished = (finished | (nxt == eos_id)) if cumulative else nxt == eos_id
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, T + 1)
        if bool(finished[0] if stop_row0 else finished.all()):
            break
    return ys


def _lazy(**kw: Any) -> Reference:
    """``_lazy_greedy`` with the mistake ``kw``, on the case ``c`` (its model, source and filler)."""
    return Reference(lambda c: [({}, lambda: _lazy_greedy(c.model, c.src, c.mask, c.bos_id, c.eos_id, c.fill, c.M,
                                                          **kw))], "lazy")


def _lazy_diagnosis(got: Any, setup: _GreedySetup, case: _GreedyCase, src: Tensor, mask: Tensor, words: str) -> None:
    if not isinstance(got, Tensor) or got.dim() != 2:
        return
    fill = case.eos_id if case.pad_id is None else case.pad_id
    c = SimpleNamespace(model=setup.model.eval(), src=src, mask=mask, bos_id=setup.bos_id, eos_id=case.eos_id,
                        fill=fill, M=setup.max_len)
    for name, message, make in GREEDY.candidates(c, "lazy", words=words):
        with torch.no_grad():
            value = make()
        if not _same(value, case.expected) and _same(got.long(), value):
            fail(message, mistake=name)


class _ProbeError(RuntimeError):
    """Raised by the checker inside the model, to see whether greedy_decode restores the mode."""


def _restored_after_error(fn: Callable[..., Any], setup: _GreedySetup) -> None:
    """The model comes in train mode and its decoder raises at the second step: the caller's
    mode must still come back (try/finally)."""
    model, rows = setup.model, setup.cases[0].rows
    calls = []

    def explode(module: nn.Module, args: tuple[Any, ...]) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise _ProbeError("the checker's decoder failed on purpose at step 2")

    handle = model.decoder.register_forward_pre_hook(explode)
    model.train()
    try:
        call_student(fn, model, setup.src[rows], setup.max_len, setup.bos_id, setup.cases[0].eos_id,
                     src_mask=setup.src_mask[rows])
    except StudentError:
        pass
    finally:
        handle.remove()
        left = {m.training for m in model.modules()}
        model.eval()
    GREEDY.detect("after an error", len(calls) >= 2 and left != {True})


def _token_diagnosis(got: Any, expected: Tensor, case: str, max_len: int) -> None:
    """Say which row differs, in tokens, instead of a float difference."""
    if not isinstance(got, Tensor) or got.dim() != 2:
        return
    GREEDY.detect("tokens", SimpleNamespace(got=got, expected=expected), case=case, max_len=max_len)


def _greedy_probe(fn: Callable[..., Any], setup: _GreedySetup, case: _GreedyCase, err: StudentError) -> None:
    """A shape error may come from an argmax over the batch axis, which only runs when B == V."""
    model, V = setup.model, setup.model.output_projection.out_features
    if not isinstance(err.exc, RuntimeError) or len(case.rows) == V or setup.src.size(0) < V:
        return
    src, mask = setup.src[:V], setup.src_mask[:V]
    fill = case.eos_id if case.pad_id is None else case.pad_id
    try:
        with torch.no_grad():
            got = fn(model, src.clone(), setup.max_len, setup.bos_id, case.eos_id, src_mask=mask.clone(), pad_id=case.pad_id)  # noqa: E501
            ys = _lazy_greedy(model.eval(), src, mask, setup.bos_id, case.eos_id, fill, setup.max_len, dim=0)
    except Exception:  # noqa: BLE001 - the probe only adds a diagnosis
        model.eval()
        return
    model.eval()
    GREEDY.detect("batch axis", isinstance(got, Tensor) and _same(got.long(), ys), type=type(err.exc).__name__,
                  first=str(err.exc).splitlines()[0] if str(err.exc) else "", B=len(case.rows), V=V)


def _rows_reversed(fn: Callable[..., Any], setup: _GreedySetup) -> None:
    """The batch of the case where every row ends before max_len, reordered so that the row that
    ends first comes first: code that stops when row 0 ends (right when row 0 happens to end
    last) shows here."""
    case, M = setup.cases[1], setup.max_len
    order = (case.expected == case.eos_id).int().argmax(dim=1).argsort(stable=True)  # (B,): earliest end first
    if bool((order == torch.arange(len(order))).all()):
        order = order.roll(1)  # already first: the last-ending row goes to row 0 instead, whatever
    rows = case.rows[order]
    src, mask = setup.src[rows], setup.src_mask[rows]
    words = (f"{case.words}, the rows in another order: batch of {len(rows)}, max_len={M}, bos_id={setup.bos_id}, "
             f"eos_id={case.eos_id}, pad_id={case.pad_id}")
    setup.model.eval()
    got = call_student(fn, setup.model, src, M, setup.bos_id, case.eos_id, context=f"decoding ({words})",
                       src_mask=mask, pad_id=case.pad_id)
    setup.model.eval()
    expected = case.expected[order]  # (B, T): the rows are independent, T the same
    if isinstance(got, Tensor) and not _same(got.long(), expected):
        _lazy_diagnosis(got, setup, replace(case, rows=rows, expected=expected), src, mask, words)
        _token_diagnosis(got, expected, words, M)


def _wrong_dtype(t: Any) -> dict[str, Any] | None:
    """Token ids of another dtype than long: floats, smaller ints, or any dtype with the right tokens."""
    got = t.got
    if not (isinstance(got, Tensor) and got.dtype != torch.long):
        return None
    right = got.shape == t.expected.shape and bool(equal(got.long(), t.expected))
    if right or got.dtype in (torch.int32, torch.int16, torch.int8, torch.uint8) or got.is_floating_point():
        return dict(dtype=got.dtype, right=" (with the right tokens)" if right else "")
    return None


def _columns_differ(t: Any) -> dict[str, Any] | None:
    if t.got.shape != t.expected.shape and t.got.size(0) == t.expected.size(0):
        return dict(cols=t.got.size(1), expected_cols=t.expected.size(1), got_row=t.got[0].tolist(),
                    expected_row=t.expected[0].tolist())
    return None


def _rows_differ(t: Any) -> dict[str, Any] | None:
    if t.got.shape != t.expected.shape:
        return None
    wrong = torch.nonzero((t.got != t.expected).any(dim=1)).flatten()
    if not len(wrong):
        return None
    r = int(wrong[0])
    return dict(n=len(wrong), B=t.got.size(0), r=r, got_row=t.got[r].tolist(), expected_row=t.expected[r].tolist())


_LAZY = "the output ({words}) is what greedy decoding gives when "

GREEDY = Catalogue("greedy_decode", "06", [
    Entry("not a function", None, Probe("require_function")),
    # the call raised: a loop that never projected (stage "unprojected"), an argmax over the batch axis
    Entry("missing output projection", None, Output(lambda w: w.decoder_calls and not w.projections, "unprojected"),
          "while decoding ({words}) model.decode ran {n} time{s} but model.output_projection never did: the next "
          "token was taken as the argmax over the decoder's D features, which are not words (an id up to D - 1, which "
          "can even fall outside the vocabulary and fail in the next decode). model.decode returns (B, T, D) vectors; "
          "turn the last one into (B, V) logits first, model.output_projection(out[:, -1]), then take argmax(dim=-1) "
          "over the vocabulary."),
    Entry("argmax over wrong axis", "greedy choice over another axis than the vocabulary", Output(bool, "batch axis"),
          "your code raised {type}: {first} with a batch of {B} sources, but runs with exactly vocab_size={V} of them: "
          "the argmax is taken over the batch axis of the (B, V) logits. Take it over the vocabulary, dim=-1."),
    # what the hooks saw while decoding
    Entry("model left in train mode", "the model (or a part of it) runs in train mode while decoding",
          Output(bool, "train mode"),
          "during decoding ({words}) {shown} ran in train mode, so dropout changed the predictions: call model.eval() "
          "on the whole model (it switches every sub-module), not on a part of it, and restore the caller's mode at "
          "the end."),
    Entry("only the last token fed",
          "greedy decoding feeds the decoder only the newest token instead of the whole prefix",
          Output(lambda fed: len(fed) >= 2 and set(fed) == {1}, "one token"),
          "while decoding ({words}) the decoder got one position at each of its {n} calls: " + _LAST_ONLY),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("wrong dtype", None, Output(_wrong_dtype, "dtype"),
          "the output has dtype {dtype}{right}: token ids are torch.long (int64). Build the start column with "
          "torch.full(..., bos_id, dtype=torch.long); argmax already returns long."),
    # the tokens are what greedy decoding gives with one of these mistakes, in this order
    Entry("model left in train mode", None, _decoded(lambda c: c.train, "train"),
          "your decoding runs with dropout active: the model came in train mode and was never switched to eval mode. "
          "Call model.eval() at the start (and decode under torch.no_grad())."),
    Entry("src_mask not used", None, _decoded(_evaluated, "no src mask"),
          "src_mask is not used: pass it to model.encode and, as memory_mask, to model.decode; without it attention "
          "reads the source padding."),
    Entry("src_mask not passed to encode", "greedy decoding calls encode without src_mask",
          _decoded(_evaluated, "no src mask in encode"),
          "model.encode runs without src_mask, so the encoder reads the source padding: pass it to "
          "model.encode(src, src_mask) too."),
    Entry("src_mask not passed to decode", "greedy decoding calls decode without src_mask",
          _decoded(_evaluated, "no src mask in decode"),
          "model.decode runs without src_mask as memory_mask, so the cross-attention reads the source padding: "
          "model.decode(ys, memory, tgt_mask, src_mask)."),
    Entry("no bos in column 0", "the output does not start with bos", _decoded(_evaluated, bos=False),
          "column 0 must be bos_id: start every sequence with <bos> and keep it in the output."),
    # listed before "keeps generating": see _greedy_cases
    Entry("pad_id ignored", "the pad_id argument is not used",
          Reference(lambda c: [({}, _fin(c, fill=c.eos))] if _evaluated(c) and c.pad_id not in (None, c.eos) else []),
          "finished sequences are filled with eos_id although pad_id was given: fill with pad_id (eos_id only when "
          "pad_id is None)."),
    Entry("filled with 0 when pad_id is None", "finished sequences filled with 0 instead of eos_id when pad_id is None",
          _decoded(lambda c: _evaluated(c) and c.pad_id is None,
                                                                     fill=0),
          "finished sequences are filled with 0 although pad_id is None: the exercise fills with eos_id when pad_id "
          "is None (fill = eos_id if pad_id is None else pad_id); 0 may well be a real token."),
    Entry("keeps generating after eos", "finished sequences get more tokens than pad",
          _decoded(_evaluated, do_fill=False),
          "a sequence keeps producing real tokens after its <eos>: once a sequence has finished, write pad_id (eos_id "
          "when pad_id is None) in its later positions."),
    Entry("keeps generating after eos", None, _decoded(_evaluated, do_fill=False, stop="never"),
          "decoding ignores <eos>: sequences keep producing real tokens until max_len. Stop when every sequence has "
          "produced eos_id, and fill the finished ones with pad_id."),
    Entry("runs to max_len after all finished", "decoding continues after every sequence ended",
          _decoded(_evaluated, stop="never"),
          "decoding goes on until max_len although every sequence had already produced <eos>: stop as soon as all of "
          "them have finished (T = 1 + the number of steps taken)."),
    Entry("stops at the first eos", "decoding stops when one sequence (or row 0) ends, not all",
          _decoded(_evaluated, stop="any"),
          "decoding stops as soon as one sequence (or row 0) produces <eos>; stop only when every sequence has "
          "finished (track a `finished` flag per sequence and test finished.all())."),
    Entry("no causal mask", "the decoder's self-attention gets no causal mask", _decoded(_evaluated, "no causal"),
          "the decoder runs without a causal mask: pass causal_mask(T) as tgt_mask at every step, as in training; "
          "without it the earlier positions see the later ones and the prediction changes."),
    Entry("upper triangle", None, _decoded(_evaluated, "upper"), _UPPER_CAUSAL),
    Entry("inverted mask", None, _decoded(_evaluated, "inverted causal"), _INVERTED_CAUSAL),
    Entry("argmax over wrong axis", None, _decoded(_evaluated, "positions"),
          "the argmax is taken over the positions axis of the (B, T, V) logits; take the logits of the last position, "
          "(B, V), and the argmax over the vocabulary (dim=-1)."),
    Entry("reads the first position", "the next token is read from the first position's logits, not the last",
          _decoded(_evaluated, "first"),
          "the next token is read from the first position (out[:, 0]); the prediction for the next token is at the "
          "last position, out[:, -1]."),
    Entry("max_len off by one", "max_len one too small",
          _decoded(_evaluated, fields=lambda c: dict(M=c.M, cols=c.M + 2),
                                                     shift=1),
          "with max_len={M} your output has {cols} columns: generate at most max_len tokens after <bos> (T <= max_len "
          "+ 1)."),
    Entry("max_len off by one", None, _decoded(_evaluated, fields=lambda c: dict(M=c.M, cols=c.M), shift=-1),
          "with max_len={M} your output has only {cols} columns: generate up to max_len tokens after <bos> (T <= "
          "max_len + 1)."),
    # wrong tokens of the filling loop itself, which the un-stopped trajectories cannot give (stage "lazy")
    Entry("eos overwritten", "a sequence's <eos> itself is replaced by the filler", _lazy(eos_filled=True),
          _LAZY + "each sequence's <eos> itself is replaced by the filler: mark a sequence finished after writing its "
          "token (finished = finished | (next_token == eos_id) after the masked_fill), so the <eos> stays."),
    Entry("finished not cumulative", "the finished flags are recomputed from the newest token only",
          _lazy(cumulative=False),
          _LAZY + "`finished` is recomputed from the newest token only (finished = next_token == eos_id), so a "
          "sequence that has filled a pad counts as unfinished again and produces more tokens: keep it finished, "
          "finished = finished | (next_token == eos_id)."),
    Entry("stops at the first eos", None, _lazy(stop_row0=True),
          _LAZY + "decoding stops when row 0 has produced <eos> (a test of ys[0, -1] or finished[0]), whatever the "
          "other rows: stop only when every sequence has finished, `if finished.all(): break`."),
    # no catalogued mistake: the tokens shown
    Entry("values differ", None, Output(_columns_differ, "tokens"),
          "the output ({case}) has {cols} columns, expected {expected_cols}: T = 1 (<bos>) + the number of steps "
          "until every sequence has produced <eos>, at most max_len={max_len}.\n    yours    row 0: {got_row}\n    "
          "expected row 0: {expected_row}"),
    Entry("values differ", None, Output(_rows_differ, "tokens"),
          "the output ({case}) differs from the expected tokens in {n} of {B} rows; row {r}:\n    yours:    "
          "{got_row}\n    expected: {expected_row}"),
    # the right tokens at the wrong cost, or the caller's mode left changed
    Entry("source encoded at every step", "greedy decoding runs the encoder again at every step",
          Output(bool, "encoder calls"),
          "the tokens are right, but the encoder ran {calls} times in one call ({words}), encoding {rows} source rows "
          "for a batch of {B}: the source is encoded once. Compute memory = model.encode(src, src_mask) before the "
          "loop and call only model.decode inside it (a full model(src, ys, ...) at every step re-encodes the source "
          "each time)."),
    Entry("gradients tracked", None, Probe("require_no_grad")),
    Entry("mode not restored", None, Output(bool, "modes"),
          "the tokens are right, but greedy_decode leaves the model (or some of its modules) in {left} mode although "
          "it came in {came} mode ({words}): the caller's mode must be restored, or a training loop that decodes a "
          "few examples goes on {without} dropout. Remember `was_training = model.training` before model.eval() and "
          "end with model.train(was_training)."),
    Entry("wrong device", None, Probe("check_input_device")),
    Entry("mode not restored", None, Output(bool, "after an error"),
          "the tokens are right, but when the model raises an error during decoding (the checker made the decoder "
          "fail at step 2, the model in train mode), greedy_decode leaves it in eval mode: restore the mode in a "
          "`finally:` block (try: ... finally: model.train(was_training)), so that a failed decode does not silently "
          "switch off dropout for the rest of training."),
])


@checker("greedy_decode")
def check_greedy_decode(fn: Callable[..., Any]) -> str:
    require_function(fn, "greedy_decode")
    setup = drawn_once(_greedy_setup)  # shared with the checks that start from the same random state
    setup = replace(setup, model=module_copy(setup.model))  # the student's own copy
    model, M, bos_id = setup.model, setup.max_len, setup.bos_id
    for case in setup.cases:
        src, mask = setup.src[case.rows], setup.src_mask[case.rows]
        src0, mask0 = src.clone(), mask.clone()
        model.train(case.train)
        pad = "" if case.pad_id is None else f", pad_id={case.pad_id}"
        words = f"{case.words}: batch of {len(case.rows)}, max_len={M}, bos_id={bos_id}, eos_id={case.eos_id}{pad}"
        kwargs = {"src_mask": mask, **({"pad_id": case.pad_id} if case.pass_pad else {})}
        watch = _GreedyWatch(model)
        try:
            got = call_student(fn, model, src, M, bos_id, case.eos_id, context=f"decoding ({words})", **kwargs)
        except StudentError as err:
            model.eval()
            if not isinstance(err.exc, NotImplementedError):
                watch.fail_if_unprojected(words)
                _greedy_probe(fn, setup, case, err)
            raise
        finally:
            watch.close()
        left_in = {m.training for m in model.modules()}  # the modes greedy_decode left behind
        model.eval()
        _watch_before_tokens(watch, words)
        watch.fail_if_one_token_fed(words)  # even with the right tokens: a random model may ignore the prefix
        check_unchanged(["src", "src_mask"], [src, mask], [src0, mask0], words)
        GREEDY.detect("dtype", SimpleNamespace(got=got, expected=case.expected))
        try:
            expect_close("the output", got, case.expected, case.mistakes, atol=0, rtol=0, case=words)
        except Failure as f:
            # never projected comes first: its tokens (ids of D features) can equal a catalogued mistake's by chance
            watch.fail_if_unprojected(words)
            if f.mistake in ("values differ", "wrong shape"):
                _lazy_diagnosis(got, setup, case, src, mask, words)
                _token_diagnosis(got, case.expected, words, M)
            raise
        _watch_after_tokens(watch, len(case.rows), words)
        came, left = ("train", "eval") if case.train else ("eval", "train")
        GREEDY.detect("modes", left_in != {case.train}, left=left, came=came, words=words,
                      without="without" if case.train else "with")
    _rows_reversed(fn, setup)
    case = setup.cases[0]  # right tokens: now with the model's own tensors watched as another device's
    src, mask = setup.src[case.rows], setup.src_mask[case.rows]
    kwargs = {"src_mask": mask, **({"pad_id": case.pad_id} if case.pass_pad else {})}
    check_input_device(None, lambda: fn(model, src.clone(), M, bos_id, case.eos_id, **kwargs), "your greedy_decode",
                       case.words, "build ys, `finished` and the causal mask on the source's device: "
                       "torch.full(..., device=src.device), causal_mask(T, device=src.device)")
    model.eval()
    _restored_after_error(fn, setup)
    return "stops when all sequences have produced <eos>, fills finished ones with pad_id, respects max_len, eval mode"


CATALOGUES = (SRC_MASK, TGT_MASK, TRANSFORMER, GREEDY)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints("make_src_mask", [
    "The encoder reads the whole source, so its mask only has to hide the padding. You wrote a "
    "function in notebook 01 that already marks the real tokens: which one?",
    "padding_mask from notebook 01 does exactly this: (src != pad_id) with a middle axis of size 1, "
    "shape (B, 1, L_src), so it broadcasts over the queries.",
])
register_hints("make_tgt_mask", [
    "A target position may attend to a key only if the key is real (not padding) AND not in the "
    "future. Build the two masks and combine them.",
    "padding_mask(tgt, pad_id) is (B, 1, L_tgt) and blocks padding keys; causal_mask(L_tgt) is "
    "(L_tgt, L_tgt), True on and below the diagonal.",
    "Combine them with & (both conditions): broadcasting gives (B, L_tgt, L_tgt). Pass the device "
    "of tgt to causal_mask.",
])
register_hints("Transformer", [
    "In __init__: two TokenEmbeddings (source and target vocabularies), one PositionalEncoding, an "
    "Encoder and a Decoder with the same settings, and an nn.Linear(d_model, tgt_vocab_size) called "
    "output_projection.",
    "encode(src, src_mask): embed the source ids, add the positional encoding, run the encoder with "
    "src_mask. decode(tgt, memory, tgt_mask, memory_mask): the same on the target side, then the decoder.",
    "forward(src, tgt, src_mask, tgt_mask): memory = encode(src, src_mask); the decoder's cross-attention "
    "uses src_mask as memory_mask; finish with the output projection to get logits (no softmax).",
])
register_hints("greedy_decode", [
    "Encode the source once, memory = model.encode(src, src_mask). Start ys as a (B, 1) column of "
    "bos_id (dtype long); at each step decode the whole prefix, model.decode(ys, memory, "
    "causal_mask(ys.size(1), device=src.device), src_mask), and pick the most likely next token.",
    "The next-token logits are output_projection(out[:, -1]) of shape (B, V): take argmax(dim=-1), "
    "append it as a new column with torch.cat, and run in eval mode under torch.no_grad().",
    "Keep a bool `finished` per sequence: after a sequence's eos_id, write pad_id (eos_id if pad_id is "
    "None) instead of the prediction, and stop as soon as finished.all() (or after max_len steps).",
])
